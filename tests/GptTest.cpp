// The "gpt" model: GPT-2's forward against the same arithmetic written out
// with plain LibTorch ops; causality; the tied head; every parallel mode
// equal to ddp on it under SAM; and Hugging Face GPT-2 weights both ways
// (refusals without Python, and with PyPI's transformers where installed:
// basin's logits equal GPT2LMHeadModel's, and the model basin trained loads
// back into it).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <ATen/ATen.h>

#include "basin/core/base/torch_compat.h"
#include "basin/core/config/config.h"
#include "basin/core/config/config_error.h"
#include "basin/core/model/model.h"
#include "basin/core/serialization/safetensors_file.h"
#include "basin/core/serialization/torch_save_file.h"
#include "basin/core/train/trainer.h"
#include "distributed_util.h"
#include "hugging_face_python.h"
#include "local_gradients.h"
#include "precision_bounds.h"
#include "test_paths.h"
#include "test_util.h"

namespace basin {
namespace {

std::shared_ptr<Model> make_gpt(const Json& keys, int64_t vocabulary, int64_t tokens) {
  Params params(keys, "model");
  auto model = model_registry().create("gpt", params, DatasetInfo{{tokens}, vocabulary});
  params.finish();
  return model;
}

at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  const at::Tensor mean = x.mean(-1, true);
  const at::Tensor variance = (x - mean).pow(2).mean(-1, true);
  return (x - mean) / (variance + 1e-5).sqrt() * weight + bias;
}

/// GPT-2 (Radford et al. 2019; nanoGPT's model.py) from its parameters, op by op.
at::Tensor reference_logits(std::map<std::string, at::Tensor> p, const at::Tensor& ids, int64_t layers, int64_t heads) {
  const int64_t n = ids.size(0), t = ids.size(1), c = p["wte.weight"].size(1), d = c / heads;
  at::Tensor x = p["wte.weight"].index_select(0, ids.flatten()).view({n, t, c}) + p["wpe.weight"].slice(0, 0, t);
  const at::Tensor future = at::ones({t, t}).triu(1).to(at::kBool);
  for (int64_t l = 0; l < layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    const at::Tensor a = layer_norm(x, p[h + "ln_1.weight"], p[h + "ln_1.bias"]);
    const at::Tensor qkv = at::matmul(a, p[h + "attn.c_attn.weight"].t()) + p[h + "attn.c_attn.bias"];
    auto split = [&](int64_t k) { return qkv.slice(2, k * c, (k + 1) * c).view({n, t, heads, d}).transpose(1, 2); };
    const at::Tensor scores = at::matmul(split(0), split(1).transpose(-2, -1)) / std::sqrt(static_cast<double>(d));
    const at::Tensor weights = scores.masked_fill(future, -INFINITY).softmax(-1);
    const at::Tensor y = at::matmul(weights, split(2)).transpose(1, 2).reshape({n, t, c});
    x = x + at::matmul(y, p[h + "attn.c_proj.weight"].t()) + p[h + "attn.c_proj.bias"];
    const at::Tensor m = at::matmul(layer_norm(x, p[h + "ln_2.weight"], p[h + "ln_2.bias"]), p[h + "mlp.c_fc.weight"].t()) +
                         p[h + "mlp.c_fc.bias"];
    const at::Tensor gelu = 0.5 * m * (1 + at::tanh(std::sqrt(2.0 / M_PI) * (m + 0.044715 * m.pow(3))));
    x = x + at::matmul(gelu, p[h + "mlp.c_proj.weight"].t()) + p[h + "mlp.c_proj.bias"];
  }
  return at::matmul(layer_norm(x, p["ln_f.weight"], p["ln_f.bias"]), p["wte.weight"].t());
}

TEST(GptTest, ForwardIsGpt2OpByOpWithTheHeadTiedAndCausal) {
  at::manual_seed(0);
  const Json keys{{"n_layer", 2}, {"n_head", 4}, {"n_embd", 16}};
  auto model = make_gpt(keys, 50, 12);
  model->eval();
  std::map<std::string, at::Tensor> params;
  int64_t count = 0;
  for (const auto& item : model->named_parameters(true)) {
    params.emplace(item.key(), item.value().detach());
    count += item.value().numel();
  }
  // Parameters by GPT-2's formula: embeddings, 12 C^2 + 13 C per block, the final LayerNorm; no head of its own.
  const int64_t v = 50, t = 12, c = 16;
  EXPECT_EQ(count, v * c + t * c + 2 * (12 * c * c + 13 * c) + 2 * c);
  EXPECT_EQ(params.count("lm_head.weight"), 0u);
  const at::Tensor ids = at::randint(0, v, {3, t}, at::kLong);
  at::NoGradGuard no_grad;
  const at::Tensor logits = model->forward(ids);
  ASSERT_EQ(logits.sizes(), (std::vector<int64_t>{3, t, v}));
  EXPECT_LT((logits - reference_logits(params, ids, 2, 4)).abs().max().item<double>(), 1e-5);
  // A later token changes no earlier position's logits, and changes its own.
  at::Tensor changed = ids.clone();
  changed[1][7] = (ids[1][7].item<int64_t>() + 1) % v;
  const at::Tensor after = model->forward(changed);
  EXPECT_TRUE(after.slice(1, 0, 7).equal(logits.slice(1, 0, 7)));
  EXPECT_GT((after[1][7] - logits[1][7]).abs().max().item<double>(), 1e-4);
  // Shorter windows than block_size run; longer ones are refused.
  EXPECT_EQ(model->forward(ids.slice(1, 0, 5)).size(1), 5);
  EXPECT_THROW(model->forward(at::zeros({1, t + 1}, at::kLong)), std::invalid_argument);
}

TEST(GptTest, BadSizesAreRefusedNamingTheKey) {
  auto refused = [](const Json& keys, const std::string& word) {
    test::expect_config_error([&] { make_gpt(keys, 50, 12); }, {word}, keys.dump());
  };
  refused({{"n_embd", 30}, {"n_head", 4}}, "model.n_embd");
  refused({{"vocab_size", 10}}, "model.vocab_size");
  refused({{"block_size", 4}}, "model.block_size");
  refused({{"dropout", 1.0}}, "model.dropout");
  refused({{"layers", 2}}, "layers");
}

Json gpt_job(const std::string& corpus, const std::string& mode, const std::string& sam) {
  Json config = Json::parse(R"({"seed": 4, "threads": 1, "max_steps": 3,
    "model": {"name": "gpt", "n_layer": 2, "n_head": 2, "n_embd": 16},
    "optimizer": {"name": "adamw", "lr": 0.01, "weight_decay": 0.1}})");
  config["data"] = {{"name", "text"}, {"train", corpus}, {"block_size", 16}, {"batch_size", 8}, {"microbatches", 2}};
  config["algorithms"] = Json::parse(R"({"sam": )" + sam + "}");
  config["parallel"] = {{"mode", mode}, {"timeout_seconds", 60}};
  return config;
}

