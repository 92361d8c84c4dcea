// Cost model of data-parallel SAM, one process per rank (run it under
// basin-run; bench/distributed.sh does, at 2 and 4 ranks). For each mode it
// trains a model (BASIN_BENCH_MODEL, one of bench_models.h's, default the
// small CNN; Fashion-MNIST shapes, synthetic data, batch 32 per rank) and
// reports, from rank 0:
//   - bytes per rank per step, as the communicator counts them (what a
//     bandwidth-optimal ring implementation sends, see Communicator), and
//     the ratio to data-parallel SGD (rank-local SAM, ZeRO-1 and ZeRO-2:
//     1.0 plus a few scalars; synced ascent: 2.0; ZeRO-3 SGD: 1.5, a gather
//     for forward, one for backward and a reduce-scatter; ZeRO-3 SAM: 3.0;
//     with bf16 gathers the gathers move half: 1.0 and 2.0)
//   - bytes per rank per step as measured on the loopback interface
//     (/proc/net/dev; all ranks share it, so it is their total over N): what
//     Gloo's own algorithms really send, TCP headers included
//   - peak bytes held during training above what was held before it
//   - bytes each rank holds after training of parameters, of gradients, of
//     optimizer state and of SAM's backup (the most and the fewest over ranks)
//   - median step time
// Threads per rank: BASIN_BENCH_THREADS (default 1).

#include <algorithm>
#include <array>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <iostream>
#include <map>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/optim/sgd.h>

#include "basin/algorithms/sam/sam_optimizer.h"
#include "basin/core/communication/communicator.h"
#include "basin/core/communication/rendezvous.h"
#include "basin/core/engine/callback.h"
#include "basin/core/model/model.h"
#include "basin/core/parallel/zero3/fully_sharded_model.h"
#include "basin/core/sharding/sharded_parameters.h"
#include "basin/core/train/trainer.h"
#include "bench_models.h"
#include "tracking_allocator.h"

namespace {

using Clock = std::chrono::steady_clock;

// Times each step, from BATCH_START to BATCH_END.
class StepTimer : public basin::Callback {
 public:
  std::string name() const override { return "step_timer"; }
  bool on_batch_start(const basin::State&, basin::Logger&) override { return start_ = Clock::now(), false; }
  bool on_batch_end(const basin::State&, basin::Logger&) override {
    seconds.push_back(std::chrono::duration<double>(Clock::now() - start_).count());
    return false;
  }
  double median() {
    std::sort(seconds.begin(), seconds.end());
    return seconds[seconds.size() / 2];
  }
  std::vector<double> seconds;

