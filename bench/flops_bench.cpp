// How close a training step comes to the machine: the matrix-product
// throughput a config's step reaches, beside the throughput of one large
// GEMM in the same LibTorch on the same threads (what the core can do).
//
//   basin-bench-flops --config examples/configs/fashion_mnist_sam.json [--set KEY=VALUE]... [--steps 10]
//
// The step's FLOPs are counted, not modelled: during one step a
// RecordFunction callback sees every matrix product LibTorch runs, forward
// and backward, both of SAM's passes (aten::mm, addmm, bmm, baddbmm: 2mkn
// each; aten::convolution: 2 x output elements x input channels per group x
// kernel area; aten::convolution_backward: that for each of the input's and
// the weight's gradients it computes). Elementwise work, the optimizer and
// SAM's own arithmetic count nothing: the figure is matrix products over
// the whole step's time. The step is timed from BATCH_START to BATCH_END
// (median over --steps, after 3 warm-up steps and the counted one).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <CLI/CLI.hpp>

#include "basin/core/base/blas.h"
#include "basin/core/base/memory_reuse.h"
#include "basin/core/base/torch_compat.h"
#include "basin/core/config/config.h"
#include "basin/core/engine/callback.h"
#include "basin/core/train/trainer.h"

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<double> counted_flops{0};

int64_t product(c10::IntArrayRef sizes) {
  int64_t p = 1;
  for (int64_t s : sizes) p *= s;
  return p;
}

c10::IntArrayRef sizes_of(const c10::IValue& value) { return value.toTensor().sizes(); }

// A forward convolution's FLOPs: 2 x output elements x (input channels / groups) x kernel area.
double convolution_flops(c10::IntArrayRef output, c10::IntArrayRef weight) {
  return 2.0 * static_cast<double>(product(output)) * static_cast<double>(product(weight.slice(1)));
}

// The output's sizes of aten::convolution(input, weight, bias, stride, padding, dilation, ...), 2-D or more.
std::vector<int64_t> convolution_output(c10::IntArrayRef input, c10::IntArrayRef weight, const c10::List<int64_t>& stride,
                                        const c10::List<int64_t>& padding, const c10::List<int64_t>& dilation) {
  std::vector<int64_t> out{input[0], weight[0]};
  for (std::size_t d = 2; d < input.size(); ++d) {
    const std::size_t i = d - 2;
    const int64_t s = stride.size() > i ? stride[i] : stride[0], p = padding.size() > i ? padding[i] : padding[0];
    const int64_t dl = dilation.size() > i ? dilation[i] : dilation[0];
    out.push_back((input[d] + 2 * p - dl * (weight[d] - 1) - 1) / s + 1);
  }
  return out;
}

double flops_of(const at::RecordFunction& fn) {
  const std::string name = fn.name();
  const auto inputs = fn.inputs();
  try {
    if (name == "aten::mm" && inputs.size() >= 2) {
      const auto a = sizes_of(inputs[0]), b = sizes_of(inputs[1]);
      return 2.0 * a[0] * a[1] * b[1];
    }
    if ((name == "aten::addmm" || name == "aten::baddbmm") && inputs.size() >= 3) {
      const auto a = sizes_of(inputs[1]), b = sizes_of(inputs[2]);
      return 2.0 * static_cast<double>(product(a)) * b[b.size() - 1];
    }
    if (name == "aten::bmm" && inputs.size() >= 2) {
      const auto a = sizes_of(inputs[0]), b = sizes_of(inputs[1]);
      return 2.0 * static_cast<double>(product(a)) * b[2];
    }
    if (name == "aten::convolution" && inputs.size() >= 9 && !inputs[6].toBool()) {
      const auto input = sizes_of(inputs[0]), weight = sizes_of(inputs[1]);
      const auto output = convolution_output(input, weight, inputs[3].toIntList(), inputs[4].toIntList(), inputs[5].toIntList());
      return convolution_flops(output, weight);
    }
    if (name == "aten::convolution_backward" && inputs.size() >= 11) {
      const auto grad_output = sizes_of(inputs[0]), weight = sizes_of(inputs[2]);
      const auto mask = inputs[10].toBoolList();
      const double one = convolution_flops(grad_output, weight);
      return one * ((mask.get(0) ? 1 : 0) + (mask.get(1) ? 1 : 0));
    }
  } catch (const c10::Error&) {
    return 0;  // a signature this LibTorch spells otherwise: not a product counted here
  }
  return 0;
}

