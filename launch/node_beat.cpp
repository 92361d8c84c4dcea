// A launcher's beats in the launchers' store, and the connection to that
// store (node_beat.h).

#include "basin/launch/node_beat.h"

#include <exception>

namespace basin::launch {

namespace {

constexpr std::chrono::seconds kBeatInterval{1};

}  // namespace

std::unique_ptr<StoreClient> connect(const JobShape& shape, std::chrono::milliseconds answer_within) {
  return std::make_unique<StoreClient>(shape.master_addr, shape.master_port, shape.join_timeout, answer_within);
}

// A beat unanswered within its interval gives its connection up and the next
// one connects afresh: the beat thread never waits out a long timeout (nor
// does ~Beat), and node 0's store still counts a beat it read late.
Beat::Beat(const JobShape& shape, const std::string& counter) : store_(connect(shape, kBeatInterval)), counter_(counter) {
  // The first beat lands before the launcher says it is ready (a ready node
  // has beaten); a store slow to answer gets the window to take it.
  for (const auto deadline = std::chrono::steady_clock::now() + shape.lost_after;;) {
    try {
      store_->add(counter_, 1);
      break;
    } catch (const std::exception&) {
      if (std::chrono::steady_clock::now() > deadline) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // a call that fails at once must not spin here
    }
  }
  thread_ = std::thread([this] { run(); });
}

Beat::~Beat() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Beat::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, kBeatInterval, [this] { return stopping_; })) {
    try {
      store_->add(counter_, 1);
    } catch (const std::exception&) {
      // node 0 is gone, or its store did not answer in time: the main thread finds out and says so
    }
  }
}

}  // namespace basin::launch
