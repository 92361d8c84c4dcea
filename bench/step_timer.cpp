// Times one training step of basin, for side-by-side comparisons with the
// Python peers (bench/peers.sh runs it interleaved with bench/peers_sam.py).
//
//   basin-bench-step --impl trainer_sam --model cnn --batch 128 --steps 30 --threads 1
//
// impl: trainer_sgd, trainer_sam  the whole step of basin's Trainer (events,
//                                 closure, optimizer, bookkeeping), timed from
//                                 BATCH_START to BATCH_END (the batch's gather
//                                 comes before, as data loading does)
//       optimizer_sgd, optimizer_sam  LibTorch SGD or SAMOptimizer over it,
//                                 stepped with a closure on a fixed batch, as
//                                 the Python peers do
// model: one of bench_models.h's (mlp, mlp1024, mlp2048, mlp4096x3, cnn,
// resnet, gpt, llama: the last two the trainer impls only, on random token
// ids); --optimizer sgd (lr 0.01, momentum 0.9), adam (lr 1e-3, basin's
// fused Adam), adam_libtorch (LibTorch's Adam, "fused": false) or adamw (lr
// 1e-3, basin's fused AdamW); SAM rho 0.05. malloc keeps freed memory for
// reuse, as in basin-train (core/base/memory_reuse.h). Prints one line:
//   peer impl=... model=... batch=... threads=... median_ms=... min_ms=... steps=... torch=... peak_rss_mib=...
// (peak_rss_mib: the process's peak resident memory, getrusage's ru_maxrss).
// --batch counts samples: windows of 128 tokens for the gpt and the llama
// (64 for the fortunes models). trainer_sam runs SAM (rho 0.05) or the
// family member --algorithm with the keys --keys (JSON); --lora REGEX
// trains LoRA adapters (r 8, alpha 16) on the projections it names, the
// rest frozen (bench/adapter_costs.py).
//
// Data parallel and sharding (bench/ddp_peers.sh, bench/sharded_peers.sh):
// run under basin-run with --parallel ddp, zero1, zero2, zero3 or hsdp
// (--shard-group-size S), the trainer impls only; --batch is per rank,
// --sync-ascent picks SAM's synced ascent (rank-local by default), --overlap 0
// the gradient sync after backward. Every rank prints its line.
// --mixed-precision 1 runs amp_bf16, and under zero3 and hsdp gathers in bf16
// from fp32 shards (reduce in fp32);
// --checkpointing 1 recomputes every unit's activations in backward;
// --return-freed-memory 1 sets zero3's and hsdp's parallel.return_freed_memory.
//
// --memory-trace N (trainer impls) prints where step N (from 0) peaks, event
// by event: resident memory, tensors and malloc's heap, then the tensors held
// at the most and where each was made (bench/memory_trace.h, and its switches).

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include "basin/algorithms/sam/sam_optimizer.h"
#include "basin/core/base/blas.h"
#include "basin/core/base/memory_reuse.h"
#include "basin/core/base/torch_compat.h"
#include "basin/core/engine/callback.h"
#include "basin/core/model/model.h"
#include "basin/core/optim/fused_adam.h"
#include "basin/core/train/trainer.h"
#include "bench_models.h"
#include "memory_trace.h"

namespace {

using Clock = std::chrono::steady_clock;

double milliseconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024;  // kilobytes on Linux
}

/// What trains: SAM or another member of its family, on adapters or on everything.
struct Method {
  std::string algorithm = "sam";
  std::string keys = "{}";
  std::string lora;  // a targets regex; empty: no adapters
};

struct Parallel {
  std::string mode = "none";
  bool sync_ascent = false;
  bool overlap = true;
  bool mixed_precision = false;  // amp_bf16; zero3: bf16 gathers
  bool checkpointing = false;    // every unit
  bool return_freed_memory = false;  // zero3's and hsdp's, before each backward
  int64_t shard_group_size = 0;  // hsdp's
};

// Times every step from BATCH_START to BATCH_END.
class StepTimer : public basin::Callback {
 public:
  std::string name() const override { return "step_timer"; }
  bool on_batch_start(const basin::State&, basin::Logger&) override { return start_ = Clock::now(), false; }
  bool on_batch_end(const basin::State&, basin::Logger&) override {
    ms.push_back(milliseconds(start_, Clock::now()));
    return false;
  }
  std::vector<double> ms;

 private:
  Clock::time_point start_;
};

basin::Json optimizer_config(const std::string& optimizer) {
  if (optimizer == "adam") return {{"name", "adam"}, {"lr", 1e-3}};
  if (optimizer == "adamw") return {{"name", "adamw"}, {"lr", 1e-3}};
  if (optimizer == "adam_libtorch") return {{"name", "adam"}, {"lr", 1e-3}, {"fused", false}};
  return {{"name", "sgd"}, {"lr", 0.01}, {"momentum", 0.9}};
}

