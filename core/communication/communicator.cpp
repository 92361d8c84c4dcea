// The process group headers are compiled only with these defined (LibTorch
// 2.x's CMake package defines them itself).
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#if defined(BASIN_HAVE_NCCL) && !defined(USE_C10D_NCCL)
#define USE_C10D_NCCL 1
#endif

#include "basin/core/base/torch_compat.h"
#include "basin/core/communication/communicator.h"
#include "basin/core/communication/flat_tensors.h"
#include "basin/core/communication/send_receive_rings.h"
#include "basin/core/communication/serial_worker.h"

#include <algorithm>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>

#include <ATen/Parallel.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#ifdef BASIN_HAVE_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace basin {

void Communicator::count(const std::vector<at::Tensor>& tensors, Pattern pattern) {
  const double n = world_size();
  const double share = (pattern == Pattern::kAllReduce ? 2.0 : 1.0) * (n - 1) / n;
  for (const auto& t : tensors) bytes_moved_ += share * static_cast<double>(t.numel() * t.element_size());
}

namespace {

class Finished : public PendingCollective {
 public:
  void wait() override {}
};

class PendingWork : public PendingCollective {
 public:
  explicit PendingWork(std::vector<c10::intrusive_ptr<c10d::Work>> works) : works_(std::move(works)) {}
  explicit PendingWork(c10::intrusive_ptr<c10d::Work> work) { works_.push_back(std::move(work)); }
  void wait() override {
    for (auto& work : works_) work->wait();
  }

 private:
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
};

/// A collective, then what completes it here (copying staged values into place).
class PendingThen : public PendingCollective {
 public:
  PendingThen(std::unique_ptr<PendingCollective> inner, std::function<void()> then)
      : inner_(std::move(inner)), then_(std::move(then)) {}
  void wait() override {
    inner_->wait();
    if (auto then = std::move(then_)) {
      then_ = nullptr;
      then();
    }
  }

 private:
  std::unique_ptr<PendingCollective> inner_;
  std::function<void()> then_;
};

class PendingJob : public PendingCollective {
 public:
  explicit PendingJob(std::future<void> done) : done_(std::move(done)) {}
  void wait() override { done_.get(); }

 private:
  std::future<void> done_;
};

}  // namespace

std::unique_ptr<PendingCollective> Communicator::start_all_reduce_sum(at::Tensor tensor) {
  std::vector<at::Tensor> one{std::move(tensor)};
  all_reduce_sum(one);  // a communicator without asynchronous collectives finishes here
  return std::make_unique<Finished>();
}

std::unique_ptr<PendingCollective> Communicator::start_reduce_scatter_sum(std::vector<at::Tensor> parts) {
  reduce_scatter_sum(parts);  // a communicator without asynchronous collectives finishes here
  return std::make_unique<Finished>();
}

std::shared_ptr<Communicator> Communicator::split(const std::vector<int>& /*colors*/) {
  throw std::logic_error("this communicator cannot split into groups of its ranks (it was made over a process group "
                         "alone; make_process_group_communicator needs the store and how the group is made)");
}

namespace {

/// How basin drives one kind of process group.
struct BackendTraits {
  /// Run reduce-scatters as a ring of sends and receives (Gloo: its reduce
  /// moves half as much again as a ring, and its reduce-scatter is an all-reduce).
  bool ring_reduce_scatter;
  /// Issue collectives one thread at a time in this process (waiting stays
  /// concurrent). LibTorch 2.11 (seen there; 1.13 has no recorder) records
  /// every Gloo collective in a process-wide flight recorder whose map of
  /// groups is read and written outside its lock (FlightRecorderDetail.hpp,
  /// recordWithResetEnabled): groups issuing from several threads at once,
  /// as ranks run as threads do, corrupt that map and crash. One rank per
  /// process never contends for this lock. Gloo's issue never waits on a
  /// peer, so the lock cannot deadlock (send and receive take it too, for
  /// one rule, though they are not recorded). NCCL's first collective may
  /// wait (it creates the communicator), so NCCL stays free, and NCCL ranks
  /// as threads of one process would still meet the race.
  bool serialize_issue;

  static BackendTraits of(ProcessGroupKind kind) {
    const bool gloo = kind == ProcessGroupKind::kGloo;
    return {/*ring_reduce_scatter=*/gloo, /*serialize_issue=*/gloo};
  }
};

/// `t` as a broadcast may carry it: a broadcast copies bits, so bf16 travels
/// as fp16, the same width (Gloo before 2.x has no bf16, nor int16, and does
/// no arithmetic on a copy).
at::Tensor as_broadcast_bits(const at::Tensor& t) { return t.scalar_type() == at::kBFloat16 ? t.view(at::kHalf) : t; }

std::mutex& issue_mutex() {
  static std::mutex mutex;
  return mutex;
}

class ProcessGroupCommunicator : public Communicator {
 public:
  ProcessGroupCommunicator(c10::intrusive_ptr<compat::CollectiveBackend> group, ProcessGroupKind kind,
                           c10::intrusive_ptr<c10d::Store> store, MakeProcessGroup made)
      : group_(std::move(group)), kind_(kind), traits_(BackendTraits::of(kind)), store_(std::move(store)),
        made_(std::move(made)) {}