TEST(GptTest, EveryModeEqualsDdpUnderSamWithEitherAscent) {
  test::TempDir dir;
  std::string corpus;
  for (int i = 0; i < 60; ++i) corpus += "A fortune: the early bird gets the worm " + std::to_string(i) + ".\n";
  test::write_text(dir.file("corpus.txt"), corpus);
  for (const std::string sam : {R"({"rho": 0.05, "sync_ascent": true})", R"({"rho": 0.05})"}) {
    const auto ddp = test::train_on_ranks(2, gpt_job(dir.file("corpus.txt"), "ddp", sam));
    EXPECT_EQ(test::max_difference(ddp[0], ddp[1]), 0.0) << "replicas drifted under ddp";
    for (const std::string mode : {"zero1", "zero2", "zero3"}) {
      if (mode == "zero3" && sam.find("sync_ascent") == std::string::npos) continue;  // zero3 syncs every ascent
      const auto sharded = test::train_on_ranks(2, gpt_job(dir.file("corpus.txt"), mode, sam));
      for (int rank = 0; rank < 2; ++rank) {
        EXPECT_LT(test::max_difference(sharded[static_cast<std::size_t>(rank)], ddp[0]), 1e-5)
            << mode << " against ddp, rank " << rank << ", sam " << sam;
      }
    }
  }
}

