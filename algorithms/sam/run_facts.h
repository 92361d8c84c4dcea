#pragma once

#include <cstdint>
#include <memory>

#include <c10/core/Device.h>

namespace torch::nn { class Module; }

namespace basin {

class Communicator;
class LossScaler;
struct State;

/// What a SAM variant may take of the run when its step is made
/// (SAM::prepare): not the engine's whole State, whose optimizer chain,
/// shards and parallel strategy are the step's to read (through its
/// StepView), never a rule's.
struct RunFacts {
  /// The model; null in a loop that names none.
  std::shared_ptr<torch::nn::Module> model;
  int64_t seed = 0;
  int rank = 0;
  int world_size = 1;
  /// The run's length in optimizer steps, as the trainer stops it (0 when
  /// not known). Resolved when the algorithm wraps: a run resumed with
  /// another length resolves it anew.
  int64_t run_length = 0;
  /// Where the model and batches live.
  c10::Device device = c10::Device(c10::kCPU);
  /// The job's ranks (null in one process alone), for what a rule keeps
  /// outside the model (Bi-LoRA averages its auxiliary gradients over them).
  std::shared_ptr<Communicator> communicator;
  /// The grad scaler under fp16, else null.
  std::shared_ptr<LossScaler> scaler;
  /// Whether the closure leaves the model's logits (a loss per sample may
  /// be taken): not under "loss": "model".
  bool outputs_given = true;

  static RunFacts of(const State& state);
};

}  // namespace basin
