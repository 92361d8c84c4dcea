#pragma once

#include <optional>
#include <string>

namespace basin {

class Model;
class Params;

/// Where a run's weights come from before training ("init_from"):
///     "init_from": "weights.pt"
///     "init_from": {"path": "weights.pt", "allow_missing": false, "allow_extra": false}
/// The file is what Python writes with `torch.save(model.state_dict(), path)`
/// (read through safe_pickle_load, which rebuilds its OrderedDict as a dict),
/// a plain dict of tensors, or a basin checkpoint, whose "model" entry is used.
/// A directory holds weights in another library's layout, which the model
/// reads into its own names (Model::import_pretrained: "gpt" reads a Hugging
/// Face GPT-2 directory).
struct InitialWeights {
  std::string path;
  bool allow_missing = false;  // model tensors the file lacks keep their initial values
  bool allow_extra = false;    // file tensors the model lacks are ignored
};

/// The config's "init_from", if any; ConfigError naming the key when malformed.
std::optional<InitialWeights> initial_weights_from_config(Params& root);

/// Copies the file's tensors into `model`'s parameters and buffers, matched
/// by name. Throws ConfigError naming the file and the first missing, extra
/// or mis-shaped tensor (listing a few names of each side for a typo).
void load_initial_weights(Model& model, const InitialWeights& weights);

}  // namespace basin
