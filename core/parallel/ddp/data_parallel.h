#pragma once

#include <memory>

#include <ATen/core/Tensor.h>

#include "basin/core/engine/state.h"

namespace torch::nn { class Module; }

namespace basin {

class Communicator;

/// Keeps the gradients of the passes run while it lives rank-local (no
/// all-reduce), as PyTorch's no_sync() does: the state's request says so,
/// SAM keeps it for each of its passes, and the trainer honours it.
class NoGradientSync {
 public:
  explicit NoGradientSync(State& state) : state_(state), previous_(state.request.sync) {
    state.request.sync = GradientSync::kNone;
  }
  ~NoGradientSync() { state_.request.sync = previous_; }
  NoGradientSync(const NoGradientSync&) = delete;
  NoGradientSync& operator=(const NoGradientSync&) = delete;

 private:
  State& state_;
  GradientSync previous_;
};

/// The replicas of data-parallel training over a Communicator: they start
/// equal, and BatchNorm's buffers can be made equal again. Their gradients
/// are averaged by a BucketReducer.
class DataParallel {
 public:
  explicit DataParallel(std::shared_ptr<Communicator> communicator);

  /// Copies rank 0's parameters and buffers to every rank.
  void broadcast_model(torch::nn::Module& model);
  /// Copies rank 0's buffers to every rank (one flat collective; none when
  /// the model has no buffers).
  void broadcast_buffers(torch::nn::Module& model);

 private:
  std::shared_ptr<Communicator> communicator_;
};

}  // namespace basin
