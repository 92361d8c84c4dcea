// zero3's mixed-precision gathers ("parallel.mixed_precision"), ranks as
// threads: the fp32 shards gathered in bf16 give the numbers autocast gives
// over fp32 gathers (bit for bit where every op autocasts, close where one
// does not), with half the bytes whole; and the config's refusals.

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/nn/modules/linear.h>

#include "fully_sharded_of.h"
#include "basin/core/base/torch_compat.h"
#include "basin/core/engine/algorithm.h"
#include "basin/core/model/model.h"
#include "basin/core/parallel/zero3/fully_sharded_model.h"
#include "basin/core/serialization/torch_save_file.h"
#include "distributed_util.h"
#include "gathers_follow_autocast.h"
#include "local_gradients.h"
#include "precision_bounds.h"
#include "test_util.h"

namespace basin {
namespace {

using test::expect_gathers_follow_autocast;
using test::kBf16Gathers;
using test::max_difference;
using test::sam_config;

/// An mlp whose inputs are scaled by a buffer of a module without
/// parameters: a floating buffer that meets no gathered weight.
struct InputScale : torch::nn::Module {
  explicit InputScale(int64_t width) : factor(register_buffer("factor", at::full({width}, 0.5))) {}
  at::Tensor factor;
};

class ScaledMlp : public Model {
 public:
  ScaledMlp(Params& /*params*/, const DatasetInfo& info) {
    int64_t width = 1;
    for (int64_t d : info.input_shape) width *= d;
    scale_ = register_module("scale", std::make_shared<InputScale>(width));
    fc_ = register_module("fc", torch::nn::Linear(width, info.num_classes));
    declare_unit(*fc_);
  }
  at::Tensor forward(const at::Tensor& inputs) override {
    return unit(*fc_, inputs.flatten(1) * scale_->factor, [fc = fc_](const at::Tensor& in) mutable { return fc->forward(in); });
  }