// Random token ids below `vocab` as nanoGPT's train.bin holds them (raw
// uint16), in a file of this process's own.
std::string write_tokens(const std::string& name, int64_t samples, int64_t block, int64_t vocab) {
  const std::string path = "/tmp/basin-bench-" + name + "-" + std::to_string(::getpid()) + ".bin";
  const int64_t count = samples * block + 1;
  const at::Tensor ids = at::randint(0, vocab, {count}, at::TensorOptions(at::kInt)).to(at::kShort);
  std::ofstream file(path, std::ios::binary);
  file.write(static_cast<const char*>(ids.data_ptr()), count * 2);
  if (!file.flush()) throw std::runtime_error("cannot write " + path);
  return path;
}

// `tokens` data for the gpt or the llama, one window per sample; a test
// split of one window, as the synthetic data's (the evaluation after the
// timed steps is not what is measured).
basin::Json token_data(int64_t samples, int64_t batch, int64_t block, int64_t vocab) {
  return {{"name", "tokens"},
          {"train", write_tokens("train", samples, block, vocab)},
          {"test", write_tokens("test", 1, block, vocab)},
          {"block_size", block},
          {"vocab_size", vocab},
          {"batch_size", batch}};
}

std::vector<double> time_trainer(bool sam, const std::string& model, const std::string& optimizer, int64_t batch,
                                 int64_t steps, int threads, const Parallel& parallel, const Method& method,
                                 int64_t memory_trace) {
  const int64_t world = std::getenv("WORLD_SIZE") != nullptr ? std::atoll(std::getenv("WORLD_SIZE")) : 1;
  const int64_t vocab = basin::bench::token_vocab(model);
  const basin::Json data = vocab > 0 ? token_data(batch * steps * world, batch, basin::bench::token_block(model), vocab)
                                     : basin::Json{{"name", "synthetic"},
                                                   {"train_size", batch * steps * world},
                                                   {"test_size", 1},
                                                   {"input_shape", {1, 28, 28}},
                                                   {"num_classes", 10},
                                                   {"batch_size", batch}};
  basin::Json config = {{"seed", 0},
                        {"threads", threads},
                        {"max_steps", steps},
                        {"log_every", 1000000},
                        {"data", data},
                        {"model", basin::bench::model_config(model)},
                        {"optimizer", optimizer_config(optimizer)}};
  if (sam && method.algorithm == "sam") config["algorithms"] = {{"sam", {{"rho", 0.05}, {"sync_ascent", parallel.sync_ascent}}}};
  if (sam && method.algorithm != "sam") config["algorithms"] = {{method.algorithm, basin::Json::parse(method.keys)}};
  if (!method.lora.empty()) config["adapters"] = {{"lora", {{"r", 8}, {"alpha", 16}, {"targets", method.lora}}}};
  if (parallel.mode != "none") config["parallel"] = {{"mode", parallel.mode}, {"overlap", parallel.overlap}};
  if (parallel.mixed_precision) config["precision"] = "amp_bf16";
  if (parallel.mode == "hsdp") config["parallel"]["shard_group_size"] = parallel.shard_group_size;
  if (parallel.mixed_precision && (parallel.mode == "zero3" || parallel.mode == "hsdp")) {
    config["parallel"]["mixed_precision"] = {{"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}, {"buffers", true}};
  }
  if (parallel.checkpointing) config["parallel"]["activation_checkpointing"] = true;
  if (parallel.return_freed_memory) config["parallel"]["return_freed_memory"] = true;
  auto timer = std::make_shared<StepTimer>();
  std::vector<std::shared_ptr<basin::Callback>> callbacks{timer};
  if (memory_trace >= 0) callbacks.push_back(std::make_shared<basin::bench::MemoryTrace>(memory_trace));
  auto remove_tokens = [&] {  // read whole when the trainer is built
    if (vocab == 0) return;
    for (const char* split : {"train", "test"}) std::remove(config["data"][split].get<std::string>().c_str());
  };
  std::unique_ptr<basin::Trainer> trainer;
  try {
    trainer = std::make_unique<basin::Trainer>(config, callbacks);
  } catch (...) {
    remove_tokens();
    throw;
  }
  remove_tokens();
  trainer->fit();
  return timer->ms;
}

std::vector<double> time_optimizer(bool sam, const std::string& model_name, const std::string& optimizer_name,
                                   int64_t batch, int64_t steps) {
  at::manual_seed(0);
  basin::Params params(basin::bench::model_config(model_name), "model");
  auto model = basin::model_registry().create(params.string("name"), params, basin::DatasetInfo{{1, 28, 28}, 10});
  const at::Tensor inputs = at::randn({batch, 1, 28, 28});
  const at::Tensor targets = at::randint(0, 10, {batch}, at::kLong);
  std::shared_ptr<torch::optim::Optimizer> optimizer;
  if (optimizer_name == "adam") {
    optimizer = std::make_shared<basin::FusedAdam>(model->parameters(), torch::optim::AdamOptions(1e-3));
  } else if (optimizer_name == "adamw") {
    optimizer = std::make_shared<basin::FusedAdamW>(model->parameters(), torch::optim::AdamWOptions(1e-3));
  } else if (optimizer_name == "adam_libtorch") {
    optimizer = std::make_shared<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(1e-3));
  } else {
    optimizer = std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  }
  if (sam) {
    basin::SAMOptions options;
    options.rho = 0.05;
    optimizer = std::make_shared<basin::SAMOptimizer>(optimizer, options);
  }
  auto closure = [&] {
    optimizer->zero_grad();
    at::Tensor loss = at::cross_entropy_loss(model->forward(inputs), targets);
    loss.backward();
    return loss.detach();
  };
  std::vector<double> ms;
  for (int64_t i = 0; i < steps; ++i) {
    const auto start = Clock::now();
    optimizer->step(closure);
    ms.push_back(milliseconds(start, Clock::now()));
  }
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  basin::keep_freed_memory_for_reuse();  // as basin-train does; bench/peers.py gives the peers the same
  CLI::App app{"Times basin's training step (one line out, for bench/peers.sh)"};
  std::string impl = "trainer_sam", model = "cnn", optimizer = "sgd";
  int64_t batch = 128, steps = 30, warmup = 3;
  int threads = 1;
  app.add_option("--impl", impl)->check(CLI::IsMember({"trainer_sgd", "trainer_sam", "optimizer_sgd", "optimizer_sam"}));
  app.add_option("--model", model)->check(CLI::IsMember(basin::bench::model_names()));
  app.add_option("--optimizer", optimizer)->check(CLI::IsMember({"sgd", "adam", "adam_libtorch", "adamw"}));
  app.add_option("--batch", batch)->check(CLI::PositiveNumber);
  app.add_option("--steps", steps)->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup)->check(CLI::NonNegativeNumber);
  app.add_option("--threads", threads)->check(CLI::PositiveNumber);
  Parallel parallel;
  app.add_option("--parallel", parallel.mode)->check(CLI::IsMember({"none", "ddp", "zero1", "zero2", "zero3", "hsdp"}));
  app.add_option("--shard-group-size", parallel.shard_group_size, "hsdp's shard groups")->check(CLI::PositiveNumber);
  app.add_option("--sync-ascent", parallel.sync_ascent);
  app.add_option("--overlap", parallel.overlap);
  app.add_option("--mixed-precision", parallel.mixed_precision);
  app.add_option("--checkpointing", parallel.checkpointing);
  app.add_option("--return-freed-memory", parallel.return_freed_memory, "zero3 and hsdp: 1 hands the heap's freed pages back before each backward");
  Method method;
  app.add_option("--algorithm", method.algorithm);
  app.add_option("--keys", method.keys);
  app.add_option("--lora", method.lora);
  int64_t memory_trace = -1;
  app.add_option("--memory-trace", memory_trace,
                 "trainer impls: print where step N (from 0) peaks, event by event (bench/memory_trace.h)");
  CLI11_PARSE(app, argc, argv);
  if ((parallel.mode != "none" || basin::bench::token_vocab(model) > 0) && impl.rfind("trainer", 0) != 0) {
    std::cerr << "--parallel and --model gpt or llama need a trainer impl (trainer_sgd, trainer_sam), not " << impl
              << std::endl;
    return 2;
  }

  basin::set_compute_threads(threads);
  const bool sam = impl.find("sam") != std::string::npos;
  std::vector<double> ms = impl.rfind("trainer", 0) == 0
                               ? time_trainer(sam, model, optimizer, batch, warmup + steps, threads, parallel, method, memory_trace)
                               : time_optimizer(sam, model, optimizer, batch, warmup + steps);
  ms.erase(ms.begin(), ms.begin() + warmup);  // first steps allocate state and buffers
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t n = sorted.size();
  const double median = n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;  // as Python's
  const std::string label = impl + (sam && method.algorithm != "sam" ? ":" + method.algorithm : "") +
                            (method.lora.empty() ? "" : "+lora");
  std::cout << "peer impl=" << label << " model=" << model << " batch=" << batch << " threads=" << threads
            << " median_ms=" << median << " min_ms=" << sorted.front() << " steps=" << ms.size()
            << " torch=" << basin::compat::torch_version() << " peak_rss_mib=" << peak_rss_mib() << std::endl;
  return 0;
}
