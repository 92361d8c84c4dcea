#pragma once

namespace basin {

/// Exit code of a run that stopped on SIGINT/SIGTERM after writing its
/// checkpoint: resumable (EX_TEMPFAIL, "try again", which job schedulers
/// read as a requeue).
inline constexpr int kExitInterrupted = 75;

/// Graceful stop on SIGINT and SIGTERM: the first signal asks the training
/// loop to stop after the current step (it then writes a checkpoint and
/// exits with kExitInterrupted); a second one ends the process at once, as
/// the signal's default action does.
void install_interrupt_handlers();

/// Whether a signal has asked to stop (also set by request_interrupt).
bool interrupt_requested();
/// Name of the signal that asked ("SIGTERM"), or "" when none did.
const char* interrupt_signal_name();

/// For tests and embedding programs: ask or un-ask as a signal would.
void request_interrupt();
void clear_interrupt();

}  // namespace basin