// fp16 autocast on the CPU (LibTorch 2.5 and later) with the grad scaler and
// SAM on the gpt: zero3 follows ddp, and the weights stay finite and move.
// One step (no SAM) by the fp32 sums' rounding alone (local_gradients.h);
// six with SAM, where fp16's rounding of activations turns the sums' orders
// into gaps no rounding bounds, nearer ddp's than a run that did not train.
// (amp_bf16 on the gpt: CheckpointTest's resume to the bit.)
TEST(GptTest, Fp16AutocastWithTheScalerTrainsUnderZeroThreeAsUnderDdp) {
  if (!compat::kCpuAutocastFp16) {
    GTEST_SKIP() << "LibTorch " << compat::torch_version() << "'s CPU autocast has no float16 (2.5 and later have)";
  }
  test::TempDir dir;
  std::string corpus;
  for (int i = 0; i < 60; ++i) corpus += "Half precision, whole fortune " + std::to_string(i) + ".\n";
  test::write_text(dir.file("corpus.txt"), corpus);
  auto job = [&](const std::string& mode) {
    Json config = gpt_job(dir.file("corpus.txt"), mode, R"({"rho": 0.05, "sync_ascent": true})");
    config["precision"] = "amp_fp16";
    config["max_steps"] = 6;
    config["optimizer"] = Json::parse(R"({"name": "sgd", "lr": 0.1, "momentum": 0.9})");
    config["callbacks"] = Json::parse(R"({"grad_scaler": {}})");
    return config;
  };
  Json one_step = job("ddp");
  one_step["callbacks"]["grad_scaler"]["init_scale"] = 1024;  // its scale at the step, known
  test::expect_one_step_follows_ddp(one_step, "zero3", 2, 1024);
  const auto ddp = test::train_on_ranks(2, job("ddp"));
  const auto zero3 = test::train_on_ranks(2, job("zero3"));
  EXPECT_EQ(test::max_difference(ddp[0], ddp[1]), 0.0) << "replicas drifted under ddp";
  for (const auto& w : ddp[0]) EXPECT_TRUE(at::isfinite(w).all().item<bool>());
  Json plain = job("ddp");
  plain.erase("parallel");
  Trainer untrained(plain);
  const double moved = test::max_difference(ddp[0], untrained.whole_parameters());
  EXPECT_GT(moved, 1e-4) << "training moved the weights";
  for (const auto& rank : zero3) EXPECT_LT(test::max_difference(rank, ddp[0]), moved) << "no nearer than a run that did not train";
}

// Every algorithm of the SAM family on the gpt, with token targets (ESAM
// ranks sequences by their token sums' rise, each one's share of the step's
// token mean; mSAM's parts count their own tokens): zero3 (a synced ascent,
// as it requires) follows ddp within what AdamW's steps allow.
class GptFamilyTest : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(GptFamilyTest, ZeroThreeEqualsDdp) {
  test::TempDir dir;
  std::string corpus;
  for (int i = 0; i < 40; ++i) corpus += "Lost: a fortune cookie, " + std::to_string(i * 7) + " words.\n";
  test::write_text(dir.file("corpus.txt"), corpus);
  Json keys = Json::parse(GetParam().second);
  keys["sync_ascent"] = true;
  auto job = [&](const std::string& mode) {
    Json config = gpt_job(dir.file("corpus.txt"), mode, "{}");
    config["algorithms"] = Json::object();
    config["algorithms"][GetParam().first] = keys;
    return config;
  };
  const auto ddp = test::train_on_ranks(2, job("ddp"));
  const auto zero3 = test::train_on_ranks(2, job("zero3"));
  Json plain = job("ddp");
  plain.erase("parallel");
  Trainer untrained(plain);
  const double moved = test::max_difference(ddp[0], untrained.whole_parameters());
  EXPECT_GT(moved, 1e-4) << "training moved the weights";
  // zero3 sums each microbatch's gradients apart and its norms over shards:
  // the same terms in another order, which AdamW's normalized step can turn
  // into up to 2 lr a step where a gradient is near zero (1.07e-5 apart on a
  // CPU whose kernels round otherwise); its largest steps bound the runs.
  const double bound = test::adam_runs_apart_bound(plain["optimizer"]["lr"].get<double>(),
                                                   plain["max_steps"].get<int64_t>(), test::largest_weight({&ddp[0], &zero3[0]}));
  EXPECT_EQ(test::max_difference(zero3[0], zero3[1]), 0.0) << GetParam().first << ": zero3's ranks hold the same weights";
  EXPECT_LE(test::max_difference(zero3[0], ddp[0]), bound) << GetParam().first;
  EXPECT_LT(test::max_difference(zero3[0], ddp[0]), moved) << GetParam().first << ": nearer than a run that did not train";
}

