#pragma once

#include <chrono>
#include <cstdio>

#include "basin/core/engine/callback.h"

namespace basin {

/// Shows training progress on stderr: a live bar with loss, throughput and
/// ETA on a terminal, plain lines every `every` steps otherwise (logs, CI);
/// `every` 0 follows the run's log_every.
class Progress : public Callback {
 public:
  explicit Progress(Params& params);
  Progress(int64_t every, bool terminal);

  std::string name() const override { return "progress"; }
  bool on_fit_start(const State& state, Logger& logger) override;
  bool on_batch_end(const State& state, Logger& logger) override;
  bool on_epoch_end(const State& state, Logger& logger) override;
  bool on_fit_end(const State& state, Logger& logger) override;

 private:
  using Clock = std::chrono::steady_clock;
  int64_t total_steps(const State& state) const;

  int64_t every_;
  bool terminal_;
  Clock::time_point start_;
  Clock::time_point last_draw_;
  int64_t start_step_ = 0;
  int64_t start_samples_ = 0;
};

}  // namespace basin
