// The "llama" model: its forward against the same arithmetic written out
// with plain LibTorch ops (RMSNorm, rotary positions, grouped-query heads,
// SwiGLU, a tied or untied head); every parallel mode equal to ddp on it
// under SAM; and Hugging Face Llama directories both ways (refusals without
// Python, and with PyPI's transformers where installed: basin's logits
// equal LlamaForCausalLM's, and the model basin trained loads back into it).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <tuple>

#include <ATen/ATen.h>

#include "basin/core/config/config.h"
#include "basin/core/model/model.h"
#include "basin/core/serialization/safetensors_checkpoint.h"
#include "basin/core/serialization/torch_save_file.h"
#include "basin/core/train/trainer.h"
#include "distributed_util.h"
#include "hugging_face_python.h"
#include "test_util.h"

namespace basin {
namespace {

std::shared_ptr<Model> make_llama(const Json& keys, int64_t vocabulary, int64_t tokens, const std::string& name = "llama") {
  Params params(keys, "model");
  auto model = model_registry().create(name, params, DatasetInfo{{tokens}, vocabulary});
  params.finish();
  return model;
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return x / (x.pow(2).mean(-1, true) + eps).sqrt() * weight;
}

/// Rotates each pair (i, i + d/2) of every head's features by the angle
/// position * theta^(-2i/d), frequencies taken in double.
at::Tensor rotate(const at::Tensor& x, double theta) {
  const int64_t t = x.size(2), d = x.size(3), half = d / 2;
  std::vector<float> cosines, sines;
  for (int64_t p = 0; p < t; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) / std::pow(theta, 2.0 * static_cast<double>(i) / static_cast<double>(d));
      cosines.push_back(static_cast<float>(std::cos(angle)));
      sines.push_back(static_cast<float>(std::sin(angle)));
    }
  }
  const at::Tensor c = at::tensor(cosines).view({t, half}), s = at::tensor(sines).view({t, half});
  const at::Tensor first = x.narrow(3, 0, half), second = x.narrow(3, half, half);
  return at::cat({first * c - second * s, second * c + first * s}, 3);
}

/// Llama (Touvron et al. 2023) from its parameters, op by op.
at::Tensor reference_logits(std::map<std::string, at::Tensor> p, const at::Tensor& ids, int64_t layers, int64_t heads,
                            int64_t kv_heads, double theta, double eps, int64_t window = 0) {
  const int64_t n = ids.size(0), t = ids.size(1), c = p["embed_tokens.weight"].size(1);
  const int64_t d = p["layers.0.self_attn.q_proj.weight"].size(0) / heads;  // head_dim, given or c / heads
  auto linear = [&](const at::Tensor& x, const std::string& name) {
    const at::Tensor y = at::matmul(x, p[name + ".weight"].t());
    return p.count(name + ".bias") ? y + p[name + ".bias"] : y;
  };
  at::Tensor x = p["embed_tokens.weight"].index_select(0, ids.flatten()).view({n, t, c});
  at::Tensor future = at::ones({t, t}).triu(1).to(at::kBool);
  if (window > 0) future = future.logical_or(at::ones({t, t}).tril(-window).to(at::kBool));  // keys window or more back
  for (int64_t l = 0; l < layers; ++l) {
    const std::string h = "layers." + std::to_string(l) + ".";
    const at::Tensor a = rms_norm(x, p[h + "input_layernorm.weight"], eps);
    auto split = [&](const at::Tensor& y, int64_t count) { return y.view({n, t, count, d}).transpose(1, 2); };
    const at::Tensor q = rotate(split(linear(a, h + "self_attn.q_proj"), heads), theta);
    const at::Tensor k = rotate(split(linear(a, h + "self_attn.k_proj"), kv_heads), theta);
    const at::Tensor v = split(linear(a, h + "self_attn.v_proj"), kv_heads);
    std::vector<at::Tensor> outputs;
    for (int64_t head = 0; head < heads; ++head) {  // query head `head` reads key/value head head / (heads / kv_heads)
      const int64_t shared = head / (heads / kv_heads);
      const at::Tensor scores = at::matmul(q.select(1, head), k.select(1, shared).transpose(-2, -1)) / std::sqrt(static_cast<double>(d));
      outputs.push_back(at::matmul(scores.masked_fill(future, -INFINITY).softmax(-1), v.select(1, shared)));
    }
    x = x + linear(at::stack(outputs, 2).reshape({n, t, heads * d}), h + "self_attn.o_proj");
    const at::Tensor m = rms_norm(x, p[h + "post_attention_layernorm.weight"], eps);
    const at::Tensor gate = linear(m, h + "mlp.gate_proj");
    x = x + linear(gate * at::sigmoid(gate) * linear(m, h + "mlp.up_proj"), h + "mlp.down_proj");
  }
  const at::Tensor head = p.count("lm_head.weight") ? p["lm_head.weight"] : p["embed_tokens.weight"];
  return at::matmul(rms_norm(x, p["norm.weight"], eps), head.t());
}

