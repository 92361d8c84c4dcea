#pragma once

// How a basin program ends on an error it caught: one line on stderr, named
// by the program, and an exit code a script can act on.

#include <exception>
#include <string>

namespace basin {

/// Exit code of a program refused its input.
constexpr int kExitBadInput = 2;

/// Says `error` as "<program>: <message>" and returns the exit code: bad
/// input (a ConfigError, a CheckpointError: the message names the key or
/// the file) exits kExitBadInput; anything else "<program>: error: ..." and
/// 1, LibTorch's errors without their backtrace, which means nothing to a
/// user.
int report_error(const std::string& program, const std::exception_ptr& error);

}  // namespace basin