INSTANTIATE_TEST_SUITE_P(Family, GptFamilyTest, ::testing::ValuesIn(test::sam_family()),
                         [](const auto& info) { return info.param.first; });

// basin-generate on a run basin-train left: greedy decoding continues the
// pattern the model learned; top-k 1 is greedy at any temperature; a seed
// fixes the draws; bad input exits 2 naming what is wrong.
TEST(GptTest, BasinGenerateSamplesWhatTheRunLearned) {
  test::TempDir dir;
  std::string corpus;
  for (int i = 0; i < 350; ++i) corpus += "abcdefg";  // a period prime to block_size: windows start at every phase
  test::write_text(dir.file("corpus.txt"), corpus);
  Json config = Json::parse(R"({"seed": 1, "threads": 1, "max_epochs": 3,
    "model": {"name": "gpt", "n_layer": 1, "n_head": 2, "n_embd": 32},
    "optimizer": {"name": "adamw", "lr": 0.01}})");
  config["data"] = {{"name", "text"}, {"train", dir.file("corpus.txt")}, {"block_size", 16}, {"batch_size", 16}};
  test::write_text(dir.file("config.json"), config.dump());
  const auto trained = test::run_command(std::string(BASIN_TRAIN_EXE) + " --config " + dir.file("config.json") +
                                         " --run-dir " + dir.file("run"));
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  auto generate = [&](const std::string& options) {
    return test::run_command(std::string(BASIN_GENERATE_EXE) + " " + dir.file("run") + " " + options + " 2>&1");
  };
  const auto greedy = generate("--prompt abc --tokens 20 --temperature 0");
  ASSERT_EQ(greedy.exit_code, 0) << greedy.output;
  EXPECT_EQ(greedy.output, corpus.substr(0, 23) + "\n");
  EXPECT_EQ(generate("--prompt abc --tokens 20 --temperature 3 --top-k 1 --seed 9").output, greedy.output);
  const auto first = generate("--prompt abc --tokens 40 --temperature 5 --seed 5");
  EXPECT_EQ(generate("--prompt abc --tokens 40 --temperature 5 --seed 5").output, first.output) << "a seed fixes the draws";
  EXPECT_NE(generate("--prompt abc --tokens 40 --temperature 5 --seed 6").output, first.output);
  EXPECT_EQ(first.output.size(), 3u + 40u + 1u);
  const auto ids = generate("--ids 1,2");
  EXPECT_EQ(ids.exit_code, 2);
  EXPECT_NE(ids.output.find("--ids"), std::string::npos) << ids.output;
  const auto no_run = test::run_command(std::string(BASIN_GENERATE_EXE) + " " + dir.file("nowhere") + " 2>&1");
  EXPECT_EQ(no_run.exit_code, 2);
  EXPECT_NE(no_run.output.find("nowhere/config.json"), std::string::npos) << no_run.output;
}

/// A trainer of a small gpt on random ids, starting from `init_from`.
Json hf_job(const std::string& dir, const std::string& init_from) {
  at::manual_seed(11);
  write_torch_save_file(dir + "/ids.pt", at::randint(0, 300, {2000}, at::kLong));
  Json config = Json::parse(R"({"seed": 2, "threads": 1, "max_steps": 3,
    "model": {"name": "gpt", "n_layer": 2, "n_head": 4, "n_embd": 32, "vocab_size": 300},
    "optimizer": {"name": "adamw", "lr": 0.01},
    "algorithms": {"sam": {"rho": 0.05}}})");
  config["data"] = {{"name", "tokens"}, {"train", dir + "/ids.pt"}, {"block_size", 16}, {"batch_size", 8}};
  if (!init_from.empty()) config["init_from"] = init_from;
  return config;
}

void expect_init_refused(const Json& config, const std::vector<std::string>& words) {
  test::expect_config_error([&] { Trainer trainer(config); }, words, config["init_from"].dump());
}

