#pragma once

#include <array>
#include <string>

namespace basin {

/// The points of the training loop at which algorithms and callbacks run.
///
/// Reading this enum is reading the loop (`Trainer::fit`):
///
///     INIT                      state built from the config
///       wrap for distribution   gradient sync (DDP) and/or sharded optimizer
///     AFTER_SHARDING            SAM wraps the optimizer here, after sharding
///     BEFORE_LOAD, AFTER_LOAD   only when resuming from a checkpoint
///     FIT_START
///     for epoch:
///       EPOCH_START
///       for batch:
///         BATCH_START
///         closure(pass) = for each microbatch:          pass: plain/ascent/descent
///             BEFORE_FORWARD, AFTER_FORWARD,
///             BEFORE_LOSS, AFTER_LOSS,
///             BEFORE_BACKWARD, AFTER_BACKWARD
///         BEFORE_STEP
///         optimizer.step(closure)                      SAM runs the closure twice
///         AFTER_STEP
///         schedulers step (per-step ones)
///         BATCH_END
///       EVAL_START, EVAL_END    test set evaluation
///       per-epoch schedulers step
///       EPOCH_END               (checkpoint: the epoch is closed whole)
///     FIT_END
///
/// Algorithms run in registration order, reversed on AFTER_* and *_END events
/// so that each can undo its own change; callbacks run after them, loggers last.
enum class Event {
  INIT,
  AFTER_SHARDING,
  BEFORE_LOAD,
  AFTER_LOAD,
  FIT_START,
  EPOCH_START,
  BATCH_START,
  BEFORE_FORWARD,
  AFTER_FORWARD,
  BEFORE_LOSS,
  AFTER_LOSS,
  BEFORE_BACKWARD,
  AFTER_BACKWARD,
  BEFORE_STEP,
  AFTER_STEP,
  BATCH_END,
  EVAL_START,
  EVAL_END,
  EPOCH_END,
  FIT_END,
};

inline constexpr std::size_t kEventCount = static_cast<std::size_t>(Event::FIT_END) + 1;

/// Every event in loop order.
const std::array<Event, kEventCount>& all_events();

/// Stable lower-case name ("after_sharding"), used in configs, traces and logs.
const char* event_name(Event event);

/// Inverse of event_name; throws ConfigError listing the known names.
Event event_from_name(const std::string& name);

/// AFTER_* and *_END events run algorithms in reverse registration order, so
/// that what algorithms do at a start or before-event nests.
bool is_after_event(Event event);

}  // namespace basin
