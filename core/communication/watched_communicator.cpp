#include "basin/core/communication/watched_communicator.h"

#include <atomic>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>

#include <c10/util/Exception.h>

#include "basin/core/communication/peer_watch.h"

namespace basin {

namespace {

class WatchedCommunicator : public Communicator {
 public:
  WatchedCommunicator(std::shared_ptr<Communicator> inner, std::shared_ptr<PeerWatch> watch,
                      std::chrono::milliseconds timeout)
      : inner_(std::move(inner)), watch_(std::move(watch)), timeout_(timeout) {}

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  double bytes_moved() const override { return inner_->bytes_moved(); }

  void all_reduce_sum(std::vector<at::Tensor>& tensors) override {
    run("all_reduce_sum", [&] { inner_->all_reduce_sum(tensors); });
  }
  std::unique_ptr<PendingCollective> start_all_reduce_sum(at::Tensor tensor) override {
    return start("all_reduce_sum", [&] { return inner_->start_all_reduce_sum(std::move(tensor)); });
  }
  void all_reduce_max(std::vector<at::Tensor>& tensors) override {
    run("all_reduce_max", [&] { inner_->all_reduce_max(tensors); });
  }
  void broadcast(std::vector<at::Tensor>& tensors, int root) override {
    run("broadcast", [&] { inner_->broadcast(tensors, root); });
  }
  void reduce_scatter_sum(std::vector<at::Tensor>& parts) override {
    run("reduce_scatter_sum", [&] { inner_->reduce_scatter_sum(parts); });
  }
  std::unique_ptr<PendingCollective> start_reduce_scatter_sum(std::vector<at::Tensor> parts) override {
    return start("reduce_scatter_sum", [&] { return inner_->start_reduce_scatter_sum(std::move(parts)); });
  }
  std::unique_ptr<PendingCollective> start_all_gather(std::vector<std::vector<at::Tensor>> pieces) override {
    return start("all_gather", [&] { return inner_->start_all_gather(std::move(pieces)); });
  }
  void barrier() override {
    run("barrier", [&] { inner_->barrier(); });
  }
  /// The group's own collectives are not numbered for the watch (it compares
  /// this communicator's counts across every rank); they fail after the
  /// same timeout, with the backend's words.
  std::shared_ptr<Communicator> split(const std::vector<int>& colors) override { return inner_->split(colors); }

  /// Rethrows `error` of collective `name` #count as one that names the rank it waited for.
  [[noreturn]] void explain(const char* name, int64_t count, const std::exception& error) const {
    std::string what = error.what();
    if (const auto* torch_error = dynamic_cast<const c10::Error*>(&error)) what = torch_error->what_without_backtrace();
    what = what.substr(0, what.find('\n'));
    // One reading per failure: a collective that fails takes the ones in
    // flight with it (every bucket, every unit), and each would wait 2.5 s.
    std::string waited_for;
    {
      std::lock_guard<std::mutex> lock(explained_mutex_);
      if (!explanation_) explanation_ = watch_->explain(count);
      waited_for = *explanation_;
    }
    std::ostringstream message;
    message << name << " #" << count << " failed on rank " << rank() << " (parallel.timeout_seconds "
            << static_cast<double>(timeout_.count()) / 1000 << "): " << (waited_for.empty() ? "" : waited_for + "; ")
            << "the backend said: " << what;
    throw std::runtime_error(message.str());
  }

 private:
  class Watched : public PendingCollective {
   public:
    Watched(std::unique_ptr<PendingCollective> inner, const WatchedCommunicator* owner, const char* name, int64_t count)
        : inner_(std::move(inner)), owner_(owner), name_(name), count_(count) {}
    void wait() override {
      try {
        inner_->wait();
      } catch (const std::exception& error) {
        owner_->explain(name_, count_, error);
      }
    }

   private:
    std::unique_ptr<PendingCollective> inner_;
    const WatchedCommunicator* owner_;  // outlives what it started, as any communicator must
    const char* name_;
    int64_t count_;
  };

  int64_t next(const char* name) {
    const int64_t count = ++count_;
    watch_->started(count, name);
    return count;
  }

  template <typename Body>
  void run(const char* name, Body&& body) {
    const int64_t count = next(name);
    try {
      body();
    } catch (const std::exception& error) {
      explain(name, count, error);
    }
  }

  template <typename Body>
  std::unique_ptr<PendingCollective> start(const char* name, Body&& body) {
    const int64_t count = next(name);
    try {
      return std::make_unique<Watched>(body(), this, name, count);
    } catch (const std::exception& error) {
      explain(name, count, error);
    }
  }

  std::shared_ptr<Communicator> inner_;
  std::shared_ptr<PeerWatch> watch_;
  std::chrono::milliseconds timeout_;
  std::atomic<int64_t> count_{0};
  mutable std::mutex explained_mutex_;
  mutable std::optional<std::string> explanation_;  // the first failure's reading, for every later one
};

}  // namespace

std::shared_ptr<Communicator> watch_collectives(std::shared_ptr<Communicator> inner, std::shared_ptr<PeerWatch> watch,
                                                std::chrono::milliseconds timeout) {
  return std::make_shared<WatchedCommunicator>(std::move(inner), std::move(watch), timeout);
}

}  // namespace basin