 private:
  std::shared_ptr<InputScale> scale_;
  torch::nn::Linear fc_{nullptr};
};

BASIN_REGISTER(model_registry(), "scaled_mlp_test", ScaledMlp);

/// One SGD step of `config` at 3 ranks, with `dtype` gathers, reduced in
/// fp32 and in `dtype`: apart by the sums' rounding alone.
void expect_one_step_of_a_low_reduce(const Json& config, const std::string& dtype, test::FloatFormat format, double scale = 1) {
  auto reduce_in = [dtype](const std::string& reduce) {
    return [dtype, reduce](Json& c) { c["parallel"]["mixed_precision"] = {{"param_dtype", dtype}, {"reduce_dtype", reduce}}; };
  };
  const test::ReduceWay fp32{"an fp32 reduce", reduce_in("fp32"), test::sum_error_factor(3, test::kFp32)};
  const test::ReduceWay low{"a " + dtype + " reduce", reduce_in(dtype), test::sum_error_factor(3, format)};
  const double used = test::expect_one_step_apart_by_the_reduce_alone(config, 0.1, 3, fp32, low, format, scale);
  std::cout << dtype << ": the largest gap after one step is " << used << " of its weight's bound" << std::endl;
}

// A linear model's every op runs in bf16 under autocast: autocast rounds each
// fp32 weight to bf16 (to nearest) where a bf16 gather rounds each shard the
// same way, so the forward and each gradient are the same bits, and the fp32
// reduce sums the same values. The whole run is bit-identical; the ascent
// point in both is w + e rounded to bf16.
TEST(ZeroThreeMixedPrecisionTest, Bf16GathersGiveAutocastsNumbersOverFp32GathersBitForBitOnTheMlp) {
  Json config = sam_config(R"({"rho": 0.05, "sync_ascent": true})", "zero3");
  config["data"]["microbatches"] = 2;
  config["grad_clip_norm"] = 0.05;
  config["model"] = Json::parse(R"({"name": "mlp", "hidden": [16, 12]})");
  config["optimizer"] = Json::parse(R"({"name": "adam", "lr": 0.01,
                                        "param_groups": [{"params": "bias", "lr": 0.002}]})");
  for (const int world : {1, 2, 3}) {
    expect_gathers_follow_autocast(config, "sam, adam at " + std::to_string(world) + " ranks", true, world);
  }
  config["algorithms"] = Json::object();
  expect_gathers_follow_autocast(config, "adam alone", true);
}

// A bf16 reduce-scatter sums in bf16: a rounding for each rank added, and
// nothing else. Nothing at one rank: SAM's whole run the same bits. At 3
// ranks one step of SGD is apart from the fp32 reduce's by at most those
// roundings of the gradients summed (local_gradients.h), and SAM's run
// nearer to it than to the start.
TEST(ZeroThreeMixedPrecisionTest, ABf16ReduceRoundsTheSumAndNothingElse) {
  Json config = sam_config(R"({"rho": 0.05, "sync_ascent": true})", "zero3");
  config["model"] = Json::parse(R"({"name": "mlp", "hidden": [16, 12]})");
  const char* const policy = R"({"param_dtype": "bf16", "reduce_dtype": "bf16"})";
  expect_gathers_follow_autocast(config, "a bf16 reduce at 1 rank (nothing to sum)", true, 1, policy);
  expect_gathers_follow_autocast(config, "a bf16 reduce at 3 ranks", false, 3, policy);
  config["precision"] = "amp_bf16";
  expect_one_step_of_a_low_reduce(config, "bf16", test::kBf16);
}

// fp16 gathers under amp_fp16 and its scaler give autocast's numbers over
// fp32 gathers bit for bit, as bf16's do; an fp16 reduce rounds the sum and
// nothing else, as bf16's does.
TEST(ZeroThreeMixedPrecisionTest, Fp16GathersWithTheScalerGiveAutocastsNumbersOverFp32Gathers) {
  if (!compat::kCpuAutocastFp16) {
    GTEST_SKIP() << "LibTorch " << compat::torch_version() << "'s CPU autocast has no float16 (2.5 and later have)";
  }
  Json config = sam_config(R"({"rho": 0.05, "sync_ascent": true})", "zero3");
  config["model"] = Json::parse(R"({"name": "mlp", "hidden": [16, 12]})");
  config["callbacks"] = Json::parse(R"({"grad_scaler": {"init_scale": 1024}})");
  for (const char* reduce : {"fp32", "fp16"}) {
    const std::string policy = std::string(R"({"param_dtype": "fp16", "reduce_dtype": ")") + reduce + "\"}";
    expect_gathers_follow_autocast(config, std::string("fp16 gathers, reduce ") + reduce, reduce == std::string("fp32"), 2,
                                   policy.c_str());
  }
  config["precision"] = "amp_fp16";
  expect_one_step_of_a_low_reduce(config, "fp16", test::kFp16, 1024);  // the scaler's first scale
}

// Every SAM-family algorithm under bf16 gathers: the same bits as under autocast over fp32 gathers.
class VariantMixedPrecisionTest : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(VariantMixedPrecisionTest, Bf16GathersGiveAutocastsNumbersOverFp32Gathers) {
  const std::string name = GetParam().first;
  Json config = sam_config("{}", "zero3");
  config["algorithms"] = Json::object();
  config["algorithms"][name] = Json::parse(GetParam().second);
  config["algorithms"][name]["sync_ascent"] = true;
  config["model"] = Json::parse(R"({"name": "mlp", "hidden": [16, 12]})");
  expect_gathers_follow_autocast(config, name, true);
}

INSTANTIATE_TEST_SUITE_P(Variants, VariantMixedPrecisionTest, ::testing::ValuesIn(test::sam_family()),
                         [](const auto& info) { return info.param.first; });

// Where an op does not autocast, the two runs compute differently (no
// rounding bound holds over steps) and end apart, nearer each other than a
// run that did not train (a few percent of the motion here): the gpt's
// and the llama's embedding (autocast leaves it in its weight's dtype, so the residual
// stream starts in bf16 instead of fp32) and the resnet's BatchNorm (bf16
// weights and statistics: it normalises in bf16 where autocast's runs in
// fp32 on fp32 weights).
TEST(ZeroThreeMixedPrecisionTest, TheGptLlamaAndResnetFollowAutocastOverFp32GathersNearerThanTheStart) {
  test::TempDir dir;
  std::string corpus;
  for (int i = 0; i < 40; ++i) corpus += "Half the bytes, the same fortune " + std::to_string(i) + ".\n";
  test::write_text(dir.file("corpus.txt"), corpus);
  Json gpt = sam_config(R"({"rho": 0.05, "sync_ascent": true})", "zero3");
  gpt["model"] = Json::parse(R"({"name": "gpt", "n_layer": 2, "n_head": 2, "n_embd": 16})");
  gpt["data"] = {{"name", "text"}, {"train", dir.file("corpus.txt")}, {"block_size", 16}, {"batch_size", 8}};
  gpt["optimizer"] = Json::parse(R"({"name": "sgd", "lr": 0.1, "momentum": 0.9})");
  gpt["max_steps"] = 3;
  expect_gathers_follow_autocast(gpt, "gpt", false);  // measured: 1.2% of the motion
  Json llama = gpt;
  llama["model"] = Json::parse(R"({"name": "llama", "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4,
                                   "num_key_value_heads": 2})");
  expect_gathers_follow_autocast(llama, "llama", false);
  Json resnet = sam_config(R"({"rho": 0.05, "sync_ascent": true})", "zero3");
  resnet["model"] = Json::parse(R"({"name": "resnet", "width": 4, "blocks": [1, 1]})");
  resnet["optimizer"] = Json::parse(R"({"name": "sgd", "lr": 0.1, "momentum": 0.9})");
  resnet["max_steps"] = 3;
  expect_gathers_follow_autocast(resnet, "resnet", false);  // measured: 6%
}

