#include "basin/core/train/model_check.h"

#include <algorithm>
#include <string>

#include <ATen/ATen.h>

#include "basin/core/config_error.h"
#include "basin/core/train/model.h"

namespace basin {
namespace {

std::string shape_text(at::IntArrayRef sizes) {
  std::string text = "[";
  for (std::size_t i = 0; i < sizes.size(); ++i) text += (i ? ", " : "") + std::to_string(sizes[i]);
  return text + "]";
}

// A TorchScript error carries the interpreter's traceback; its last line says what failed.
std::string last_line(const std::string& text) {
  std::string trimmed = text.substr(0, text.find_last_not_of(" \n") + 1);
  const std::size_t newline = trimmed.rfind('\n');
  std::string line = newline == std::string::npos ? trimmed : trimmed.substr(newline + 1);
  return line.size() > 300 ? line.substr(0, 300) + "..." : line;
}

}  // namespace

void check_model_fits_data(Model& model, const DataSplits& data, const Loss& loss, int64_t samples) {
  const Batch batch = data.train.slice(0, std::min(samples, data.train.size()));
  const int64_t n = batch.size();
  const std::string data_text = "the data's samples are " + shape_text(data.info.input_shape) + " in " +
                                std::to_string(data.info.num_classes) + " classes";
  if (loss.from_model() && !model.computes_loss()) {
    throw ConfigError("config key 'loss': \"model\" needs a model whose forward(x, y) returns its loss (a "
                      "TorchScript module); this model's forward takes the inputs alone");
  }
  if (!loss.from_model() && !model.gives_logits()) {
    throw ConfigError("config key 'loss': the model's forward needs the targets (forward(x, y)); set \"loss\": "
                      "\"model\" if it returns the loss");
  }
  const bool training = model.is_training();
  model.eval();
  at::Tensor output;
  try {
    at::NoGradGuard no_grad;
    const at::Tensor inputs = batch.inputs.to(model.parameters().empty() ? at::kCPU : model.parameters()[0].device());
    output = loss.from_model() ? model.forward_loss(inputs, batch.targets.to(inputs.device())) : model.forward(inputs);
  } catch (const ConfigError&) {
    model.train(training);
    throw;
  } catch (const std::exception& error) {
    model.train(training);
    const auto* c10_error = dynamic_cast<const c10::Error*>(&error);
    throw ConfigError("config key 'model': the model fails on a batch of " + std::to_string(n) + " training samples (" +
                      data_text + "): " + last_line(c10_error ? c10_error->what_without_backtrace() : error.what()));
  }
  model.train(training);
  if (loss.from_model()) {
    if (output.dim() != 0 || !at::isFloatingType(output.scalar_type())) {
      throw ConfigError("config key 'loss': \"model\": the model's forward(x, y) returned shape " +
                        shape_text(output.sizes()) + " (" + std::string(c10::toString(output.scalar_type())) +
                        ") for a batch of " + std::to_string(n) + "; expected the batch's mean loss, a floating-point scalar");
    }
    return;
  }
  const std::vector<int64_t> expected = {n, data.info.num_classes};
  if (output.sizes() != at::IntArrayRef(expected) || !at::isFloatingType(output.scalar_type())) {
    throw ConfigError("config key 'model': its output for a batch of " + std::to_string(n) + " samples has shape " +
                      shape_text(output.sizes()) + ", and the loss (" + loss.name() + ") needs logits " +
                      shape_text(expected) + ": " + data_text);
  }
}

}  // namespace basin