struct ForwardCase {
  int64_t kv_heads, head_dim;
  double theta;
  bool attention_bias, mlp_bias, tied;
  std::string name = "llama";  // "qwen2": a bias on q, k and v alone, whatever attention_bias says here
  int64_t window = 0;          // "mistral": a window over every layer
};

TEST(LlamaTest, ForwardIsLlamaOpByOpWithGroupedHeadsRotaryPositionsAndEitherHead) {
  at::manual_seed(0);
  const int64_t v = 50, t = 12, c = 16, f = 40, heads = 4;
  // Grouped heads with attention biases and another theta; plain heads and a tied head; a head_dim
  // of its own with the MLP's biases; Qwen2's biases; Mistral's window of 5 over 12 positions.
  for (const ForwardCase& shape : {ForwardCase{2, 4, 500.0, true, false, false}, ForwardCase{4, 4, 10000.0, false, false, true},
                                   ForwardCase{2, 6, 10000.0, false, true, false},
                                   ForwardCase{2, 4, 10000.0, false, false, false, "qwen2"},
                                   ForwardCase{2, 4, 10000.0, false, false, false, "mistral", 5}}) {
    const bool qwen2 = shape.name == "qwen2";
    Json keys{{"hidden_size", c},   {"intermediate_size", f},         {"num_hidden_layers", 2},
              {"num_attention_heads", heads}, {"num_key_value_heads", shape.kv_heads}, {"rope_theta", shape.theta},
              {"rms_norm_eps", 1e-5}, {"tie_word_embeddings", shape.tied}};
    if (shape.name == "llama") {
      keys["attention_bias"] = shape.attention_bias;
      keys["mlp_bias"] = shape.mlp_bias;
    }
    if (shape.name == "mistral") keys["sliding_window"] = shape.window;
    if (shape.head_dim != c / heads) keys["head_dim"] = shape.head_dim;
    const std::string which = shape.name + " " + keys.dump();
    auto model = make_llama(keys, v, t, shape.name);
    model->eval();
    std::map<std::string, at::Tensor> params;
    int64_t count = 0;
    for (const auto& item : model->named_parameters(true)) {
      params.emplace(item.key(), item.value().detach().normal_(0, 0.3));  // norms and biases too, to see them used
      count += item.value().numel();
    }
    // Parameters by Llama's formula, per layer: q and o of C H d, k and v of C K d, the MLP's 3 C F, two
    // norms, and the biases asked for.
    const int64_t d = shape.head_dim, q = heads * d, kv = shape.kv_heads * d;
    const int64_t per_layer = 2 * c * q + 2 * c * kv + 3 * c * f + 2 * c + (shape.attention_bias ? q + 2 * kv + c : 0) +
                              (qwen2 ? q + 2 * kv : 0) + (shape.mlp_bias ? 2 * f + c : 0);
    EXPECT_EQ(count, v * c + 2 * per_layer + c + (shape.tied ? 0 : v * c)) << which;
    EXPECT_EQ(params.count("lm_head.weight"), shape.tied ? 0u : 1u) << which;
    EXPECT_EQ(model->units().size(), 3u + (shape.tied ? 0u : 1u)) << "the embedding, every decoder layer and an untied head are units";
    const at::Tensor ids = at::randint(0, v, {3, t}, at::kLong);
    at::NoGradGuard no_grad;
    const at::Tensor logits = model->forward(ids);
    ASSERT_EQ(logits.sizes(), (std::vector<int64_t>{3, t, v}));
    EXPECT_LT((logits - reference_logits(params, ids, 2, heads, shape.kv_heads, shape.theta, 1e-5, shape.window)).abs().max().item<double>(),
              1e-5) << which;
    // A later token changes no earlier position's logits, and changes its own.
    at::Tensor changed = ids.clone();
    changed[1][7] = (ids[1][7].item<int64_t>() + 1) % v;
    const at::Tensor after = model->forward(changed);
    EXPECT_TRUE(after.slice(1, 0, 7).equal(logits.slice(1, 0, 7))) << which;
    EXPECT_GT((after[1][7] - logits[1][7]).abs().max().item<double>(), 1e-4) << which;
    EXPECT_THROW(model->forward(at::zeros({1, t + 1}, at::kLong)), std::invalid_argument);
  }
}

