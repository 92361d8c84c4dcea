// Low-rank adapters ("adapters.lora") on the gpt and the llama: the adapted model against W + (alpha/r) B A
// merged by hand, at the start and after training; the base frozen to the bit under every variant of the
// family; ddp and every ZeRO mode equal to one process (SAM, Flat-LoRA); exports (merged, and the adapter
// in PEFT's layout, continued from it); where PyPI's transformers and peft are, both read back in Python.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>

#include <ATen/ATen.h>

#include "basin/core/config/config.h"
#include "basin/core/config/config_file.h"
#include "basin/core/model/lora.h"
#include "basin/core/model/model.h"
#include "basin/core/serialization/safetensors_file.h"
#include "basin/core/serialization/torch_save_file.h"
#include "basin/core/train/trainer.h"
#include "distributed_util.h"
#include "hugging_face_python.h"
#include "test_util.h"

namespace basin {
namespace {

std::string corpus_file(const test::TempDir& dir) {
  std::string corpus;
  for (int i = 0; i < 80; ++i) corpus += "Adapters learn in a small subspace; the base stays as it was, " + std::to_string(i) + ".\n";
  test::write_text(dir.file("corpus.txt"), corpus);
  return dir.file("corpus.txt");
}

const char* kGpt = R"({"name": "gpt", "n_layer": 2, "n_head": 2, "n_embd": 16})";
const char* kLlama = R"({"name": "llama", "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2,
                         "num_attention_heads": 4, "num_key_value_heads": 2})";
const char* kGptTargets = R"(h\.\d+\.(attn\.c_attn|mlp\.c_fc))";
const char* kLlamaTargets = R"(layers\.\d+\.(self_attn\.(q_proj|v_proj)|mlp\.down_proj))";
/// How many projections the patterns above adapt in the 2-layer models.
int64_t adapted_count(const std::string& model) { return model == kGpt ? 4 : 6; }

/// A short SAM run of `model` on byte windows, with adapters when `targets` is given.
Json lora_job(const std::string& corpus, const std::string& model, const std::string& targets,
              const Json& lora = Json::object()) {
  Json config = Json::parse(R"({"seed": 5, "threads": 1, "max_steps": 4,
    "optimizer": {"name": "adamw", "lr": 0.02, "weight_decay": 0.1},
    "algorithms": {"sam": {"rho": 0.05}}})");
  config["model"] = Json::parse(model);
  config["data"] = {{"name", "text"}, {"train", corpus}, {"block_size", 16}, {"batch_size", 8}};
  if (!targets.empty()) {
    config["adapters"]["lora"] = {{"r", 4}, {"alpha", 8}, {"targets", targets}};
    if (lora.is_object()) config["adapters"]["lora"].update(lora);
  }
  return config;
}

std::map<std::string, at::Tensor> named_values(torch::nn::Module& module) {
  std::map<std::string, at::Tensor> values;
  for (const auto& item : module.named_parameters(true)) values.emplace(item.key(), item.value().detach().clone());
  return values;
}

bool is_adapter(const std::string& name) {
  return name.find(".lora_A.") != std::string::npos || name.find(".lora_B.") != std::string::npos;
}

/// The plain model (no adapters) with every adapted weight replaced by
/// W + (alpha / r) B A, computed here from the adapted model's tensors.
at::Tensor merged_by_hand_logits(Trainer& plain, Trainer& adapted, double scaling, const at::Tensor& ids) {
  const auto values = named_values(adapted.model());
  at::NoGradGuard no_grad;
  for (auto& item : plain.model().named_parameters(true)) {
    at::Tensor merged = values.at(item.key());
    const std::string module = item.key().substr(0, item.key().size() - std::string(".weight").size());
    if (values.count(module + ".lora_A.weight")) {
      merged = merged + scaling * at::matmul(values.at(module + ".lora_B.weight"), values.at(module + ".lora_A.weight"));
    }
    item.value().copy_(merged);
  }
  plain.model().eval();
  return plain.model().forward(ids);
}

