// Fuzz target for checkpoint loading: the bytes of a checkpoint file whose
// checksum passed (accidental damage stops at the checksum; this is what a
// crafted or buggy file reaches) go through parse_checkpoint_bytes and
// restore_checkpoint into a small run: a Linear and a BatchNorm, Adam, a
// cosine schedule, the grad scaler and a loop part.
//
// The contract basin-train relies on: whatever the bytes, the only way out
// is success or a CheckpointError (which it reports as bad input, exit 2).
// Anything else escaping, a crash or a sanitizer report is a finding.
//
// BASIN_CHECKPOINT_FUZZ_SEED=FILE writes a valid checkpoint of that run to
// FILE first (how fuzz/corpus/checkpoint/valid was made).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>

#include "basin/core/checkpoint/checkpoint.h"
#include "basin/core/checkpoint/checkpoint_file.h"
#include "basin/core/config/config.h"
#include "basin/core/engine/callback.h"
#include "basin/core/engine/engine.h"
#include "basin/core/optim/scheduler.h"

namespace {

struct Run {
  basin::State state;
  std::unique_ptr<basin::Engine> engine;
  int64_t loop_counter = 0;

  Run() {
    at::manual_seed(0);
    auto model = torch::nn::Sequential(torch::nn::Linear(4, 3), torch::nn::BatchNorm1d(3));
    state.model = model.ptr();
    state.optimizer = std::make_shared<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(0.01));
    basin::Params schedule(basin::Json{{"name", "cosine_warmup"}, {"warmup", 2}}, "schedulers[0]");
    state.schedulers.push_back(basin::make_scheduler(schedule));
    state.schedulers.back()->attach(*state.optimizer, 10);
    engine = std::make_unique<basin::Engine>(state);
    basin::Params scaler(basin::Json::object(), "callbacks.grad_scaler");
    engine->add_callback(basin::callback_registry().create("grad_scaler", scaler));
    engine->add_checkpoint_part({"loop", [this] { return c10::IValue(loop_counter); },
                                 [this](const c10::IValue& saved) {
                                   if (!saved.isInt()) throw std::invalid_argument("loop is not an integer");
                                   loop_counter = saved.toInt();
                                 }});
  }

  void train_one_step() {
    state.optimizer->zero_grad();
    auto* module = dynamic_cast<torch::nn::SequentialImpl*>(state.model.get());
    module->forward(at::randn({8, 4})).square().mean().backward();
    state.optimizer->step();
    ++state.timestamp.step;
  }
};

void write_seed(const char* path) {
  Run run;
  run.train_one_step();
  const std::vector<char> bytes = torch::jit::pickle_save(basin::capture_checkpoint(*run.engine));
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool seeded = [] {
    if (const char* path = std::getenv("BASIN_CHECKPOINT_FUZZ_SEED")) write_seed(path);
    return true;
  }();
  (void)seeded;
  const std::vector<char> bytes(reinterpret_cast<const char*>(data), reinterpret_cast<const char*>(data) + size);
  Run run;
  try {
    basin::restore_checkpoint(*run.engine, basin::parse_checkpoint_bytes(bytes, "fuzz input"));
  } catch (const basin::CheckpointError&) {
    return 0;  // refused cleanly, naming what is wrong
  } catch (const std::exception& error) {
    std::fprintf(stderr, "checkpoint fuzz: an error other than CheckpointError escaped: %.600s\n", error.what());
    std::abort();
  }
  // Restored: the run must still be usable.
  run.train_one_step();
  return 0;
}
