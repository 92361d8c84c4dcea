// The families of Llama's decoder layer beyond Llama 2 (models/
// decoder_families.h): attention that sees the keys its mask leaves (a
// window, documents, a soft-cap) against the product written out; a window
// as long as the sequence the same bits as none; and with PyPI's
// transformers, random Llama 3.1 (RoPE "llama3"), Qwen3, Gemma 2, Gemma 3
// and windowed Mistral and Qwen2 checkpoints give basin transformers'
// logits and greedy continuation, from the model's name and init_from
// alone; they train (SAM, and SAM on LoRA) and load back with basin's
// logits (the adapter through PEFT); and each follows ddp under zero3 and hsdp.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include "basin/core/config/config.h"
#include "basin/core/model/model.h"
#include "basin/core/serialization/torch_save_file.h"
#include "basin/core/train/trainer.h"
#include "basin/models/attention.h"
#include "basin/models/sampling.h"
#include "hugging_face_python.h"
#include "test_paths.h"
#include "test_util.h"
#include "zero_three_follows_ddp.h"

namespace basin {
namespace {

/// softmax(q k^T scale, capped) v over the keys query i sees, in double, loop by loop.
at::Tensor written_out_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t window,
                                 const at::Tensor& documents, double scale, double softcap) {
  const at::Tensor q64 = q.to(at::kDouble), k64 = k.to(at::kDouble), v64 = v.to(at::kDouble);
  const int64_t n = q.size(0), heads = q.size(1), t = q.size(2);
  at::Tensor out = at::zeros_like(v64);
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < t; ++i) {
        std::vector<double> scores;
        std::vector<int64_t> seen;
        for (int64_t j = 0; j <= i; ++j) {
          if (window > 0 && i - j >= window) continue;
          if (documents.defined() && documents[b][j].item<int64_t>() != documents[b][i].item<int64_t>()) continue;
          double score = (q64[b][h][i] * k64[b][h][j]).sum().item<double>() * scale;
          if (softcap > 0) score = softcap * std::tanh(score / softcap);
          scores.push_back(score);
          seen.push_back(j);
        }
        double largest = -std::numeric_limits<double>::infinity(), total = 0;
        for (double s : scores) largest = std::max(largest, s);
        for (double& s : scores) total += (s = std::exp(s - largest));
        for (std::size_t s = 0; s < seen.size(); ++s) out[b][h][i] += v64[b][h][seen[s]] * (scores[s] / total);
      }
    }
  }
  return out.to(at::kFloat);
}

TEST(DecoderFamiliesTest, AttentionSeesTheKeysItsMaskLeaves) {
  at::manual_seed(0);
  const int64_t n = 2, heads = 3, t = 10, d = 8;
  const at::Tensor q = at::randn({n, heads, t, d}), k = at::randn({n, heads, t, d}), v = at::randn({n, heads, t, d});
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  // fp32 against double: two sums of at most d + t = 18 terms, each rounded at 2^-24 relative, on
  // scores and values below 10 in size here: 18 * 10 * 2^-24 < 1.1e-5, and 2e-5 leaves the exp's rounding.
  const double bound = 2e-5;
  for (const int64_t window : {0, 1, 3, 9}) {
    const at::Tensor got = layers::attention(q, k, v, {window, {}}, {});
    EXPECT_LT((got - written_out_attention(q, k, v, window, {}, scale, 0)).abs().max().item<double>(), bound)
        << "window " << window;
  }
  // A window as long as the sequence, or longer, narrows nothing: the plain causal path, to the bit.
  const at::Tensor causal = layers::attention(q, k, v, {}, {});
  EXPECT_TRUE(layers::attention(q, k, v, {t, {}}, {}).equal(causal));
  EXPECT_TRUE(layers::attention(q, k, v, {t + 5, {}}, {}).equal(causal));
  // Packed documents: each query reads its own document's keys alone, with a window inside it.
  const at::Tensor documents = at::tensor({0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 5, 5, 5, 5, 5, 5, 5, 5, 6, 6}, at::kLong).view({n, t});
  for (const int64_t window : {0, 2}) {
    const at::Tensor got = layers::attention(q, k, v, {window, documents}, {});
    EXPECT_LT((got - written_out_attention(q, k, v, window, documents, scale, 0)).abs().max().item<double>(), bound)
        << "documents, window " << window;
  }
  // Gemma's scale of its own and Gemma 2's soft-cap, which bites: scores here reach past 2.
  const at::Tensor capped = layers::attention(q, k, v, {4, {}}, {0.7, 2.0, 0.0});
  EXPECT_LT((capped - written_out_attention(q, k, v, 4, {}, 0.7, 2.0)).abs().max().item<double>(), bound);
  EXPECT_GT((capped - layers::attention(q, k, v, {4, {}}, {0.7, 0.0, 0.0})).abs().max().item<double>(), 1e-3)
      << "the cap changed nothing";
  const at::Tensor visible = layers::visible_keys(4, {2, {}}, at::kCPU);
  EXPECT_TRUE(visible.view({4, 4}).equal(at::tensor({1, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1}, at::kInt).to(at::kBool).view({4, 4})));
}

