#pragma once

// What a zero3 test asks of the trainer's mode: the FullyShardedModel that
// runs the model's units. The trainer names no mode, so the test looks
// through the model's unit runner.

#include "basin/core/model/model.h"
#include "basin/core/parallel/zero3/fully_sharded_model.h"
#include "basin/core/train/trainer.h"

namespace basin::test {

/// The zero3 model that gathers `trainer`'s units; null under any other mode.
inline FullyShardedModel* fully_sharded_of(Trainer& trainer) {
  return dynamic_cast<FullyShardedModel*>(trainer.model().unit_runner());
}

}  // namespace basin::test
