#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace basin {

/// Each rank's sign of life, for naming the rank a stuck collective waits
/// for. A thread counts a beat in the job's store each second, with how many
/// collectives this rank has started and the last one's name. When a
/// collective fails, explain() reads every rank's beats twice, a few beats
/// apart: a rank whose count stood still has stopped answering (SIGSTOP, a
/// lost machine); a live rank that started fewer collectives is behind.
/// Counts, not clocks, so machines' clocks may differ. Its store is a
/// connection of its own (a client is used by one thread at a time). When
/// the store itself does not answer (rank 0 hosts it), explain() says so
/// after a bounded wait instead of waiting with it.
class PeerWatch {
 public:
  PeerWatch(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size,
            std::chrono::milliseconds beat = std::chrono::seconds(1));
  ~PeerWatch();
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  /// This rank starts collective number `count` (from 1), named `name` (a literal).
  void started(int64_t count, const char* name);
  /// Which ranks this rank's collective number `count` waits for, and why; "" when no rank stands out.
  std::string explain(int64_t count);

 private:
  struct Shared;
  /// Shared with the threads that talk to the store: a stuck store (its host
  /// stopped) may keep one waiting forever, and it is then left behind
  /// rather than waited for, holding what it uses.
  std::shared_ptr<Shared> shared_;
  std::thread thread_;
};

}  // namespace basin
