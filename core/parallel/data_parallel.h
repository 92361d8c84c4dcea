#pragma once

#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "basin/core/state.h"

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

/// Data-parallel training over a Communicator: replicas start equal and
/// their gradients are averaged after backward, in buckets.
class DataParallel {
 public:
  /// `bucket_bytes`: gradients are flattened into buckets of about this size,
  /// so a model with many small tensors makes few collectives.
  DataParallel(std::shared_ptr<Communicator> communicator, int64_t bucket_bytes);

  /// Copies rank 0's parameters and buffers to every rank.
  void broadcast_model(torch::nn::Module& model);
  /// Copies rank 0's buffers to every rank (one flat collective; none when
  /// the model has no buffers).
  void broadcast_buffers(torch::nn::Module& model);

  /// Replaces the gradient of each of `params` by its mean over ranks (Gloo
  /// has no AVG: a sum, then a division). A parameter without a gradient on
  /// this rank counts as a zero gradient when another rank has one (see
  /// agreed_gradients). `params`: the same tensors on every rank, each once.
  void average_gradients(const std::vector<at::Tensor>& params);

 private:
  std::shared_ptr<Communicator> communicator_;
  int64_t bucket_bytes_;
};

}  // namespace basin