// A long sequence and a window well inside it run a block of queries at a
// time (models/attention.cpp): the outputs and the gradients of q, k and v
// against the product in double over a mask built here, query by query,
// with documents and with Gemma's scale and soft-cap.
TEST(DecoderFamiliesTest, AWindowInsideALongSequenceAttendsInBlocksAsOverTheWholeMask) {
  at::manual_seed(1);
  const int64_t t = 300, d = 8;
  for (const int64_t window : {64, 200}) {
    // Query i sees key j when i - window < j <= i, within its document of 100.
    at::Tensor allowed = at::zeros({t, t}, at::kBool);
    auto allow = allowed.accessor<bool, 2>();
    for (int64_t i = 0; i < t; ++i) {
      for (int64_t j = std::max<int64_t>(0, i - window + 1); j <= i; ++j) allow[i][j] = i / 100 == j / 100;
    }
    const at::Tensor documents = at::arange(t, at::kLong).div(100, "floor").view({1, t});
    for (const layers::AttentionOptions& options : {layers::AttentionOptions{}, layers::AttentionOptions{0.7, 2.0, 0.0}}) {
      const double scale = options.scale != 0 ? options.scale : 1.0 / std::sqrt(static_cast<double>(d));
      const at::Tensor q = at::randn({1, 2, t, d}).requires_grad_(), k = at::randn({1, 2, t, d}).requires_grad_(),
                       v = at::randn({1, 2, t, d}).requires_grad_();
      const at::Tensor upstream = at::randn({1, 2, t, d});
      const at::Tensor got = layers::attention(q, k, v, {window, documents}, options);
      const auto got_grads = torch::autograd::grad({got}, {q, k, v}, {upstream});
      const at::Tensor q64 = q.detach().to(at::kDouble).requires_grad_(), k64 = k.detach().to(at::kDouble).requires_grad_(),
                       v64 = v.detach().to(at::kDouble).requires_grad_();
      at::Tensor scores = at::matmul(q64, k64.transpose(-2, -1)) * scale;
      if (options.softcap > 0) scores = at::tanh(scores / options.softcap) * options.softcap;
      const at::Tensor expected =
          at::matmul(at::softmax(scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity()), -1), v64);
      const auto expected_grads = torch::autograd::grad({expected}, {q64, k64, v64}, {upstream.to(at::kDouble)});
      // fp32 against double: each value a chain of sums of at most d or `window` terms, 3 forward and 4
      // backward, each rounded at 2^-24 relative on terms below 10 in size (scores, values, upstream).
      const double bound = static_cast<double>(3 * d + 4 * window) * std::ldexp(1.0, -24) * 10;
      const std::string what = "window " + std::to_string(window) + (options.softcap > 0 ? ", capped" : "");
      EXPECT_LT((got - expected).abs().max().item<double>(), bound * std::max(1.0, expected.abs().max().item<double>())) << what;
      for (std::size_t i = 0; i < 3; ++i) {
        const double largest = std::max(1.0, expected_grads[i].abs().max().item<double>());
        EXPECT_LT((got_grads[i] - expected_grads[i]).abs().max().item<double>(), bound * largest) << what << ", gradient " << "qkv"[i];
      }
    }
  }
}