at::Tensor some_ids(int64_t vocabulary) {
  at::manual_seed(2);
  return at::randint(0, vocabulary, {3, 16}, at::kLong);
}

// Adapters start at zero (the adapted model is the base to the bit), train
// alone (the base ends equal to the bit to a run's untouched base), and the
// adapted model equals the merged one, merged here by hand, after training.
TEST(LoraTest, AdaptedModelIsTheBaseAtFirstAndTheHandMergedModelAfterTraining) {
  test::TempDir dir;
  const std::string corpus = corpus_file(dir);
  for (const auto& [model, targets] : {std::pair{kGpt, kGptTargets}, std::pair{kLlama, kLlamaTargets}}) {
    SCOPED_TRACE(model);
    Trainer plain(lora_job(corpus, model, ""));
    Trainer adapted(lora_job(corpus, model, targets));
    const at::Tensor ids = some_ids(256);
    const auto base = named_values(plain.model());
    int64_t adapters = 0, trained = 0;
    for (const auto& item : adapted.model().named_parameters(true)) {
      if (is_adapter(item.key())) {
        ++adapters;
        EXPECT_TRUE(item.value().requires_grad()) << item.key();
        continue;
      }
      EXPECT_FALSE(item.value().requires_grad()) << item.key() << " is not frozen";
      EXPECT_TRUE(item.value().equal(base.at(item.key()))) << item.key() << ": adapters changed the base's draws";
    }
    EXPECT_EQ(adapters, 2 * adapted_count(model)) << "two matrices for each adapted projection";
    {
      at::NoGradGuard no_grad;
      plain.model().eval();
      adapted.model().eval();
      EXPECT_TRUE(adapted.model().forward(ids).equal(plain.model().forward(ids))) << "B starts at zero";
    }
    adapted.fit();
    for (const auto& item : adapted.model().named_parameters(true)) {
      if (is_adapter(item.key())) {
        trained += item.key().find("lora_B") != std::string::npos && item.value().abs().max().item<double>() > 0;
        continue;
      }
      EXPECT_TRUE(item.value().equal(base.at(item.key()))) << item.key() << " moved under SAM";
    }
    EXPECT_EQ(trained, adapted_count(model)) << "every B moved off zero";
    adapted.model().eval();
    at::NoGradGuard no_grad;
    const at::Tensor base_logits = plain.model().forward(ids);
    const at::Tensor lora = adapted.model().forward(ids);
    const at::Tensor merged = merged_by_hand_logits(plain, adapted, 8.0 / 4.0, ids);
    EXPECT_LT((lora - merged).abs().max().item<double>(), 1e-5);
    EXPECT_GT((lora - base_logits).abs().max().item<double>(), 1e-3) << "training moved the adapted model off the base";
  }
}

// The merge an export writes through restores the weights to the bit, and
// takes the adapters out of named_parameters while it lasts.
TEST(LoraTest, MergingForAnExportRestoresTheWeightsToTheBit) {
  test::TempDir dir;
  Trainer adapted(lora_job(corpus_file(dir), kGpt, kGptTargets, {{"init", "gaussian"}}));
  adapted.fit();
  const auto before = named_values(adapted.model());
  adapted.model().eval();
  const at::Tensor ids = some_ids(256);
  at::NoGradGuard no_grad;
  const at::Tensor logits = adapted.model().forward(ids);
  {
    const MergedAdapters merged(adapted.model());
    EXPECT_LT((adapted.model().forward(ids) - logits).abs().max().item<double>(), 1e-5) << "the delta counted twice";
    EXPECT_THROW(MergedAdapters(adapted.model()), std::logic_error) << "merged twice";
    for (const auto& item : adapted.model().named_parameters(true)) EXPECT_FALSE(is_adapter(item.key())) << item.key();
    const at::Tensor& w = adapted.model().named_parameters(true)["h.0.attn.c_attn.weight"];
    const at::Tensor by_hand = before.at("h.0.attn.c_attn.weight") +
                               2.0 * at::matmul(before.at("h.0.attn.c_attn.lora_B.weight"), before.at("h.0.attn.c_attn.lora_A.weight"));
    EXPECT_LT((w - by_hand).abs().max().item<double>(), 1e-6);
  }
  const auto after = named_values(adapted.model());
  ASSERT_EQ(after.size(), before.size());
  for (const auto& [name, value] : before) EXPECT_TRUE(after.at(name).equal(value)) << name;
}