TEST(LlamaTest, BadSizesAreRefusedNamingTheKey) {
  auto refused = [](const Json& keys, const std::string& word) {
    test::expect_config_error([&] { make_llama(keys, 50, 12); }, {word}, keys.dump());
  };
  refused({{"num_attention_heads", 4}, {"num_key_value_heads", 3}}, "model.num_key_value_heads");
  refused({{"hidden_size", 30}, {"num_attention_heads", 4}}, "model.hidden_size");
  refused({{"head_dim", 7}}, "model.head_dim");
  refused({{"hidden_size", 12}, {"num_attention_heads", 12}}, "model.num_attention_heads");  // head size 1, odd
  refused({{"initializer_range", 2.0}}, "model.initializer_range");
  refused({{"vocab_size", 10}}, "model.vocab_size");
  refused({{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}}}, "model.rope_scaling");
  refused({{"n_layer", 2}}, "n_layer");
  // Qwen2's biases and Mistral's are fixed; a window is a positive count.
  auto refused_as = [](const std::string& name, const Json& keys, const std::string& word) {
    test::expect_config_error([&] { make_llama(keys, 50, 12, name); }, {word}, name + " " + keys.dump());
  };
  refused_as("qwen2", {{"attention_bias", true}}, "attention_bias");
  refused_as("qwen2", {{"use_sliding_window", "yes"}}, "model.use_sliding_window");
  refused_as("mistral", {{"mlp_bias", true}}, "mlp_bias");
  refused_as("mistral", {{"sliding_window", -4}}, "model.sliding_window");
  EXPECT_NO_THROW(make_llama({{"sliding_window", 12}}, 50, 12, "mistral")) << "a window as long as the model's slides nowhere";
}

Json llama_job(const std::string& ids, const std::string& mode, const Json& extra = Json::object()) {
  Json config = Json::parse(R"({"seed": 4, "threads": 1, "max_steps": 3,
    "model": {"name": "llama", "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300},
    "optimizer": {"name": "adamw", "lr": 0.01, "weight_decay": 0.1},
    "algorithms": {"sam": {"rho": 0.05, "sync_ascent": true}}})");
  config["data"] = {{"name", "tokens"}, {"train", ids}, {"block_size", 16}, {"batch_size", 8}, {"microbatches", 2}};
  config["parallel"] = {{"mode", mode}, {"timeout_seconds", 60}};
  config["model"].update(extra);
  return config;
}

std::string random_ids(const test::TempDir& dir) {
  at::manual_seed(11);
  write_torch_save_file(dir.file("ids.pt"), at::randint(0, 300, {2000}, at::kLong));
  return dir.file("ids.pt");
}

TEST(LlamaTest, EveryModeEqualsDdpUnderSam) {
  test::TempDir dir;
  const std::string ids = random_ids(dir);
  const auto ddp = test::train_on_ranks(2, llama_job(ids, "ddp"));
  EXPECT_EQ(test::max_difference(ddp[0], ddp[1]), 0.0) << "replicas drifted under ddp";
  for (const std::string mode : {"zero1", "zero2", "zero3"}) {
    const auto sharded = test::train_on_ranks(2, llama_job(ids, mode));
    // Equal up to the order of the sums, which AdamW's first steps magnify where a gradient is at
    // rounding level (m / sqrt(v) of it is O(1)): the largest gap, 1.5e-5, is in the embedding's rows.
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_LT(test::max_difference(sharded[static_cast<std::size_t>(rank)], ddp[0]), 5e-5)
          << mode << " against ddp, rank " << rank;
    }
  }
}

Json hf_job(const std::string& ids, const std::string& init_from, const Json& extra = Json::object()) {
  Json config = llama_job(ids, "none", extra);
  config.erase("parallel");
  config["data"].erase("microbatches");
  if (!init_from.empty()) config["init_from"] = init_from;
  return config;
}

