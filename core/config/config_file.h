#pragma once

// Configs as text: files, text and --set overrides, read strictly. Params
// (config.h) then reads the values.

#include <cstddef>
#include <string>

#include "basin/core/config/json.h"

namespace basin {

/// Config files larger than this are refused before they are read.
constexpr std::size_t kMaxConfigFileBytes = std::size_t{16} << 20;
/// Objects and arrays nest at most this deep (the top-level object is 1), so
/// that nothing that walks a config recursively can run out of stack.
constexpr int kMaxConfigDepth = 64;

/// Parses a config file; syntax errors name the file, line and column. A
/// directory, an unreadable file or one above kMaxConfigFileBytes is refused.
Json load_config_file(const std::string& path);

/// Parses config text; `origin` names it in errors (a file name, "--set").
/// Besides JSON syntax it rejects, each as a ConfigError naming the line and
/// column: bytes that are not UTF-8, nesting deeper than kMaxConfigDepth, a
/// number beyond the range of a double (naming its key), and a key given
/// twice in one object.
Json parse_config_text(const std::string& text, const std::string& origin);

/// Applies one `a.b.c=value` override. The value is parsed as JSON
/// (`lr=0.1`, `sam={"rho":0.1}`); text that is not JSON is taken as a string
/// (`model.name=cnn`). Missing objects on the path are created. The same
/// limits as in files hold (UTF-8, depth of key path plus value, numbers).
void apply_override(Json& config, const std::string& assignment);

}  // namespace basin