// Every member of the SAM family trains on adapters alone: the loss stays
// finite, the base does not move by a bit, the adapters do.
TEST(LoraTest, EveryVariantOfTheFamilyTrainsTheAdaptersAlone) {
  test::TempDir dir;
  const std::string corpus = corpus_file(dir);
  auto family = test::sam_family();
  family.emplace_back("sam", "{}");
  for (const auto& name : sam_family_registry().names()) {
    if (test::needs_adapters(name)) family.emplace_back(name, "{}");
  }
  for (const auto& [name, keys] : family) {
    SCOPED_TRACE(name);
    Json config = lora_job(corpus, kGpt, kGptTargets);
    config["max_steps"] = 3;
    config["algorithms"] = {{name, Json::parse(keys)}};
    if (name == "msam") config["algorithms"][name]["m"] = 4;
    Trainer trainer(config);
    const auto before = named_values(trainer.model());
    const FitSummary summary = trainer.fit();
    EXPECT_TRUE(std::isfinite(summary.final_train_loss));
    int64_t moved = 0;
    for (const auto& item : trainer.model().named_parameters(true)) {
      const bool same = item.value().equal(before.at(item.key()));
      if (is_adapter(item.key())) {
        moved += !same;
      } else {
        EXPECT_TRUE(same) << item.key() << " moved";
      }
    }
    EXPECT_GE(moved, 4) << "the B matrices at least";
  }
}

// Under ddp and every ZeRO mode, adapters on the llama train as on one
// process over the joined batch, and the frozen base ends as it began, to
// the bit; zero3 with activation checkpointing too, and with bf16 gathers
// under amp_bf16 the base still does not move.
class LoraModeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LoraModeTest, EveryParallelModeEqualsOneProcess) {
  test::TempDir dir;
  const std::string corpus = corpus_file(dir);
  Json config = lora_job(corpus, kLlama, kLlamaTargets, {{"dropout", 0.0}});
  config["algorithms"] = {{GetParam(), {{"sync_ascent", true}}}};
  if (GetParam() == "flat_lora") config["algorithms"]["flat_lora"]["rho"] = 0.5;  // noise well above the tolerance
  if (GetParam() == "bi_lora") config["algorithms"]["bi_lora"].update({{"rho", 0.5}, {"ascent_lr", 1.0}});
  Json single = config;
  single["data"]["batch_size"] = 16;
  Trainer one(single);
  std::vector<bool> frozen;
  for (const auto& item : one.model().named_parameters(true)) frozen.push_back(!is_adapter(item.key()));
  const test::Weights initial = test::weights_of(one);
  one.fit();
  const test::Weights reference = test::weights_of(one);
  auto expect_base_unmoved = [&](const test::Weights& weights, const std::string& what) {
    ASSERT_EQ(weights.size(), frozen.size());
    for (std::size_t i = 0; i < weights.size(); ++i) {
      if (frozen[i]) {
        EXPECT_TRUE(weights[i].equal(initial[i])) << what << ": frozen parameter " << i << " moved";
      }
    }
  };
  expect_base_unmoved(reference, "one process");
  if (GetParam() != "sam") {  // its perturbation is on: without it the run ends elsewhere
    Json quiet = single;
    quiet["algorithms"][GetParam()]["rho"] = 1e-12;  // rho must be > 0
    Trainer without_noise(quiet);
    without_noise.fit();
    EXPECT_GT(test::max_difference(test::weights_of(without_noise), reference), 1e-4);
  }
  config["data"]["batch_size"] = 8;
  for (const std::string mode : {"ddp", "zero1", "zero2", "zero3", "zero3 checkpointed"}) {
    config["parallel"] = {{"mode", mode.substr(0, 5) == "zero3" ? "zero3" : mode}, {"timeout_seconds", 60}};
    if (mode == "zero3 checkpointed") config["parallel"]["activation_checkpointing"] = true;
    const auto ranks = test::train_on_ranks(2, config);
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_LT(test::max_difference(ranks[static_cast<std::size_t>(rank)], reference), 1e-5)
          << mode << " against one process, rank " << rank;
      expect_base_unmoved(ranks[static_cast<std::size_t>(rank)], mode);
    }
  }
  config["precision"] = "amp_bf16";
  config["parallel"] = {{"mode", "zero3"}, {"timeout_seconds", 60}, {"activation_checkpointing", true},
                        {"mixed_precision", {{"param_dtype", "bf16"}}}};
  const auto gathered_in_bf16 = test::train_on_ranks(2, config);
  expect_base_unmoved(gathered_in_bf16[0], "zero3 with bf16 gathers");
  EXPECT_GT(test::max_difference(gathered_in_bf16[0], initial), 0) << "the adapters trained";
}

