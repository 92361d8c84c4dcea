// Text through a tokenizer.json: "data": {"name": "text", "tokenizer": ...}
// gives each file's ids (the eos token after each when asked for) in
// windows; basin-tokenize writes the same ids for "tokens" to read;
// basin-generate encodes its prompt with the run's tokenizer and prints
// text; what does not fit is refused naming the key and the file. The
// tokenizer is the fortunes example's (examples/tokenizers/fortunes_bpe.json).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <ATen/ATen.h>

#include "basin/core/config/config.h"
#include "basin/core/data/dataset.h"
#include "basin/core/data/token_stream.h"
#include "basin/tokenizer/tokenizer.h"
#include "test_paths.h"
#include "test_util.h"

namespace basin {
namespace {

std::string example_tokenizer() { return std::string(BASIN_SOURCE_DIR) + "/examples/tokenizers/fortunes_bpe.json"; }

DataSplits read(const Json& data) { return test::read_dataset("text", data); }

const char* kFirst = "Q: Why did the chicken cross the road?\nA: To get to the other side.\n%\n";
const char* kSecond = "He who laughs last thinks slowest. 12345 \xF0\x9F\x98\x80\n";

TEST(TokenizedTextTest, EachFileIsEncodedAndFollowedByTheEosToken) {
  test::TempDir dir;
  test::write_text(dir.file("a.txt"), kFirst);
  test::write_text(dir.file("b.txt"), kSecond);
  auto tokenizer = tokenizer::Tokenizer::from_file(example_tokenizer());
  const int32_t eos = tokenizer.token_to_id("<|end_of_text|>");
  ASSERT_GE(eos, 0);
  std::vector<int32_t> stream = tokenizer.encode(kFirst, false);
  stream.push_back(eos);
  const std::vector<int32_t> second = tokenizer.encode(kSecond, false);
  stream.insert(stream.end(), second.begin(), second.end());
  stream.push_back(eos);
  ASSERT_NE(stream.front(), tokenizer.token_to_id("<|begin_of_text|>")) << "no template's tokens: the files are text, not prompts";

  const int64_t block = 4;
  const DataSplits splits = read({{"tokenizer", example_tokenizer()}, {"eos_token", "<|end_of_text|>"},
                                  {"train", {dir.file("a.txt"), dir.file("b.txt")}}, {"test", dir.file("b.txt")},
                                  {"block_size", block}});
  EXPECT_EQ(splits.info.num_classes, tokenizer.vocab_size());
  EXPECT_EQ(splits.info.tokenizer, std::filesystem::absolute(example_tokenizer()).string());
  const int64_t count = (static_cast<int64_t>(stream.size()) - 1) / block;
  ASSERT_EQ(splits.train.size(), count);
  EXPECT_EQ(splits.train.stream().held_bytes(), 4 * static_cast<int64_t>(stream.size())) << "ids held once, as int32";
  const Batch all = splits.train.slice(0, count);
  for (int64_t k = 0; k < count; ++k) {
    const auto window = [&](int64_t shift) {
      return at::tensor(std::vector<int64_t>(stream.begin() + k * block + shift, stream.begin() + k * block + shift + block), at::kLong);
    };
    EXPECT_TRUE(all.inputs[k].equal(window(0))) << "x of window " << k;
    EXPECT_TRUE(all.targets[k].equal(window(1))) << "y of window " << k;
  }
  // Without eos_token the files' ids simply join.
  const DataSplits joined = read({{"tokenizer", example_tokenizer()}, {"train", {dir.file("a.txt"), dir.file("b.txt")}},
                                  {"test", dir.file("b.txt")}, {"block_size", 1}});
  EXPECT_EQ(joined.train.size(), static_cast<int64_t>(stream.size()) - 2 - 1);
  EXPECT_EQ(joined.test.size(), static_cast<int64_t>(second.size()) - 1);
}

TEST(TokenizedTextTest, WhatDoesNotFitIsRefusedNamingTheKeyAndTheFile) {
  test::TempDir dir;
  test::write_text(dir.file("good.txt"), kFirst);
  test::write_text(dir.file("latin1.txt"), "caf\xE9 au lait");  // Latin-1, not UTF-8: byte 3
  const auto refused = [&](const Json& data, const std::vector<std::string>& words) {
    test::expect_config_error([&] { read(data); }, words, data.dump());
  };
  const Json base = {{"tokenizer", example_tokenizer()}, {"train", dir.file("good.txt")}, {"block_size", 4}};
  Json data = base;
  data["train"] = {dir.file("good.txt"), dir.file("latin1.txt")};
  refused(data, {"data.train", "latin1.txt", "byte 3 is not UTF-8"});
  data = base, data["eos_token"] = "<nope>";
  refused(data, {"data.eos_token", "'<nope>'", "fortunes_bpe.json"});
  data = base, data.erase("tokenizer"), data["eos_token"] = "<|end_of_text|>";
  refused(data, {"data.eos_token", "data.tokenizer"});
  data = base, data["tokenizer"] = dir.file("missing.json");
  refused(data, {"data.tokenizer", "missing.json"});
  test::write_text(dir.file("broken.json"), "{\"model\": ");
  data = base, data["tokenizer"] = dir.file("broken.json");
  refused(data, {"data.tokenizer", "broken.json", "not JSON"});
}

TEST(TokenizedTextTest, BasinTokenizeWritesTheIdsTheTextDataReadsAndKeepsOldOutputOnBadInput) {
  test::TempDir dir;
  test::write_text(dir.file("a.txt"), kFirst);
  test::write_text(dir.file("b.txt"), kSecond);
  const std::string tokenize = std::string(BASIN_TOKENIZE_EXE) + " --tokenizer " + example_tokenizer() + " ";
  const auto made = test::run_command(tokenize + "--eos-token '<|end_of_text|>' --out " + dir.file("ids.bin") + " " +
                                      dir.file("a.txt") + " " + dir.file("b.txt"));
  ASSERT_EQ(made.exit_code, 0) << made.output;
  EXPECT_NE(made.output.find("tokens/s on one thread"), std::string::npos) << made.output;
  const DataSplits text = read({{"tokenizer", example_tokenizer()}, {"eos_token", "<|end_of_text|>"},
                                {"train", {dir.file("a.txt"), dir.file("b.txt")}}, {"test", dir.file("b.txt")}, {"block_size", 1}});
  Params params(Json{{"train", dir.file("ids.bin")}, {"test", dir.file("ids.bin")}, {"block_size", 1}, {"dtype", "uint16"}}, "data");
  const DataSplits ids = std::move(*dataset_registry().create("tokens", params, 0));
  ASSERT_EQ(ids.train.size(), text.train.size());
  EXPECT_TRUE(ids.train.slice(0, ids.train.size()).inputs.equal(text.train.slice(0, text.train.size()).inputs));

  const std::string before = test::read_text(dir.file("ids.bin"));
  test::write_text(dir.file("latin1.txt"), "na\xEFve");
  const auto bad = test::run_command(tokenize + "--out " + dir.file("ids.bin") + " " + dir.file("a.txt") + " " + dir.file("latin1.txt"));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("latin1.txt': byte 2 is not UTF-8"), std::string::npos) << bad.output;
  EXPECT_EQ(test::read_text(dir.file("ids.bin")), before) << "the old output is kept";
  EXPECT_FALSE(std::filesystem::exists(dir.file("ids.bin.partial")));
  const auto wide = test::run_command(tokenize + "--dtype uint32 --out " + dir.file("wide.bin") + " " + dir.file("a.txt"));
  ASSERT_EQ(wide.exit_code, 0) << wide.output;
  EXPECT_EQ(std::filesystem::file_size(dir.file("wide.bin")), 4 * tokenizer::Tokenizer::from_file(example_tokenizer()).encode(kFirst, false).size());
}

// basin-train exits 2 on a tokenizer file whose merges name a token its
// vocabulary lacks, naming the config key, the file and the merge.
TEST(TokenizedTextTest, BasinTrainExitsTwoOnATokenizerWhoseMergesLeaveTheVocabulary) {
  test::TempDir dir;
  Json tokenizer = Json::parse(test::read_text(example_tokenizer()));
  tokenizer["model"]["merges"][7] = Json::array({"\u0120th", "zzz-not-a-token"});
  test::write_text(dir.file("tokenizer.json"), tokenizer.dump());
  test::write_text(dir.file("corpus.txt"), kFirst);
  Json config = Json::parse(R"({"max_steps": 1, "model": {"name": "llama", "hidden_size": 16, "num_hidden_layers": 1,
    "num_attention_heads": 2}, "optimizer": {"name": "adamw", "lr": 0.01}})");
  config["data"] = {{"name", "text"}, {"tokenizer", dir.file("tokenizer.json")}, {"train", dir.file("corpus.txt")}, {"block_size", 4}};
  test::write_text(dir.file("config.json"), config.dump());
  const auto run = test::run_command(std::string(BASIN_TRAIN_EXE) + " --config " + dir.file("config.json") + " --run-dir " + dir.file("run"));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  for (const std::string& word : std::vector<std::string>{"data.tokenizer", dir.file("tokenizer.json"), "model.merges[7]", "zzz-not-a-token", "not in the vocab"}) {
    EXPECT_NE(run.output.find(word), std::string::npos) << "'" << word << "' not in: " << run.output;
  }
}