std::unique_ptr<at::ObserverContext> count_flops(const at::RecordFunction& fn) {
  const double flops = flops_of(fn);
  if (flops > 0) {
    double seen = counted_flops.load();
    while (!counted_flops.compare_exchange_weak(seen, seen + flops)) {
    }
  }
  return nullptr;
}

// Times every step but `counted`, during which it counts the matrix products' FLOPs.
class StepMeter : public basin::Callback {
 public:
  explicit StepMeter(int64_t counted) : counted_(counted) {}
  std::string name() const override { return "step_meter"; }
  bool on_batch_start(const basin::State& state, basin::Logger&) override {
    if (state.timestamp.step == counted_) {
      handle_ = at::addGlobalCallback(at::RecordFunctionCallback(count_flops).needsInputs(true));
    }
    start_ = Clock::now();
    return false;
  }
  bool on_batch_end(const basin::State& state, basin::Logger&) override {
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start_).count();
    const int64_t index = state.timestamp.step - 1;  // counted up before BATCH_END
    if (index == counted_) {
      at::removeCallback(handle_);
    } else if (index > counted_) {  // the steps before the counted one warm up
      step_ms.push_back(ms);
    }
    return false;
  }
  std::vector<double> step_ms;

 private:
  int64_t counted_;
  at::CallbackHandle handle_ = 0;
  Clock::time_point start_;
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// GFLOP/s of a [n, n] x [n, n] float product, best of five, on the current threads.
double gemm_gflops(int64_t n) {
  const at::Tensor a = at::randn({n, n}), b = at::randn({n, n});
  at::Tensor c = at::mm(a, b);
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto start = Clock::now();
    at::mm_out(c, a, b);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return 2.0 * n * n * n / best / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  basin::keep_freed_memory_for_reuse();  // as basin-train does
  CLI::App app{"The matrix-product throughput a config's training step reaches, against one large GEMM"};
  std::string config_path;
  std::vector<std::string> overrides;
  int64_t steps = 10;
  app.add_option("--config", config_path, "a basin-train config")->required();
  app.add_option("--set", overrides, "KEY=VALUE, as basin-train's --set");
  app.add_option("--steps", steps, "timed steps, after 3 warm-up steps and the counted one")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  basin::Json config = basin::load_config_file(config_path);
  for (const auto& assignment : overrides) basin::apply_override(config, assignment);
  const int64_t counted = 3;  // steps count from 0 at BATCH_START
  config["max_steps"] = counted + 1 + steps;
  config["max_epochs"] = 1000;
  auto meter = std::make_shared<StepMeter>(counted);
  basin::Trainer trainer(config, {meter});
  const int threads = at::get_num_threads();
  trainer.fit();

  const double step_ms = median(meter->step_ms);
  const double flops = counted_flops.load();
  const double reached = flops / (step_ms / 1e3) / 1e9;
  const double peak = gemm_gflops(2048);
  std::printf("config %s%s\n", config_path.c_str(), overrides.empty() ? "" : " (with --set)");
  std::printf("LibTorch %s on %s, %d thread(s)\n", basin::compat::torch_version(), basin::blas_info().describe().c_str(), threads);
  std::printf("step %.2f ms (median of %zu); matrix products %.3f GFLOP a step\n", step_ms, meter->step_ms.size(), flops / 1e9);
  std::printf("reached %.1f GFLOP/s, %.1f per core; one [2048]x[2048] GEMM %.1f GFLOP/s, %.1f per core; "
              "the step at %.0f%% of it\n",
              reached, reached / threads, peak, peak / threads, 100 * reached / peak);
  return 0;
}
