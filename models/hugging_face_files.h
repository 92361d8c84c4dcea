#pragma once

// What the models' Hugging Face layouts share (gpt_hugging_face.cpp,
// llama_hugging_face.cpp): config.json read with errors that name the file,
// its checks with errors that name the key, and written whole.
#include <functional>
#include <string>

#include "basin/core/config/json.h"

namespace basin {

/// `dir`/config.json, a JSON object; else a ConfigError naming init_from, the
/// file, and what a `layout` directory ("GPT-2", "Llama") holds.
Json read_hugging_face_config(const std::string& dir, const std::string& layout);

/// Runs `check` over a config.json read from `path`: a ConfigError passes
/// through, anything else (a key of an unexpected type) becomes one naming
/// init_from and the file.
void check_hugging_face_config(const std::string& path, const std::function<void()>& check);

/// Writes `config` to `dir`/config.json whole or not at all (a temporary file renamed).
void write_hugging_face_config(const std::string& dir, const Json& config);

}  // namespace basin
