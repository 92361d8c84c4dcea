#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "basin/core/model/adaptable_linear.h"
#include "basin/core/serialization/safetensors_file.h"

namespace basin {

class Model;
class Params;

/// Low-rank adapters from the config:
///     "adapters": {"lora": {"r": 8, "alpha": 16, "dropout": 0.0,
///                           "targets": "h\\.\\d+\\.attn\\.c_attn", "init": "kaiming",
///                           "rslora": false, "init_from": "run/adapter"}}
/// `targets` takes PEFT's three forms of target_modules: a regular
/// expression (ECMAScript) that must match the whole name of each projection
/// to adapt, over basin's names ("h.0.attn.c_attn" in the gpt, where Hugging
/// Face says "transformer.h.0.attn.c_attn"; "layers.0.self_attn.q_proj" in
/// the llama); a list of module names, each matching a projection named so
/// or ending in "." and it, in basin's or Hugging Face's names
/// (["q_proj", "v_proj"]); or "all-linear", every projection but the output
/// head (lm_head).
/// `init_from` continues an adapter: a PEFT directory (adapter_config.json,
/// adapter_model.safetensors), such as the `adapter/` a run exports.
struct LoraOptions {
  int64_t r = 8;
  double alpha = 16;
  double dropout = 0.0;
  std::string targets;                    // the regular expression, or "all-linear"; empty for a list
  std::vector<std::string> target_names;  // the list form
  LoraInit init = LoraInit::kKaiming;
  bool rslora = false;    // scaling alpha / sqrt(r) (Kalajdzievski 2023) instead of alpha / r
  std::string init_from;  // empty: a fresh adapter

  LoraShape shape() const;
  /// Whether the projection `name` (Hugging Face's: `hugging_face_name`) is one to adapt.
  bool targets_module(const std::string& name, const std::string& hugging_face_name) const;
  /// The targets as the config gave them, for messages.
  std::string targets_text() const;
  /// The config's "adapters.lora", if any; ConfigError naming the key when malformed.
  static std::optional<LoraOptions> from_config(Params& root);
};

/// Attaches an adapter to every AdaptableLinear of `model` whose name
/// matches `options.targets`, drawn from a generator seeded with `seed`
/// alone (so the adapters do not depend on what else drew before them), and
/// freezes every other parameter (requires_grad false: no gradient, no
/// optimizer state, no SAM perturbation). Returns the adapted layers' names.
/// A pattern that matches no projection is a ConfigError listing them.
std::vector<std::string> attach_lora(Model& model, const LoraOptions& options, uint64_t seed);

/// The adapted layers of `model`, by name.
std::vector<std::pair<std::string, AdaptableLinear*>> adapted_layers(torch::nn::Module& model);

/// For its lifetime, `model` is the plain model with its adapters merged:
/// W <- W + scaling * B A, the adapter modules hidden from named_parameters.
/// Its end restores W to the bit and the adapters. Exports write through it.
class MergedAdapters {
 public:
  explicit MergedAdapters(torch::nn::Module& model);
  ~MergedAdapters();
  MergedAdapters(const MergedAdapters&) = delete;
  MergedAdapters& operator=(const MergedAdapters&) = delete;

 private:
  void restore() noexcept;

  std::vector<std::pair<AdaptableLinear*, at::Tensor>> saved_;  // each layer and its unmerged weight
};

}  // namespace basin
