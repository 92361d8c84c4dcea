#pragma once

#include <stdexcept>

namespace basin {

/// A checkpoint that cannot be written, read or restored; the message names
/// the file or the part and what was expected. Apart from checkpoint.h, so
/// that the layers below the engine (a parallel mode's own checkpoint part)
/// can throw it.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace basin