std::shared_ptr<Model> make_model(const std::string& name, const Json& keys, int64_t tokens) {
  Params params(keys, "model");
  auto model = model_registry().create(name, params, DatasetInfo{{tokens}, 50});
  params.finish();
  return model;
}

TEST(DecoderFamiliesTest, AWindowAsLongAsTheSequenceIsNoneAndBadKeysAreRefusedNamingThem) {
  const Json shape{{"hidden_size", 16}, {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2}};
  const at::Tensor ids = at::randint(0, 50, {2, 12}, at::kLong);
  at::NoGradGuard no_grad;
  for (const std::string name : {"mistral", "gemma2"}) {
    Json none = shape, long_one = shape, short_one = shape;
    // No window: Mistral's null; Gemma's layers all full (its sliding layers need a window).
    if (name == "mistral") {
      none["sliding_window"] = nullptr;
    } else {
      none["layer_types"] = {"full_attention", "full_attention"};
    }
    long_one["sliding_window"] = 12;
    short_one["sliding_window"] = 5;
    at::manual_seed(3);
    const at::Tensor plain = make_model(name, none, 12)->forward(ids);
    at::manual_seed(3);
    EXPECT_TRUE(make_model(name, long_one, 12)->forward(ids).equal(plain)) << name;
    at::manual_seed(3);
    const at::Tensor windowed = make_model(name, short_one, 12)->forward(ids);
    EXPECT_TRUE(windowed.slice(1, 0, 5).equal(plain.slice(1, 0, 5))) << name << ": the first 5 positions see their whole past";
    EXPECT_GT((windowed.slice(1, 5) - plain.slice(1, 5)).abs().max().item<double>(), 1e-4) << name << ": the window hid nothing";
  }
  auto refused = [&](const std::string& name, const Json& extra, const std::vector<std::string>& words) {
    Json keys = shape;
    keys.update(extra);
    test::expect_config_error([&] { make_model(name, keys, 12); }, words, name + " " + extra.dump());
  };
  refused("mistral", {{"sliding_window", 0}}, {"model.sliding_window", "0"});
  refused("qwen3", {{"layer_types", {"full_attention"}}}, {"model.layer_types"});
  refused("gemma3", {{"layer_types", {"full_attention", "chunked_attention"}}}, {"model.layer_types"});
  refused("llama", {{"rope_scaling", {{"rope_type", "ntk-by-parts"}, {"factor", 2.0}}}},
          {"model.rope_scaling.rope_type", "ntk-by-parts"});
  refused("llama", {{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}}}, {"model.rope_scaling.low_freq_factor"});
  refused("llama", {{"rope_parameters", {{"rope_type", "linear"}}}}, {"model.rope_parameters.factor"});
  refused("llama", {{"partial_rotary_factor", 0.5}}, {"model.partial_rotary_factor", "LlamaForCausalLM"});
  // Two layers of gemma3 are both sliding ones (each sixth is full).
  refused("gemma3", {{"rope_parameters", {{"sliding_attention", {{"rope_type", "yarn"}, {"factor", 4.0}, {"beta_fast", "x"}}}}}},
          {"model.rope_parameters.sliding_attention.beta_fast"});
  refused("gemma2", {{"attn_logit_softcapping", -1.0}}, {"model.attn_logit_softcapping"});
  refused("gemma3", {{"use_bidirectional_attention", true}}, {"model.use_bidirectional_attention"});
  refused("llama", {{"sliding_window", 4}}, {"sliding_window"});  // Llama has no window key
  // What transformers' classes cannot run, or would not apply.
  refused("gemma2", {{"sliding_window", nullptr}}, {"model.sliding_window", "sliding layers need one"});
  refused("qwen3", {{"layer_types", {"sliding_attention", "full_attention"}}}, {"model.layer_types", "use_sliding_window"});
  refused("gemma3", {{"attn_logit_softcapping", 50.0}}, {"model.attn_logit_softcapping", "Gemma3ForCausalLM"});
  refused("llama", {{"rope_parameters", {{"rope_type", "linear"}, {"factor", 2.0}, {"partial_rotary_factor", 0.5}}}},
          {"model.rope_parameters.partial_rotary_factor", "whole heads"});
  refused("llama", {{"rope_parameters", {{"full_attention", {{"rope_type", "default"}}}}}}, {"model.rope_parameters", "one object"});
  refused("gemma3", {{"rope_parameters", {{"rope_type", "linear"}, {"factor", 2.0}}}}, {"model.rope_parameters", "by layer type"});
  refused("llama", {{"rope_theta", 0.5}}, {"model.rope_theta"});
  refused("gemma3", {{"rope_local_base_freq", -1.0}}, {"model.rope_local_base_freq"});
}

