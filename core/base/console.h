#pragma once

#include <string>

namespace basin::console {

/// The console log (stderr) of basin and its programs: the engine trace at
/// debug level, run information at info. spdlog does the work behind this
/// header, in one translation unit that sees no LibTorch header: LibTorch
/// 2.x ships its own, newer fmt, which the system's spdlog cannot use.
enum class Level { kTrace, kDebug, kInfo, kWarn, kError };

/// "trace", "debug", "info", "warn" or "error"; throws std::invalid_argument otherwise.
void set_level(const std::string& name);
bool enabled(Level level);
/// spdlog's pattern syntax, e.g. "[%H:%M:%S] %v".
void set_pattern(const std::string& pattern);
void write(Level level, const std::string& message);

inline void debug(const std::string& message) { write(Level::kDebug, message); }
inline void info(const std::string& message) { write(Level::kInfo, message); }
inline void warn(const std::string& message) { write(Level::kWarn, message); }

}  // namespace basin::console
