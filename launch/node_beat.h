#pragma once

// A launcher's sign of life in the launchers' TCPStore: Beat adds to its
// counter once a second (store_coordinator.cpp names the keys and reads them),
// and connect() opens a connection to node 0's store, as the beats and the
// coordinator each do. Internal to store_coordinator.cpp: not installed.

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "basin/launch/coordinator.h"

namespace basin::launch {

/// A connection to the launchers' store at --master-addr:--master-port, its
/// host when server (node 0).
c10::intrusive_ptr<c10d::TCPStore> connect(const JobShape& shape, bool server);

/// A launcher's beats, from a thread of their own with a connection of
/// their own: a launcher busy stopping its ranks, or blocked on a slow
/// terminal, still beats.
class Beat {
 public:
  Beat(const JobShape& shape, const std::string& counter);
  ~Beat();

 private:
  void run();

  c10::intrusive_ptr<c10d::TCPStore> store_;
  std::string counter_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace basin::launch
