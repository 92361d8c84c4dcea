#pragma once

// What the models' Hugging Face layouts share (gpt_hugging_face.cpp,
// llama_hugging_face.cpp): config.json read with errors that name the file,
// its checks with errors that name the key, and written whole; the
// parameters a writer stores.
#include <functional>
#include <string>

#include "basin/core/config/json.h"
#include "basin/core/serialization/safetensors_file.h"

namespace torch::nn { class Module; }

namespace basin {

/// `dir`/config.json, a JSON object; else a ConfigError naming init_from, the
/// file, and what a `layout` directory ("GPT-2", "Llama") holds.
Json read_hugging_face_config(const std::string& dir, const std::string& layout);

/// Runs `check` over a config.json read from `path`: a ConfigError passes
/// through, anything else (a key of an unexpected type) becomes one naming
/// init_from and the file.
void check_hugging_face_config(const std::string& path, const std::function<void()>& check);

/// `model`'s parameters by the model's names, each detached and on the CPU
/// in `dtype` (a parameter already there shares its storage): what a writer
/// renames and stores.
NamedTensors parameters_to_write(torch::nn::Module& model, at::ScalarType dtype);

/// Writes `config` to `dir`/config.json whole or not at all (a temporary file renamed).
void write_hugging_face_config(const std::string& dir, const Json& config);

}  // namespace basin
