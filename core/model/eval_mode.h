#pragma once

#include <torch/nn/module.h>

namespace basin {

/// Eval mode for a scope; the module's own mode again after, however the scope ends.
class EvalModeScope {
 public:
  explicit EvalModeScope(torch::nn::Module& module) : module_(module), training_(module.is_training()) {
    module_.eval();
  }
  ~EvalModeScope() { module_.train(training_); }
  EvalModeScope(const EvalModeScope&) = delete;
  EvalModeScope& operator=(const EvalModeScope&) = delete;

 private:
  torch::nn::Module& module_;
  bool training_;
};

}  // namespace basin