// What a rank holds: the model's parameters are bf16 and hold no bytes at
// rest; the shards, their gradients and the whole weights are fp32; the most
// held whole during a step is exactly half of fp32 gathers' (the same units,
// two bytes an element instead of four).
TEST(ZeroThreeMixedPrecisionTest, ARankHoldsHalfTheBytesWholeAndFp32Shards) {
  Json config = sam_config(R"({"rho": 0.05, "sync_ascent": true})", "zero3");
  config["model"] = Json::parse(R"({"name": "mlp", "hidden": [64, 64]})");
  config["precision"] = "amp_bf16";
  config["max_steps"] = 2;
  std::map<bool, std::vector<int64_t>> peak, shard;
  for (const bool lowered : {false, true}) {
    if (lowered) config["parallel"]["mixed_precision"] = Json::parse(kBf16Gathers);
    peak[lowered].assign(2, 0), shard[lowered].assign(2, 0);
    test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
      Trainer trainer(config, {}, {}, communicator);
      FullyShardedModel& sharded = *test::fully_sharded_of(trainer);
      sharded.reset_peak();
      trainer.fit();
      const auto r = static_cast<std::size_t>(rank);
      peak[lowered][r] = sharded.peak_gathered_bytes();
      shard[lowered][r] = sharded.shard_bytes();
      EXPECT_EQ(sharded.gathered_bytes(), 0) << "nothing whole at rest";
      for (const auto& p : sharded.parameters()) {
        EXPECT_EQ(p.scalar_type(), lowered ? at::kBFloat16 : at::kFloat);
        EXPECT_FALSE(p.grad().defined()) << "a whole gradient left behind";
      }
      for (const auto& s : sharded.shards()) {
        EXPECT_EQ(s.scalar_type(), at::kFloat);
        EXPECT_EQ(s.grad().scalar_type(), at::kFloat);
      }
      for (const auto& w : trainer.whole_parameters()) EXPECT_EQ(w.scalar_type(), at::kFloat);
    });
  }
  for (std::size_t r = 0; r < 2; ++r) {
    EXPECT_GT(peak[false][r], 0);
    EXPECT_EQ(2 * peak[true][r], peak[false][r]) << "rank " << r;
    EXPECT_EQ(shard[true][r], shard[false][r]) << "rank " << r << ": the fp32 shards are the same";
  }
}

/// Runs `call` after step `step`.
class AfterStep : public Algorithm {
 public:
  AfterStep(int64_t step, std::function<void()> call) : step_(step), call_(std::move(call)) {}
  std::string name() const override { return "after_step"; }
  bool match(Event event, const State& state) const override {
    return event == Event::AFTER_STEP && state.timestamp.step == step_;
  }
  void apply(Event, State&, Logger&) override { call_(); }

 private:
  int64_t step_;
  std::function<void()> call_;
};

