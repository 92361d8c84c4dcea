// basin's C++ tokenizer.json reader (tokenizer/): small hand-built BPEs whose
// ids follow from the merge rules by hand, every component's refusals, and
// the ids Hugging Face's `tokenizers` gives on all of fortunes, the licences
// and hostile strings, for tokenizers built like Llama 3's, Qwen2's,
// SmolLM2's, GPT-2's, Llama 2's and Mistral's.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "basin/tokenizer/pre_tokenizers.h"
#include "basin/tokenizer/tokenizer.h"
#include "hugging_face_python.h"
#include "test_paths.h"
#include "test_util.h"
#include "tokenizer/fixtures.h"

namespace basin {
namespace {

using test::first_difference;
using test::read_bytes;
using test::read_ids;
using tokenizer::Tokenizer;
using nlohmann::json;

// A BPE over single letters: vocab "a".."e" (ids 0..4), then `merged` tokens.
json letters_bpe(const std::vector<std::string>& merged, const json& merges) {
  json vocab = json::object();
  for (const char* letter : {"a", "b", "c", "d", "e"}) vocab[letter] = vocab.size();
  for (const std::string& token : merged) vocab[token] = vocab.size();
  return {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", json::array()},
          {"normalizer", nullptr}, {"pre_tokenizer", nullptr}, {"post_processor", nullptr}, {"decoder", nullptr},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

TEST(TokenizerTest, MergesApplyLowestRankLeftmostFirstInEitherSpelling) {
  // "abcab": (a,b) at 0 and 3, (b,c) at 1. With a+b ranked first both a b pairs
  // merge and c stays alone; with b+c first, it takes the b at 1 and only the
  // second a b merges.
  const json ab_first = letters_bpe({"ab", "bc"}, {"a b", "b c"});
  const json bc_first = letters_bpe({"ab", "bc"}, {"b c", "a b"});
  const json pairs = letters_bpe({"ab", "bc"}, json::array({json::array({"a", "b"}), json::array({"b", "c"})}));
  EXPECT_EQ(Tokenizer(ab_first, "t").encode("abcab"), (std::vector<int32_t>{5, 2, 5}));
  EXPECT_EQ(Tokenizer(bc_first, "t").encode("abcab"), (std::vector<int32_t>{0, 6, 5}));
  EXPECT_EQ(Tokenizer(pairs, "t").encode("abcab"), Tokenizer(ab_first, "t").encode("abcab"));
  // A run merges left to right: "aaa" is "aa" then "a".
  EXPECT_EQ(Tokenizer(letters_bpe({"aa"}, {"a a"}), "t").encode("aaa"), (std::vector<int32_t>{5, 0}));
  // Merges build on merges: ab + c once ab exists.
  EXPECT_EQ(Tokenizer(letters_bpe({"ab", "abc"}, {"a b", "ab c"}), "t").encode("abcd"), (std::vector<int32_t>{6, 3}));
  EXPECT_EQ(Tokenizer(ab_first, "t").decode({5, 2, 5}), "ab c ab") << "no decoder joins tokens with spaces, as tokenizers";
}

TEST(TokenizerTest, IgnoreMergesTakesAWordInTheVocabularyWhole) {
  json file = letters_bpe({"ab", "abc"}, {"a b"});  // no merge reaches "abc"
  EXPECT_EQ(Tokenizer(file, "t").encode("abc"), (std::vector<int32_t>{5, 2}));
  file["model"]["ignore_merges"] = true;
  EXPECT_EQ(Tokenizer(file, "t").encode("abc"), (std::vector<int32_t>{6}));
  EXPECT_EQ(Tokenizer(file, "t").encode("abcd"), (std::vector<int32_t>{5, 2, 3})) << "a word not in the vocabulary is merged";
}

TEST(TokenizerTest, UnknownCharactersFallBackToBytesOrTheUnknownToken) {
  json file = letters_bpe({"<unk>", "<0xC3>", "<0xA9>"}, json::array());  // é is C3 A9
  file["model"]["unk_token"] = "<unk>";
  EXPECT_EQ(Tokenizer(file, "t").encode("aéxyb"), (std::vector<int32_t>{0, 5, 5, 5, 1})) << "one <unk> per unknown character";
  file["model"]["fuse_unk"] = true;
  EXPECT_EQ(Tokenizer(file, "t").encode("aéxyb"), (std::vector<int32_t>{0, 5, 1})) << "fused into one";
  file["model"]["byte_fallback"] = true;
  EXPECT_EQ(Tokenizer(file, "t").encode("aéxyb"), (std::vector<int32_t>{0, 6, 7, 5, 1})) << "é's bytes; x and y have no <0xXX>";
  file["decoder"] = {{"type", "Sequence"}, {"decoders", json::array({{{"type", "ByteFallback"}}, {{"type", "Fuse"}}})}};
  EXPECT_EQ(Tokenizer(file, "t").decode({0, 6, 7, 1}), "aéb");
  EXPECT_EQ(Tokenizer(file, "t").decode({0, 6, 1}), "a\xEF\xBF\xBD" "b") << "a lone lead byte is U+FFFD";
  // The <unk> of x waits for the next known character: é's bytes come first, and y's <unk> fuses with x's across them.
  EXPECT_EQ(Tokenizer(file, "t").encode("axéyb"), (std::vector<int32_t>{0, 6, 7, 5, 1}));
  file["model"]["fuse_unk"] = false;
  EXPECT_EQ(Tokenizer(file, "t").encode("axéyb"), (std::vector<int32_t>{0, 6, 7, 5, 5, 1}));
  file["model"].erase("unk_token");
  EXPECT_EQ(Tokenizer(file, "t").encode("xay"), (std::vector<int32_t>{0})) << "with no unknown token, tokenizers drops the character";
}

TEST(TokenizerTest, AddedTokensMatchLeftmostLongestAndStripWhitespaceWhereAsked) {
  json file = letters_bpe({}, json::array());
  // The file says 10, 11, 12; tokenizers gives the ids after the vocabulary's five, in order, and so does basin.
  file["added_tokens"] = json::array({
      {{"id", 10}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
      {{"id", 11}, {"content", "<s><s>"}, {"special", true}, {"normalized", false}},
      {{"id", 12}, {"content", "<t>"}, {"special", false}, {"normalized", false}, {"lstrip", true}, {"rstrip", true}},
      {{"id", 13}, {"content", "b"}, {"special", true}, {"normalized", false}}});  // the vocabulary's b: its id, 1
  Tokenizer plain(file, "t");
  EXPECT_EQ(plain.encode("a<s>b<s><s><s>c"), (std::vector<int32_t>{0, 5, 1, 6, 5, 2}));
  EXPECT_EQ(plain.encode("a  <t>  c"), (std::vector<int32_t>{0, 7, 2})) << "the spaces go with <t>";
  EXPECT_EQ(plain.encode("<s"), std::vector<int32_t>{}) << "'<' and 's' are not in the vocabulary: no unknown token, nothing";
  EXPECT_EQ(plain.decode({0, 5, 2}, false), "a <s> c");
  EXPECT_EQ(plain.decode({0, 5, 2}, true), "a c") << "special tokens skipped; <t> is not special";
  EXPECT_EQ(plain.decode({7}, true), "<t>");
  EXPECT_EQ(plain.token_to_id("<s><s>"), 6);
  EXPECT_EQ(plain.vocab_size(), 8);
}

TEST(TokenizerTest, TheTemplateAddsItsSpecialTokensOnlyWhenAskedFor) {
  json file = letters_bpe({}, json::array());
  file["added_tokens"] = json::array({{{"id", 5}, {"content", "<bos>"}, {"special", true}}});
  file["post_processor"] = {{"type", "TemplateProcessing"},
                            {"single", json::array({{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}},
                                                    {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                            {"special_tokens", {{"<bos>", {{"id", "<bos>"}, {"ids", {5}}, {"tokens", {"<bos>"}}}}}}};
  Tokenizer tokenizer(file, "t");
  EXPECT_EQ(tokenizer.encode("ab", true), (std::vector<int32_t>{5, 0, 1}));
  EXPECT_EQ(tokenizer.encode("ab", false), (std::vector<int32_t>{0, 1}));
  file["post_processor"]["single"] = json::array({{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}}});
  EXPECT_EQ(Tokenizer(file, "t").encode("ab", true), (std::vector<int32_t>{5})) << "a template without $A drops the text, as tokenizers' does";
}

// The pieces `pre_tokenizer` cuts `text` into.
std::vector<std::string> pieces_of(const json& pre_tokenizer, const std::string& text) {
  std::vector<std::string> pieces{text};
  bool at_text_start = true;
  tokenizer::pre_tokenizer_from_json(pre_tokenizer, {"t", "pre_tokenizer"})->split(pieces, at_text_start);
  return pieces;
}

TEST(TokenizerTest, SplitHasTokenizersFiveBehaviors) {
  // "a-b--c" in parts: a, -, b, -, -, c (the dashes matched).
  const auto split = [](const char* behavior, bool invert = false) {
    return pieces_of({{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", invert}}, "a-b--c");
  };
  using Pieces = std::vector<std::string>;
  EXPECT_EQ(split("Removed"), (Pieces{"a", "b", "c"}));
  EXPECT_EQ(split("Isolated"), (Pieces{"a", "-", "b", "-", "-", "c"}));
  EXPECT_EQ(split("MergedWithPrevious"), (Pieces{"a-", "b-", "-", "c"}));
  EXPECT_EQ(split("MergedWithNext"), (Pieces{"a", "-b", "-", "-c"}));
  EXPECT_EQ(split("Contiguous"), (Pieces{"a", "-", "b", "--", "c"}));
  EXPECT_EQ(split("Removed", true), (Pieces{"-", "-", "-"})) << "inverted: the letters are the delimiters";
  // \s is Unicode's White_Space, as Oniguruma's: U+0085 too, which PCRE2's \s leaves out.
  EXPECT_EQ(pieces_of({{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Removed"}}, "x\xC2\x85y z"),
            (Pieces{"x", "y", "z"}));
  // Empty matches cut, as Oniguruma finds them: all but one right where the last match ended.
  EXPECT_EQ(pieces_of({{"type", "Split"}, {"pattern", {{"Regex", "(?=[A-Z])"}}}, {"behavior", "Isolated"}}, "helloWorldFooBar abc"),
            (Pieces{"hello", "World", "Foo", "Bar abc"}));
  EXPECT_EQ(pieces_of({{"type", "Split"}, {"pattern", {{"Regex", "x*"}}}, {"behavior", "Isolated"}}, "axxbx"), (Pieces{"a", "xx", "b", "x"}));
  EXPECT_EQ(pieces_of({{"type", "Split"}, {"pattern", {{"Regex", "x*"}}}, {"behavior", "MergedWithNext"}}, "axxbx"), (Pieces{"a", "xxb", "x"}));
  // A repeated group over a long run needs more than PCRE2's default JIT stack.
  std::string long_run;
  for (int i = 0; i < 100000; ++i) long_run += "ab";
  EXPECT_EQ(pieces_of({{"type", "Split"}, {"pattern", {{"Regex", "(?:ab)+"}}}, {"behavior", "Isolated"}}, long_run + "c"),
            (Pieces{long_run, "c"}));
  EXPECT_EQ(pieces_of({{"type", "Digits"}, {"individual_digits", false}}, "ab12c٣4"), (Pieces{"ab", "12", "c", "٣4"}));
  // "first" prepends where the piece begins the text: not after text a Split removed.
  const json removed_then_first = {{"type", "Sequence"}, {"pretokenizers", json::array({
      {{"type", "Split"}, {"pattern", {{"String", ","}}}, {"behavior", "Removed"}},
      {{"type", "Metaspace"}, {"replacement", "_"}, {"prepend_scheme", "first"}, {"split", true}}})}};
  EXPECT_EQ(pieces_of(removed_then_first, ",a,b"), (Pieces{"a", "b"}));
  EXPECT_EQ(pieces_of(removed_then_first, "a,b"), (Pieces{"_a", "b"}));
  EXPECT_EQ(pieces_of({{"type", "Metaspace"}, {"replacement", "_"}, {"prepend_scheme", "always"}, {"split", true}}, "a b  c"),
            (Pieces{"_a", "_b", "_", "_c"}));
  EXPECT_EQ(pieces_of({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}, "Hi there\n"),
            (Pieces{"Hi", "\xC4\xA0there", "\xC4\x8A"})) << "space is U+0120 Ġ, newline U+010A Ċ in GPT-2's alphabet";
}

TEST(TokenizerTest, TextThatIsNotUtf8IsRefusedNamingTheOffset) {
  Tokenizer tokenizer(letters_bpe({}, json::array()), "t");
  try {
    tokenizer.encode(std::string("abc\xC3(d", 6));
    ADD_FAILURE() << "encoded bytes that are not UTF-8";
  } catch (const std::invalid_argument& error) {
    EXPECT_STREQ(error.what(), "byte 3 is not UTF-8");
  }
  EXPECT_THROW(tokenizer.encode("\xED\xA0\x80"), std::invalid_argument) << "a surrogate";
  EXPECT_THROW(tokenizer.encode("\xC0\xAF"), std::invalid_argument) << "an overlong '/'";
}

TEST(TokenizerTest, WhatBasinDoesNotReadIsRefusedNamingTheFileAndKey) {
  const auto refused = [](json file, const std::vector<std::string>& words) {
    test::expect_config_error([&] { Tokenizer(file, "my/tokenizer.json"); }, words, file.dump().substr(0, 200));
  };
  const json good = letters_bpe({"ab"}, {"a b"});
  json file = good;
  file["model"]["merges"] = {"a b", "a z"};
  refused(file, {"my/tokenizer.json", "model.merges[1]", "'z'", "not in the vocab"});
  file = good, file["model"]["merges"] = {"a b", "b c"};
  refused(file, {"model.merges[1]", "'bc'", "not in the vocab"});
  file = good, file["model"]["merges"] = {"a b c"};
  refused(file, {"model.merges[0]", "two tokens"});
  file = good, file["model"]["type"] = "Unigram";
  refused(file, {"model.type", "Unigram", "BPE"});
  file = good, file["truncation"] = {{"max_length", 512}};
  refused(file, {"truncation", "null"});
  file = good, file["model"]["dropout"] = 0.1;
  refused(file, {"model.dropout"});
  file = good, file["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "NFC"}}, {{"type", "StripAccents"}}})}};
  refused(file, {"normalizer.normalizers[1].type", "StripAccents"});
  file = good, file["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  refused(file, {"pre_tokenizer.pattern.Regex", "does not compile"});
  for (const char* regex : {"^\\p{L}+", "\\w+", "\\bx", "(?m).+", "[a-z&&[^aeiou]]", "a{,2}", "\\h"}) {
    file = good, file["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}};
    refused(file, {"pre_tokenizer.pattern.Regex", "Oniguruma"});
  }
  file = good, file["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "\\C"}}}, {"behavior", "Isolated"}};
  refused(file, {"pre_tokenizer.pattern.Regex", "does not compile"});
  file = good, file["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", ""}, {"prepend_scheme", "always"}};
  refused(file, {"pre_tokenizer.replacement", "not one character"});
  file = good, file["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array({nullptr})}};
  refused(file, {"pre_tokenizer.pretokenizers[0]", "expected a component"});
  file = good, file["model"]["vocab"]["far"] = 2000000000;
  refused(file, {"model.vocab", "2000000000"});
  file = good, file["post_processor"] = {{"type", "Sequence"}, {"processors", json::array({
      {{"type", "BertProcessing"}, {"cls", {"a", 0}}, {"sep", {"b", 1}}}, {{"type", "BertProcessing"}, {"cls", {"a", 0}}, {"sep", {"b", 1}}}})}};
  refused(file, {"post_processor.processors[1].type", "second post-processor"});
  file = good, file["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  refused(file, {"pre_tokenizer.type", "BertPreTokenizer"});
  file = good, file["decoder"] = {{"type", "WordPiece"}};
  refused(file, {"decoder.type", "WordPiece"});
  file = good, file["post_processor"] = {{"type", "TemplateProcessing"}, {"single", json::array({{{"SpecialToken", {{"id", "<x>"}}}}})},
                                        {"special_tokens", json::object()}};
  refused(file, {"post_processor.special_tokens", "<x>"});
  file = good, file["added_tokens"] = json::array({{{"id", 9}, {"content", "w"}, {"single_word", true}}});
  refused(file, {"added_tokens[0].single_word", "'w'"});
  test::expect_config_error([] { Tokenizer::from_file("/nonexistent/dir"); }, {"/nonexistent/dir", "tokenizer.json"}, "a missing file");
  test::TempDir dir;
  test::write_text(dir.file("deep.json"), std::string(100000, '[') + std::string(100000, ']'));
  test::expect_config_error([&] { Tokenizer::from_file(dir.file("deep.json")); }, {"deep.json", "nested deeper than 128"}, "deep nesting");
}

// Every regular file of `folder`, sorted; fortunes' .dat indexes and .u8 links aside.
std::vector<std::string> texts_in(const std::string& folder) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    const std::string extension = entry.path().extension().string();
    if (entry.is_regular_file() && extension != ".dat" && extension != ".u8") files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

TEST(TokenizerTest, IdsAndTextEqualTokenizersOnFortunesLicencesAndHostileStrings) {
  const std::string python = test::hugging_face_python();
  if (python.empty() || std::system((python + " -c 'import tokenizers' > /dev/null 2>&1").c_str()) != 0) {
    GTEST_SKIP() << "no Python with PyPI's tokenizers (scripts/hf-python.sh installs it beside PyPI's torch)";
  }
  std::vector<std::string> corpus = texts_in("/usr/share/games/fortunes");
  ASSERT_GT(corpus.size(), 20u) << "Debian's fortunes package (scripts/install-deps.sh) holds the corpus";
  const std::vector<std::string> licences = texts_in("/usr/share/common-licenses");
  corpus.insert(corpus.end(), licences.begin(), licences.end());
  test::TempDir dir;
  std::string command = python + " " + BASIN_SOURCE_DIR + "/tests/tokenizer/make_fixtures.py " + dir.path().string();
  for (const std::string& file : corpus) command += " '" + file + "'";
  const auto made = test::run_command(command, 240);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const auto texts = json::parse(read_bytes(dir.file("texts.json"))).get<std::vector<std::string>>();
  ASSERT_GT(texts.size(), corpus.size()) << "the hostile strings follow the files";
  for (const char* style : {"gpt2", "llama3", "qwen2", "smollm2", "llama2", "mistral"}) {
    SCOPED_TRACE(style);
    Tokenizer tokenizer = Tokenizer::from_file(dir.file(style));
    // Byte-level BPE gives any text back but where NFC changed it (Qwen2). Llama 2's "▁" gives back
    // text without "▁" or special tokens in it (the files'); Mistral's Metaspace decoder drops the
    // spaces that begin the first token.
    const std::string name = style;
    const bool byte_level = name != "qwen2" && name != "llama2" && name != "mistral";
    std::size_t ids_compared = 0;
    for (std::size_t n = 0; n < texts.size(); ++n) {
      const std::string text = read_bytes(texts[n]);
      const std::string prefix = dir.file(style) + "/" + std::to_string(n);
      const std::vector<int32_t> expected = read_ids(prefix + ".ids");
      const std::vector<int32_t> ids = tokenizer.encode(text, true);
      ASSERT_TRUE(ids == expected) << texts[n] << ": " << first_difference(ids, expected);
      EXPECT_EQ(tokenizer.decode(ids), read_bytes(prefix + ".decoded")) << texts[n];
      if (byte_level || (name == "llama2" && n < corpus.size())) {
        EXPECT_EQ(tokenizer.decode(tokenizer.encode(text, false)), text) << texts[n];
      }
      ids_compared += ids.size();
    }
    EXPECT_GT(ids_compared, 500000u) << "all of fortunes should be hundreds of thousands of ids";
  }
}

}  // namespace
}  // namespace basin