// A llama that learned a repeated sentence continues it from a prompt,
// greedily, in text; the run directory and its hf/ hold the tokenizer.
TEST(TokenizedTextTest, BasinGenerateEncodesThePromptAndPrintsText) {
  test::TempDir dir;
  std::string corpus;
  for (int i = 0; i < 300; ++i) corpus += "The quick brown fox jumps over the lazy dog. ";
  test::write_text(dir.file("corpus.txt"), corpus);
  Json config = Json::parse(R"({"seed": 1, "threads": 1, "max_epochs": 4,
    "model": {"name": "llama", "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1},
    "optimizer": {"name": "adamw", "lr": 0.01}})");
  config["data"] = {{"name", "text"}, {"tokenizer", example_tokenizer()}, {"train", dir.file("corpus.txt")},
                    {"block_size", 16}, {"batch_size", 16}};
  test::write_text(dir.file("config.json"), config.dump());
  const auto trained = test::run_command(std::string(BASIN_TRAIN_EXE) + " --config " + dir.file("config.json") +
                                         " --run-dir " + dir.file("run"), 300);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  EXPECT_EQ(test::read_text(dir.file("run/tokenizer.json")), test::read_text(example_tokenizer()));
  EXPECT_EQ(test::read_text(dir.file("run/hf/tokenizer.json")), test::read_text(example_tokenizer()));
  const auto greedy = test::run_command(std::string(BASIN_GENERATE_EXE) + " " + dir.file("run") +
                                        " --prompt 'The quick brown' --tokens 20 --temperature 0 2>&1");
  ASSERT_EQ(greedy.exit_code, 0) << greedy.output;
  ASSERT_GT(greedy.output.size(), 60u) << greedy.output;
  EXPECT_EQ(greedy.output, corpus.substr(0, greedy.output.size() - 1) + "\n") << "the sentence, continued as learned";
  const auto ids = test::run_command(std::string(BASIN_GENERATE_EXE) + " " + dir.file("run") + " --ids 1,2 2>&1");
  EXPECT_EQ(ids.exit_code, 2);
  EXPECT_NE(ids.output.find("--ids"), std::string::npos) << ids.output;
  const auto bad = test::run_command(std::string(BASIN_GENERATE_EXE) + " " + dir.file("run") + " --prompt \"$(printf '\\377')\" 2>&1");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--prompt: byte 0 is not UTF-8"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace basin