// The model a run exports is its fp32 weights, whatever the gathers' dtype,
// and training goes on after an export as if there had been none: the
// parameters get back their dtype, and the gradient accumulators that
// zero3's hooks are on (a new one, without them, would still train, but
// would hold every gradient whole to backward's end).
TEST(ZeroThreeMixedPrecisionTest, AnExportMidRunWritesTheFp32MastersAndChangesNothingAfter) {
  test::TempDir dir;
  std::filesystem::create_directories(dir.file("run"));
  Json config = sam_config(R"({"rho": 0.05, "sync_ascent": true})", "zero3");
  config["precision"] = "amp_bf16";
  config["parallel"]["mixed_precision"] = Json::parse(kBf16Gathers);
  config["max_steps"] = 4;
  test::Weights at_export;
  std::vector<int> kept_hooks(2, 0);
  const auto exported = test::train_on_ranks(2, config, [&](int rank, Trainer& trainer) {
    trainer.engine().add_algorithm(std::make_shared<AfterStep>(2, [&trainer, &at_export, &dir, &kept_hooks, rank] {
      const auto& parameters = test::fully_sharded_of(trainer)->parameters();
      std::vector<std::shared_ptr<torch::autograd::Node>> before;
      for (const auto& p : parameters) before.push_back(torch::autograd::impl::try_get_grad_accumulator(p));
      trainer.export_model(dir.file("run"));  // collective
      bool same = true;
      for (std::size_t i = 0; i < parameters.size(); ++i) {
        same = same && before[i] && torch::autograd::impl::try_get_grad_accumulator(parameters[i]) == before[i] &&
               parameters[i].scalar_type() == at::kBFloat16;
      }
      kept_hooks[static_cast<std::size_t>(rank)] = same ? 1 : 0;
      const test::Weights whole = trainer.whole_parameters();
      if (rank == 0) at_export = whole;
    }));
  });
  EXPECT_EQ(kept_hooks, (std::vector<int>{1, 1})) << "each parameter's accumulator and dtype, after the export";
  const auto straight = test::train_on_ranks(2, config);
  EXPECT_EQ(max_difference(exported[0], straight[0]), 0.0) << "the export changed the steps after it";
  EXPECT_EQ(max_difference(exported[1], straight[1]), 0.0);
  const auto saved = read_torch_save_file(dir.file("run") + "/state_dict.pt", "export").toGenericDict();
  Trainer plain(config);  // the parameters' names, in order
  std::size_t i = 0;
  for (const auto& item : plain.model().named_parameters(/*recurse=*/true)) {
    const at::Tensor value = saved.at(item.key()).toTensor();
    EXPECT_EQ(value.scalar_type(), at::kFloat) << item.key();
    EXPECT_TRUE(value.equal(at_export.at(i++))) << item.key() << ": the masters at step 2";
  }
}

