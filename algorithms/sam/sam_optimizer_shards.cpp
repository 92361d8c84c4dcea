// Where the step's tensors are when the base steps shards (zero1-3, hsdp):
// what this rank does with each parameter, whether the ascent's gradients
// are whole here, and where collectives run, each decided by where the
// parameters' tensors are placed, never by the mode. The rules' arithmetic
// over them is StepView's.
#include "basin/algorithms/sam/sam_optimizer.h"

#include <ATen/ATen.h>

#include "basin/core/sharding/sharded_parameters.h"

namespace basin {

ParameterShare SAMOptimizer::share_of(const at::Tensor& param) const {
  if (shards_ == nullptr) return {};
  return {shards_->placement(param), shards_->owns(param), shards_->counted_here(param), shards_->first_row(param)};
}

bool SAMOptimizer::ascent_sharded() const {
  return !synced_gradients_whole_ && options_.sync_ascent && rule_->ascent_pass();
}

c10::Device SAMOptimizer::device() const {
  if (shards_ != nullptr) return shards_->device();
  for (const auto& group : param_groups_) {
    if (!group.params().empty()) return group.params().front().device();
  }
  return c10::Device(c10::kCPU);
}

}  // namespace basin
