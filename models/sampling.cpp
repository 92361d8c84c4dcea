#include "basin/models/sampling.h"

#include <filesystem>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "basin/core/checkpoint/run_directory.h"
#include "basin/core/config/config.h"
#include "basin/core/config/config_error.h"
#include "basin/core/model/eval_mode.h"
#include "basin/core/model/initial_weights.h"
#include "basin/core/model/model.h"

namespace basin {

namespace {

/// A JSON object basin-train wrote into the run directory, read as configs are (size, depth, syntax checked).
Json run_file(const std::string& path) {
  try {
    return load_config_file(path);
  } catch (const ConfigError& error) {
    throw ConfigError(std::string(error.what()) + "; expected a file of the run directory basin-train wrote");
  }
}

}  // namespace

TrainedModel load_trained_model(const std::string& run_dir) {
  const RunDirectory run(run_dir);
  const Json config = run_file(run.file(RunDirectory::kConfig));
  const Json data = run_file(run.file(RunDirectory::kDataInfo));
  TrainedModel trained;
  try {
    trained.data_name = data.at("name").get<std::string>();
    trained.info.input_shape = data.at("input_shape").get<std::vector<int64_t>>();
    trained.info.num_classes = data.at("num_classes").get<int64_t>();
  } catch (const std::exception& error) {
    throw ConfigError("'" + run.file(RunDirectory::kDataInfo) + "' lacks the data's name, input_shape or num_classes: " + error.what());
  }
  if (!config.contains("model") || !config["model"].is_object()) {
    throw ConfigError("'" + run.file(RunDirectory::kConfig) + "' has no \"model\"; expected a run's config.json");
  }
  Json model_keys = config["model"];
  const std::string name = model_keys.contains("torchscript") && !model_keys.contains("name")
                               ? "torchscript"
                               : model_keys.value("name", std::string());
  model_keys.erase("name");
  Params model(model_keys, "model");
  trained.model = model_registry().create(name, model, trained.info);
  InitialWeights weights;
  weights.path = run.file(Model::kStateDictFile);
  load_initial_weights(*trained.model, weights);
  trained.model->eval();
  return trained;
}

at::Tensor sample_tokens(Model& model, const at::Tensor& prompt, const SamplingOptions& options) {
  if (prompt.dim() != 1 || prompt.numel() == 0) throw std::invalid_argument("sample_tokens: the prompt needs an id");
  if (options.context < 1) throw std::invalid_argument("sample_tokens: the context must hold a token");
  at::NoGradGuard no_grad;
  EvalModeScope eval(model);
  auto generator = at::detail::createCPUGenerator(options.seed);
  at::Tensor ids = prompt.to(at::kLong).cpu();
  for (int64_t i = 0; i < options.tokens; ++i) {
    const at::Tensor window = ids.slice(0, std::max<int64_t>(0, ids.size(0) - options.context)).unsqueeze(0);
    at::Tensor logits = model.forward(window).select(1, -1).squeeze(0).to(at::kFloat).cpu();  // [V]
    at::Tensor next;
    if (options.temperature <= 0) {
      next = logits.argmax().view({1});
    } else {
      logits = (logits - logits.max()) / options.temperature;  // the likeliest at 0: no overflow at a tiny temperature
      if (options.top_k > 0 && options.top_k < logits.size(0)) {
        const at::Tensor kth = std::get<0>(logits.topk(options.top_k)).select(0, -1);
        logits = logits.masked_fill(logits < kth, -INFINITY);
      }
      next = at::multinomial(logits.softmax(0), 1, /*replacement=*/false, generator);
    }
    ids = at::cat({ids, next});
  }
  return ids;
}

}  // namespace basin
