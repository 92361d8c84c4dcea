#include "basin/core/parallel/distributed_strategy.h"

#include <stdexcept>
#include <utility>

#include <torch/nn/module.h>

namespace basin {

DistributedStrategy::DistributedStrategy(std::string mode, std::shared_ptr<Communicator> communicator)
    : mode_(std::move(mode)), communicator_(std::move(communicator)) {}

DistributedStrategy::~DistributedStrategy() = default;

void DistributedStrategy::wrap(State& state, const std::vector<torch::nn::Module*>&, const LocalOptimizerFactory&) {
  state_ = &state;
}

State& DistributedStrategy::state() const {
  if (state_ == nullptr) throw std::logic_error("basin: the distributed strategy is used before wrap()");
  return *state_;
}

std::vector<at::Tensor> DistributedStrategy::whole_parameters() {
  std::vector<at::Tensor> whole;
  for (const auto& p : state().model->parameters()) whole.push_back(p.detach().clone());
  return whole;
}

}  // namespace basin
