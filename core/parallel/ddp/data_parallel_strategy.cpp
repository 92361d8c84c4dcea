#include "basin/core/parallel/ddp/data_parallel_strategy.h"

#include <algorithm>
#include <utility>

#include <torch/nn/module.h>

#include "basin/core/config/config.h"
#include "basin/core/optim/optimizer_state.h"
#include "basin/core/parallel/ddp/bucket_reducer.h"
#include "basin/core/parallel/ddp/data_parallel.h"

namespace basin {

DataParallelStrategy::DataParallelStrategy(std::shared_ptr<Communicator> communicator, Options options,
                                           std::string mode)
    : DistributedStrategy(std::move(mode), communicator),
      options_(options),
      replicas_(std::make_unique<DataParallel>(std::move(communicator))) {}

DataParallelStrategy::~DataParallelStrategy() = default;

const std::vector<std::string>& DataParallelStrategy::option_keys() {
  static const std::vector<std::string> keys = {"bucket_mb", "overlap"};
  return keys;
}

DataParallelStrategy::Options DataParallelStrategy::options_from_config(Params& parallel) {
  Options options;
  options.bucket_bytes = static_cast<int64_t>(parallel.positive("bucket_mb", 25) * (1 << 20));
  options.overlap = parallel.boolean("overlap", true);
  return options;
}

void DataParallelStrategy::wrap(State& state, const std::vector<torch::nn::Module*>& units,
                                const LocalOptimizerFactory& make_local) {
  DistributedStrategy::wrap(state, units, make_local);
  replicas_->broadcast_model(*state.model);  // replicas start from rank 0's weights and buffers
}

BucketReducer& DataParallelStrategy::reducer() {
  // Over the parameters the optimizer steps now (the same on every rank):
  // built at the first all-reduce, so a zero1 run that never needs one holds
  // no buckets, and again when they change (a group added).
  std::vector<at::Tensor> params = unique_parameters(*state().optimizer);
  const bool same = reducer_ && reducer_->parameters().size() == params.size() &&
                    std::equal(params.begin(), params.end(), reducer_->parameters().begin(),
                               [](const at::Tensor& a, const at::Tensor& b) { return a.is_same(b); });
  if (!same) {
    BucketReducer::Options reducer_options;
    reducer_options.bucket_bytes = options_.bucket_bytes;
    reducer_options.overlap = options_.overlap;
    reducer_options.owners = owners(params);
    reducer_ = std::make_unique<BucketReducer>(communicator(), std::move(params), reducer_options);
  }
  return *reducer_;
}

void DataParallelStrategy::prepare_gradient_sync(GradientSync sync) {
  if (reduces_to_owners_after_backward(sync)) return;
  reducer().prepare_for_backward();
}

void DataParallelStrategy::finish_gradient_sync(GradientSync sync) {
  if (reduces_to_owners_after_backward(sync)) {
    reduce_to_owners();
    return;
  }
  reducer_->finish_backward();  // prepare_gradient_sync built it
}

void DataParallelStrategy::after_step() { replicas_->broadcast_buffers(*state().model); }

}  // namespace basin
