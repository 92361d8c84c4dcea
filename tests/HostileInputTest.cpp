// Config input built to break the loader: numbers beyond their types, bytes
// that are not UTF-8, nesting deep enough to overflow a recursive walk, files
// too large or not files at all, and messages that would span lines. Each must
// end as a ConfigError (basin-train: exit code 2) whose one line names the
// key, or the file and where in it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "basin/core/config/config.h"
#include "test_paths.h"
#include "test_util.h"

namespace basin {
namespace {

const std::string kTrain = BASIN_TRAIN_EXE;
const std::string kConfigs = std::string(BASIN_SOURCE_DIR) + "/examples/configs";

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string nested_arrays(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

std::string parse_error(const std::string& text, const std::string& origin = "hostile.json") {
  return test::config_error_of([&] { parse_config_text(text, origin); });
}

TEST(HostileInputTest, NumberBeyondADoubleNamesItsKeyAndPlace) {
  const std::string digits = "1" + std::string(399, '0');
  std::string message = parse_error("{\"seed\": " + digits + "}");
  EXPECT_TRUE(contains(message, "hostile.json:1:10")) << message;
  EXPECT_TRUE(contains(message, "config key 'seed'")) << message;
  EXPECT_TRUE(contains(message, "400 characters")) << message;
  EXPECT_LT(message.size(), 300u) << "the 400 digits are not repeated in full: " << message;

  message = parse_error("{\n  \"optimizer\": {\"name\": \"sgd\", \"lr\": -1e400}\n}");
  EXPECT_TRUE(contains(message, "hostile.json:2:")) << message;
  EXPECT_TRUE(contains(message, "'optimizer.lr'")) << message;
  EXPECT_TRUE(contains(message, "-1e400")) << message;

  message = parse_error(R"({"model": {"hidden": [64, 32, 2e308]}})");
  EXPECT_TRUE(contains(message, "'model.hidden[2]'")) << message;

  // Below the overflow, a huge integer is a float, and reading it as an integer says so.
  Params params(parse_config_text("{\"seed\": 1" + std::string(300, '0') + "}", "x"), "");
  message = test::config_error_of([&] { params.integer("seed", 0, 0); });
  EXPECT_TRUE(contains(message, "'seed'")) << message;
  EXPECT_TRUE(contains(message, std::to_string(std::numeric_limits<int64_t>::max()))) << message;
}

TEST(HostileInputTest, IntegersBeyondInt64AreRefusedNotWrapped) {
  const int64_t max = std::numeric_limits<int64_t>::max();
  const std::string above = std::to_string(static_cast<uint64_t>(max) + 1);
  Params params(parse_config_text("{\"seed\": " + above + ", \"fits\": " + std::to_string(max) +
                                      ", \"list\": [1, " + above + "], \"float\": 18446744073709551616}",
                                  "x"),
                "data");
  std::string message = test::config_error_of([&] { params.integer("seed", 0, 0); });
  EXPECT_TRUE(contains(message, "'data.seed'")) << message;
  EXPECT_TRUE(contains(message, "got " + above)) << message;
  EXPECT_EQ(params.integer("fits", 0, 0), max);
  message = test::config_error_of([&] { params.integers("list", {}); });
  EXPECT_TRUE(contains(message, "'data.list'")) << message;
  message = test::config_error_of([&] { params.integer("float", 0); });
  EXPECT_TRUE(contains(message, "'data.float'")) << message;
  // Unbounded reads still see the whole int64 range.
  Params low(parse_config_text("{\"x\": " + std::to_string(std::numeric_limits<int64_t>::min()) + "}", "x"), "");
  EXPECT_EQ(low.integer("x", 0), std::numeric_limits<int64_t>::min());
}

TEST(HostileInputTest, BytesThatAreNotUtf8NameTheFileAndOffset) {
  const std::vector<std::string> bad = {
      "\xff",          // never UTF-8
      "\x80",          // a continuation byte alone
      "\xc0\xaf",      // overlong '/'
      "\xed\xa0\x80",  // a surrogate
      "\xf4\x90\x80\x80",  // above U+10FFFF
      "\xe2\x82",      // cut short
  };
  for (const auto& bytes : bad) {
    // Outside strings, inside, and after a backslash: an escape hides no byte.
    for (const std::string prefix : {"", "\"ab", "\"ab\\"}) {
      const std::string head = "{\n  \"name\": " + prefix;
      const std::string text = head + bytes + (prefix.empty() ? "" : "\"") + "\n}";
      const std::string message = parse_error(text, "enc.json");
      EXPECT_TRUE(contains(message, "enc.json:2:")) << message;
      EXPECT_TRUE(contains(message, "offset " + std::to_string(head.size()))) << message;
      EXPECT_TRUE(contains(message, "UTF-8")) << message;
    }
  }
  // Well-formed characters of every length pass.
  const Json ok = parse_config_text("{\"name\": \"\x41\xc3\xa9\xe2\x82\xac\xf0\x9f\x99\x82\"}", "enc.json");
  EXPECT_EQ(ok["name"].get<std::string>().size(), 10u);
}

TEST(HostileInputTest, DeepNestingIsRefusedAboveTheLimit) {
  // 100000 brackets would overflow the stack of anything that walks the
  // result recursively (dump, copy, comparison).
  std::string message = parse_error(std::string(100000, '['), "deep.json");
  EXPECT_TRUE(contains(message, "deep.json:1:" + std::to_string(kMaxConfigDepth + 1))) << message;
  EXPECT_TRUE(contains(message, "deeper than " + std::to_string(kMaxConfigDepth))) << message;

  EXPECT_EQ(parse_error(nested_arrays(kMaxConfigDepth)), "(no error)");
  EXPECT_NE(parse_error(nested_arrays(kMaxConfigDepth + 1)), "(no error)");
  const auto nested_objects = [](int depth) {
    std::string text;
    for (int i = 0; i < depth; ++i) text += "{\"k\": ";
    return text + "1" + std::string(depth, '}');
  };
  EXPECT_EQ(parse_error(nested_objects(kMaxConfigDepth)), "(no error)");
  message = parse_error(nested_objects(kMaxConfigDepth + 1));
  EXPECT_TRUE(contains(message, "deeper than")) << message;
  // Brackets inside strings do not nest.
  const std::string in_string = "{\"a\": \"" + std::string(1000, '[') + "\\\"{{\"}";
  EXPECT_EQ(parse_error(in_string), "(no error)");
}

TEST(HostileInputTest, AKeyGivenTwiceIsAnError) {
  const std::string message = parse_error(R"({"data": {"batch_size": 64, "batch_size": 128}})");
  EXPECT_TRUE(contains(message, "'data.batch_size' appears twice")) << message;
  EXPECT_EQ(parse_error(R"({"a": {"x": 1}, "b": {"x": 2}})"), "(no error)") << "one key in two objects";
}

TEST(HostileInputTest, LoaderAgreesWithNlohmannOnTheShippedConfigs) {
  int configs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kConfigs)) {
    if (entry.path().extension() != ".json") continue;
    const std::string text = test::read_text(entry.path().string());
    const Json ours = load_config_file(entry.path().string());
    EXPECT_EQ(ours.dump(), Json::parse(text).dump()) << entry.path();  // same values, same key order
    ++configs;
  }
  EXPECT_GT(configs, 0);
}

TEST(HostileInputTest, HugeFilesAreRefusedBeforeTheyAreRead) {
  test::TempDir dir;
  const std::string huge = dir.file("huge.json");
  std::ofstream(huge) << "{}";
  std::filesystem::resize_file(huge, kMaxConfigFileBytes + 1);  // sparse: costs no disk
  std::string message = test::config_error_of([&] { load_config_file(huge); });
  EXPECT_TRUE(contains(message, "huge.json")) << message;
  EXPECT_TRUE(contains(message, std::to_string(kMaxConfigFileBytes + 1) + " bytes")) << message;
  // A device has no size to check first; it is read only up to the limit.
  message = test::config_error_of([&] { load_config_file("/dev/zero"); });
  EXPECT_TRUE(contains(message, "'/dev/zero' holds more than")) << message;
}

TEST(HostileInputTest, DirectoriesAndMissingFilesAreNamed) {
  test::TempDir dir;
  std::string message = test::config_error_of([&] { load_config_file(dir.path().string()); });
  EXPECT_TRUE(contains(message, dir.path().string() + "' is a directory")) << message;
  message = test::config_error_of([&] { load_config_file(dir.file("absent.json")); });
  EXPECT_TRUE(contains(message, "absent.json' cannot be opened: ")) << message;
  EXPECT_TRUE(contains(message, std::strerror(ENOENT))) << message;
  // A file where a directory should be: unreadable even for root.
  const std::string file = dir.file("plain");
  std::ofstream(file) << "{}";
  message = test::config_error_of([&] { load_config_file(file + "/x.json"); });
  EXPECT_TRUE(contains(message, "plain/x.json' cannot be opened: ")) << message;
  EXPECT_TRUE(contains(message, std::strerror(ENOTDIR))) << message;
}

TEST(HostileInputTest, UnreadableFileIsNamed) {
  if (geteuid() == 0) GTEST_SKIP() << "root reads files whatever their mode";
  test::TempDir dir;
  const std::string locked = dir.file("locked.json");
  std::ofstream(locked) << "{}";
  std::filesystem::permissions(locked, std::filesystem::perms::none);
  const std::string message = test::config_error_of([&] { load_config_file(locked); });
  EXPECT_TRUE(contains(message, "locked.json' cannot be opened: ")) << message;
  EXPECT_TRUE(contains(message, std::strerror(EACCES))) << message;
}

TEST(HostileInputTest, OverridesGetTheSameLimits) {
  Json config = parse_config_text(R"({"seed": 1})", "x");
  const Json before = config;
  std::string message = test::config_error_of([&] { apply_override(config, "seed=1" + std::string(399, '0')); });
  EXPECT_TRUE(contains(message, "config key 'seed'")) << message;
  message = test::config_error_of([&] { apply_override(config, "model.hidden=[8, 1e999]"); });
  EXPECT_TRUE(contains(message, "'model.hidden[1]'")) << message;
  message = test::config_error_of([&] { apply_override(config, "model.name=cn\xffn"); });
  EXPECT_TRUE(contains(message, "'model.name'")) << message;
  EXPECT_TRUE(contains(message, "UTF-8")) << message;
  // Not JSON, so a bare word, but still not UTF-8 (found by fuzz/config_fuzzer).
  message = test::config_error_of([&] { apply_override(config, "model.name=\"a\\\xb7"); });
  EXPECT_TRUE(contains(message, "UTF-8")) << message;
  message = test::config_error_of([&] { apply_override(config, "mod\xc3l.name=cnn"); });
  EXPECT_TRUE(contains(message, "UTF-8")) << message;
  // Brackets in a key are plain characters, and hide no byte after them (found by fuzz/config_fuzzer).
  message = test::config_error_of([&] { apply_override(config, std::string(100, '{') + "\xf4\xea.lr=1"); });
  EXPECT_TRUE(contains(message, "UTF-8")) << message;
  message = test::config_error_of([&] { apply_override(config, "a.b=" + std::string(100000, '[')); });
  EXPECT_TRUE(contains(message, "'a.b'")) << message;
  EXPECT_TRUE(contains(message, "deeper than")) << message;
  // The key path counts toward the depth: a.a.a...=1 nests as deep as its segments.
  std::string deep_key = "a";
  for (int i = 0; i < kMaxConfigDepth; ++i) deep_key += ".a";
  message = test::config_error_of([&] { apply_override(config, deep_key + "=1"); });
  EXPECT_TRUE(contains(message, "deeper than")) << message;
  EXPECT_EQ(config, before) << "a refused override changes nothing";
  // One level less fits, and bare words remain strings.
  apply_override(config, deep_key.substr(2) + "=1");
  EXPECT_EQ(parse_config_text(config.dump(), "x"), config) << "what an override builds, a file may hold";
  apply_override(config, "model.name=[cnn");
  EXPECT_EQ(config["model"]["name"], "[cnn");
}

TEST(HostileInputTest, MessagesStayOneLineAndBounded) {
  // A key may hold any character JSON can escape; the message escapes it back.
  Params params(parse_config_text(R"({"a\nb\u001b[2J": 1})", "x"), "");
  std::string message = test::config_error_of([&] { params.finish(); });
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_EQ(message.find('\x1b'), std::string::npos) << message;
  EXPECT_TRUE(contains(message, "a\\nb\\x1b[2J")) << message;
  // A key of a megabyte is cut, and the message still says what is wrong.
  Params long_key(parse_config_text("{\"" + std::string(1 << 20, 'k') + "\": 1}", "x"), "");
  message = test::config_error_of([&] { long_key.finish(); });
  EXPECT_LE(message.size(), ConfigError::kMaxBytes + 3);
  EXPECT_TRUE(contains(message, "is not known")) << message;
  // Whoever throws, the error itself keeps to one line of UTF-8.
  const std::string raw = "x\r\ny\xff\xe2\x82";
  message = ConfigError(raw).what();
  EXPECT_EQ(message, "x\\r\\ny\\xff\\xe2\\x82");
  EXPECT_EQ(ConfigError(std::string(10000, 'e')).what(), std::string(ConfigError::kMaxBytes, 'e') + "...");
  // Escapes count toward the bound too, and are never cut in half (found by fuzz/config_fuzzer).
  message = ConfigError("e" + std::string(2000, '\x15')).what();
  EXPECT_LE(message.size(), ConfigError::kMaxBytes + 3);
  EXPECT_EQ(message.substr(message.size() - 7), "\\x15...") << message;
}

// basin-train itself: exit code 2 and one line naming the key or the file,
// before anything is trained or written.
TEST(HostileInputTest, BasinTrainExitsTwoWithOneLine) {
  ASSERT_TRUE(std::filesystem::exists(kTrain)) << kTrain << " is not built";
  test::TempDir dir;
  const std::string digits = "1" + std::string(399, '0');
  test::write_text(dir.file("seed.json"), "{\"seed\": " + digits + "}");
  test::write_text(dir.file("deep.json"), std::string(100000, '['));
  const std::string latin1_head = "{\"model\": {\"name\": \"caf";
  test::write_text(dir.file("latin1.json"), latin1_head + "\xe9\"}}");
  struct Case {
    std::string args;
    std::string expected;
  };
  const std::string smoke = kConfigs + "/synthetic_smoke.json";
  const std::vector<Case> cases = {
      {"--config " + dir.file("seed.json"), "config key 'seed'"},
      {"--config " + smoke + " --set seed=" + digits, "config key 'seed'"},
      {"--config " + smoke + " --set seed=9223372036854775808", "config key 'seed'"},
      {"--config " + dir.file("deep.json"), "deep.json:1:" + std::to_string(kMaxConfigDepth + 1)},
      {"--config " + dir.file("latin1.json"),
       "latin1.json:1:" + std::to_string(latin1_head.size() + 1) + ": not valid UTF-8"},
      {"--config " + dir.path().string(), "is a directory"},
      {"--config " + smoke + " --set \"$(printf 'model.name=\\377')\"", "'model.name'"},
  };
  for (const auto& c : cases) {
    const auto result = test::run_command(kTrain + " " + c.args + " --run-dir " + dir.file("run"));
    EXPECT_EQ(result.exit_code, 2) << c.args << "\n" << result.output;
    EXPECT_TRUE(contains(result.output, c.expected)) << c.args << "\n" << result.output;
    EXPECT_EQ(std::count(result.output.begin(), result.output.end(), '\n'), 1) << result.output;
    EXPECT_FALSE(std::filesystem::exists(dir.file("run"))) << c.args;
  }
}

}  // namespace
}  // namespace basin