  int rank() const override { return group_->getRank(); }
  int world_size() const override { return group_->getSize(); }

  void all_reduce_sum(std::vector<at::Tensor>& tensors) override { all_reduce(tensors, c10d::ReduceOp::SUM); }
  void all_reduce_max(std::vector<at::Tensor>& tensors) override { all_reduce(tensors, c10d::ReduceOp::MAX); }

  std::unique_ptr<PendingCollective> start_all_reduce_sum(at::Tensor tensor) override {
    if (world_size() == 1) return std::make_unique<Finished>();
    std::vector<at::Tensor> one{std::move(tensor)};
    count(one, Pattern::kAllReduce);
    c10d::AllreduceOptions options;
    options.reduceOp = c10d::ReduceOp::SUM;
    return std::make_unique<PendingWork>(issue([&] { return group_->allreduce(one, options); }));
  }

  void broadcast(std::vector<at::Tensor>& tensors, int root) override {
    if (world_size() == 1) return;  // nothing to move
    count(tensors, Pattern::kOneToAllOrAllToOne);
    for (auto& t : tensors) {
      std::vector<at::Tensor> one{as_broadcast_bits(t)};
      c10d::BroadcastOptions options;
      options.rootRank = root;
      issue([&] { return group_->broadcast(one, options); })->wait();
    }
  }

  void reduce_scatter_sum(std::vector<at::Tensor>& parts) override { start_reduce_scatter_sum(parts)->wait(); }

  std::unique_ptr<PendingCollective> start_reduce_scatter_sum(std::vector<at::Tensor> parts) override {
    if (world_size() == 1) return std::make_unique<Finished>();  // the sum of one rank is itself
    count(parts, Pattern::kOneToAllOrAllToOne);
    // Gloo's sends take host memory only (its collectives stage CUDA tensors themselves).
    const bool on_host = std::all_of(parts.begin(), parts.end(), [](const at::Tensor& t) { return t.is_cpu(); });
    if (traits_.ring_reduce_scatter && on_host) {
      // The ring waits on every round: it runs on the worker, one reduce-scatter after another.
      return std::make_unique<PendingJob>(ring_.post([this, parts]() mutable {
        at::init_num_threads();  // the sums take this process's intra-op threads, not OpenMP's default team
        rings::reduce_scatter(*group_, issuer(), parts);
      }));
    }
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    for (int root = 0; root < world_size(); ++root) {  // NCCL's reduce is a pipelined ring already
      if (parts[static_cast<std::size_t>(root)].numel() == 0) continue;
      std::vector<at::Tensor> one{parts[static_cast<std::size_t>(root)]};
      c10d::ReduceOptions options;
      options.reduceOp = c10d::ReduceOp::SUM;
      options.rootRank = root;
      works.push_back(issue([&] { return group_->reduce(one, options); }));
    }
    return std::make_unique<PendingWork>(std::move(works));
  }

  std::unique_ptr<PendingCollective> start_all_gather(std::vector<std::vector<at::Tensor>> pieces) override {
    if (world_size() == 1) return std::make_unique<Finished>();  // this rank's part is every part
    std::vector<at::Tensor> all;
    for (const auto& part : pieces) all.insert(all.end(), part.begin(), part.end());
    count(all, Pattern::kOneToAllOrAllToOne);
    const bool on_host = std::all_of(all.begin(), all.end(), [](const at::Tensor& t) { return t.is_cpu(); });
    if (traits_.ring_reduce_scatter && on_host) {
      // A worker of their own: each rank starts gathers in one order and
      // reduce-scatters in one order, but backward may interleave the two
      // streams differently on different ranks (a gradient missing on one).
      return std::make_unique<PendingJob>(gather_ring_.post([this, pieces]() mutable {
        at::init_num_threads();
        rings::all_gather(*group_, issuer(), pieces);
      }));
    }
    // NCCL's broadcast is a pipelined ring: one per part, staged flat, copied into the pieces once done.
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    std::vector<std::pair<at::Tensor, std::size_t>> staged;
    for (int root = 0; root < world_size(); ++root) {
      const auto r = static_cast<std::size_t>(root);
      if (numel_of(pieces[r]) == 0) continue;
      const at::Tensor flat = root == rank() ? at::flatten_dense_tensors(pieces[r])
                                             : at::empty({numel_of(pieces[r])}, pieces[r].front().options());
      std::vector<at::Tensor> one{as_broadcast_bits(flat)};
      c10d::BroadcastOptions options;
      options.rootRank = root;
      works.push_back(issue([&] { return group_->broadcast(one, options); }));
      if (root != rank()) staged.emplace_back(flat, r);
    }
    return std::make_unique<PendingThen>(std::make_unique<PendingWork>(std::move(works)), [staged, pieces] {
      for (const auto& [flat, r] : staged) copy_from_flat(flat, pieces[r]);
    });
  }

