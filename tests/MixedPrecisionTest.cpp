// The grad scaler and autocast inside the trainer, with and without SAM.

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <numeric>
#include <set>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "basin/algorithms/sam/sam_optimizer.h"
#include "basin/callbacks/grad_scaler.h"
#include "basin/core/base/torch_compat.h"
#include "basin/core/data/data_pipeline.h"
#include "basin/core/engine/algorithm.h"
#include "basin/core/model/model.h"
#include "basin/core/optim/scheduler.h"
#include "basin/core/train/autocast.h"
#include "basin/core/train/low_precision_speed.h"
#include "test_util.h"

namespace basin {
namespace {

// Writes inf into the first gradient at chosen (step, pass) points.
class InjectOverflow : public Algorithm {
 public:
  InjectOverflow(std::vector<std::pair<int64_t, Pass>> at) : at_(std::move(at)) {}
  std::string name() const override { return "inject_overflow"; }
  bool match(Event event, const State& state) const override {
    if (event != Event::AFTER_BACKWARD) return false;
    for (const auto& [step, pass] : at_) {
      if (state.timestamp.step == step && state.pass == pass) return true;
    }
    return false;
  }
  void apply(Event, State& state, Logger&) override {
    at::NoGradGuard no_grad;
    state.model->parameters().front().grad().view(-1)[0] = INFINITY;
  }

 private:
  std::vector<std::pair<int64_t, Pass>> at_;
};

// Checks after every step that no inf or NaN reached the weights.
class WeightsStayFinite : public Callback {
 public:
  std::string name() const override { return "weights_stay_finite"; }
  bool on_after_step(const State& state, Logger&) override {
    for (const auto& p : state.model->parameters()) finite = finite && p.isfinite().all().item<bool>();
    return false;
  }
  bool finite = true;
};

Json scaled_sam_config() {
  Json config = test::smoke_config();
  config["max_steps"] = 10;
  config["algorithms"] = Json::parse(R"({"sam": {"rho": 0.05}})");
  config["callbacks"] = Json::parse(R"({"grad_scaler": {"init_scale": 128, "growth_interval": 1}})");
  config["schedulers"] = Json::parse(R"([{"name": "exponential", "gamma": 0.9}])");
  return config;
}

// The trainer's step without a scaler, skipping `skipped` steps outright:
// the batch is consumed, the schedule advances, the optimizer does nothing.
void run_control(Trainer& control, int64_t steps, const std::set<int64_t>& skipped) {
  State& state = control.state();
  auto& model = control.model();
  const auto& train = control.data().train;
  for (int64_t step = 0; step < steps; ++step) {
    const int64_t epoch = step / state.steps_per_epoch, index = step % state.steps_per_epoch;
    const auto order = epoch_order(train.size(), static_cast<uint64_t>(state.seed), epoch, true);
    const auto first = order.begin() + index * control.batch_size();
    const Batch batch = train.gather(std::vector<int64_t>(first, first + control.batch_size()));
    if (skipped.count(step) == 0) {
      state.optimizer->step([&] {
        state.optimizer->zero_grad();
        at::Tensor loss = at::cross_entropy_loss(model.forward(batch.inputs).to(at::kFloat), batch.targets) / 1.0;
        loss.backward();
        return loss.detach();
      });
    }
    for (auto& scheduler : state.schedulers) scheduler->step(*state.optimizer);
  }
}

TEST(MixedPrecisionTest, OverflowInAscentAndDescentSkipsExactlyThoseSteps) {
  Json config = scaled_sam_config();
  auto inject = std::make_shared<InjectOverflow>(std::vector<std::pair<int64_t, Pass>>{{3, Pass::kAscent}, {7, Pass::kDescent}});
  Trainer scaled(config);
  scaled.engine().add_algorithm(inject);
  const FitSummary summary = scaled.fit();
  EXPECT_EQ(summary.skipped_steps, 2);
  // 128 grown on 8 clean steps, halved on 2 overflows (growth_interval 1).
  EXPECT_EQ(scaled.state().scaler->current_scale(), 128 * std::pow(2.0, 8) * std::pow(0.5, 2));

  config.erase("callbacks");
  Trainer control(config);
  run_control(control, 10, {3, 7});
  const auto a = scaled.model().parameters();
  const auto b = control.model().parameters();
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i], b[i])) << "parameter " << i;
  // The schedule advanced on the skipped steps too.
  EXPECT_DOUBLE_EQ(scaled.state().optimizer->param_groups()[0].options().get_lr(),
                   control.state().optimizer->param_groups()[0].options().get_lr());
}

