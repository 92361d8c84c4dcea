#pragma once

#include <string>
#include <vector>

#include "basin/core/config.h"

namespace basin::bench {

/// The models benchmarks compare by name: mlp (784-256-10), mlp1024
/// (784-1024-1024-10), mlp2048 (784-2048-2048-10), cnn (the examples' small
/// CNN) or resnet (the examples' resnet, width 16, blocks [1, 1, 1]).
inline const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names{"mlp", "mlp1024", "mlp2048", "cnn", "resnet"};
  return names;
}

/// The "model" config of one of model_names().
inline Json model_config(const std::string& model) {
  if (model == "mlp") return Json::parse(R"({"name": "mlp", "hidden": [256]})");
  if (model == "mlp1024") return Json::parse(R"({"name": "mlp", "hidden": [1024, 1024]})");
  if (model == "mlp2048") return Json::parse(R"({"name": "mlp", "hidden": [2048, 2048]})");
  return {{"name", model}};
}

}  // namespace basin::bench