  void barrier() override {
    issue([&] { return group_->barrier(); })->wait();
  }

  std::shared_ptr<Communicator> split(const std::vector<int>& colors) override {
    if (!store_ || !made_) return Communicator::split(colors);
    if (static_cast<int>(colors.size()) != world_size()) {
      throw std::invalid_argument("split: " + std::to_string(colors.size()) + " colors for " +
                                  std::to_string(world_size()) + " ranks");
    }
    // The ranks of one color meet under a prefix of their own, new for every
    // split (every rank splits in one order).
    const int color = colors[static_cast<std::size_t>(rank())];
    int members = 0;
    int mine = 0;
    for (int r = 0; r < world_size(); ++r) {
      if (colors[static_cast<std::size_t>(r)] != color) continue;
      if (r == rank()) mine = members;
      ++members;
    }
    const std::string prefix = "basin/split/" + std::to_string(splits_++) + "/" + std::to_string(color);
    auto store = c10::make_intrusive<c10d::PrefixStore>(prefix, store_);
    return std::make_shared<ProcessGroupCommunicator>(made_(store, mine, members), kind_, store, made_);
  }

 private:
  template <typename Collective>
  c10::intrusive_ptr<c10d::Work> issue(Collective&& collective) {
    if (!traits_.serialize_issue) return collective();
    std::lock_guard<std::mutex> lock(issue_mutex());
    return collective();
  }

  rings::Issue issuer() {
    return [this](const std::function<c10::intrusive_ptr<c10d::Work>()>& collective) { return issue(collective); };
  }

  void all_reduce(std::vector<at::Tensor>& tensors, c10d::ReduceOp op) {
    if (world_size() == 1) return;  // the reduction of one rank is itself
    count(tensors, Pattern::kAllReduce);
    c10d::AllreduceOptions options;
    options.reduceOp = op;
    for (auto& t : tensors) {
      std::vector<at::Tensor> one{t};
      issue([&] { return group_->allreduce(one, options); })->wait();
    }
  }

  c10::intrusive_ptr<compat::CollectiveBackend> group_;
  ProcessGroupKind kind_;
  BackendTraits traits_;
  c10::intrusive_ptr<c10d::Store> store_;  // where the ranks met, and their groups meet (null: no splits)
  MakeProcessGroup made_;
  int splits_ = 0;
  SerialWorker ring_;         // reduce-scatters; destroyed first: its last job still uses the group
  SerialWorker gather_ring_;  // all-gathers
};

}  // namespace

std::shared_ptr<Communicator> make_process_group_communicator(c10::intrusive_ptr<compat::CollectiveBackend> group,
                                                              ProcessGroupKind kind,
                                                              c10::intrusive_ptr<c10d::Store> store,
                                                              MakeProcessGroup made) {
  return std::make_shared<ProcessGroupCommunicator>(std::move(group), kind, std::move(store), std::move(made));
}

std::shared_ptr<Communicator> make_gloo_communicator(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                     int world_size, std::chrono::milliseconds timeout,
                                                     const GlooDevice& device) {
  auto options = c10d::ProcessGroupGloo::Options::create();
  options->timeout = timeout;
  options->devices.push_back(device.interface.empty()
                                 ? c10d::ProcessGroupGloo::createDeviceForHostname(device.address)
                                 : c10d::ProcessGroupGloo::createDeviceForInterface(device.interface));
  MakeProcessGroup made = [options](const c10::intrusive_ptr<c10d::Store>& over, int r, int n) {
    return c10::intrusive_ptr<compat::CollectiveBackend>(c10::make_intrusive<c10d::ProcessGroupGloo>(over, r, n, options));
  };
  return make_process_group_communicator(made(store, rank, world_size), ProcessGroupKind::kGloo, store, made);
}

bool nccl_available() {
#ifdef BASIN_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

std::shared_ptr<Communicator> make_nccl_communicator(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                     int world_size, std::chrono::milliseconds timeout) {
#ifdef BASIN_HAVE_NCCL
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  MakeProcessGroup made = [options](const c10::intrusive_ptr<c10d::Store>& over, int r, int n) {
    return c10::intrusive_ptr<compat::CollectiveBackend>(c10::make_intrusive<c10d::ProcessGroupNCCL>(over, r, n, options));
  };
  return make_process_group_communicator(made(store, rank, world_size), ProcessGroupKind::kNccl, store, made);
#else
  (void)store, (void)rank, (void)world_size, (void)timeout;
  throw std::runtime_error("this basin was built without NCCL (Debian's LibTorch is CPU-only); use Gloo on CPU");
#endif
}

}  // namespace basin
