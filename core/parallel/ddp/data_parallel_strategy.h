#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "basin/core/parallel/distributed_strategy.h"

namespace basin {

class BucketReducer;
class DataParallel;
class Params;

/// "ddp": every rank holds the whole model and optimizer; replicas start
/// from rank 0's, each pass's gradients are averaged over ranks by a
/// BucketReducer (from backward's hooks when it overlaps), and buffers
/// follow rank 0's after each step. The ZeRO modes build on it.
class DataParallelStrategy : public DistributedStrategy {
 public:
  struct Options {
    int64_t bucket_bytes = 25 << 20;  // about, per gradient bucket
    bool overlap = true;              // buckets start from backward's hooks
  };
  /// The "parallel" section's gradient-sync keys, "bucket_mb" and "overlap",
  /// which every mode reads (zero3 takes "overlap"; one process ignores both).
  static const std::vector<std::string>& option_keys();
  static Options options_from_config(Params& parallel);
  DataParallelStrategy(std::shared_ptr<Communicator> communicator, Options options, std::string mode = "ddp");
  ~DataParallelStrategy() override;

  void wrap(State& state, const std::vector<torch::nn::Module*>& units,
            const LocalOptimizerFactory& make_local) override;
  void prepare_gradient_sync(GradientSync sync) override;
  void finish_gradient_sync(GradientSync sync) override;
  void after_step() override;

 protected:
  const Options& options() const { return options_; }
  DataParallel& replicas() { return *replicas_; }
  /// zero2: each parameter's owner, so that the buckets reduce-scatter to
  /// owners; empty for an all-reduce.
  virtual std::vector<int> owners(const std::vector<at::Tensor>& /*params*/) const { return {}; }
  /// zero1's descent: its gradients go to their owners once backward has
  /// ended (reduce_to_owners), not through the buckets.
  virtual bool reduces_to_owners_after_backward(GradientSync /*sync*/) const { return false; }
  virtual void reduce_to_owners() {}

 private:
  /// The reducer over the parameters the optimizer steps now.
  BucketReducer& reducer();

  Options options_;
  std::unique_ptr<DataParallel> replicas_;
  std::unique_ptr<BucketReducer> reducer_;  // built at the first all-reduce
};

}  // namespace basin
