#pragma once

#include <string>

#include "basin/core/base/state_dict.h"
#include "basin/core/config/registry.h"
#include "basin/core/engine/event.h"
#include "basin/core/engine/state.h"

namespace basin {

class Engine;
class Logger;

/// Observes training: one optional hook per event, each given a read-only
/// state. A hook that returns true asks the loop to stop after the current
/// batch (early stopping, time limits).
///
/// The engine runs callbacks after all algorithms of the same event, so a
/// callback always sees the state as the algorithms left it.
class Callback {
 public:
  virtual ~Callback() = default;

  virtual std::string name() const = 0;

  /// Runs once when registered with an engine, before INIT: the only place a
  /// callback may change the state (the grad scaler fills its slot here).
  virtual void install(State& /*state*/) {}
  /// Runs once right after `install`: a callback that acts on the whole run
  /// (the checkpoint writer captures every algorithm's state) keeps the engine.
  virtual void attach(Engine& /*engine*/) {}

  virtual bool on_init(const State&, Logger&) { return false; }
  virtual bool on_after_sharding(const State&, Logger&) { return false; }
  virtual bool on_before_load(const State&, Logger&) { return false; }
  virtual bool on_after_load(const State&, Logger&) { return false; }
  virtual bool on_fit_start(const State&, Logger&) { return false; }
  virtual bool on_epoch_start(const State&, Logger&) { return false; }
  virtual bool on_batch_start(const State&, Logger&) { return false; }
  virtual bool on_before_forward(const State&, Logger&) { return false; }
  virtual bool on_after_forward(const State&, Logger&) { return false; }
  virtual bool on_before_loss(const State&, Logger&) { return false; }
  virtual bool on_after_loss(const State&, Logger&) { return false; }
  virtual bool on_before_backward(const State&, Logger&) { return false; }
  virtual bool on_after_backward(const State&, Logger&) { return false; }
  virtual bool on_before_step(const State&, Logger&) { return false; }
  virtual bool on_after_step(const State&, Logger&) { return false; }
  virtual bool on_batch_end(const State&, Logger&) { return false; }
  virtual bool on_eval_start(const State&, Logger&) { return false; }
  virtual bool on_eval_end(const State&, Logger&) { return false; }
  virtual bool on_epoch_end(const State&, Logger&) { return false; }
  virtual bool on_fit_end(const State&, Logger&) { return false; }

  virtual StateDict state_dict() const { return new_state_dict(); }
  virtual void load_state_dict(const StateDict& /*state*/) {}
};

/// Calls the hook of `callback` that belongs to `event`.
bool dispatch_event(Callback& callback, Event event, const State& state, Logger& logger);

/// Callbacks by name: `{"callbacks": {"progress": {}}}`.
Registry<Callback>& callback_registry();

}  // namespace basin