// basin's own export read back (no Python needed), and a directory whose
// config.json is not one the model can take refused naming the file and the key.
TEST(LlamaTest, HuggingFaceDirectoriesRoundTripAndWhatDisagreesIsRefused) {
  test::TempDir dir;
  const std::string ids = random_ids(dir), out = dir.file("run");
  std::filesystem::create_directories(out);
  const at::Tensor sample = at::randint(0, 300, {2, 16}, at::kLong);
  at::Tensor before;
  {
    Trainer trainer(hf_job(ids, ""));
    trainer.fit();
    trainer.export_model(out);
    trainer.model().eval();
    at::NoGradGuard no_grad;
    before = trainer.model().forward(sample);
  }
  ASSERT_TRUE(std::filesystem::exists(out + "/hf/model.safetensors"));
  {
    Trainer trainer(hf_job(ids, out + "/hf"));
    trainer.model().eval();
    at::NoGradGuard no_grad;
    EXPECT_TRUE(trainer.model().forward(sample).equal(before)) << "what basin wrote, basin reads to the bit";
  }
  const std::string path = out + "/hf/config.json";
  const Json written = Json::parse(test::read_text(path));
  EXPECT_EQ(written.value("rope_theta", 0.0), 10000.0) << "transformers 4 reads theta there";
  EXPECT_TRUE(written.at("bos_token_id").is_null() && written.at("eos_token_id").is_null())
      << "no special tokens of LlamaConfig's defaults, which would name the run's ids";
  auto refused_with = [&](const std::function<void(Json&)>& change, const std::vector<std::string>& words) {
    Json config = written;
    change(config);
    test::write_text(path, config.dump());
    test::expect_config_error([&] { Trainer trainer(hf_job(ids, out + "/hf")); }, words, config.dump());
  };
  // Keys the job gives (its sizes) must agree with config.json's; those it leaves out are taken from there.
  refused_with([](Json& c) { c["hidden_size"] = 32; }, {"config.json", "hidden_size 32", "model.hidden_size"});
  refused_with([](Json& c) { c["num_key_value_heads"] = 4; }, {"config.json", "num_key_value_heads"});
  refused_with([](Json& c) { c["architectures"] = {"Qwen2ForCausalLM"}; }, {"config.json", "architectures"});
  refused_with([](Json& c) { c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}}; },
               {"config.json", "model.rope_scaling.low_freq_factor"});
  refused_with([](Json& c) { c["max_position_embeddings"] = 8; }, {"config.json", "model.max_position_embeddings"});
  auto refused_given = [&](const Json& given, const std::function<void(Json&)>& change, const std::vector<std::string>& words) {
    Json config = written;
    change(config);
    test::write_text(path, config.dump());
    test::expect_config_error([&] { Trainer trainer(hf_job(ids, out + "/hf", given)); }, words, config.dump());
  };
  // One RoPE key given withholds the rest, which would override it (rope_parameters' rope_theta).
  const Json default_rope{{"rope_theta", 10000.0}};
  refused_given(default_rope, [](Json& c) { c["rope_parameters"]["rope_theta"] = 500000.0; }, {"config.json", "rope_theta"});
  refused_given({{"tie_word_embeddings", false}}, [](Json& c) { c["tie_word_embeddings"] = true; },
                {"config.json", "tie_word_embeddings"});
  refused_given(default_rope, [](Json& c) { c["rope_parameters"] = {{"type", "linear"}, {"factor", 2.0}}; }, {"config.json", "linear"});
  test::write_text(path, written.dump());
  // Without the whole file, the index is read (SafetensorsTest has its lies): one that maps nothing is refused.
  std::filesystem::remove(out + "/hf/model.safetensors");
  test::write_text(out + "/hf/model.safetensors.index.json", "{}");
  test::expect_config_error([&] { Trainer trainer(hf_job(ids, out + "/hf")); },
                            {"model.safetensors.index.json", "weight_map"}, "an index of nothing");
}

