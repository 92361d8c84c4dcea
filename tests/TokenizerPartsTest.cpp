// basin's tokenizer.json reader on the parts beside the Llama family's: the
// Punctuation pre-tokenizer (Falcon's) with each behavior, Whitespace,
// WhitespaceSplit, and the Strip and Lowercase normalizers, by hand; then
// against Hugging Face's `tokenizers`: the ids of tokenizers built with each
// part on fortunes and hostile strings, and what each part and each normal
// form makes of every code point (tokenizers' Unicode tables are older or
// newer than utf8proc's, and basin holds to tokenizers').
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "basin/tokenizer/normalizers.h"
#include "basin/tokenizer/pre_tokenizers.h"
#include "basin/tokenizer/tokenizer.h"
#include "basin/tokenizer/unicode_text.h"
#include "hugging_face_python.h"
#include "test_paths.h"
#include "test_util.h"
#include "tokenizer/fixtures.h"

namespace basin {
namespace {

using nlohmann::json;
using test::read_bytes;
using tokenizer::Tokenizer;
using Pieces = std::vector<std::string>;

Pieces pieces_of(const json& pre_tokenizer, const std::string& text) {
  Pieces pieces{text};
  bool at_text_start = true;
  tokenizer::pre_tokenizer_from_json(pre_tokenizer, {"t", "pre_tokenizer"})->split(pieces, at_text_start);
  return pieces;
}

std::string normalized(const json& normalizer, const std::string& text) {
  return tokenizer::normalizer_from_json(normalizer, {"t", "normalizer"})->normalize(text);
}

TEST(TokenizerPartsTest, PunctuationCutsAtEachMarkWithEachBehavior) {
  const auto punctuation = [](const char* behavior) {
    return pieces_of({{"type", "Punctuation"}, {"behavior", behavior}}, "Hey, «you»!? ok");
  };
  EXPECT_EQ(punctuation("Isolated"), (Pieces{"Hey", ",", " ", "«", "you", "»", "!", "?", " ok"}));
  EXPECT_EQ(punctuation("Removed"), (Pieces{"Hey", " ", "you", " ok"}));
  EXPECT_EQ(punctuation("MergedWithPrevious"), (Pieces{"Hey,", " «", "you»", "!", "?", " ok"}));
  EXPECT_EQ(punctuation("MergedWithNext"), (Pieces{"Hey", ", ", "«you", "»", "!", "? ok"}));
  EXPECT_EQ(punctuation("Contiguous"), (Pieces{"Hey", ",", " ", "«", "you", "»!?", " ok"}));
  // Without "behavior", Isolated. ASCII's symbols ($, +) count, other symbols (€, ©) do not; the table is
  // Unicode 8.0's: U+166D, punctuation then, still counts, and U+2E43, punctuation since 9.0, does not.
  EXPECT_EQ(pieces_of({{"type", "Punctuation"}}, "¿Qué? 「引用」、。 a‐b–c—d ‹x› $1+2 €3 ©\u166D\u2E43"),
            (Pieces{"¿", "Qué", "?", " ", "「", "引用", "」", "、", "。", " a", "‐", "b", "–", "c", "—", "d ", "‹", "x", "›", " ",
                    "$", "1", "+", "2 €3 ©", "\u166D", "\u2E43"}));
  EXPECT_EQ(pieces_of({{"type", "Punctuation"}, {"behavior", "Removed"}}, "!?"), Pieces{});
}

TEST(TokenizerPartsTest, WhitespaceKeepsWordAndSymbolRunsAndWhitespaceSplitCutsAtWhitespace) {
  // \w is Alphabetic, marks, decimal digits, connector punctuation and the joiners: ² and ½ are not, ⓐ is.
  EXPECT_EQ(pieces_of({{"type", "Whitespace"}}, "Hey man! snake_case x²½ ①2 a\u0301b ⓐ\u200Dz 3.5€ İ\u00A0—«»"),
            (Pieces{"Hey", "man", "!", "snake_case", "x", "²½", "①", "2", "a\u0301b", "ⓐ\u200Dz", "3", ".", "5", "€", "İ", "—«»"}));
  EXPECT_EQ(pieces_of({{"type", "Whitespace"}}, " \t\n\u3000"), Pieces{});
  EXPECT_EQ(pieces_of({{"type", "WhitespaceSplit"}}, " Hey, man,\u00A0Good?\u0085x\u200By\u3000 "),
            (Pieces{"Hey,", "man,", "Good?", "x\u200By"})) << "U+200B is no whitespace";
  EXPECT_EQ(pieces_of({{"type", "WhitespaceSplit"}}, ""), Pieces{});
}

TEST(TokenizerPartsTest, LowercaseMapsEachCodePointAndStripTakesWhitespaceOffTheEndsAsked) {
  // İ becomes i and a combining dot; Σ is σ even at a word's end (no context, as Rust's char::to_lowercase).
  EXPECT_EQ(normalized({{"type", "Lowercase"}}, "İSTANBUL ΟΔΟΣ Ǆ ǅ ẞ ΣΑΣ \u212A \u212B"), "i\u0307stanbul οδοσ ǆ ǆ ß σασ k å");
  EXPECT_EQ(normalized({{"type", "Lowercase"}}, "\U00010D50\uA7CB"), "\U00010D70\u0264") << "case pairs of Unicode 16";
  const auto strip = [](bool left, bool right, const std::string& text) {
    return normalized({{"type", "Strip"}, {"strip_left", left}, {"strip_right", right}}, text);
  };
  EXPECT_EQ(strip(true, true, "\u00A0 x \u3000y\u2029"), "x \u3000y");
  EXPECT_EQ(strip(true, false, "\u00A0 x \u3000y\u2029"), "x \u3000y\u2029");
  EXPECT_EQ(strip(false, true, "\u00A0 x \u3000y\u2029"), "\u00A0 x \u3000y");
  EXPECT_EQ(strip(true, true, " \u0085 "), "");
  EXPECT_EQ(strip(false, true, "\u00A0"), "");
  EXPECT_EQ(strip(true, true, "\u200Bx\u200B"), "\u200Bx\u200B") << "U+200B is no whitespace";
  test::expect_config_error([] { normalized({{"type", "Strip"}, {"strip_left", true}}, "x"); },
                            {"normalizer.strip_right", "missing"}, "a Strip without strip_right");
  test::expect_config_error([] { pieces_of({{"type", "Punctuation"}, {"behavior", "isolated"}}, "x"); },
                            {"pre_tokenizer.behavior", "'isolated'"}, "a behavior spelled as Python's argument");
}

// A Python with PyPI's tokenizers, or empty.
std::string tokenizers_python() {
  const std::string python = test::hugging_face_python();
  if (python.empty() || std::system((python + " -c 'import tokenizers' > /dev/null 2>&1").c_str()) != 0) return "";
  return python;
}

TEST(TokenizerPartsTest, IdsEqualTokenizersForEachPartOnFortunesAndHostileStrings) {
  const std::string python = tokenizers_python();
  if (python.empty()) GTEST_SKIP() << "no Python with PyPI's tokenizers (scripts/hf-python.sh installs it beside PyPI's torch)";
  test::TempDir dir;
  std::vector<std::string> corpus;
  std::string command = python + " " + BASIN_SOURCE_DIR + "/tests/tokenizer/make_parts_fixtures.py ids " + dir.path().string();
  for (const char* name : {"art", "science", "wisdom", "literature", "linux", "tao"}) {
    corpus.push_back(std::string("/usr/share/games/fortunes/") + name);
    ASSERT_TRUE(std::filesystem::exists(corpus.back())) << "Debian's fortunes package (scripts/install-deps.sh) holds the corpus";
    command += " " + corpus.back();
  }
  const auto made = test::run_command(command, 240);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const auto texts = json::parse(read_bytes(dir.file("texts.json"))).get<std::vector<std::string>>();
  ASSERT_GT(texts.size(), corpus.size() + 50) << "the hostile strings follow the files";
  for (const char* style : {"punctuation-isolated", "punctuation-removed", "punctuation-merged_with_previous",
                            "punctuation-merged_with_next", "punctuation-contiguous", "falcon", "whitespace",
                            "whitespace-split", "strip-right"}) {
    SCOPED_TRACE(style);
    Tokenizer tokenizer = Tokenizer::from_file(dir.file(style));
    std::size_t ids_compared = 0;
    for (std::size_t n = 0; n < texts.size(); ++n) {
      const std::string text = read_bytes(texts[n]);
      const std::string prefix = dir.file(style) + "/" + std::to_string(n);
      const std::vector<int32_t> expected = test::read_ids(prefix + ".ids");
      const std::vector<int32_t> ids = tokenizer.encode(text, true);
      ASSERT_TRUE(ids == expected) << texts[n] << ": " << test::first_difference(ids, expected);
      EXPECT_EQ(tokenizer.decode(ids), read_bytes(prefix + ".decoded")) << texts[n];
      ids_compared += ids.size();
    }
    EXPECT_GT(ids_compared, 50000u) << "the six fortunes files should be tens of thousands of ids";
  }
}

// The code points make_parts_fixtures.py writes a line for, in order.
std::vector<char32_t> fixture_code_points() {
  std::vector<char32_t> code_points;
  for (char32_t c = 0; c < 0xE1000; c = c == 0x3FFFF ? 0xE0000 : c + 1) {
    if ((c < 0xD800 || c > 0xDFFF) && c != 0x0A) code_points.push_back(c);
  }
  return code_points;
}

std::string hex(char32_t c) {
  char text[16];
  std::snprintf(text, sizeof text, "U+%04X", static_cast<unsigned>(c));
  return text;
}

TEST(TokenizerPartsTest, EveryCodePointNormalizesAndSplitsAsTokenizers) {
  const std::string python = tokenizers_python();
  if (python.empty()) GTEST_SKIP() << "no Python with PyPI's tokenizers (scripts/hf-python.sh installs it beside PyPI's torch)";
  test::TempDir dir;
  const auto made = test::run_command(python + " " + BASIN_SOURCE_DIR + "/tests/tokenizer/make_parts_fixtures.py code-points " +
                                      dir.path().string(), 240);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const std::vector<char32_t> code_points = fixture_code_points();
  const json cases = json::parse(read_bytes(dir.file("cases.json")));
  ASSERT_EQ(cases.size(), 24u) << "4 normal forms in 5 patterns, Lowercase, 3 pre-tokenizers";
  for (const json& item : cases) {
    const std::string name = item.at("name").get<std::string>();
    SCOPED_TRACE(name);
    const std::string text = read_bytes(dir.file(name + ".in"));
    const std::string expected = read_bytes(dir.file(name + ".out"));
    if (item.at("kind") == "pre_tokenizer") {
      const Pieces pieces = pieces_of(item.at("component"), text);
      const Pieces tokenizers_pieces = json::parse(expected).get<Pieces>();
      std::size_t at = 0;
      while (at < pieces.size() && at < tokenizers_pieces.size() && pieces[at] == tokenizers_pieces[at]) ++at;
      EXPECT_EQ(at, tokenizers_pieces.size()) << "first difference at piece " << at << " of " << tokenizers_pieces.size();
      EXPECT_EQ(pieces.size(), tokenizers_pieces.size());
      continue;
    }
    // A line per code point: the newline is a boundary to every normalizer here.
    const std::vector<std::string> lines = test::lines_of(normalized(item.at("component"), text));
    const std::vector<std::string> tokenizers_lines = test::lines_of(expected);
    ASSERT_EQ(tokenizers_lines.size(), code_points.size());
    ASSERT_EQ(lines.size(), code_points.size());
    std::string differing;
    std::size_t count = 0;
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (lines[i] == tokenizers_lines[i]) continue;
      if (++count <= 20) differing += " " + hex(code_points[i]);
    }
    std::printf("%s: %zu of %zu code points differ from tokenizers%s\n", name.c_str(), count, code_points.size(), differing.c_str());
    EXPECT_EQ(count, 0u) << differing;
  }
}

}  // namespace
}  // namespace basin