 private:
  Clock::time_point start_;
};

struct Mode {
  Mode(std::string name, std::string parallel, std::string algorithms, std::string precision = "fp32",
       std::string parallel_keys = "{}")
      : name(std::move(name)),
        parallel(std::move(parallel)),
        algorithms(std::move(algorithms)),
        precision(std::move(precision)),
        parallel_keys(std::move(parallel_keys)) {}
  std::string name;
  std::string parallel;
  std::string algorithms;
  std::string precision;
  std::string parallel_keys;  // more of the "parallel" section (mixed_precision, activation_checkpointing)
};

// Bytes sent on the loopback interface since boot, all processes together.
double loopback_bytes_sent() {
  std::ifstream dev("/proc/net/dev");
  std::string line;
  while (std::getline(dev, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos || line.substr(0, colon).find("lo") == std::string::npos) continue;
    std::istringstream fields(line.substr(colon + 1));
    double value = 0;
    for (int i = 0; i <= 8; ++i) fields >> value;  // receive: 8 fields, then transmit bytes
    return value;
  }
  return 0;
}

struct Result {
  double bytes_per_step = 0;
  double wire_bytes_per_step = 0;  // measured on loopback, per rank
  double peak_bytes = 0;  // this rank's
  double peak_max = 0;    // over ranks
  double peak_min = 0;
  double step_ms = 0;
  // Held after training, by this rank, then the most and fewest over ranks.
  std::array<double, 4> held{};      // parameters, gradients, optimizer state, SAM's backup
  std::array<double, 4> held_max{};
  std::array<double, 4> held_min{};
};

double bytes_of(const at::Tensor& t) { return t.defined() ? static_cast<double>(t.numel() * t.element_size()) : 0; }

// Parameters, gradients, optimizer state and SAM's backup this rank holds
// now (between steps: under zero3 the shards, the model's own holding none).
std::array<double, 4> held_bytes(basin::Trainer& trainer) {
  std::array<double, 4> held{};
  for (const auto& p : trainer.model().parameters()) {
    held[0] += static_cast<double>(p.storage().nbytes());
    held[1] += bytes_of(p.grad());
  }
  if (const basin::FullyShardedModel* sharded = dynamic_cast<const basin::FullyShardedModel*>(trainer.model().unit_runner())) {
    held[0] += static_cast<double>(sharded->shard_bytes());
    for (const auto& shard : sharded->shards()) held[1] += bytes_of(shard.grad());
  }
  torch::optim::Optimizer* stepping = trainer.state().optimizer.get();
  if (auto* sam = dynamic_cast<basin::SAMOptimizer*>(stepping)) {
    for (const auto& b : sam->perturbed_buffers()) held[3] += bytes_of(b);
    stepping = &sam->base();
  }
  if (basin::ShardedParameters* shards = trainer.state().shards; shards && shards->local_optimizer()) {
    stepping = shards->local_optimizer();
  }
  for (const auto& [key, state] : stepping->state()) {  // SGD's momentum: the benchmark's optimizer
    if (const auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(state.get())) {
      held[2] += bytes_of(sgd->momentum_buffer());
    }
  }
  return held;
}

Result measure(const Mode& mode, const std::string& model, int threads,
               const std::shared_ptr<basin::Communicator>& job) {
  constexpr int64_t kSteps = 12;
  basin::Json config = basin::Json::parse(fmt::format(R"({{
    "seed": 0, "threads": {}, "max_steps": {}, "log_every": 1000,
    "data": {{"name": "synthetic", "train_size": 4096, "test_size": 32, "input_shape": [1, 28, 28],
             "num_classes": 10, "batch_size": 32}},
    "model": {{"name": "cnn"}},
    "optimizer": {{"name": "sgd", "lr": 0.01, "momentum": 0.9}},
    "algorithms": {},
    "parallel": {{"mode": "{}", "timeout_seconds": 120}}}})",
                                                      threads, kSteps, mode.algorithms, mode.parallel));
  config["model"] = basin::bench::model_config(model);
  config["precision"] = mode.precision;
  config["parallel"].update(basin::Json::parse(mode.parallel_keys));
  auto& tracker = basin::bench::TrackingAllocator::install();
  auto timer = std::make_shared<StepTimer>();
  basin::Trainer trainer(config, {timer}, {}, job);
  // One process with ddp has no communicator: it moves nothing.
  basin::Communicator* communicator = trainer.state().communicator.get();
  const double bytes_before = communicator != nullptr ? communicator->bytes_moved() : 0;
  if (communicator != nullptr) communicator->barrier();
  const double wire_before = loopback_bytes_sent();
  tracker.reset_peak();
  const size_t held_before = tracker.current();
  trainer.fit();
  if (communicator != nullptr) communicator->barrier();
  const double wire_after = loopback_bytes_sent();
  Result r;
  // fit() also evaluates once; evaluation moves no bytes.
  r.bytes_per_step = communicator != nullptr ? (communicator->bytes_moved() - bytes_before) / kSteps : 0;
  const int world = communicator != nullptr ? communicator->world_size() : 1;
  r.wire_bytes_per_step = communicator != nullptr ? (wire_after - wire_before) / world / kSteps : 0;
  r.peak_bytes = static_cast<double>(tracker.peak() - held_before);
  timer->seconds.erase(timer->seconds.begin());  // the first step allocates state
  r.step_ms = timer->median() * 1e3;
  r.held = held_bytes(trainer);
  // Every rank's figures to every rank: one slot each in a summed matrix.
  const int ranks = communicator != nullptr ? communicator->world_size() : 1;
  std::vector<at::Tensor> figures{at::zeros({5, ranks}, at::kDouble)};
  const int me = communicator != nullptr ? communicator->rank() : 0;
  figures.front()[0][me] = r.peak_bytes;
  for (int k = 0; k < 4; ++k) figures.front()[k + 1][me] = r.held[static_cast<std::size_t>(k)];
  if (communicator != nullptr) communicator->all_reduce_sum(figures);
  const at::Tensor most = std::get<0>(figures.front().max(1)), fewest = std::get<0>(figures.front().min(1));
  r.peak_max = most[0].item<double>();
  r.peak_min = fewest[0].item<double>();
  for (int k = 0; k < 4; ++k) {
    r.held_max[static_cast<std::size_t>(k)] = most[k + 1].item<double>();
    r.held_min[static_cast<std::size_t>(k)] = fewest[k + 1].item<double>();
  }
  return r;
}

}  // namespace