// A RoPE whose factor or original length config.json leaves to
// max_position_embeddings (longrope without "factor", llama3 without
// "original_max_position_embeddings") is the checkpoint's only at the
// checkpoint's positions: a model of other positions is refused, naming the key.
TEST(DecoderFamiliesTest, RopeThatDerivesFromThePositionsIsReadAtTheCheckpointsPositions) {
  test::TempDir dir;
  at::manual_seed(11);
  write_torch_save_file(dir.file("ids.pt"), at::randint(0, 50, {400}, at::kLong));
  std::vector<double> factors(4, 1.5);
  const Json ropes = Json::array({Json{{"rope_type", "longrope"}, {"short_factor", factors}, {"long_factor", factors},
                                       {"original_max_position_embeddings", 16}},
                                  Json{{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0}}});
  for (const Json& rope : ropes) {
    Json job = Json::parse(R"({"seed": 1, "threads": 1, "max_steps": 1, "optimizer": {"name": "sgd", "lr": 0.1}})");
    job["data"] = {{"name", "tokens"}, {"train", dir.file("ids.pt")}, {"block_size", 16}, {"batch_size", 8}};
    job["model"] = {{"name", "llama"}, {"hidden_size", 16}, {"num_hidden_layers", 1}, {"num_attention_heads", 2},
                    {"max_position_embeddings", 64}, {"rope_scaling", rope}};
    const std::string out = dir.file(rope.at("rope_type").get<std::string>());
    std::filesystem::create_directories(out);
    {
      Trainer trainer(job);
      trainer.export_model(out);
    }
    job["init_from"] = out + "/hf";
    EXPECT_NO_THROW(Trainer trainer(job)) << rope.dump() << ": at the checkpoint's positions";
    job["model"]["max_position_embeddings"] = 32;
    test::expect_config_error([&] { Trainer trainer(job); }, {"config.json", "max_position_embeddings 64", "model.max_position_embeddings"},
                              rope.dump());
  }
}

/// One random checkpoint of a family, shaped like the published ones and
/// shrunk, keeping what sets the family apart.
struct FamilyCase {
  std::string name, hugging_face, model;
  Json keys;
  std::string dtype = "float32";
};

