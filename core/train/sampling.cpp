#include "basin/core/train/sampling.h"

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "basin/core/config/config.h"
#include "basin/core/config/config_error.h"
#include "basin/core/train/initial_weights.h"
#include "basin/core/train/model.h"

namespace basin {

TrainedModel load_trained_model(const std::string& run_dir) {
  const std::string config_path = run_dir + "/config.json";
  std::ifstream in(config_path);
  if (!in) throw ConfigError("'" + config_path + "' cannot be read; expected the run directory basin-train wrote");
  Json config;
  try {
    config = Json::parse(in);
  } catch (const std::exception& error) {
    throw ConfigError("'" + config_path + "' is not JSON: " + error.what());
  }
  if (!config.is_object() || !config.contains("data") || !config.contains("model")) {
    throw ConfigError("'" + config_path + "' has no \"data\" and \"model\"; expected a run's config.json");
  }
  // The data sizes the model, as when it trained; the trainer's own data keys are not the dataset's.
  Json data_keys = config["data"];
  for (const char* key : {"name", "batch_size", "microbatches", "eval_batch_size", "train_subset", "label_noise", "shuffle"}) {
    data_keys.erase(key);
  }
  TrainedModel trained;
  trained.data_name = config["data"].value("name", std::string());
  Params data(data_keys, "data");
  trained.info = dataset_registry().create(trained.data_name, data, config.value("seed", int64_t{0}))->info;
  Json model_keys = config["model"];
  const std::string name = model_keys.contains("torchscript") && !model_keys.contains("name")
                               ? "torchscript"
                               : model_keys.value("name", std::string());
  model_keys.erase("name");
  Params model(model_keys, "model");
  trained.model = model_registry().create(name, model, trained.info);
  InitialWeights weights;
  weights.path = run_dir + "/state_dict.pt";
  load_initial_weights(*trained.model, weights);
  trained.model->eval();
  return trained;
}

at::Tensor sample_tokens(Model& model, const at::Tensor& prompt, const SamplingOptions& options) {
  if (prompt.dim() != 1 || prompt.numel() == 0) throw std::invalid_argument("sample_tokens: the prompt needs an id");
  if (options.context < 1) throw std::invalid_argument("sample_tokens: the context must hold a token");
  at::NoGradGuard no_grad;
  const bool training = model.is_training();
  model.eval();
  auto generator = at::detail::createCPUGenerator(options.seed);
  at::Tensor ids = prompt.to(at::kLong).cpu();
  for (int64_t i = 0; i < options.tokens; ++i) {
    const at::Tensor window = ids.slice(0, std::max<int64_t>(0, ids.size(0) - options.context)).unsqueeze(0);
    at::Tensor logits = model.forward(window).select(1, -1).squeeze(0).to(at::kFloat).cpu();  // [V]
    at::Tensor next;
    if (options.temperature <= 0) {
      next = logits.argmax().view({1});
    } else {
      logits = logits / options.temperature;
      if (options.top_k > 0 && options.top_k < logits.size(0)) {
        const at::Tensor kth = std::get<0>(logits.topk(options.top_k)).select(0, -1);
        logits = logits.masked_fill(logits < kth, -INFINITY);
      }
      next = at::multinomial(logits.softmax(0), 1, /*replacement=*/false, generator);
    }
    ids = at::cat({ids, next});
  }
  model.train(training);
  return ids;
}

}  // namespace basin