int main() {
  const char* threads_env = std::getenv("BASIN_BENCH_THREADS");
  const int threads = threads_env != nullptr ? std::atoi(threads_env) : 1;
  const char* model_env = std::getenv("BASIN_BENCH_MODEL");
  const std::string model = model_env != nullptr ? model_env : "cnn";
  const auto& known = basin::bench::model_names();
  if (std::find(known.begin(), known.end(), model) == known.end() || basin::bench::token_vocab(model) > 0) {
    std::cerr << "BASIN_BENCH_MODEL='" << model << "': expected one of mlp, mlp1024, mlp2048, mlp4096x3, cnn, "
              << "cnn_contiguous, resnet (the gpt and the llama are bench/sharded_peers.sh's)" << std::endl;
    return 2;
  }
  const basin::JobEnvironment job = basin::read_job_environment();
  const std::string bf16_gathers =
      R"("mixed_precision": {"param_dtype": "bf16", "reduce_dtype": "fp32", "buffers": true})";
  const std::string checkpointed = R"("activation_checkpointing": true)";
  const std::string bf16_keys = "{" + bf16_gathers + "}", checkpoint_keys = "{" + checkpointed + "}",
                    both_keys = "{" + bf16_gathers + ", " + checkpointed + "}";
  const std::vector<Mode> modes = {
      {"ddp sgd", "ddp", "{}"},
      {"ddp sam, rank-local ascent", "ddp", R"({"sam": {"sync_ascent": false}})"},
      {"ddp sam, synced ascent", "ddp", R"({"sam": {"sync_ascent": true}})"},
      {"zero1 sgd", "zero1", "{}"},
      {"zero1 sam, rank-local ascent", "zero1", R"({"sam": {"sync_ascent": false}})"},
      {"zero1 sam, synced ascent", "zero1", R"({"sam": {"sync_ascent": true}})"},
      {"zero2 sgd", "zero2", "{}"},
      {"zero2 sam, rank-local ascent", "zero2", R"({"sam": {"sync_ascent": false}})"},
      {"zero2 sam, synced ascent", "zero2", R"({"sam": {"sync_ascent": true}})"},
      {"zero3 sgd", "zero3", "{}"},
      {"zero3 sam, synced ascent", "zero3", R"({"sam": {"sync_ascent": true}})"},
      // amp_bf16 over fp32 gathers (autocast keeps a bf16 copy of each weight), then bf16 gathers.
      {"zero3 sam, amp_bf16", "zero3", R"({"sam": {"sync_ascent": true}})", "amp_bf16"},
      {"zero3 sgd, bf16 gathers", "zero3", "{}", "amp_bf16", bf16_keys},
      {"zero3 sam, bf16 gathers", "zero3", R"({"sam": {"sync_ascent": true}})", "amp_bf16", bf16_keys},
      // The gather schedule: no prefetch either way; units whole from forward to backward.
      {"zero3 sam, no prefetch", "zero3", R"({"sam": {"sync_ascent": true}})", "fp32",
       R"({"prefetch": {"forward": 0, "backward": 0}})"},
      {"zero3 sam, kept after forward", "zero3", R"({"sam": {"sync_ascent": true}})", "fp32",
       R"({"reshard_after_forward": false})"},
      // Activation checkpointing of every unit: activations recomputed in backward.
      {"ddp sam, checkpointed", "ddp", R"({"sam": {"sync_ascent": true}})", "fp32", checkpoint_keys},
      {"zero3 sam, checkpointed", "zero3", R"({"sam": {"sync_ascent": true}})", "fp32", checkpoint_keys},
      {"zero3 sam, bf16, checkpointed", "zero3", R"({"sam": {"sync_ascent": true}})", "amp_bf16", both_keys},
  };
  // One rendezvous for all modes: each trainer gets the same communicator.
  const auto communicator = job.world_size > 1 ? basin::connect_job(job, std::chrono::seconds(120)) : nullptr;
  std::map<std::string, Result> results;
  for (const auto& mode : modes) results[mode.name] = measure(mode, model, threads, communicator);
  if (job.rank != 0) return 0;
  const double baseline = results["ddp sgd"].bytes_per_step;
  const double wire_baseline = results["ddp sgd"].wire_bytes_per_step;
  fmt::print("ranks {}, torch threads per rank {}, model {}, batch 32 per rank; bytes per rank per step\n",
             job.world_size, threads, model);
  fmt::print("{:<30} {:>12} {:>7} {:>12} {:>7} {:>22} {:>9}\n", "mode", "ring model", "vs ddp", "loopback",
             "vs ddp", "peak MiB (max / min)", "step ms");
  for (const auto& mode : modes) {
    const Result& r = results[mode.name];
    fmt::print("{:<30} {:>12.0f} {:>7.3f} {:>12.0f} {:>7.3f} {:>13.2f} / {:>6.2f} {:>9.1f}\n", mode.name,
               r.bytes_per_step, baseline > 0 ? r.bytes_per_step / baseline : 0.0, r.wire_bytes_per_step,
               wire_baseline > 0 ? r.wire_bytes_per_step / wire_baseline : 0.0, r.peak_max / (1 << 20),
               r.peak_min / (1 << 20), r.step_ms);
  }
  fmt::print("\nheld per rank after training, MiB (max / min over ranks)\n");
  fmt::print("{:<30} {:>17} {:>17} {:>17} {:>17}\n", "mode", "parameters", "gradients", "optimizer state",
             "SAM's backup");
  for (const auto& mode : modes) {
    const Result& r = results[mode.name];
    fmt::print("{:<30}", mode.name);
    for (std::size_t k = 0; k < 4; ++k) {
      fmt::print(" {:>8.3f} / {:>6.3f}", r.held_max[k] / (1 << 20), r.held_min[k] / (1 << 20));
    }
    fmt::print("\n");
  }
  return 0;
}