// basin's own export read back (no Python needed), and a directory whose
// config.json disagrees with the model or with its own weights refused
// naming the file and the key.
TEST(GptTest, HuggingFaceDirectoriesRoundTripAndWhatDisagreesIsRefused) {
  test::TempDir dir;
  const std::string out = dir.file("run");
  std::filesystem::create_directories(out);
  at::Tensor before;
  const at::Tensor ids = at::randint(0, 300, {2, 16}, at::kLong);
  {
    Trainer trainer(hf_job(dir.path().string(), ""));
    trainer.fit();
    trainer.export_model(out);
    trainer.model().eval();
    at::NoGradGuard no_grad;
    before = trainer.model().forward(ids);
  }
  ASSERT_TRUE(std::filesystem::exists(out + "/hf/model.safetensors"));
  {
    Trainer trainer(hf_job(dir.path().string(), out + "/hf"));
    trainer.model().eval();
    at::NoGradGuard no_grad;
    EXPECT_TRUE(trainer.model().forward(ids).equal(before)) << "what basin wrote, basin reads to the bit";
  }
  const Json config = Json::parse(test::read_text(out + "/hf/config.json"));
  // GPT2Config's defaults would name token 50256, outside this model's vocabulary: the run has none to name.
  for (const char* key : {"bos_token_id", "eos_token_id"}) {
    ASSERT_TRUE(config.contains(key)) << key;
    EXPECT_TRUE(config[key].is_null()) << key << ": " << config[key].dump();
  }
  auto with_config = [&](const std::string& name, const Json& changed) {
    const std::string copy = dir.file(name);
    std::filesystem::create_directories(copy);
    std::filesystem::copy_file(out + "/hf/model.safetensors", copy + "/model.safetensors");
    test::write_text(copy + "/config.json", changed.dump());
    return copy;
  };
  Json layers = config;
  layers["n_layer"] = 3;
  expect_init_refused(hf_job(dir.path().string(), with_config("layers", layers)),
                      {"'init_from'", "config.json", "n_layer 3", "model.n_layer"});
  Json width = config;
  width["n_embd"] = 64;
  Json wide_job = hf_job(dir.path().string(), with_config("width", width));
  wide_job["model"]["n_embd"] = 64;  // the model agrees with config.json; the weights do not
  expect_init_refused(wide_job, {"'init_from'", "width'", "tensor 'transformer.wte.weight'", "shape", "config.json's sizes"});
  Json positions = config;
  positions["n_positions"] = 64;
  expect_init_refused(hf_job(dir.path().string(), with_config("positions", positions)),
                      {"wpe.weight", "n_positions is 64"});
  Json activation = config;
  activation["activation_function"] = "relu";
  expect_init_refused(hf_job(dir.path().string(), with_config("activation", activation)), {"activation_function", "relu"});
  expect_init_refused(hf_job(dir.path().string(), dir.file("nothing")), {"init_from"});
}

