#include "basin/core/model/initial_weights.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <sstream>
#include <vector>

#include <ATen/ATen.h>

#include "basin/core/config/config.h"
#include "basin/core/config/config_error.h"
#include "basin/core/model/model.h"
#include "basin/core/serialization/torch_save_file.h"

namespace basin {

namespace {

std::string some_names(const std::vector<std::string>& names) {
  std::string text;
  for (std::size_t i = 0; i < names.size() && i < 6; ++i) text += (i ? ", " : "") + names[i];
  if (names.size() > 6) text += ", ... (" + std::to_string(names.size()) + " in all)";
  return text;
}

c10::impl::GenericDict read_tensors(const std::string& path) {
  const c10::IValue value = read_torch_save_file(path, "init_from");
  if (!value.isGenericDict()) {
    throw ConfigError("config key 'init_from': '" + path + "' does not hold a dict of tensors (a state_dict)");
  }
  auto dict = value.toGenericDict();
  if (dict.contains("basin") && dict.at("basin").isGenericDict() && dict.at("basin").toGenericDict().contains("sharded")) {
    throw ConfigError("config key 'init_from': '" + path + "' is the manifest of a zero3 checkpoint, whose weights are "
                      "in one file per rank: join them with basin-consolidate and start from that file");
  }
  // A basin checkpoint carries its weights under "model".
  if (dict.contains("basin") && dict.contains("model") && dict.at("model").isGenericDict()) {
    dict = dict.at("model").toGenericDict();
  }
  return dict;
}

/// A directory holds another library's layout, which the model translates.
c10::impl::GenericDict imported_tensors(Model& model, const std::string& dir) {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  for (auto& [name, tensor] : model.import_pretrained(dir)) dict.insert(name, tensor);
  return dict;
}

}  // namespace

std::optional<InitialWeights> initial_weights_from_config(Params& root) {
  const Json value = root.raw("init_from");
  if (value.is_null()) return std::nullopt;
  InitialWeights weights;
  if (value.is_string()) {
    weights.path = value.get<std::string>();
  } else if (value.is_object()) {
    Params params(value, "init_from");
    weights.path = params.string("path");
    weights.allow_missing = params.boolean("allow_missing", false);
    weights.allow_extra = params.boolean("allow_extra", false);
    params.finish();
  } else {
    root.fail("init_from", "a file path or {\"path\": ..., \"allow_missing\": ..., \"allow_extra\": ...}", value);
  }
  if (weights.path.empty()) root.fail("init_from", "a file path", value);
  return weights;
}

void load_initial_weights(Model& model, const InitialWeights& weights) {
  std::error_code error;
  const auto saved = std::filesystem::is_directory(weights.path, error) ? imported_tensors(model, weights.path)
                                                                         : read_tensors(weights.path);
  std::map<std::string, at::Tensor> mine;
  for (const auto& item : model.named_parameters(true)) mine.emplace(item.key(), item.value());
  for (const auto& item : model.named_buffers(true)) mine.emplace(item.key(), item.value());

  std::vector<std::string> missing, extra;
  for (const auto& [name, tensor] : mine) {
    if (!saved.contains(name)) missing.push_back(name);
  }
  for (const auto& entry : saved) {
    if (!entry.key().isString() || mine.count(entry.key().toStringRef()) == 0) {
      extra.push_back(entry.key().isString() ? entry.key().toStringRef() : "<not a name>");
    }
  }
  const std::string where = "config key 'init_from': '" + weights.path + "'";
  if (!missing.empty() && !weights.allow_missing) {
    throw ConfigError(where + " lacks tensor '" + missing.front() + "' of the model (missing: " + some_names(missing) +
                      "; the file has: " + some_names(extra.empty() ? std::vector<std::string>{"nothing else"} : extra) +
                      "); set \"allow_missing\": true to keep their initial values");
  }
  if (!extra.empty() && !weights.allow_extra) {
    throw ConfigError(where + " has tensor '" + extra.front() + "', which the model lacks (extra: " + some_names(extra) +
                      "); set \"allow_extra\": true to ignore them");
  }
  at::NoGradGuard no_grad;
  for (auto& [name, tensor] : mine) {
    if (!saved.contains(name)) continue;
    const c10::IValue& value = saved.at(name);
    if (!value.isTensor()) throw ConfigError(where + ": entry '" + name + "' is not a tensor");
    const at::Tensor source = value.toTensor();
    if (source.sizes() != tensor.sizes()) {
      std::ostringstream message;
      message << where << ": tensor '" << name << "' has shape " << source.sizes() << ", the model's "
              << tensor.sizes();
      throw ConfigError(message.str());
    }
    tensor.copy_(source);
  }
}

}  // namespace basin