// The refusals name the key and say what is expected.
TEST(ZeroThreeMixedPrecisionTest, ItsKeysAreCheckedAgainstTheModeThePrecisionAndTheModel) {
  auto refusal = [](Json config) {
    try {
      test::run_ranks(2, [&](int, std::shared_ptr<Communicator> communicator) { Trainer trainer(config, {}, {}, communicator); });
    } catch (const ConfigError& error) {
      return std::string(error.what());
    }
    return std::string("accepted");
  };
  Json config = sam_config(R"({"rho": 0.05, "sync_ascent": true})", "zero3");
  config["precision"] = "amp_bf16";
  config["parallel"]["mixed_precision"] = Json::parse(R"({"param_dtype": "bf16"})");
  for (const std::string mode : {"ddp", "zero1", "zero2"}) {
    config["parallel"]["mode"] = mode;
    const std::string message = refusal(config);
    EXPECT_NE(message.find("parallel.mixed_precision"), std::string::npos) << message;
    EXPECT_NE(message.find("\"" + mode + "\""), std::string::npos) << message;
  }
  for (const std::string dtype : {"fp16", "fp32"}) {  // it suggests a precision that exists
    Json other = config;
    other["parallel"]["mixed_precision"]["param_dtype"] = dtype;
    const std::string message = refusal(other);
    EXPECT_NE(message.find(dtype == "fp16" ? "\"amp_fp16\"" : "\"amp_bf16\""), std::string::npos) << message;
  }
  config["parallel"]["mode"] = "zero3";
  config["precision"] = "fp32";
  std::string message = refusal(config);
  EXPECT_NE(message.find("parallel.mixed_precision.param_dtype"), std::string::npos) << message;
  EXPECT_NE(message.find("amp_bf16"), std::string::npos) << message;
  config["precision"] = "amp_bf16";
  config["parallel"]["mixed_precision"]["reduce_dtype"] = "fp16";
  message = refusal(config);
  EXPECT_NE(message.find("parallel.mixed_precision.reduce_dtype"), std::string::npos) << message;
  EXPECT_NE(message.find("bf16"), std::string::npos) << message;
  config["parallel"]["mixed_precision"].erase("reduce_dtype");
  config["model"] = Json::parse(R"({"name": "resnet", "width": 4, "blocks": [1]})");
  message = refusal(config);
  EXPECT_NE(message.find("parallel.mixed_precision.buffers"), std::string::npos) << message;
  EXPECT_NE(message.find("running_mean"), std::string::npos) << message;
  EXPECT_NE(message.find("say true"), std::string::npos) << message;
  EXPECT_EQ(message.find("false to keep"), std::string::npos) << "false is no choice beside BatchNorm: " << message;
  // Given anyway, false is refused at once: BatchNorm would fail at the first step (bf16 weight, fp32 statistics).
  config["parallel"]["mixed_precision"]["buffers"] = false;
  message = refusal(config);
  EXPECT_NE(message.find("parallel.mixed_precision.buffers': false keeps"), std::string::npos) << message;
  EXPECT_NE(message.find("running_mean"), std::string::npos) << message;
  EXPECT_NE(message.find("say true"), std::string::npos) << message;
  config["parallel"]["mixed_precision"]["buffers"] = true;
  EXPECT_EQ(refusal(config), "accepted");
  // A buffer no gathered weight meets may stay as it is: then false is offered.
  config["model"] = Json{{"name", "scaled_mlp_test"}};
  config["parallel"]["mixed_precision"].erase("buffers");
  message = refusal(config);
  EXPECT_NE(message.find("'scale.factor'"), std::string::npos) << message;
  EXPECT_NE(message.find("false to keep them as they are"), std::string::npos) << message;
}

// "buffers": false keeps a floating buffer in fp32 where no gathered weight
// meets it (the option the message offers works), and true lowers it; both
// train. With BatchNorm, true trains the resnet (false is refused above).
TEST(ZeroThreeMixedPrecisionTest, BuffersStayFp32UnderFalseAndFollowTheGathersUnderTrue) {
  Json config = sam_config(R"({"rho": 0.05, "sync_ascent": true})", "zero3");
  config["precision"] = "amp_bf16";
  config["model"] = Json{{"name", "scaled_mlp_test"}};
  for (const bool follow : {false, true}) {
    config["parallel"]["mixed_precision"] = {{"param_dtype", "bf16"}, {"buffers", follow}};
    std::vector<at::ScalarType> kept(2);
    std::vector<double> moved(2);
    test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
      Trainer trainer(config, {}, {}, communicator);
      const test::Weights before = test::weights_of(trainer);
      trainer.fit();
      kept[static_cast<std::size_t>(rank)] = trainer.model().named_buffers(true)["scale.factor"].scalar_type();
      moved[static_cast<std::size_t>(rank)] = max_difference(test::weights_of(trainer), before);
      EXPECT_EQ(test::fully_sharded_of(trainer)->parameters().front().scalar_type(), at::kBFloat16);
    });
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(kept[static_cast<std::size_t>(r)], follow ? at::kBFloat16 : at::kFloat) << "buffers " << follow;
      EXPECT_TRUE(std::isfinite(moved[static_cast<std::size_t>(r)]) && moved[static_cast<std::size_t>(r)] > 0)
          << "buffers " << follow << ": trained, " << moved[static_cast<std::size_t>(r)];
    }
  }
  config["model"] = Json::parse(R"({"name": "resnet", "width": 4, "blocks": [1]})");
  config["parallel"]["mixed_precision"]["buffers"] = true;
  test::run_ranks(2, [&](int, std::shared_ptr<Communicator> communicator) {
    Trainer trainer(config, {}, {}, communicator);
    const test::Weights before = test::weights_of(trainer);
    trainer.fit();
    const double moved = max_difference(test::weights_of(trainer), before);
    EXPECT_TRUE(std::isfinite(moved) && moved > 0) << moved;
  });
}

}  // namespace
}  // namespace basin