// GPT-2's layout written by hand (Conv1D weights [in, out] under
// "transformer.", a tied lm_head.weight, the old mask buffers, 32 position
// rows for a model of 16): the gpt that starts from it computes GPT-2 op by
// op from the same numbers. No Python needed: the layout is the test's own.
TEST(GptTest, AHandWrittenGpt2DirectoryLoadsIntoTheSameFunction) {
  test::TempDir dir;
  at::manual_seed(3);
  const int64_t v = 300, c = 32, layers = 2, positions = 32;
  std::map<std::string, at::Tensor> params;  // basin's names and [out, in] layout
  NamedTensors file;
  auto add = [&](const std::string& name, at::Tensor value) {
    params[name] = value;
    const bool conv1d = name.find(".c_") != std::string::npos && name.size() > 7 &&
                        name.compare(name.size() - 7, 7, ".weight") == 0;
    file.emplace_back("transformer." + name, conv1d ? value.t().contiguous() : value);
  };
  add("wte.weight", at::randn({v, c}) * 0.1);
  const at::Tensor wpe = at::randn({positions, c}) * 0.1;
  params["wpe.weight"] = wpe.slice(0, 0, 16);
  file.emplace_back("transformer.wpe.weight", wpe);
  for (int64_t l = 0; l < layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    for (const char* norm : {"ln_1", "ln_2"}) {
      add(h + norm + ".weight", 1 + 0.1 * at::randn({c}));
      add(h + norm + ".bias", 0.1 * at::randn({c}));
    }
    add(h + "attn.c_attn.weight", 0.1 * at::randn({3 * c, c}));
    add(h + "attn.c_attn.bias", 0.1 * at::randn({3 * c}));
    add(h + "attn.c_proj.weight", 0.1 * at::randn({c, c}));
    add(h + "attn.c_proj.bias", 0.1 * at::randn({c}));
    add(h + "mlp.c_fc.weight", 0.1 * at::randn({4 * c, c}));
    add(h + "mlp.c_fc.bias", 0.1 * at::randn({4 * c}));
    add(h + "mlp.c_proj.weight", 0.1 * at::randn({c, 4 * c}));
    add(h + "mlp.c_proj.bias", 0.1 * at::randn({c}));
    file.emplace_back("transformer." + h + "attn.bias", at::ones({1, 1, positions, positions}).tril());
  }
  add("ln_f.weight", 1 + 0.1 * at::randn({c}));
  add("ln_f.bias", 0.1 * at::randn({c}));
  file.emplace_back("lm_head.weight", params["wte.weight"]);
  std::filesystem::create_directories(dir.file("gpt2"));
  write_safetensors_file(dir.file("gpt2/model.safetensors"), file, {{"format", "pt"}});
  test::write_text(dir.file("gpt2/config.json"), Json{{"model_type", "gpt2"}, {"vocab_size", v}, {"n_positions", positions},
                                                       {"n_embd", c}, {"n_layer", layers}, {"n_head", 4},
                                                       {"activation_function", "gelu_new"}}.dump());
  Trainer trainer(hf_job(dir.path().string(), dir.file("gpt2")));
  at::NoGradGuard no_grad;
  trainer.model().eval();
  const at::Tensor ids = at::randint(0, v, {2, 16}, at::kLong);
  EXPECT_LT((trainer.model().forward(ids) - reference_logits(params, ids, layers, 4)).abs().max().item<double>(), 1e-4);
}

// With PyPI's transformers: a random GPT2LMHeadModel saved by Python gives
// basin the same logits; basin trains it a few SAM steps; Python loads what
// basin wrote and gets basin's logits.
TEST(GptTest, Gpt2WeightsFromHuggingFaceTrainAndGoBack) {
  const std::string python = test::hugging_face_python();
  if (python.empty()) {
    GTEST_SKIP() << "no Python with PyPI's transformers and safetensors: run scripts/hf-python.sh (or set BASIN_HF_PYTHON)";
  }
  test::TempDir dir;
  const auto made = test::run_command(
      "env -C " + dir.path().string() + " " + python + " -c \"import torch, transformers\n"
      "torch.manual_seed(0)\n"
      "config = transformers.GPT2Config(vocab_size=300, n_positions=32, n_embd=32, n_layer=2, n_head=4)\n"
      "model = transformers.GPT2LMHeadModel(config).eval()\n"
      // Split over several files, as larger checkpoints come: basin reads them through the index.
      "model.save_pretrained('hf_in', max_shard_size='20KB')\n"
      "import os; assert os.path.exists('hf_in/model.safetensors.index.json')\n"
      "ids = torch.randint(0, 300, (3, 16))\n"
      "with torch.no_grad(): logits = model(ids).logits\n"
      "torch.save({'ids': ids, 'logits': logits}, 'reference.pt')\"", 300);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const auto reference = read_torch_save_file(dir.file("reference.pt"), "test").toGenericDict();
  const at::Tensor ids = reference.at("ids").toTensor();
  Trainer trainer(hf_job(dir.path().string(), dir.file("hf_in")));
  {
    trainer.model().eval();
    at::NoGradGuard no_grad;
    const at::Tensor logits = trainer.model().forward(ids);
    EXPECT_LT((logits - reference.at("logits").toTensor()).abs().max().item<double>(), 1e-5)
        << "basin's logits against GPT2LMHeadModel's";
    trainer.model().train();
  }
  // GPT2Config's default special tokens would name ids outside a byte-level vocabulary.
  test::expect_trained_model_loads_in_transformers(trainer, python, dir, "GPT2LMHeadModel", ids,
                                                   reference.at("logits").toTensor(),
                                                   "for key in ('bos_token_id', 'eos_token_id'):\n"
                                                   "    value = getattr(model.config, key)\n"
                                                   "    assert value is None or value < model.config.vocab_size, (key, value)\n");
}

}  // namespace
}  // namespace basin