// hf/ in the dtype asked (bf16 here, or the one init_from's checkpoint came
// in) and split above the shard size as save_pretrained splits; an export
// in the other layout replaces the earlier one whole; transformers loads
// the split bf16 export with basin's weights after the same cast.
TEST(LlamaTest, ExportIsSplitAboveTheShardSizeInTheDtypeAsked) {
  test::TempDir dir;
  const std::string ids = random_ids(dir), out = dir.file("run"), again = dir.file("again");
  std::filesystem::create_directories(out);
  std::filesystem::create_directories(again);
  c10::Dict<std::string, at::Tensor> trained;  // basin's weights by Hugging Face's names, in fp32
  {
    Trainer trainer(hf_job(ids, "", {{"export_dtype", "bfloat16"}, {"export_max_shard_size", "8KB"}}));
    trainer.fit();
    trainer.export_model(out);
    for (const auto& item : trainer.model().named_parameters()) {
      trained.insert(item.key().rfind("lm_head.", 0) == 0 ? item.key() : "model." + item.key(), item.value().detach().clone());
    }
  }
  const std::string hf = out + "/hf";
  EXPECT_FALSE(std::filesystem::exists(hf + "/model.safetensors"));
  ASSERT_TRUE(std::filesystem::exists(hf + "/model.safetensors.index.json"));
  const Json index = Json::parse(test::read_text(hf + "/model.safetensors.index.json"));
  std::map<std::string, std::pair<int64_t, int64_t>> files;  // file: its tensors and their bytes
  int64_t total = 0;
  const NamedTensors written = read_safetensors_checkpoint(hf, "test");
  ASSERT_EQ(written.size(), trained.size());
  for (const auto& [name, tensor] : written) {
    EXPECT_EQ(tensor.scalar_type(), at::kBFloat16) << name;
    EXPECT_TRUE(tensor.equal(trained.at(name).to(at::kBFloat16))) << name << ": basin's weight, cast";
    auto& file = files[index["weight_map"][name].get<std::string>()];
    file.first += 1, file.second += static_cast<int64_t>(tensor.nbytes());
    total += static_cast<int64_t>(tensor.nbytes());
  }
  EXPECT_GE(files.size(), 3u);
  for (const auto& [file, contents] : files) {
    EXPECT_TRUE(contents.second <= 8000 || contents.first == 1) << file << ": past 8 KB with more than one tensor";
    EXPECT_EQ(file.rfind("model-", 0), 0u) << file;
  }
  EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), total);
  EXPECT_EQ(Json::parse(test::read_text(hf + "/config.json"))["torch_dtype"], "bfloat16");

  // Started from the bf16 export, "init_from" writes bf16 again; into the same folder, as one file.
  {
    Trainer trainer(hf_job(ids, hf, {{"export_dtype", "init_from"}}));
    trainer.export_model(again);
    trainer.export_model(out);
  }
  for (const std::string& folder : {again + "/hf", hf}) {
    EXPECT_TRUE(std::filesystem::exists(folder + "/model.safetensors")) << folder;
    for (const auto& entry : std::filesystem::directory_iterator(folder)) {
      EXPECT_TRUE(entry.path().filename() == "model.safetensors" || entry.path().extension() == ".json") << entry.path();
    }
    for (const auto& [name, tensor] : read_safetensors_checkpoint(folder, "test")) {
      EXPECT_TRUE(tensor.equal(trained.at(name).to(at::kBFloat16))) << name << " in " << folder << ": bf16 to fp32 and back is exact";
    }
  }
  test::expect_config_error([&] { Trainer trainer(hf_job(ids, "", {{"export_max_shard_size", "5 parsecs"}})); },
                            {"model.export_max_shard_size", "5 parsecs"}, "a size of no unit");
  test::expect_config_error([&] { Trainer trainer(hf_job(ids, "", {{"export_dtype", "int8"}})); },
                            {"model.export_dtype", "int8"}, "a dtype no export has");

  const std::string python = test::hugging_face_python();
  if (python.empty()) GTEST_SKIP() << "no Python with PyPI's transformers: the files were checked, transformers' reading of them is not";
  std::filesystem::remove_all(hf);
  {
    Trainer trainer(hf_job(ids, "", {{"export_dtype", "bfloat16"}, {"export_max_shard_size", "8KB"}}));
    trainer.fit();
    trainer.export_model(out);
  }
  write_torch_save_file(dir.file("trained.pt"), trained);
  const auto loaded = test::run_command(
      "env -C " + dir.path().string() + " " + python + " -c \"import torch, transformers\n"
      "model = transformers.LlamaForCausalLM.from_pretrained('run/hf')\n"
      "assert model.dtype == torch.bfloat16, model.dtype\n"
      "trained = torch.load('trained.pt')\n"
      "state = model.state_dict()\n"
      "for name, weight in trained.items(): assert torch.equal(state[name], weight.bfloat16()), name\n"
      "print('python: every weight is basin\\'s, cast to bf16')\"", 300);
  EXPECT_EQ(loaded.exit_code, 0) << loaded.output;
}

