// "model": {"name": <model>} and "init_from" a Hugging Face directory are
// enough, as from_pretrained takes the shape from config.json: the keys the
// config leaves out are config.json's (core/model/pretrained_keys.h), a key
// it gives must agree, and a value config.json gives that the model
// refuses names the file. The run directory keeps the keys so resolved, so
// that basin-generate and a resume build the same model; bad model keys
// exit basin-train with 2, naming the key.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <ATen/ATen.h>

#include "basin/core/config/config.h"
#include "basin/core/serialization/torch_save_file.h"
#include "basin/core/train/trainer.h"
#include "test_paths.h"
#include "test_util.h"

namespace basin {
namespace {

const std::string kTrain = BASIN_TRAIN_EXE;

/// A short SAM job over random ids (a vocabulary of 300, windows of 16).
Json job_on(const test::TempDir& dir, const Json& model) {
  if (!std::filesystem::exists(dir.file("ids.pt"))) {
    at::manual_seed(11);
    write_torch_save_file(dir.file("ids.pt"), at::randint(0, 300, {2000}, at::kLong));
  }
  Json job = Json::parse(R"({"seed": 3, "threads": 1, "max_steps": 2,
    "optimizer": {"name": "adamw", "lr": 0.01}, "algorithms": {"sam": {"rho": 0.05}}})");
  job["data"] = {{"name", "tokens"}, {"train", dir.file("ids.pt")}, {"block_size", 16}, {"batch_size", 8}};
  job["model"] = model;
  return job;
}

/// A model of `keys`, untrained, exported into dir/<name>; its hf/ folder.
std::string exported(const test::TempDir& dir, const std::string& name, const Json& keys) {
  const std::string out = dir.file(name);
  std::filesystem::create_directories(out);
  Trainer trainer(job_on(dir, keys));
  trainer.export_model(out);
  return out + "/hf";
}

at::Tensor logits_of(Trainer& trainer) {
  at::manual_seed(5);
  const at::Tensor ids = at::randint(0, 300, {2, 16}, at::kLong);
  trainer.model().eval();
  at::NoGradGuard no_grad;
  return trainer.model().forward(ids);
}

// Every key that shapes each model (sizes past the data's, a head_dim of its
// own, Llama 3.1's RoPE, a tied head, another eps) comes from config.json.
TEST(PretrainedKeysTest, ANameAndInitFromGiveTheCheckpointsModel) {
  test::TempDir dir;
  const Json llama{{"name", "llama"}, {"vocab_size", 320}, {"max_position_embeddings", 64}, {"hidden_size", 16},
                   {"intermediate_size", 24}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
                   {"num_key_value_heads", 2}, {"head_dim", 8}, {"rms_norm_eps", 1e-5}, {"tie_word_embeddings", true},
                   {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                                     {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 32}}}};
  const Json gpt{{"name", "gpt"}, {"vocab_size", 320}, {"n_layer", 1}, {"n_head", 2}, {"n_embd", 16}};
  for (const Json& keys : {llama, gpt}) {
    const std::string name = keys.at("name");
    const std::string hf = exported(dir, name, keys);
    at::Tensor expected;
    {
      Json job = job_on(dir, keys);
      job["init_from"] = hf;
      Trainer given(job);
      expected = logits_of(given);
    }
    if (name == "llama") {  // special tokens as Llama 3's: a list of ends
      Json special = Json::parse(test::read_text(hf + "/config.json"));
      special["bos_token_id"] = 1, special["eos_token_id"] = {2, 3};
      test::write_text(hf + "/config.json", special.dump());
    }
    Json job = job_on(dir, {{"name", name}});
    job["init_from"] = hf;
    Trainer trainer(job);
    EXPECT_TRUE(logits_of(trainer).equal(expected)) << name << ": the checkpoint's model, to the bit";
    if (name == "llama") {
      std::filesystem::create_directories(dir.file("again"));
      trainer.export_model(dir.file("again"));
      const Json again = Json::parse(test::read_text(dir.file("again/hf/config.json")));
      EXPECT_EQ(again.value("bos_token_id", Json()), 1) << "the checkpoint's special tokens, carried through";
      EXPECT_EQ(again.value("eos_token_id", Json()), Json({2, 3}));
      EXPECT_TRUE(again.at("pad_token_id").is_null());
      Json outside = Json::parse(test::read_text(hf + "/config.json"));
      outside["eos_token_id"] = {2, 320};
      const std::string other = dir.file("outside");
      std::filesystem::copy(hf, other);
      test::write_text(other + "/config.json", outside.dump());
      Json outside_job = job;
      outside_job["init_from"] = other;
      Trainer outside_ids(outside_job);  // as transformers loads it; what the export writes holds ids of the vocabulary
      std::filesystem::create_directories(dir.file("outside-run"));
      outside_ids.export_model(dir.file("outside-run"));
      const Json written = Json::parse(test::read_text(dir.file("outside-run/hf/config.json")));
      EXPECT_TRUE(written.at("eos_token_id").is_null()) << written.dump();
      EXPECT_EQ(written.value("bos_token_id", Json()), 1);
    }
    const Json resolved = nlohmann::json::parse(trainer.config().at("model").dump());
    for (auto it = keys.begin(); it != keys.end(); ++it) {
      const nlohmann::json given = nlohmann::json::parse(it.value().dump()), taken = resolved.value(it.key(), nlohmann::json());
      if (!given.is_object()) {
        EXPECT_EQ(taken, given) << name << ": model." << it.key() << " as config.json has it";
      }
      // The export writes RoPE's objects as transformers 5 does, rope_theta within.
      for (auto inner = given.begin(); given.is_object() && inner != given.end(); ++inner) {
        EXPECT_EQ(taken.value(inner.key(), nlohmann::json()), inner.value()) << name << ": model." << it.key() << "." << inner.key();
      }
    }
    // A value config.json gives that the model cannot take names the file; a key the job gives must agree.
    Json narrow = Json::parse(test::read_text(hf + "/config.json"));
    narrow["vocab_size"] = 200;  // fewer ids than the data's 300
    const std::string other = dir.file(name + "-narrow");
    std::filesystem::copy(hf, other);
    test::write_text(other + "/config.json", narrow.dump());
    job["init_from"] = other;
    test::expect_config_error([&] { Trainer refused(job); }, {"model.vocab_size", other + "/config.json"}, name);
    job["init_from"] = hf;
    if (name == "llama") {
      // A RoPE key the job gives withholds the others (rope_scaling would override it): the job's RoPE, plain
      // at theta 10^4, is compared with config.json's llama3, and refused.
      Json plain_rope = job;
      plain_rope["model"]["rope_theta"] = 10000.0;
      test::expect_config_error([&] { Trainer refused(plain_rope); }, {"config.json", "llama3", "model.rope_parameters"}, "rope");
    }
    job["model"][name == "gpt" ? "n_layer" : "num_hidden_layers"] = 3;
    test::expect_config_error([&] { Trainer refused(job); }, {"config.json", name == "gpt" ? "model.n_layer" : "model.num_hidden_layers",
                                                             "leave", "out"}, name);
  }
}