TEST(MixedPrecisionTest, PlainOptimizerSkipsOverflowedStepsToo) {
  Json config = scaled_sam_config();
  config.erase("algorithms");
  auto inject = std::make_shared<InjectOverflow>(std::vector<std::pair<int64_t, Pass>>{{2, Pass::kPlain}});
  Trainer scaled(config);
  scaled.engine().add_algorithm(inject);
  EXPECT_EQ(scaled.fit().skipped_steps, 1);
  config.erase("callbacks");
  Trainer control(config);
  run_control(control, 10, {2});
  const auto a = scaled.model().parameters();
  const auto b = control.model().parameters();
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i], b[i])) << "parameter " << i;
}

// No injection: a real fp32 overflow. fp32 holds up to ~2^128, so scaled
// gradients overflow only when scale * |g| gets there: here the largest
// scale a float holds, 2^127, and unnormalised inputs (x30) whose first-layer
// gradients exceed 2. The scaler must back off until they fit, then train.
TEST(MixedPrecisionTest, HugeInitialScaleBacksOffThenTrains) {
  Json config = test::smoke_config();
  config["max_epochs"] = 4;
  config["data"]["input_scale"] = 30;
  config["optimizer"]["lr"] = 0.001;
  config["algorithms"] = Json::parse(R"({"sam": {"rho": 0.05}})");
  config["callbacks"] = Json::parse(R"({"grad_scaler": {"init_scale": 1.7014118346046923e+38, "growth_interval": 1000}})");
  auto finite = std::make_shared<WeightsStayFinite>();
  auto losses = std::make_shared<test::LossRecorder>();
  Trainer trainer(config, {finite, losses});
  const FitSummary summary = trainer.fit();
  EXPECT_GT(summary.skipped_steps, 0);                                       // 2^127 overflowed at first
  EXPECT_LT(summary.skipped_steps, 8);                                       // then it backed off and stayed off
  EXPECT_LT(trainer.state().scaler->current_scale(), std::ldexp(1.0, 127));
  EXPECT_TRUE(finite->finite);                                               // no inf ever reached the weights
  EXPECT_LT(summary.final_train_loss, 0.3 * losses->losses.front());         // and it trained
}

class NanInputAtStep : public Algorithm {
 public:
  explicit NanInputAtStep(int64_t step) : step_(step) {}
  std::string name() const override { return "nan_input"; }
  bool match(Event event, const State& state) const override {
    return event == Event::BATCH_START && state.timestamp.step == step_;
  }
  void apply(Event, State& state, Logger&) override {
    state.batch.inputs = state.batch.inputs.clone();
    state.batch.inputs[0][0][0][0] = NAN;
  }

 private:
  int64_t step_;
};

TEST(MixedPrecisionTest, NanInTheInputSkipsThatStepOnly) {
  Json config = test::smoke_config();
  config["max_epochs"] = 4;
  config["algorithms"] = Json::parse(R"({"sam": {}})");
  config["callbacks"] = Json::parse(R"({"grad_scaler": {}})");
  auto finite = std::make_shared<WeightsStayFinite>();
  Trainer trainer(config, {finite});
  trainer.engine().add_algorithm(std::make_shared<NanInputAtStep>(2));
  const FitSummary summary = trainer.fit();
  EXPECT_EQ(summary.skipped_steps, 1);
  EXPECT_TRUE(finite->finite);
  EXPECT_LT(summary.final_train_loss, std::log(3.0) * 0.8);
}

TEST(MixedPrecisionTest, GradientClippingActsOnUnscaledGradients) {
  Json config = test::smoke_config();
  config["max_steps"] = 1;
  config["optimizer"] = Json::parse(R"({"name": "sgd", "lr": 1.0})");
  config["grad_clip_norm"] = 0.01;
  auto step_size = [](const Json& c) {
    Trainer trainer(c);
    std::vector<at::Tensor> before;
    for (const auto& p : trainer.model().parameters()) before.push_back(p.detach().clone());
    trainer.fit();
    double squares = 0;
    const auto after = trainer.model().parameters();
    for (std::size_t i = 0; i < after.size(); ++i) squares += (after[i] - before[i]).pow(2).sum().item<double>();
    return std::sqrt(squares);
  };
  const double clipped = step_size(config);
  EXPECT_NEAR(clipped, 0.01, 1e-6);  // lr 1: the step is the clipped gradient
  config["callbacks"] = Json::parse(R"({"grad_scaler": {"init_scale": 4096}})");
  EXPECT_NEAR(step_size(config), clipped, 1e-9);
  // A threshold above the true gradient norm but far below the scaled one:
  // clipping must not act, which it would if it saw scaled gradients.
  config.erase("callbacks");
  config["grad_clip_norm"] = 0;
  const double free_step = step_size(config);
  config["grad_clip_norm"] = 1.5 * free_step;
  config["callbacks"] = Json::parse(R"({"grad_scaler": {"init_scale": 4096}})");
  EXPECT_NEAR(step_size(config), free_step, 1e-6);
}