// Qwen2's and Mistral's windows as their config classes read them: where
// config.json places windows other than the model's, it is refused naming
// the window, the layers and the keys to set; keys that place the same
// windows are read.
TEST(LlamaTest, QwenAndMistralWindowsAreReadAsTransformersReadsThem) {
  test::TempDir dir;
  const std::string ids = random_ids(dir);
  for (const std::string name : {"qwen2", "mistral"}) {
    const std::string out = dir.file(name);
    std::filesystem::create_directories(out);
    Json job = hf_job(ids, "");
    job["model"]["name"] = name;
    if (name == "mistral") job["model"]["sliding_window"] = 4096;
    {
      Trainer trainer(job);
      trainer.export_model(out);
    }
    const std::string path = out + "/hf/config.json";
    const Json written = Json::parse(test::read_text(path));
    job["init_from"] = out + "/hf";
    auto read_with = [&](const std::function<void(Json&)>& change) {
      Json config = written;
      change(config);
      test::write_text(path, config.dump());
      Trainer trainer(job);
    };
    auto refused_with = [&](const std::function<void(Json&)>& change, const std::vector<std::string>& words) {
      test::expect_config_error([&] { read_with(change); }, words, name);
    };
    // The job gives a window key, which withholds the others (layer_types would override use_sliding_window):
    // config.json's other windows are refused. (Left out, they would be taken from there.)
    job["model"].update(name == "mistral" ? Json{{"sliding_window", 4096}} : Json{{"use_sliding_window", false}});
    if (name == "mistral") {
      EXPECT_EQ(written.at("sliding_window"), 4096) << "the model's window, written back";
      EXPECT_NO_THROW(read_with([](Json& c) { c.erase("sliding_window"); })) << "absent is MistralConfig's 4096";
      refused_with([](Json& c) { c["sliding_window"] = 8; }, {"config.json", "a window of 8", "model.sliding_window"});
      refused_with([](Json& c) { c["sliding_window"] = nullptr; }, {"config.json", "no window", "model.sliding_window"});
      refused_with([](Json& c) { c.erase("num_key_value_heads"); }, {"num_key_value_heads 8"});  // MistralConfig's default
    } else {
      EXPECT_EQ(written.at("use_sliding_window"), false);
      EXPECT_EQ(written.at("layer_types"), Json({"full_attention", "full_attention"}));
      EXPECT_NO_THROW(read_with([](Json& c) { c["use_sliding_window"] = true; c["sliding_window"] = 8; c["max_window_layers"] = 2; }))
          << "no layer at or past max_window_layers slides";
      // Without use_sliding_window Qwen2Config drops the window, and transformers' mask for its sliding layers fails.
      refused_with([](Json& c) { c["layer_types"] = {"full_attention", "sliding_attention"}; c["sliding_window"] = 8; },
                   {"config.json", "layer_types", "use_sliding_window"});
      refused_with([](Json& c) { c["use_sliding_window"] = true; c["sliding_window"] = 8; c["max_window_layers"] = 1; c.erase("layer_types"); },
                   {"config.json", "a window of 8", "over layers [1]", "max_window_layers"});
      refused_with([](Json& c) { c["use_sliding_window"] = true; c["layer_types"] = {"sliding_attention", "full_attention"}; c["sliding_window"] = 8; },
                   {"a window of 8", "over layers [0]", "layer_types"});
      refused_with([](Json& c) { c.erase("num_key_value_heads"); }, {"num_key_value_heads 32"});  // Qwen2Config's default
    }
  }
}