std::vector<FamilyCase> family_cases() {
  const Json base{{"vocab_size", 300}, {"hidden_size", 16}, {"intermediate_size", 24}, {"num_hidden_layers", 3},
                  {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"max_position_embeddings", 64}};
  auto with = [&](const Json& extra) {
    Json keys = base;
    keys.update(extra);
    return keys;
  };
  return {
      // Llama 3.1's RoPE, whose wavelengths here fall in all three of its bands (kept, smoothed, divided);
      // a tied head as Llama 3.2's.
      {"llama31", "Llama", "llama",
       with({{"head_dim", 16}, {"rope_theta", 500.0}, {"tie_word_embeddings", true},
             {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                               {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 32}}}})},
      // Qwen3: norms on q and k, a head_dim of its own; windows from max_window_layers on.
      {"qwen3", "Qwen3", "qwen3",
       with({{"head_dim", 8}, {"rope_theta", 1000000.0}, {"use_sliding_window", true}, {"sliding_window", 4},
             {"max_window_layers", 1}, {"tie_word_embeddings", false}})},
      // Gemma 2: soft-caps that bite, a scale of its own, a window on alternate layers; stored in bf16.
      {"gemma2", "Gemma2", "gemma2",
       with({{"head_dim", 8}, {"query_pre_attn_scalar", 6}, {"attn_logit_softcapping", 3.0},
             {"final_logit_softcapping", 5.0}, {"sliding_window", 4}}),
       "bfloat16"},
      // Gemma 3: norms on q and k, a window on all but each second layer, local and global RoPE bases, a
      // linear scaling on the global layers.
      {"gemma3", "Gemma3", "gemma3",
       with({{"head_dim", 8}, {"query_pre_attn_scalar", 8}, {"sliding_window", 4}, {"sliding_window_pattern", 2},
             {"rope_theta", 50000.0}, {"rope_local_base_freq", 100.0},
             {"rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}}}})},
      // Mistral v0.1's window on every layer, stored in fp16.
      {"mistral", "Mistral", "mistral", with({{"sliding_window", 5}}), "float16"},
      // Qwen2 with its layers' types written out.
      {"qwen2", "Qwen2", "qwen2",
       with({{"use_sliding_window", true}, {"sliding_window", 3},
             {"layer_types", {"sliding_attention", "full_attention", "sliding_attention"}}})},
  };
}

// Each family as a zero3 unit a layer, and under hsdp (2 groups of 2),
// follows ddp under SAM: its windows, norms and caps run on gathered weights
// as on whole ones. Recomputed in backward (activation checkpointing), a
// layer gives the bits it gave the first time.
TEST(DecoderFamiliesTest, EachFamilyUnderZero3AndHsdpFollowsDdp) {
  test::TempDir dir;
  at::manual_seed(11);
  write_torch_save_file(dir.file("ids.pt"), at::randint(0, 300, {2000}, at::kLong));
  for (const FamilyCase& c : family_cases()) {
    Json job = Json::parse(R"({"seed": 4, "threads": 1, "max_steps": 2, "optimizer": {"name": "sgd", "lr": 0.1},
      "algorithms": {"sam": {"rho": 0.05, "sync_ascent": true}}, "parallel": {"timeout_seconds": 60}})");
    job["data"] = {{"name", "tokens"}, {"train", dir.file("ids.pt")}, {"block_size", 16}, {"batch_size", 4}};
    job["model"] = c.keys;
    job["model"]["name"] = c.model;
    {
      Json plain = job;
      plain.erase("parallel");
      Trainer trainer(plain);
      const int64_t layers = c.keys.at("num_hidden_layers"), heads = trainer.model().named_parameters().contains("lm_head.weight");
      EXPECT_EQ(static_cast<int64_t>(trainer.model().units().size()), 1 + layers + heads) << c.name << ": the embedding, a unit a layer, the head";
      trainer.fit();
      plain["parallel"] = {{"activation_checkpointing", true}};
      Trainer recomputed(plain);
      recomputed.fit();
      EXPECT_EQ(test::max_difference(test::weights_of(recomputed), test::weights_of(trainer)), 0.0)
          << c.name << ": layers recomputed in backward";
    }
    test::expect_zero_three_follows_ddp(job, c.name + ", zero3");
    test::expect_zero_three_follows_ddp(job, c.name + ", hsdp 2 x 2", 4, 2);
  }
}

TEST(DecoderFamiliesTest, EachFamilyGivesTransformersLogitsAndContinuationTrainsAndGoesBack) {
  const std::string python = test::hugging_face_python();
  if (python.empty()) {
    GTEST_SKIP() << "no Python with PyPI's transformers and safetensors: run scripts/hf-python.sh (or set BASIN_HF_PYTHON)";
  }
  test::TempDir dir;
  at::manual_seed(11);
  write_torch_save_file(dir.file("ids.pt"), at::randint(0, 300, {2000}, at::kLong));
  const std::vector<FamilyCase> cases = family_cases();
  Json listed = Json::array();
  for (const FamilyCase& c : cases) listed.push_back({{"name", c.name}, {"family", c.hugging_face}, {"keys", c.keys}, {"dtype", c.dtype}});
  test::write_text(dir.file("cases.json"), listed.dump());
  const std::string script = std::string(BASIN_SOURCE_DIR) + "/tests/hugging_face/decoder_families.py";
  const auto made = test::run_command(python + " " + script + " make " + dir.file("cases.json") + " " + dir.path().string(), 600);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  for (const FamilyCase& c : cases) {
    const std::string folder = dir.file(c.name);
    const auto reference = read_torch_save_file(folder + "/reference.pt", "test").toGenericDict();
    const at::Tensor ids = reference.at("ids").toTensor();
    Json job = Json::parse(R"({"seed": 4, "threads": 1, "max_steps": 3,
      "optimizer": {"name": "adamw", "lr": 0.01, "weight_decay": 0.1},
      "algorithms": {"sam": {"rho": 0.05}}})");
    job["data"] = {{"name", "tokens"}, {"train", dir.file("ids.pt")}, {"block_size", 16}, {"batch_size", 8}};
    job["model"] = {{"name", c.model}};  // the rest from config.json, as from_pretrained takes it
    job["init_from"] = folder + "/hf";
    Trainer trainer(job);
    for (const char* key : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                            "num_key_value_heads", "max_position_embeddings"}) {
      EXPECT_EQ(trainer.config()["model"].value(key, Json()), c.keys.at(key)) << c.name << ": " << key << " taken from config.json";
    }
    Model& model = trainer.model();
    {
      model.eval();
      at::NoGradGuard no_grad;
      EXPECT_LT((model.forward(ids) - reference.at("logits").toTensor()).abs().max().item<double>(), 1e-5)
          << c.name << ": basin's logits against " << c.hugging_face << "ForCausalLM's";
      SamplingOptions greedy;
      greedy.tokens = 8;
      greedy.temperature = 0;
      greedy.context = 64;  // the model's positions: prompt and continuation fit
      EXPECT_TRUE(sample_tokens(model, reference.at("prompt").toTensor(), greedy).equal(reference.at("greedy").toTensor()))
          << c.name << ": greedy continuation";
      model.train();
    }
    trainer.fit();
    std::filesystem::create_directories(folder + "/run");
    trainer.export_model(folder + "/run");
    model.eval();
    at::NoGradGuard no_grad;
    const at::Tensor trained = model.forward(ids);
    EXPECT_GT((trained - reference.at("logits").toTensor()).abs().max().item<double>(), 1e-3) << c.name << ": training moved nothing";
    c10::Dict<std::string, at::Tensor> saved;
    saved.insert("ids", ids);
    saved.insert("logits", trained);
    write_torch_save_file(folder + "/trained.pt", saved);
    // SAM on LoRA over every projection, exported in PEFT's layout (the script loads it onto hf/).
    Json adapted_job = job;
    adapted_job["adapters"]["lora"] = {{"r", 4}, {"alpha", 8}, {"targets", "all-linear"}};
    Trainer adapted(adapted_job);
    adapted.fit();
    std::filesystem::create_directories(folder + "/lora");
    adapted.export_model(folder + "/lora");
    adapted.model().eval();
    saved.insert_or_assign("logits", adapted.model().forward(ids));
    write_torch_save_file(folder + "/adapted.pt", saved);
    const Json written = Json::parse(test::read_text(folder + "/run/hf/config.json"));
    const Json read = Json::parse(test::read_text(folder + "/hf/config.json"));
    for (const char* key : {"sliding_window", "layer_types", "rope_parameters", "attn_logit_softcapping", "query_pre_attn_scalar"}) {
      if (read.contains(key)) {  // as JSON, whatever the order of an object's keys
        EXPECT_EQ(nlohmann::json::parse(written.value(key, Json()).dump()), nlohmann::json::parse(read.at(key).dump()))
            << c.name << ": " << key << " written back";
      }
    }
  }
  const auto checked = test::run_command(python + " " + script + " check " + dir.file("cases.json") + " " + dir.path().string(), 600);
  EXPECT_EQ(checked.exit_code, 0) << checked.output;
}

}  // namespace
}  // namespace basin
