#include "basin/core/engine/callback.h"

namespace basin {

bool dispatch_event(Callback& c, Event event, const State& s, Logger& l) {
  switch (event) {
    case Event::INIT: return c.on_init(s, l);
    case Event::AFTER_SHARDING: return c.on_after_sharding(s, l);
    case Event::BEFORE_LOAD: return c.on_before_load(s, l);
    case Event::AFTER_LOAD: return c.on_after_load(s, l);
    case Event::FIT_START: return c.on_fit_start(s, l);
    case Event::EPOCH_START: return c.on_epoch_start(s, l);
    case Event::BATCH_START: return c.on_batch_start(s, l);
    case Event::BEFORE_FORWARD: return c.on_before_forward(s, l);
    case Event::AFTER_FORWARD: return c.on_after_forward(s, l);
    case Event::BEFORE_LOSS: return c.on_before_loss(s, l);
    case Event::AFTER_LOSS: return c.on_after_loss(s, l);
    case Event::BEFORE_BACKWARD: return c.on_before_backward(s, l);
    case Event::AFTER_BACKWARD: return c.on_after_backward(s, l);
    case Event::BEFORE_STEP: return c.on_before_step(s, l);
    case Event::AFTER_STEP: return c.on_after_step(s, l);
    case Event::BATCH_END: return c.on_batch_end(s, l);
    case Event::EVAL_START: return c.on_eval_start(s, l);
    case Event::EVAL_END: return c.on_eval_end(s, l);
    case Event::EPOCH_END: return c.on_epoch_end(s, l);
    case Event::FIT_END: return c.on_fit_end(s, l);
  }
  return false;
}

Registry<Callback>& callback_registry() {
  static Registry<Callback> registry("callback");
  return registry;
}

}  // namespace basin