// With PyPI's transformers: random LlamaForCausalLMs saved by Python (grouped
// heads, an untied head, biases and another theta, split over several
// files; plain heads and a tied head, in bf16; a head_dim of its own and the
// MLP's biases) give basin the same logits; basin trains each a few SAM steps;
// Python loads what basin wrote and gets basin's logits.
TEST(LlamaTest, LlamaWeightsFromHuggingFaceTrainAndGoBack) {
  const std::string python = test::hugging_face_python();
  if (python.empty()) {
    GTEST_SKIP() << "no Python with PyPI's transformers and safetensors: run scripts/hf-python.sh (or set BASIN_HF_PYTHON)";
  }
  test::TempDir dir;
  const std::string ids = random_ids(dir);
  // Each as basin names it, and Hugging Face's config and model classes.
  const std::vector<std::tuple<std::string, std::string, Json>> shapes{
      {"llama", "Llama", Json{{"num_key_value_heads", 2}, {"attention_bias", true}, {"rope_theta", 500.0}, {"tie_word_embeddings", false}}},
      {"llama", "Llama", Json{{"num_key_value_heads", 4}, {"attention_bias", false}, {"rope_theta", 10000.0}, {"tie_word_embeddings", true}}},
      {"llama", "Llama", Json{{"num_key_value_heads", 2}, {"head_dim", 6}, {"mlp_bias", true}, {"tie_word_embeddings", false}}},
      {"qwen2", "Qwen2", Json{{"num_key_value_heads", 2}, {"rope_theta", 1000000.0}, {"tie_word_embeddings", true}}},
      {"mistral", "Mistral", Json{{"num_key_value_heads", 2}, {"sliding_window", 4096}, {"tie_word_embeddings", false}}}};
  for (const auto& [name, hf_name, shape] : shapes) {
    // The tied llama is stored in bf16: read as fp32 master weights, it computes what bf16's values do in fp32.
    const bool bf16 = name == "llama" && shape["tie_word_embeddings"].get<bool>();
    const bool split = &shape == &std::get<2>(shapes.front());
    std::string python_keys = "vocab_size=300, hidden_size=16, intermediate_size=24, num_hidden_layers=2, "
                              "num_attention_heads=4, rms_norm_eps=1e-6";
    for (const auto& [key, value] : shape.items()) {
      python_keys += ", " + key + "=" + (value.is_boolean() ? (value.get<bool>() ? "True" : "False") : value.dump());
    }
    const auto made = test::run_command(
        "env -C " + dir.path().string() + " " + python + " -c \"import torch, transformers\n"
        "torch.manual_seed(0)\n"
        "model = transformers." + hf_name + "ForCausalLM(transformers." + hf_name + "Config(" + python_keys + ")).eval()\n"
        "with torch.no_grad():\n"
        "    for p in model.parameters(): p.normal_(0, 0.3)\n" +  // norms and biases too, to see them used
        // bf16's values, computed in fp32 (the model's own cast would round RoPE's frequencies too).
        (bf16 ? "    for p in model.parameters(): p.copy_(p.bfloat16().float())\n" : "") +
        "ids = torch.randint(0, 300, (3, 16))\n"
        "with torch.no_grad(): logits = model(ids).logits\n"
        "torch.save({'ids': ids, 'logits': logits}, 'reference.pt')\n" +
        (bf16 ? "model = model.to(torch.bfloat16)\n" : "") +
        "import glob, os, shutil, safetensors.torch\n"
        "shutil.rmtree('hf_in', ignore_errors=True)\n" +
        // The first one split over several files, as larger checkpoints come.
        (split ? "model.save_pretrained('hf_in', max_shard_size='8KB')\n"
                 "assert os.path.exists('hf_in/model.safetensors.index.json')\n"
                 "assert len(glob.glob('hf_in/*.safetensors')) > 2\n"
               : "model.save_pretrained('hf_in')\n"
                 "assert not os.path.exists('hf_in/model.safetensors.index.json')\n") +
        "dtypes = {t.dtype for f in glob.glob('hf_in/*.safetensors') for t in safetensors.torch.load_file(f).values()}\n"
        "assert dtypes == {" + (bf16 ? "torch.bfloat16" : "torch.float32") + "}, dtypes\"", 300);
    ASSERT_EQ(made.exit_code, 0) << made.output;
    const auto reference = read_torch_save_file(dir.file("reference.pt"), "test").toGenericDict();
    const at::Tensor sample = reference.at("ids").toTensor();
    Json job = hf_job(ids, dir.file("hf_in"), shape);
    job["model"]["name"] = name;
    Trainer trainer(job);
    {
      trainer.model().eval();
      at::NoGradGuard no_grad;
      EXPECT_LT((trainer.model().forward(sample) - reference.at("logits").toTensor()).abs().max().item<double>(), 1e-5)
          << "basin's logits against " << hf_name << "ForCausalLM's, " << shape.dump();
      trainer.model().train();
    }
    test::expect_trained_model_loads_in_transformers(trainer, python, dir, hf_name + "ForCausalLM", sample,
                                                     reference.at("logits").toTensor());
  }
}

}  // namespace
}  // namespace basin
