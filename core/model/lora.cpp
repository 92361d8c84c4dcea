#include "basin/core/model/lora.h"

#include <cmath>
#include <regex>
#include <stdexcept>

#include "basin/core/config/config.h"
#include "basin/core/config/config_error.h"
#include "basin/core/model/model.h"

namespace basin {

LoraShape LoraOptions::shape() const {
  const double rank = static_cast<double>(r);
  return LoraShape{r, rslora ? alpha / std::sqrt(rank) : alpha / rank, dropout, init};
}

std::optional<LoraOptions> LoraOptions::from_config(Params& root) {
  Params adapters = root.object("adapters");
  if (!adapters.has("lora")) {
    adapters.finish();
    return std::nullopt;
  }
  Params lora = adapters.object("lora");
  adapters.finish();
  LoraOptions options;
  options.r = lora.integer("r", options.r, 1);
  options.alpha = lora.positive("alpha", options.alpha);
  options.dropout = lora.number("dropout", options.dropout, 0.0, 0.999);
  const Json targets = lora.raw("targets");
  const std::string forms = "a regular expression (ECMAScript) over the whole name, a list of module names, or \"all-linear\"";
  if (targets.is_array()) {
    for (const Json& name : targets) {
      if (!name.is_string() || name.get<std::string>().empty()) lora.fail("targets", forms, targets);
      options.target_names.push_back(name.get<std::string>());
    }
    if (options.target_names.empty()) lora.fail("targets", forms + " (this list is empty)", targets);
  } else if (targets.is_string()) {
    options.targets = targets.get<std::string>();
    try {
      std::regex(options.targets, std::regex::ECMAScript);
    } catch (const std::regex_error& error) {
      lora.fail("targets", std::string("a regular expression (ECMAScript): ") + error.what(), targets);
    }
  } else {
    lora.fail("targets", forms, targets);
  }
  options.init = lora.choice("init", "kaiming", {"kaiming", "gaussian"}) == "kaiming" ? LoraInit::kKaiming
                                                                                      : LoraInit::kGaussian;
  options.rslora = lora.boolean("rslora", options.rslora);
  options.init_from = lora.string("init_from", "");
  lora.finish();
  return options;
}

bool LoraOptions::targets_module(const std::string& name, const std::string& hugging_face_name) const {
  auto ends_with = [](const std::string& text, const std::string& tail) {
    return text == tail || (text.size() > tail.size() && text.compare(text.size() - tail.size() - 1, std::string::npos, "." + tail) == 0);
  };
  if (!target_names.empty()) {
    for (const std::string& target : target_names) {
      if (ends_with(name, target) || ends_with(hugging_face_name, target)) return true;
    }
    return false;
  }
  // As PEFT means it: every linear layer but the one that makes the logits.
  if (targets == "all-linear") return !ends_with(name, "lm_head");
  return std::regex_match(name, std::regex(targets, std::regex::ECMAScript));
}

std::string LoraOptions::targets_text() const {
  return target_names.empty() ? "\"" + targets + "\"" : Json(target_names).dump();
}

std::vector<std::pair<std::string, AdaptableLinear*>> adapted_layers(torch::nn::Module& model) {
  std::vector<std::pair<std::string, AdaptableLinear*>> layers;
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    auto* layer = dynamic_cast<AdaptableLinear*>(item.value().get());
    if (layer != nullptr && layer->adapted()) layers.emplace_back(item.key(), layer);
  }
  return layers;
}

std::vector<std::string> attach_lora(Model& model, const LoraOptions& options, uint64_t seed) {
  std::vector<std::string> candidates, adapted;
  at::Generator generator = at::detail::createCPUGenerator(seed);
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    auto* layer = dynamic_cast<AdaptableLinear*>(item.value().get());
    if (layer == nullptr) continue;
    candidates.push_back(item.key());
    if (!options.targets_module(item.key(), model.hugging_face_module(item.key()))) continue;
    layer->attach_lora(options.shape(), generator);
    adapted.push_back(item.key());
  }
  if (adapted.empty()) {
    std::string names;
    for (std::size_t i = 0; i < candidates.size() && i < 8; ++i) names += (i ? ", " : "") + candidates[i];
    throw ConfigError("config key 'adapters.lora.targets': " + options.targets_text() + " matches no projection of the "
                      "model (a pattern must match the whole name, a listed name its last parts); " +
                      (candidates.empty() ? std::string("this model has none that takes an adapter (\"gpt\" and "
                                                        "\"llama\" have)")
                                          : "its projections are " + names + (candidates.size() > 8 ? ", ..." : "")));
  }
  // Only the adapters train: every other parameter keeps its value to the bit.
  for (auto& p : model.parameters(/*recurse=*/true)) p.requires_grad_(false);
  for (auto& [name, layer] : adapted_layers(model)) {
    layer->lora_A->weight.requires_grad_(true);
    layer->lora_B->weight.requires_grad_(true);
  }
  return adapted;
}

MergedAdapters::MergedAdapters(torch::nn::Module& model) {
  at::NoGradGuard no_grad;
  try {
    for (auto& [name, layer] : adapted_layers(model)) {
      if (layer->merged()) throw std::logic_error("MergedAdapters: '" + name + "' is merged already");
      const at::Tensor merged = layer->weight.detach() + layer->adapter_delta().to(layer->weight.scalar_type());
      saved_.emplace_back(layer, layer->weight.detach().clone());
      layer->weight.detach().copy_(merged);
      layer->detach_adapter_modules();
    }
  } catch (...) {
    restore();  // what merged before the failure goes back as it was
    throw;
  }
}

MergedAdapters::~MergedAdapters() { restore(); }

void MergedAdapters::restore() noexcept {
  at::NoGradGuard no_grad;
  for (auto& [layer, weight] : saved_) {
    layer->weight.detach().copy_(weight);  // same shape, dtype and device: cannot fail but for memory
    layer->reattach_adapter_modules();
  }
  saved_.clear();
}

}  // namespace basin
