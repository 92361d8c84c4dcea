#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "basin/core/parallel/communicator.h"

namespace basin::test {

/// Runs `body(rank, communicator)` on `world` threads joined by a Gloo group
/// over a HashStore, as PyTorch's own c10d tests do; rethrows the first
/// exception a rank threw. Collectives time out after 60 s, so a bug fails
/// instead of hanging.
inline void run_ranks(int world, const std::function<void(int, std::shared_ptr<Communicator>)>& body) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        body(rank, make_gloo_communicator(store, rank, world, std::chrono::seconds(60)));
      } catch (...) {
        errors[static_cast<std::size_t>(rank)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace basin::test