// SAM on the adapters; Flat-LoRA, whose noise on the frozen weights each
// rank draws as one process does (under zero3 from the gathered unit); and
// Bi-LoRA, whose auxiliary adapters' gradients are averaged over the ranks.
INSTANTIATE_TEST_SUITE_P(Algorithms, LoraModeTest, ::testing::Values("sam", "flat_lora", "bi_lora"));

TEST(LoraTest, BadAdapterKeysAreRefusedNamingTheKey) {
  test::TempDir dir;
  const std::string corpus = corpus_file(dir);
  auto refused = [&](const std::string& model, const std::string& targets, const Json& lora,
                     const std::vector<std::string>& words) {
    test::expect_config_error([&] { Trainer trainer(lora_job(corpus, model, targets, lora)); }, words,
                              targets + " " + lora.dump());
  };
  refused(kGpt, "q_proj", {}, {"adapters.lora.targets", "q_proj", "h.0.attn.c_attn"});
  refused(kGpt, "h.(", {}, {"adapters.lora.targets", "regular expression"});
  refused(kGpt, kGptTargets, {{"r", 0}}, {"adapters.lora.r"});
  refused(kGpt, kGptTargets, {{"init", "pissa"}}, {"adapters.lora.init", "gaussian"});
  refused(kGpt, kGptTargets, {{"rank", 4}}, {"adapters.lora.rank"});
  refused(kGpt, kGptTargets, {{"init_from", dir.file("nowhere")}}, {"adapters.lora.init_from", "nowhere", "adapter_config.json"});
  Json mlp = lora_job(corpus, kGpt, kGptTargets);
  mlp["model"] = Json::parse(R"({"name": "mlp", "hidden": [8]})");
  mlp["data"] = Json::parse(R"({"name": "synthetic", "train_size": 32, "test_size": 8, "input_shape": [4],
                                "num_classes": 2, "batch_size": 8})");
  test::expect_config_error([&] { Trainer trainer(mlp); }, {"adapters.lora.targets", "none"}, "an mlp");
}

// PEFT's other forms of target_modules: a list of module names, each the
// last parts of a projection's name (basin's or Hugging Face's), and
// "all-linear", every projection but the output head.
TEST(LoraTest, TargetsTakeAListOfNamesOrAllLinearAsPeftDoes) {
  test::TempDir dir;
  const std::string corpus = corpus_file(dir);
  auto adapted_by = [&](const Json& targets) {
    Json config = lora_job(corpus, kLlama, "x");
    config["adapters"]["lora"]["targets"] = targets;
    Trainer trainer(config);
    std::vector<std::string> names;
    for (const auto& [name, layer] : adapted_layers(trainer.model())) names.push_back(name);
    return names;
  };
  std::vector<std::string> q_and_v, every;
  for (const std::string layer : {"layers.0.", "layers.1."}) {
    for (const std::string p : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}) {
      every.push_back(layer + p);
      if (p == "self_attn.q_proj" || p == "self_attn.v_proj") q_and_v.push_back(layer + p);
    }
  }
  auto sorted = [](std::vector<std::string> names) {
    std::sort(names.begin(), names.end());
    return names;
  };
  EXPECT_EQ(sorted(adapted_by({"q_proj", "v_proj"})), sorted(q_and_v));
  EXPECT_EQ(sorted(adapted_by({"self_attn.q_proj", "model.layers.1.self_attn.v_proj"})),
            sorted({"layers.0.self_attn.q_proj", "layers.1.self_attn.q_proj", "layers.1.self_attn.v_proj"}))
      << "a longer tail, and Hugging Face's whole name";
  EXPECT_EQ(sorted(adapted_by("all-linear")), sorted(every)) << "every projection but lm_head";
  test::expect_config_error([&] { adapted_by({"proj"}); }, {"adapters.lora.targets", "[\"proj\"]", "last parts"},
                            "a name that is no whole part");
  test::expect_config_error([&] { adapted_by(Json::array()); }, {"adapters.lora.targets", "empty"}, "an empty list");
  test::expect_config_error([&] { adapted_by(5); }, {"adapters.lora.targets", "all-linear"}, "a number");
}

