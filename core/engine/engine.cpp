#include "basin/core/engine/engine.h"

#include <array>

#include <boost/signals2/signal.hpp>
#include <c10/util/Exception.h>

#include "basin/core/base/console.h"
#include "basin/core/config/config.h"
#include "basin/core/engine/algorithm.h"
#include "basin/core/engine/callback.h"

namespace basin {

namespace {

// Slot groups: lower runs first.
enum SlotGroup { kAlgorithms = 0, kCallbacks = 1, kLoggers = 2 };

// LibTorch's errors carry a C++ backtrace; the message alone is what a user reads.
std::string describe(const std::exception& error) {
  if (const auto* torch_error = dynamic_cast<const c10::Error*>(&error)) return torch_error->what_without_backtrace();
  return error.what();
}

}  // namespace

struct Engine::Signals {
  std::array<boost::signals2::signal<void()>, kEventCount> by_event;
};

Engine::Engine(State& state) : state_(state), signals_(std::make_unique<Signals>()) {}

Engine::~Engine() = default;

void Engine::add_algorithm(std::shared_ptr<Algorithm> algorithm) {
  algorithms_.push_back(algorithm);
  for (Event event : all_events()) {
    auto slot = [this, algorithm, event] {
      if (!algorithm->match(event, state_)) return;
      std::string entry = algorithm->name() + "/" + event_name(event);
      if (console::enabled(console::Level::kDebug)) console::debug("engine: " + entry);
      if (applications_[entry]++ == 0) trace_.push_back(std::move(entry));
      try {
        algorithm->apply(event, state_, logger_);
      } catch (const ConfigError& error) {
        throw;  // bad input stays bad input (exit code 2), and already names its key
      } catch (const std::exception& error) {
        throw EngineError("algorithm '" + algorithm->name() + "' failed on event '" +
                          event_name(event) + "': " + describe(error));
      }
    };
    // Within the algorithms' group, AFTER_* events run the latest first.
    auto position = is_after_event(event) ? boost::signals2::at_front : boost::signals2::at_back;
    signals_->by_event[static_cast<std::size_t>(event)].connect(kAlgorithms, slot, position);
  }
}

void Engine::add_algorithms(Params& algorithms) {
  for (const std::string& name : algorithms.keys()) {
    Params params = algorithms.object(name);
    add_algorithm(algorithm_registry().create(name, params));
  }
  algorithms.finish();
}

namespace {

template <class C>
void connect_callback(std::array<boost::signals2::signal<void()>, kEventCount>& signals, int group,
                      const std::shared_ptr<C>& callback, State& state, Logger& logger, bool& stop) {
  for (Event event : all_events()) {
    signals[static_cast<std::size_t>(event)].connect(group, [&state, &logger, &stop, callback, event] {
      bool wants_stop = false;
      try {
        wants_stop = dispatch_event(*callback, event, state, logger);
      } catch (const ConfigError&) {
        throw;  // bad input stays bad input (exit code 2)
      } catch (const std::exception& error) {
        throw EngineError("callback '" + callback->name() + "' failed on event '" + event_name(event) +
                          "': " + describe(error));
      }
      stop = stop || wants_stop;
    });
  }
}

}  // namespace

void Engine::add_callback(std::shared_ptr<Callback> callback) {
  callback->install(state_);
  callback->attach(*this);
  callbacks_.push_back(callback);
  connect_callback(signals_->by_event, kCallbacks, callback, state_, logger_, stop_);
}

void Engine::add_logger(std::shared_ptr<LoggerDestination> destination) {
  destination->install(state_);
  destination->attach(*this);
  loggers_.push_back(destination);
  logger_.add_destination(destination);
  connect_callback(signals_->by_event, kLoggers, destination, state_, logger_, stop_);
}

bool Engine::run(Event event) {
  stop_ = false;
  signals_->by_event[static_cast<std::size_t>(event)]();
  if (stop_) state_.stop_requested = true;
  return stop_;
}

}  // namespace basin
