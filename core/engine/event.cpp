#include "basin/core/engine/event.h"

#include "basin/core/config/config_error.h"

namespace basin {

const std::array<Event, kEventCount>& all_events() {
  static const std::array<Event, kEventCount> events = [] {
    std::array<Event, kEventCount> all{};
    for (std::size_t i = 0; i < kEventCount; ++i) all[i] = static_cast<Event>(i);
    return all;
  }();
  return events;
}

const char* event_name(Event event) {
  switch (event) {
    case Event::INIT: return "init";
    case Event::AFTER_SHARDING: return "after_sharding";
    case Event::BEFORE_LOAD: return "before_load";
    case Event::AFTER_LOAD: return "after_load";
    case Event::FIT_START: return "fit_start";
    case Event::EPOCH_START: return "epoch_start";
    case Event::BATCH_START: return "batch_start";
    case Event::BEFORE_FORWARD: return "before_forward";
    case Event::AFTER_FORWARD: return "after_forward";
    case Event::BEFORE_LOSS: return "before_loss";
    case Event::AFTER_LOSS: return "after_loss";
    case Event::BEFORE_BACKWARD: return "before_backward";
    case Event::AFTER_BACKWARD: return "after_backward";
    case Event::BEFORE_STEP: return "before_step";
    case Event::AFTER_STEP: return "after_step";
    case Event::BATCH_END: return "batch_end";
    case Event::EVAL_START: return "eval_start";
    case Event::EVAL_END: return "eval_end";
    case Event::EPOCH_END: return "epoch_end";
    case Event::FIT_END: return "fit_end";
  }
  return "unknown";
}

Event event_from_name(const std::string& name) {
  std::string known;
  for (Event event : all_events()) {
    if (name == event_name(event)) return event;
    known += known.empty() ? "" : ", ";
    known += event_name(event);
  }
  throw ConfigError("unknown event '" + name + "'; known events: " + known);
}

bool is_after_event(Event event) {
  switch (event) {
    case Event::AFTER_SHARDING:
    case Event::AFTER_LOAD:
    case Event::AFTER_FORWARD:
    case Event::AFTER_LOSS:
    case Event::AFTER_BACKWARD:
    case Event::AFTER_STEP:
    case Event::BATCH_END:
    case Event::EVAL_END:
    case Event::EPOCH_END:
    case Event::FIT_END:
      return true;
    default:
      return false;
  }
}

}  // namespace basin
