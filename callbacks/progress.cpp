#include "basin/callbacks/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/format.h>

namespace basin {

namespace {

std::string clock_text(double seconds) {
  const auto s = static_cast<int64_t>(std::max(0.0, seconds));
  return s >= 3600 ? fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
                   : fmt::format("{:02}:{:02}", s / 60, s % 60);
}

}  // namespace

Progress::Progress(Params& params)
    : Progress(params.integer("every", 0, 0), isatty(fileno(stderr)) != 0) {}

Progress::Progress(int64_t every, bool terminal) : every_(every), terminal_(terminal) {}

int64_t Progress::total_steps(const State& state) const {
  const int64_t by_epochs = state.max_epochs * state.steps_per_epoch;
  return state.max_steps > 0 ? std::min(state.max_steps, by_epochs) : by_epochs;
}

bool Progress::on_fit_start(const State& state, Logger&) {
  start_ = last_draw_ = Clock::now();
  start_step_ = state.timestamp.step;
  start_samples_ = state.timestamp.samples;
  return false;
}

bool Progress::on_batch_end(const State& state, Logger&) {
  const auto& ts = state.timestamp;
  const auto now = Clock::now();
  const bool draw_bar = terminal_ && now - last_draw_ > std::chrono::milliseconds(100);
  const int64_t every = every_ > 0 ? every_ : state.log_every;
  if (!draw_bar && ts.step % every != 0) return false;
  last_draw_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const int64_t done = ts.step - start_step_;
  const int64_t total = total_steps(state);
  const double throughput = elapsed > 0 ? static_cast<double>(ts.samples - start_samples_) / elapsed : 0.0;
  const double eta = done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(total - ts.step) : 0.0;
  const double loss = state.step_loss.defined() ? state.step_loss.item<double>() : 0.0;
  if (terminal_) {
    constexpr int kWidth = 30;
    const int filled = total > 0 ? static_cast<int>(kWidth * ts.step / total) : 0;
    fmt::print(stderr, "\r[{}{}] epoch {}/{} step {}/{} loss {:.4f} {:.0f} samples/s ETA {}\033[K",
               std::string(filled, '='), std::string(kWidth - filled, ' '), ts.epoch + 1, state.max_epochs,
               ts.step, total, loss, throughput, clock_text(eta));
  } else {
    fmt::print(stderr, "epoch {}/{} step {}/{} loss {:.4f} {:.0f} samples/s ETA {}\n", ts.epoch + 1,
               state.max_epochs, ts.step, total, loss, throughput, clock_text(eta));
  }
  std::fflush(stderr);
  return false;
}

bool Progress::on_epoch_end(const State& state, Logger&) {
  // No accuracy (NaN) where the model's forward needs the targets ("loss": "model").
  const std::string accuracy =
      std::isnan(state.test_accuracy) ? "" : fmt::format("test_accuracy {:.4f} ", state.test_accuracy);
  const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  fmt::print(stderr, "{}epoch {}/{} done: {}test_loss {:.4f} ({} elapsed)\n", terminal_ ? "\r\033[K" : "",
             state.timestamp.epoch + 1, state.max_epochs, accuracy, state.test_loss, clock_text(elapsed));
  return false;
}

bool Progress::on_fit_end(const State&, Logger&) {
  std::fflush(stderr);
  return false;
}

BASIN_REGISTER(callback_registry(), "progress", Progress);

}  // namespace basin