// Records the dtype of the model's outputs.
class OutputDtype : public Callback {
 public:
  std::string name() const override { return "output_dtype"; }
  bool on_after_forward(const State& state, Logger&) override {
    dtype = state.outputs.scalar_type();
    return false;
  }
  at::ScalarType dtype = at::kFloat;
};

TEST(MixedPrecisionTest, Bf16AutocastTrainsTheSmallCnnOnCpu) {
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Debian package dataset-fashion-mnist is not installed";
  }
  const Json config = Json::parse(R"({
    "seed": 1, "threads": 2, "max_epochs": 1, "log_every": 10, "precision": "amp_bf16",
    "data": {"name": "fashion_mnist", "batch_size": 64, "train_subset": 2048, "eval_batch_size": 2000},
    "model": {"name": "cnn", "channels": [8, 16], "hidden": 32},
    "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
    "algorithms": {"sam": {"rho": 0.05}}})");
  auto dtype = std::make_shared<OutputDtype>();
  auto losses = std::make_shared<test::LossRecorder>();
  Trainer trainer(config, {dtype, losses});
  const FitSummary summary = trainer.fit();
  EXPECT_EQ(dtype->dtype, at::kBFloat16);  // autocast was on in the forward
  for (const auto& p : trainer.model().parameters()) EXPECT_EQ(p.scalar_type(), at::kFloat);
  const auto& l = losses->losses;
  ASSERT_EQ(l.size(), 32u);
  const double first = std::accumulate(l.begin(), l.begin() + 8, 0.0) / 8;
  const double last = std::accumulate(l.end() - 8, l.end(), 0.0) / 8;
  EXPECT_LT(last, 0.85 * first);          // the loss fell
  EXPECT_GT(summary.test_accuracy, 0.3);  // chance is 0.1
  EXPECT_FALSE(compat::autocast_enabled(c10::DeviceType::CPU));  // and autocast is off again outside the step
}

TEST(MixedPrecisionTest, Fp16OnCpuIsRejectedBeforeTraining) {
  if (compat::kCpuAutocastFp16) {
    GTEST_SKIP() << "LibTorch " << compat::torch_version() << "'s CPU autocast has float16: amp_fp16 runs on CPU "
                 << "(MixedPrecisionTest.Fp16RealOverflowOnCpu)";
  }
  Json config = test::smoke_config();
  config["precision"] = "amp_fp16";
  const std::string message = test::trainer_config_error(config);
  EXPECT_NE(message.find("'precision'"), std::string::npos) << message;
  EXPECT_NE(message.find("amp_bf16"), std::string::npos) << message;
}

TEST(MixedPrecisionTest, UnknownPrecisionListsTheKnownOnes) {
  Json config = test::smoke_config();
  config["precision"] = "fp8";
  EXPECT_NE(test::trainer_config_error(config).find("fp32, amp_bf16, amp_fp16"), std::string::npos);
}

// fp16 autocast with SAM and a real float16 overflow, no injection: at a
// scale of 2^24 the float16 gradient of the logits, scale * (p - y) / 16,
// exceeds float16's 65504, so the scaler backs off (about 2^19 fits) and then
// trains, with fp32 weights that never see an inf.
void expect_fp16_overflow_backs_off_then_trains(const std::string& device) {
  Json config = test::smoke_config();
  config["device"] = device;
  config["precision"] = "amp_fp16";
  config["max_epochs"] = 6;
  config["algorithms"] = Json::parse(R"({"sam": {"rho": 0.05}})");
  config["callbacks"] = Json::parse(R"({"grad_scaler": {"init_scale": 16777216, "growth_interval": 1000}})");
  auto dtype = std::make_shared<OutputDtype>();
  auto finite = std::make_shared<WeightsStayFinite>();
  auto losses = std::make_shared<test::LossRecorder>();
  Trainer trainer(config, {dtype, finite, losses});
  const FitSummary summary = trainer.fit();
  EXPECT_EQ(dtype->dtype, at::kHalf);  // the forward ran in float16
  for (const auto& p : trainer.model().parameters()) EXPECT_EQ(p.scalar_type(), at::kFloat);
  EXPECT_TRUE(finite->finite);
  EXPECT_GE(summary.skipped_steps, 3);   // 2^24 -> 2^21 at least
  EXPECT_LE(summary.skipped_steps, 12);  // then it fits and trains
  EXPECT_LE(trainer.state().scaler->current_scale(), std::ldexp(1.0, 21));
  const auto& l = losses->losses;
  ASSERT_EQ(l.size(), 48u);
  const double last = std::accumulate(l.end() - 8, l.end(), 0.0) / 8;
  EXPECT_LT(last, std::log(3.0) * 0.8);  // below chance: it learned
}

