#pragma once

// A launcher's sign of life in the launchers' store: Beat adds to its counter
// once a second (store_coordinator.cpp names the keys and reads them), and
// connect() opens a connection to node 0's store, as the beats and the
// coordinator each do. Internal to store_coordinator.cpp: not installed.

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "basin/launch/coordinator.h"
#include "basin/launch/launcher_store.h"

namespace basin::launch {

/// A connection to the launchers' store at --master-addr:--master-port
/// (within --join-timeout: node 0 may start later), whose calls give up after
/// `answer_within`.
std::unique_ptr<StoreClient> connect(const JobShape& shape, std::chrono::milliseconds answer_within);

/// A launcher's beats, from a thread of their own with a connection of
/// their own: a launcher busy stopping its ranks, or blocked on a slow
/// terminal or a slow store call, still beats.
class Beat {
 public:
  Beat(const JobShape& shape, const std::string& counter);
  ~Beat();

 private:
  void run();

  std::unique_ptr<StoreClient> store_;
  std::string counter_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace basin::launch
