#pragma once

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "basin/core/base/state_dict.h"
#include "basin/core/engine/event.h"
#include "basin/core/engine/logger.h"
#include "basin/core/engine/state.h"

namespace basin {

class Algorithm;
class Callback;
class Params;

/// An algorithm or callback threw: the message names it and the event.
class EngineError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Runs algorithms, callbacks and loggers at each event of a loop.
///
/// One Boost.Signals2 signal per event. Order within an event: algorithms in
/// registration order (reversed on AFTER_* events), then callbacks, then
/// loggers. The trainer drives it; a hand-written loop can too, by calling
/// `run(Event::...)` at its own points.
class Engine {
 public:
  explicit Engine(State& state);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  void add_algorithm(std::shared_ptr<Algorithm> algorithm);
  /// Creates each entry of a config's "algorithms" object by name, in order.
  void add_algorithms(Params& algorithms);
  /// Calls `callback->install(state)`, then subscribes it.
  void add_callback(std::shared_ptr<Callback> callback);
  void add_logger(std::shared_ptr<LoggerDestination> destination);

  /// A piece of a checkpoint that lives outside the state, algorithms and
  /// callbacks: the trainer's position in its epoch, the run's config.
  struct CheckpointPart {
    std::string name;
    std::function<c10::IValue()> save;
    std::function<void(const c10::IValue&)> load;
  };
  void add_checkpoint_part(CheckpointPart part) { checkpoint_parts_.push_back(std::move(part)); }
  const std::vector<CheckpointPart>& checkpoint_parts() const { return checkpoint_parts_; }

  /// Runs `event`. Returns true when a callback asked to stop, which also
  /// sets `state.stop_requested`.
  bool run(Event event);

  /// "name/event" for each kind of algorithm application so far, in the
  /// order of their first time (an algorithm acting every step adds one entry,
  /// not one a step, so the trace stays small however long the run).
  const std::vector<std::string>& trace() const { return trace_; }
  /// How many times "name/event" has been applied.
  int64_t applications(const std::string& entry) const {
    const auto found = applications_.find(entry);
    return found == applications_.end() ? 0 : found->second;
  }

  State& state() { return state_; }
  Logger& logger() { return logger_; }
  const std::vector<std::shared_ptr<Algorithm>>& algorithms() const { return algorithms_; }
  const std::vector<std::shared_ptr<Callback>>& callbacks() const { return callbacks_; }
  const std::vector<std::shared_ptr<LoggerDestination>>& loggers() const { return loggers_; }

 private:
  struct Signals;

  State& state_;
  Logger logger_;
  std::unique_ptr<Signals> signals_;
  std::vector<std::shared_ptr<Algorithm>> algorithms_;
  std::vector<std::shared_ptr<Callback>> callbacks_;
  std::vector<std::shared_ptr<LoggerDestination>> loggers_;
  std::vector<CheckpointPart> checkpoint_parts_;
  std::vector<std::string> trace_;
  std::unordered_map<std::string, int64_t> applications_;
  bool stop_ = false;
};

}  // namespace basin