TEST(MixedPrecisionTest, Fp16RealOverflowOnCpu) {
  if (!compat::kCpuAutocastFp16) {
    GTEST_SKIP() << "LibTorch " << compat::torch_version() << "'s CPU autocast has no float16 (2.5 and later have)";
  }
  expect_fp16_overflow_backs_off_then_trains("cpu");
}

TEST(MixedPrecisionTest, Fp16RealOverflowWithSamOnCuda) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device: amp_fp16 on CUDA runs on a GPU machine";
  expect_fp16_overflow_backs_off_then_trains("cuda");
}

// The slow-bf16 warning, its timings faked: said with the measured ratio where
// the low precision is over twice as slow as fp32; nothing timed for fp32 or
// a GPU; a format the CPU cannot multiply is not warned of.
TEST(MixedPrecisionTest, WarnsWhereTheLowPrecisionsProductsAreOverTwiceAsSlow) {
  std::vector<at::ScalarType> timed;
  auto timings = [&](double low, double fp32) {
    return [&timed, low, fp32](at::ScalarType dtype) {
      timed.push_back(dtype);
      return dtype == at::kFloat ? fp32 : low;
    };
  };
  const c10::Device cpu(c10::DeviceType::CPU);
  const std::string slow = low_precision_speed_warning(Precision::kAmpBf16, cpu, timings(0.0877, 0.001));
  EXPECT_NE(slow.find("bf16 matrix products 87.7x slower than fp32"), std::string::npos) << slow;
  EXPECT_NE(slow.find("87.70 ms against 1.00 ms"), std::string::npos) << slow;
  EXPECT_NE(slow.find("precision amp_bf16"), std::string::npos) << slow;
  EXPECT_EQ(timed, (std::vector<at::ScalarType>{at::kBFloat16, at::kFloat}));
  const std::string fp16 = low_precision_speed_warning(Precision::kAmpFp16, cpu, timings(0.0025, 0.001));
  EXPECT_NE(fp16.find("fp16 matrix products 2.5x slower"), std::string::npos) << fp16;
  EXPECT_NE(fp16.find("precision amp_fp16"), std::string::npos) << fp16;

  EXPECT_EQ(low_precision_speed_warning(Precision::kAmpBf16, cpu, timings(0.002, 0.001)), "") << "2x is no warning";
  EXPECT_EQ(low_precision_speed_warning(Precision::kAmpBf16, cpu, timings(0.0005, 0.001)), "");
  timed.clear();
  EXPECT_EQ(low_precision_speed_warning(Precision::kFp32, cpu, timings(1, 0.001)), "");
  EXPECT_EQ(low_precision_speed_warning(Precision::kAmpBf16, c10::Device(c10::DeviceType::CUDA, 0), timings(1, 0.001)), "");
  EXPECT_TRUE(timed.empty()) << "fp32 and a GPU time nothing";
  auto no_kernel = [](at::ScalarType dtype) -> double {
    if (dtype == at::kHalf) TORCH_CHECK(false, "\"addmm_impl_cpu_\" not implemented for 'Half'");
    return 0.001;
  };
  EXPECT_EQ(low_precision_speed_warning(Precision::kAmpFp16, cpu, no_kernel), "");
}

// The real probe times a product in each format basin computes in on a CPU.
TEST(MixedPrecisionTest, TheProbeTimesAProductInFp32AndBf16) {
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const double seconds = time_cpu_product(dtype);
    EXPECT_GT(seconds, 0.0) << dtype;
    EXPECT_TRUE(std::isfinite(seconds)) << dtype;
  }
}

TEST(MixedPrecisionTest, Fp16AutocastWithSamOnCuda) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device: amp_fp16 runs on a GPU machine";
  Json config = test::smoke_config();
  config["device"] = "cuda";
  config["precision"] = "amp_fp16";
  config["max_epochs"] = 4;
  config["algorithms"] = Json::parse(R"({"sam": {"rho": 0.05}})");
  auto dtype = std::make_shared<OutputDtype>();
  auto finite = std::make_shared<WeightsStayFinite>();
  Trainer trainer(config, {dtype, finite});
  ASSERT_TRUE(trainer.state().scaler != nullptr);  // installed automatically
  const FitSummary summary = trainer.fit();
  EXPECT_EQ(dtype->dtype, at::kHalf);
  EXPECT_TRUE(finite->finite);
  EXPECT_LT(summary.final_train_loss, std::log(3.0) * 0.8);
}

}  // namespace
}  // namespace basin