/// Trains a few steps of the plain model and exports it: the base an adapter run starts from.
std::string exported_base(const test::TempDir& dir, const std::string& corpus, const std::string& model) {
  Json config = lora_job(corpus, model, "");
  config["max_steps"] = 2;
  Trainer trainer(config);
  trainer.fit();
  std::filesystem::create_directories(dir.file("base"));
  trainer.export_model(dir.file("base"));
  return dir.file("base/hf");
}

// A run exports the adapter in PEFT's layout and the merged model; a second
// run continues the adapter from that directory (it starts where the first
// ended), and one that asks for another rank is refused naming the file.
TEST(LoraTest, ExportsTheMergedModelAndTheAdapterWhichAnotherRunContinues) {
  test::TempDir dir;
  const std::string corpus = corpus_file(dir);
  for (const auto& [model, targets] : {std::pair{kGpt, kGptTargets}, std::pair{kLlama, kLlamaTargets}}) {
    SCOPED_TRACE(model);
    std::filesystem::remove_all(dir.file("base"));
    std::filesystem::remove_all(dir.file("run"));
    Json config = lora_job(corpus, model, targets);
    config["init_from"] = exported_base(dir, corpus, model);
    Trainer trainer(config);
    trainer.fit();
    std::filesystem::create_directories(dir.file("run"));
    trainer.export_model(dir.file("run"));
    const auto trained = named_values(trainer.model());

    // state_dict.pt is the plain model, merged.
    Trainer plain(lora_job(corpus, model, ""));
    const at::Tensor ids = some_ids(256);
    trainer.model().eval();
    at::Tensor logits;
    {
      at::NoGradGuard no_grad;
      logits = trainer.model().forward(ids);
    }
    const auto state = read_torch_save_file(dir.file("run/state_dict.pt"), "test").toGenericDict();
    at::NoGradGuard no_grad;
    for (auto& item : plain.model().named_parameters(true)) item.value().copy_(state.at(item.key()).toTensor());
    plain.model().eval();
    EXPECT_LT((plain.model().forward(ids) - logits).abs().max().item<double>(), 1e-5);

    // The adapter, named as PEFT names it; and continued by another run.
    const Json adapter_config = load_config_file(dir.file("run/adapter/adapter_config.json"));
    EXPECT_EQ(adapter_config["r"], 4);
    EXPECT_EQ(adapter_config["fan_in_fan_out"], std::string(model) == kGpt);
    EXPECT_EQ(static_cast<int64_t>(adapter_config["target_modules"].size()), adapted_count(model));
    const NamedTensors file = read_safetensors_file(dir.file("run/adapter/adapter_model.safetensors"), "test");
    EXPECT_EQ(static_cast<int64_t>(file.size()), 2 * adapted_count(model));
    for (const auto& [name, value] : file) EXPECT_EQ(name.rfind("base_model.model.", 0), 0u) << name;
    if (std::string(model) == kGpt) {
      // GPT-2's layout stores c_attn [in, out]: hf/ holds (W + s B A)^T, and the adapter A [r, in], B [out, r].
      std::map<std::string, at::Tensor> adapter(file.begin(), file.end());
      const at::Tensor a = adapter.at("base_model.model.transformer.h.0.attn.c_attn.lora_A.weight");
      const at::Tensor b = adapter.at("base_model.model.transformer.h.0.attn.c_attn.lora_B.weight");
      EXPECT_EQ(a.sizes(), (std::vector<int64_t>{4, 16}));
      EXPECT_EQ(b.sizes(), (std::vector<int64_t>{48, 4}));
      std::map<std::string, at::Tensor> hf;
      for (auto& [name, value] : read_safetensors_file(dir.file("run/hf/model.safetensors"), "test")) hf.emplace(name, value);
      const at::Tensor expected = (trained.at("h.0.attn.c_attn.weight") + 2.0 * at::matmul(b, a)).t();
      EXPECT_LT((hf.at("transformer.h.0.attn.c_attn.weight") - expected).abs().max().item<double>(), 1e-6);
    }
    Json continued = config;
    continued["adapters"]["lora"]["init_from"] = dir.file("run/adapter");
    Trainer again(continued);
    for (const auto& item : again.model().named_parameters(true)) {
      EXPECT_TRUE(item.value().equal(trained.at(item.key()))) << item.key() << " did not continue where the run ended";
    }
    continued["adapters"]["lora"]["r"] = 2;
    test::expect_config_error([&] { Trainer wrong(continued); }, {"adapters.lora.init_from", "adapter_config.json", "\"r\""},
                              "another rank");
  }
}

