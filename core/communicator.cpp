// Gloo's process group header is compiled only with this defined.
#define USE_C10D_GLOO 1

#include "basin/core/communicator.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

namespace basin {

void Communicator::count(const std::vector<at::Tensor>& tensors) {
  for (const auto& t : tensors) bytes_moved_ += t.numel() * static_cast<int64_t>(t.element_size());
}

namespace {

class ProcessGroupCommunicator : public Communicator {
 public:
  explicit ProcessGroupCommunicator(c10::intrusive_ptr<c10d::ProcessGroup> group) : group_(std::move(group)) {}

  int rank() const override { return group_->getRank(); }
  int world_size() const override { return group_->getSize(); }

  void all_reduce_sum(std::vector<at::Tensor>& tensors) override { all_reduce(tensors, c10d::ReduceOp::SUM); }
  void all_reduce_max(std::vector<at::Tensor>& tensors) override { all_reduce(tensors, c10d::ReduceOp::MAX); }

  void broadcast(std::vector<at::Tensor>& tensors, int root) override {
    if (world_size() == 1) return;  // nothing to move
    count(tensors);
    for (auto& t : tensors) {
      std::vector<at::Tensor> one{t};
      c10d::BroadcastOptions options;
      options.rootRank = root;
      group_->broadcast(one, options)->wait();
    }
  }

  void barrier() override { group_->barrier()->wait(); }

 private:
  void all_reduce(std::vector<at::Tensor>& tensors, c10d::ReduceOp op) {
    if (world_size() == 1) return;  // the reduction of one rank is itself
    count(tensors);
    c10d::AllreduceOptions options;
    options.reduceOp = op;
    for (auto& t : tensors) {
      std::vector<at::Tensor> one{t};
      group_->allreduce(one, options)->wait();
    }
  }

  c10::intrusive_ptr<c10d::ProcessGroup> group_;
};

}  // namespace

std::shared_ptr<Communicator> make_gloo_communicator(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                     int world_size, std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create();
  options->timeout = timeout;
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, options);
  return std::make_shared<ProcessGroupCommunicator>(std::move(group));
}

}  // namespace basin
