#pragma once

#include <string>

#include "basin/core/model/lora.h"

namespace basin {

class Model;

/// A model's adapters in PEFT's layout, which
/// `peft.PeftModel.from_pretrained(base, dir)` loads onto the Hugging Face
/// model the run's hf/ holds: `dir`/adapter_config.json (LoRA, r, alpha,
/// dropout, the adapted modules by their Hugging Face names, fan_in_fan_out
/// where that layout stores projections [in, out] as GPT-2's Conv1D) and
/// `dir`/adapter_model.safetensors (`base_model.model.<module>.lora_A.weight`
/// [r, in] and `lora_B.weight` [out, r], fp32). `base` names the base model
/// (init_from's path), or is empty.
void write_peft_adapter(Model& model, const LoraOptions& options, const std::string& base, const std::string& dir);

/// Reads such a directory into `model`'s adapters ("adapters.lora.init_from"):
/// every adapted layer must find its two matrices, in the shapes the config
/// gives (r included), and every matrix of the file a layer; a ConfigError
/// names the file and the tensor or key that disagrees.
void read_peft_adapter(Model& model, const LoraOptions& options, const std::string& dir);

}  // namespace basin
