#pragma once

#include <stdexcept>
#include <string>

namespace basin {

/// Bad user input (config file, --set override, command line): the message is
/// one line that names the offending key, value or file and what was expected.
/// Front ends turn it into exit code 2.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace basin
