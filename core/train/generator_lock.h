#pragma once

#include <mutex>

namespace basin {

/// LibTorch has one global generator per process. Trainers built side by
/// side (ranks as threads) hold this while they seed it and draw from it,
/// so that one's seeding never lands inside another's draws.
inline std::mutex& global_generator_mutex() {
  static std::mutex mutex;
  return mutex;
}

}  // namespace basin
