#pragma once

// The model keys a pretrained checkpoint gives: with "init_from" a Hugging
// Face directory, `"model": {"name": "llama"}` is enough, as from_pretrained
// takes the shape from config.json. A model that reads such directories
// registers how its keys are read from one; the trainer fills the keys the
// config leaves out from it (a key the config gives must then agree with
// config.json, which the model's import checks), and the run's config.json
// holds the keys so resolved, so that resume, export and basin-generate
// build the same model.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "basin/core/config/json.h"

namespace basin {

/// What a checkpoint's config.json gives a model.
struct PretrainedKeys {
  /// The model keys, as an object (a key config.json leaves to its config
  /// class's default has that default where the model's own differs).
  Json keys = Json::object();
  /// Keys read together, where one may override another (RoPE's theta in
  /// rope_theta or inside rope_parameters; a window's layers by
  /// max_window_layers or by layer_types): where the config gives one key
  /// of a group, none of the group is taken, so that what the config says
  /// is compared with config.json, never overridden by it.
  std::vector<std::vector<std::string>> groups;
};

/// The keys `dir`'s config.json gives; a ConfigError naming init_from and
/// the file where config.json is not the model's kind.
using PretrainedKeysReader = std::function<PretrainedKeys(const std::string& dir)>;

/// Readers by model name.
std::map<std::string, PretrainedKeysReader>& pretrained_keys_readers();

struct ResolvedModelKeys {
  Json keys;                        // the model's section, with the keys taken
  std::vector<std::string> taken;   // the keys taken, in the reader's order
  std::string source;               // the file they came from
};

/// `model_keys` (the config's "model" section) with the keys it leaves out
/// (and no key of their group) taken from `init_from`, where that is a
/// directory and `model_name` has a reader; else `model_keys` as given.
ResolvedModelKeys resolve_pretrained_keys(const std::string& model_name, const Json& model_keys, const std::string& init_from);

}  // namespace basin
