#include "basin/core/base/console.h"

#include <stdexcept>

#include <spdlog/spdlog.h>

namespace basin::console {

namespace {

spdlog::level::level_enum to_spdlog(Level level) {
  switch (level) {
    case Level::kTrace: return spdlog::level::trace;
    case Level::kDebug: return spdlog::level::debug;
    case Level::kInfo: return spdlog::level::info;
    case Level::kWarn: return spdlog::level::warn;
    case Level::kError: return spdlog::level::err;
  }
  return spdlog::level::info;
}

}  // namespace

void set_level(const std::string& name) {
  const auto level = spdlog::level::from_str(name);
  // from_str answers "off" for every name it does not know.
  if (level == spdlog::level::off && name != "off") {
    throw std::invalid_argument("log level '" + name + "': expected trace, debug, info, warn or error");
  }
  spdlog::set_level(level);
}

bool enabled(Level level) { return spdlog::should_log(to_spdlog(level)); }

void set_pattern(const std::string& pattern) { spdlog::set_pattern(pattern); }

void write(Level level, const std::string& message) { spdlog::log(to_spdlog(level), "{}", message); }

}  // namespace basin::console