// transformers loads the merged hf/, and peft loads the adapter onto the
// base's hf/: both give basin's logits.
TEST(LoraTest, TransformersLoadsTheMergedModelAndPeftTheAdapterWithBasinsLogits) {
  const std::string python = test::hugging_face_python();
  if (python.empty() || std::system((python + " -c 'import peft' > /dev/null 2>&1").c_str()) != 0) {
    GTEST_SKIP() << "no Python with PyPI's transformers and peft: run scripts/hf-python.sh (or set BASIN_HF_PYTHON)";
  }
  test::TempDir dir;
  const std::string corpus = corpus_file(dir);
  for (const auto& [model, targets, model_class] :
       {std::tuple{kGpt, kGptTargets, "GPT2LMHeadModel"}, std::tuple{kLlama, kLlamaTargets, "LlamaForCausalLM"}}) {
    SCOPED_TRACE(model);
    std::filesystem::remove_all(dir.file("base"));
    std::filesystem::remove_all(dir.file("run"));
    Json config = lora_job(corpus, model, targets, {{"dropout", 0.1}});
    config["init_from"] = exported_base(dir, corpus, model);
    Trainer trainer(config);
    trainer.fit();
    std::filesystem::create_directories(dir.file("run"));
    trainer.export_model(dir.file("run"));
    trainer.model().eval();
    at::NoGradGuard no_grad;
    const at::Tensor ids = some_ids(256);
    c10::Dict<std::string, at::Tensor> saved;
    saved.insert("ids", ids);
    saved.insert("logits", trainer.model().forward(ids));
    write_torch_save_file(dir.file("trained.pt"), saved);
    const auto loaded = test::run_command(
        "env -C " + dir.path().string() + " " + python + " -c \"import torch, transformers, peft\n"
        "trained = torch.load('trained.pt')\n"
        "merged = transformers." + model_class + ".from_pretrained('run/hf').eval()\n"
        "base = transformers." + model_class + ".from_pretrained('base/hf')\n"
        "adapted = peft.PeftModel.from_pretrained(base, 'run/adapter').eval()\n"
        "with torch.no_grad():\n"
        "    for name, model in (('merged', merged), ('peft', adapted)):\n"
        "        difference = (model(trained['ids']).logits - trained['logits']).abs().max().item()\n"
        "        print('python:', name, 'differs from basin by', difference)\n"
        "        assert difference < 1e-5, (name, difference)\"",
        300);
    EXPECT_EQ(loaded.exit_code, 0) << loaded.output;
  }
}

}  // namespace
}  // namespace basin
