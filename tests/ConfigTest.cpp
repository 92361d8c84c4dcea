#include <gtest/gtest.h>

#include "basin/core/config/config.h"
#include "basin/core/parallel/distributed_strategy.h"
#include "basin/core/train/run_identity.h"
#include "test_util.h"

namespace basin {
namespace {

TEST(ConfigTest, SyntaxErrorGivesLineAndColumn) {
  const std::string message = test::config_error_of([] { parse_config_text("{\n  \"a\": 1,\n  \"b\": ]\n}", "run.json"); });
  EXPECT_NE(message.find("run.json:3:8"), std::string::npos) << message;
}

TEST(ConfigTest, MissingFileIsNamed) {
  const std::string message = test::config_error_of([] { load_config_file("/nonexistent/x.json"); });
  EXPECT_NE(message.find("/nonexistent/x.json"), std::string::npos) << message;
}

TEST(ConfigTest, OverridesParseJsonAndFallBackToStrings) {
  Json config = Json::parse(R"({"optimizer": {"lr": 0.1}})");
  apply_override(config, "optimizer.lr=0.5");
  apply_override(config, "model.name=cnn");
  apply_override(config, "model.hidden=[8, 4]");
  apply_override(config, "algorithms.sam={\"rho\": 0.1}");
  EXPECT_EQ(config["optimizer"]["lr"], 0.5);
  EXPECT_EQ(config["model"]["name"], "cnn");
  EXPECT_EQ(config["model"]["hidden"], Json::parse("[8, 4]"));
  EXPECT_EQ(config["algorithms"]["sam"]["rho"], 0.1);
  EXPECT_NE(test::config_error_of([&] { apply_override(config, "no-equals-sign"); }).find("KEY=VALUE"), std::string::npos);
  EXPECT_NE(test::config_error_of([&] { apply_override(config, "optimizer.lr.x=1"); }).find("'optimizer.lr' is not an object"),
            std::string::npos);
}

TEST(ConfigTest, ReadsNameTheKeyPathValueAndExpectation) {
  Params params(Json::parse(R"({"lr": -1, "batch_size": 0, "name": 5, "flag": "yes"})"), "optimizer");
  std::string message = test::config_error_of([&] { params.number("lr", 0.1, 0); });
  EXPECT_NE(message.find("'optimizer.lr'"), std::string::npos) << message;
  EXPECT_NE(message.find(">= 0"), std::string::npos) << message;
  EXPECT_NE(message.find("-1"), std::string::npos) << message;
  message = test::config_error_of([&] { params.integer("batch_size", 1, 1); });
  EXPECT_NE(message.find("'optimizer.batch_size'"), std::string::npos) << message;
  message = test::config_error_of([&] { params.string("name"); });
  EXPECT_NE(message.find("a string"), std::string::npos) << message;
  message = test::config_error_of([&] { params.boolean("flag", false); });
  EXPECT_NE(message.find("true or false"), std::string::npos) << message;
  message = test::config_error_of([&] { params.string("missing"); });
  EXPECT_NE(message.find("'optimizer.missing' is required"), std::string::npos) << message;
}

TEST(ConfigTest, UnknownKeysAreErrors) {
  Params params(Json::parse(R"({"lr": 0.1, "lrr": 0.2})"), "optimizer");
  params.number("lr", 0.0);
  const std::string message = test::config_error_of([&] { params.finish(); });
  EXPECT_NE(message.find("'optimizer.lrr' is not known"), std::string::npos) << message;
  EXPECT_NE(message.find("lr"), std::string::npos) << message;
}

TEST(ConfigTest, NestedObjectsCarryTheirPath) {
  Params root(Json::parse(R"({"data": {"batch_size": "big"}})"), "");
  Params data = root.object("data");
  const std::string message = test::config_error_of([&] { data.integer("batch_size", 1, 1); });
  EXPECT_NE(message.find("'data.batch_size'"), std::string::npos) << message;
  EXPECT_NE(message.find("\"big\""), std::string::npos) << message;
}

TEST(ConfigTest, ChoiceListsTheChoices) {
  Params params(Json::parse(R"({"interval": "week"})"), "schedulers[0]");
  const std::string message = test::config_error_of([&] { params.choice("interval", "step", {"step", "epoch"}); });
  EXPECT_NE(message.find("'schedulers[0].interval'"), std::string::npos) << message;
  EXPECT_NE(message.find("step, epoch"), std::string::npos) << message;
}

}  // namespace
}  // namespace basin

namespace basin {
namespace {

// What a resume may change is each parallel mode's to say (its line in
// core/parallel/modes.cpp): the keys that change no number, in any resume;
// its layout's, in a resharded one; nothing else, ever.
TEST(ConfigTest, AResumeMayChangeWhatTheModesLinesSayAndNothingElse) {
  const Json saved = Json::parse(R"({"parallel": {"mode": "hsdp", "shard_group_size": 2, "timeout_seconds": 60,
      "bucket_mb": 25, "overlap": true, "prefetch": {"forward": 1}, "reshard_after_forward": true,
      "return_freed_memory": false, "mixed_precision": {"param_dtype": "bf16"}}})");
  auto with = [&](const std::string& key, const Json& value) {
    Json changed = saved;
    changed["parallel"][key] = value;
    return changed;
  };
  const std::vector<std::string> reshard = parallel_keys_reshard_may_change();
  for (const auto& [key, value] : std::vector<std::pair<std::string, Json>>{
           {"timeout_seconds", 300}, {"prefetch", Json::parse(R"({"forward": 2})")},
           {"reshard_after_forward", false}, {"return_freed_memory", true}}) {
    EXPECT_NO_THROW(check_same_run(saved, with(key, value))) << key;
  }
  for (const auto& [key, value] : std::vector<std::pair<std::string, Json>>{
           {"mode", "zero3"}, {"shard_group_size", 4}, {"bucket_mb", 5}, {"overlap", false}}) {
    const std::string message = test::config_error_of([&] { check_same_run(saved, with(key, value)); });
    EXPECT_NE(message.find("'parallel." + key + "'"), std::string::npos) << message;
    EXPECT_NO_THROW(check_same_run(saved, with(key, value), reshard)) << key;
  }
  const std::string message =
      test::config_error_of([&] { check_same_run(saved, with("mixed_precision", Json::object()), reshard); });
  EXPECT_NE(message.find("'parallel.mixed_precision.param_dtype'"), std::string::npos) << message;
}

}  // namespace
}  // namespace basin
