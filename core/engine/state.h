#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "basin/core/data/batch.h"
#include "basin/core/engine/pass_request.h"

namespace torch {
namespace nn { class Module; }
namespace optim { class Optimizer; }
}  // namespace torch

namespace basin {

class Communicator;
class LossScaler;
class Scheduler;
class ShardedParameters;

/// Which pass of the step the closure is running: a plain step runs it once,
/// SAM runs an ascent pass at w and a descent pass at w + e(w).
enum class Pass { kPlain, kAscent, kDescent };
const char* pass_name(Pass pass);

enum class Precision { kFp32, kAmpBf16, kAmpFp16 };

/// Progress through training. `step` counts optimizer steps, skipped ones included.
struct Timestamp {
  int64_t epoch = 0;           // current epoch, from 0
  int64_t step = 0;            // optimizer steps completed
  int64_t batch_in_epoch = 0;  // steps completed in this epoch (of another size before a resharded resume)
  int64_t samples = 0;         // training samples consumed
};

/// Everything algorithms and callbacks may look at, in one place.
///
/// The trainer fills it from the config; a hand-written loop fills what it
/// has. Algorithms may change it (SAM replaces `optimizer`); callbacks only read.
struct State {
  std::shared_ptr<torch::nn::Module> model;
  /// Runs `model` on inputs and returns its outputs (torch::nn::Module has
  /// no virtual forward): what an algorithm that runs the model itself
  /// (MESA's averaged weights) calls. The trainer sets it; a hand-written
  /// loop sets its own, or leaves it empty where nothing needs it.
  std::function<at::Tensor(const at::Tensor&)> forward;
  std::shared_ptr<torch::optim::Optimizer> optimizer;
  std::vector<std::shared_ptr<Scheduler>> schedulers;
  /// Loss scaling slot, filled by the grad_scaler callback under amp_fp16.
  std::shared_ptr<LossScaler> scaler;
  Precision precision = Precision::kFp32;
  /// Seed of the run: algorithms that draw random numbers derive from it.
  int64_t seed = 0;

  Timestamp timestamp;
  int64_t max_epochs = 1;
  int64_t max_steps = 0;        // 0: no limit besides max_epochs
  int64_t steps_per_epoch = 0;  // known once the data is
  int64_t train_size = 0;       // samples in the training set, known once the data is
  int64_t log_every = 50;       // steps between metric records

  Batch batch;       // the whole batch of this step
  /// What the closure runs on, returns and syncs in this pass (the whole
  /// batch, its mean loss, gradients averaged where they are stepped,
  /// unless an algorithm asks for part of it, a forward alone, each
  /// sample's loss or rank-local gradients); the closure splits it into
  /// microbatches.
  PassRequest request;
  Batch microbatch;  // the microbatch the closure is running on
  int64_t microbatch_index = 0;
  int64_t microbatch_count = 1;
  /// The pass's samples over this microbatch's: its mean loss is divided by
  /// it, so the microbatches' losses add up to the pass's mean (the
  /// microbatch count when they are equal).
  double microbatch_divisor = 1;
  at::Tensor outputs;
  /// Whether the closure leaves the model's logits in `outputs`: not under
  /// "loss": "model", where the model returns its loss instead.
  bool outputs_given = true;
  /// Whether the targets are token sequences [n, T] and the outputs logits
  /// [n, T, V] (a language model), not one class per sample.
  bool outputs_per_token = false;
  at::Tensor loss;   // loss of the current microbatch, already divided by microbatch_divisor
  Pass pass = Pass::kPlain;

  at::Tensor step_loss;        // training loss the last step reported (detached)
  int64_t skipped_steps = 0;   // steps whose update was skipped (overflow)

  double test_accuracy = -1;   // last evaluation; -1 before the first
  double test_loss = -1;

  int rank = 0;
  int world_size = 1;
  /// The optimizer's shards under zero1, zero2 and zero3, as the parallel
  /// mode's strategy made them (rules ask them where each parameter's
  /// tensors live, for global norms and owners);
  /// null when every rank steps every parameter. Not owned: the optimizer
  /// chain in `optimizer` holds them, and they live as long as it does.
  ShardedParameters* shards = nullptr;
  /// The parallel mode that placed them ("zero3"), for messages; empty in a
  /// hand loop, whose optimizer says where its parameters are.
  std::string parallel_mode;
  /// The job's ranks; null in a single process.
  std::shared_ptr<Communicator> communicator;
  /// Where the model and batches live (cuda:LOCAL_RANK for a CUDA job).
  c10::Device device = c10::Device(c10::DeviceType::CPU);

  /// Set by the engine when a callback asks to stop; the loop ends after the batch.
  bool stop_requested = false;

  /// Where the run writes its files (checkpoints, metrics); empty: the
  /// current folder. basin-train sets it to its --run-dir.
  std::string run_dir;
};

}  // namespace basin
