#pragma once

#include <string>

#include "basin/core/base/state_dict.h"
#include "basin/core/config/registry.h"
#include "basin/core/engine/event.h"
#include "basin/core/engine/state.h"

namespace basin {

class Logger;

/// A change to training that runs at events of the loop.
///
/// The engine asks `match` at every event and calls `apply` when it says yes,
/// leaving a trace "name/event". Algorithms are made by name from the
/// config's "algorithms" object (see BASIN_REGISTER) and may change the
/// state; variants subclass existing algorithms.
class Algorithm {
 public:
  virtual ~Algorithm() = default;

  /// The name it was registered under; traces and logs use it.
  virtual std::string name() const = 0;
  virtual bool match(Event event, const State& state) const = 0;
  virtual void apply(Event event, State& state, Logger& logger) = 0;

  virtual StateDict state_dict() const { return new_state_dict(); }
  virtual void load_state_dict(const StateDict& /*state*/) {}
};

/// Algorithms by name: `{"algorithms": {"sam": {"rho": 0.05}}}`.
Registry<Algorithm>& algorithm_registry();

}  // namespace basin
