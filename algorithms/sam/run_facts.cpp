#include "basin/algorithms/sam/run_facts.h"

#include <algorithm>

#include "basin/core/engine/state.h"

namespace basin {

RunFacts RunFacts::of(const State& state) {
  RunFacts run;
  run.model = state.model;
  run.seed = state.seed;
  run.rank = state.rank;
  run.world_size = state.world_size;
  // As the trainer stops: at max_steps or at the end of max_epochs, whichever comes first.
  const int64_t by_epochs = state.steps_per_epoch * state.max_epochs;
  run.run_length = state.max_steps <= 0 ? by_epochs : by_epochs > 0 ? std::min(state.max_steps, by_epochs) : state.max_steps;
  run.device = state.device;
  run.communicator = state.communicator;
  run.scaler = state.scaler;
  run.outputs_given = state.outputs_given;
  return run;
}

}  // namespace basin
