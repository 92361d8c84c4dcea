// Linked into every test executable: a test that dies on a signal prints its
// stack first, so a crash seen once in CI can be read, not only counted.
#include <csignal>
#include <cstring>

#include <execinfo.h>
#include <unistd.h>

namespace {

void print_stack_and_die(int signal_number) {
  // Only async-signal-safe calls: write(2) and backtrace_symbols_fd.
  const char* name = strsignal(signal_number);
  const char prefix[] = "\n*** test process received ";
  ssize_t ignored = ::write(STDERR_FILENO, prefix, sizeof(prefix) - 1);
  ignored = ::write(STDERR_FILENO, name, std::strlen(name));
  ignored = ::write(STDERR_FILENO, "; stack:\n", 9);
  (void)ignored;
  void* frames[64];
  backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
  std::signal(signal_number, SIG_DFL);
  std::raise(signal_number);
}

const bool installed = [] {
  void* warm_up[1];
  backtrace(warm_up, 1);  // loads libgcc now, not inside the handler
  for (const int signal_number : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(signal_number, print_stack_and_die);
  return true;
}();

}  // namespace
