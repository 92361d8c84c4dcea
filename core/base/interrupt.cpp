#include "basin/core/base/interrupt.h"

#include <csignal>
#include <cstring>

#include <unistd.h>

namespace basin {

namespace {

volatile std::sig_atomic_t g_signal = 0;  // the first signal received; -1: asked by a call

void on_signal(int signal_number) {
  if (g_signal != 0) {
    // Second signal: the default action, now (it was the user's intent).
    std::signal(signal_number, SIG_DFL);
    std::raise(signal_number);
    return;
  }
  g_signal = signal_number;
  // Only async-signal-safe calls here: write(2) of a fixed message.
  const char* message = signal_number == SIGINT
      ? "\nbasin: SIGINT: stopping after this step and writing a checkpoint (send it again to stop at once)\n"
      : "\nbasin: SIGTERM: stopping after this step and writing a checkpoint (send it again to stop at once)\n";
  const ssize_t ignored = ::write(STDERR_FILENO, message, std::strlen(message));
  (void)ignored;
}

}  // namespace

void install_interrupt_handlers() {
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a signal does not fail the write or read it lands in
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

bool interrupt_requested() { return g_signal != 0; }

const char* interrupt_signal_name() {
  switch (g_signal) {
    case 0: return "";
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return "a stop request";
  }
}

void request_interrupt() { g_signal = -1; }
void clear_interrupt() { g_signal = 0; }

}  // namespace basin