// A key config.json gives as null is what the config class makes of it:
// Qwen2's num_key_value_heads null is num_attention_heads (absent, 32).
TEST(PretrainedKeysTest, ANullKeyIsWhatTheConfigClassMakesOfIt) {
  test::TempDir dir;
  const std::string hf = exported(dir, "qwen2", {{"name", "qwen2"}, {"hidden_size", 16}, {"intermediate_size", 24},
                                                 {"num_hidden_layers", 1}, {"num_attention_heads", 2}, {"num_key_value_heads", 2}});
  Json config = Json::parse(test::read_text(hf + "/config.json"));
  config["num_key_value_heads"] = nullptr;
  test::write_text(hf + "/config.json", config.dump());
  Json job = job_on(dir, {{"name", "qwen2"}});
  job["init_from"] = hf;
  Trainer trainer(job);
  EXPECT_EQ(trainer.config()["model"].value("num_key_value_heads", Json()), 2);
  job["model"]["num_key_value_heads"] = 2;
  EXPECT_NO_THROW(Trainer given(job)) << "given, it agrees with config.json's null";
  config.erase("num_key_value_heads");
  test::write_text(hf + "/config.json", config.dump());
  test::expect_config_error([&] { Trainer refused(job); }, {"config.json", "num_key_value_heads 32"}, "absent: Qwen2Config's 32");
}

// basin-train writes the resolved keys into the run's config.json: basin-generate
// builds the checkpoint's model from it, and a resume sees the run it continues.
// Bad model keys exit 2 naming the key, and write no run directory.
TEST(PretrainedKeysTest, BasinTrainKeepsTheResolvedKeysAndExitsTwoOnBadOnes) {
  test::TempDir dir;
  const std::string hf = exported(dir, "base", {{"name", "llama"}, {"hidden_size", 16}, {"intermediate_size", 24},
                                                {"num_hidden_layers", 1}, {"num_attention_heads", 2}});
  Json job = job_on(dir, {{"name", "llama"}});
  job["init_from"] = hf;
  test::write_text(dir.file("job.json"), job.dump());
  const std::string train = kTrain + " --config " + dir.file("job.json") + " --run-dir " + dir.file("run");
  const auto trained = test::run_command(train);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const Json written = Json::parse(test::read_text(dir.file("run/config.json")));
  EXPECT_EQ(written["model"].value("hidden_size", Json()), 16) << written.dump();
  EXPECT_EQ(written["model"].value("num_hidden_layers", Json()), 1) << written.dump();
  const auto generated = test::run_command(std::string(BASIN_GENERATE_EXE) + " " + dir.file("run") + " --ids 1,2 --tokens 3 2>&1");
  EXPECT_EQ(generated.exit_code, 0) << generated.output;
  const auto resumed = test::run_command(train + " --resume latest --set max_steps=3");
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;

  auto refused = [&](const std::string& options, const std::vector<std::string>& words) {
    std::filesystem::remove_all(dir.file("bad"));
    const auto result = test::run_command(kTrain + " --config " + dir.file("job.json") + " --run-dir " + dir.file("bad") + " " +
                                          options + " 2>&1");
    EXPECT_EQ(result.exit_code, 2) << options << "\n" << result.output;
    for (const std::string& word : words) EXPECT_NE(result.output.find(word), std::string::npos) << word << "\n" << result.output;
    EXPECT_FALSE(std::filesystem::exists(dir.file("bad/config.json"))) << options << ": nothing written";
  };
  refused("--set 'model.rope_scaling={\"rope_type\": \"nope\", \"factor\": 2}'", {"model.rope_scaling.rope_type", "nope"});
  refused("--set model.hidden_size=32", {"model.hidden_size", "config.json", "hidden_size 16"});
  refused("--set model.name=mistral --set model.sliding_window=0 --set init_from=null", {"model.sliding_window"});
}

}  // namespace
}  // namespace basin
