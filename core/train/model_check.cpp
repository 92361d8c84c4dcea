#include "basin/core/train/model_check.h"

#include <algorithm>
#include <string>

#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

#include "basin/core/config/config_error.h"
#include "basin/core/model/eval_mode.h"
#include "basin/core/model/model.h"

namespace basin {
namespace {

// A TorchScript error carries the interpreter's traceback; its last line says what failed.
std::string last_line(const std::exception& error) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&error);
  const std::string text = c10_error != nullptr ? c10_error->what_without_backtrace() : error.what();
  const std::string trimmed = text.substr(0, text.find_last_not_of(" \n") + 1);
  const std::size_t newline = trimmed.rfind('\n');
  const std::string line = newline == std::string::npos ? trimmed : trimmed.substr(newline + 1);
  return line.size() > 300 ? line.substr(0, 300) + "..." : line;
}

/// Token targets [n, T] take logits [n, T, V] over at least the data's vocabulary, and a cross-entropy.
void check_token_logits(const at::Tensor& logits, const at::Tensor& targets, const Loss& loss, int64_t vocabulary,
                        const std::string& data_text) {
  if (loss.name() == "mse") {
    throw ConfigError("config key 'loss': \"mse\" takes one class per sample, and the data's targets are token "
                      "sequences; use \"cross_entropy\"");
  }
  const auto n = targets.size(0), tokens = targets.size(1);
  if (logits.dim() != 3 || logits.size(0) != n || logits.size(1) != tokens || logits.size(2) < vocabulary ||
      !at::isFloatingType(logits.scalar_type())) {
    throw ConfigError("config key 'model': its output for " + std::to_string(n) + " sequences of " +
                      std::to_string(tokens) + " tokens has shape " + c10::str(logits.sizes()) +
                      ", and the loss needs logits [" + std::to_string(n) + ", " + std::to_string(tokens) +
                      ", vocabulary]: " + data_text);
  }
}

/// Token targets are ids below the vocabulary, or the loss's ignore_index.
void check_token_targets(const TensorDataset& split, const std::string& name, const Loss& loss, int64_t vocabulary) {
  if (split.size() == 0 || !split.per_token() || loss.from_model()) return;
  // Windows of a token stream, and ids stored narrow, were checked against the vocabulary as they were read.
  if (split.windowed() || split.targets().scalar_type() != at::kLong) return;
  const at::Tensor& targets = split.targets();
  const at::Tensor wrong = targets.lt(0).logical_or(targets.ge(vocabulary)).logical_and(targets.ne(loss.ignore_index()));
  if (!wrong.any().item<bool>()) return;
  const at::Tensor where = wrong.nonzero()[0];
  const int64_t sample = where[0].item<int64_t>(), token = where[1].item<int64_t>();
  throw ConfigError("config key 'data': the " + name + " split's target of sample " + std::to_string(sample) +
                    ", token " + std::to_string(token) + " is " + std::to_string(targets[sample][token].item<int64_t>()) +
                    "; expected ids 0 to " + std::to_string(vocabulary - 1) + " or loss.ignore_index (" +
                    std::to_string(loss.ignore_index()) + ")");
}

}  // namespace

void check_model_fits_data(Model& model, const DataSplits& data, const Loss& loss, int64_t samples, c10::Device device) {
  const Batch batch = data.train.slice(0, std::min(samples, data.train.size()));
  const int64_t n = batch.size();
  check_token_targets(data.train, "training", loss, data.info.num_classes);
  check_token_targets(data.test, "test", loss, data.info.num_classes);
  const bool ids = at::isIntegralType(batch.inputs.scalar_type(), /*includeBool=*/false);
  const std::string data_text =
      Loss::per_token(batch.targets)
          ? "the data's samples are windows of " + std::to_string(batch.targets.size(1)) +
                " token ids, of a vocabulary of " + std::to_string(data.info.num_classes)
          : "the data's samples are " + c10::str(at::IntArrayRef(data.info.input_shape)) + " in " +
                std::to_string(data.info.num_classes) + " classes";
  if (loss.from_model() && !model.computes_loss()) {
    throw ConfigError("config key 'loss': \"model\" needs a model whose forward(x, y) returns its loss (a "
                      "TorchScript module); this model's forward takes the inputs alone");
  }
  if (!loss.from_model() && !model.gives_logits()) {
    throw ConfigError("config key 'loss': the model's forward needs the targets (forward(x, y)); set \"loss\": "
                      "\"model\" if it returns the loss");
  }
  at::Tensor logits;
  {
    EvalModeScope eval(model);
    at::NoGradGuard no_grad;
    const at::Tensor inputs = batch.inputs.to(device);
    try {
      // The model's own loss is checked by run_loss (a floating-point scalar); then its logits, where it gives them.
      if (loss.from_model()) model.run_loss(inputs, batch.targets.to(device));
      if (model.gives_logits()) logits = model.forward(inputs);
    } catch (const ConfigError&) {
      throw;
    } catch (const std::exception& error) {
      throw ConfigError("config key 'model': the model fails on a batch of " + std::to_string(n) +
                        " training samples (" + data_text + "): " + last_line(error) +
                        (ids ? "; the inputs are integers, read as token ids: the model must start with an embedding "
                               "(\"gpt\", or a TorchScript module), or, for images, save them as floats (X.float())"
                             : ""));
    }
  }
  if (!logits.defined()) return;
  if (Loss::per_token(batch.targets)) {
    check_token_logits(logits, batch.targets, loss, data.info.num_classes, data_text);
    return;
  }
  // Cross-entropy and mse take any logits past the largest class (data.num_classes may be below the head).
  if (logits.dim() != 2 || logits.size(0) != n || logits.size(1) < data.info.num_classes ||
      !at::isFloatingType(logits.scalar_type())) {
    throw ConfigError("config key 'model': its output for a batch of " + std::to_string(n) + " samples has shape " +
                      c10::str(logits.sizes()) + ", and the loss (" + loss.name() + ") needs logits [" +
                      std::to_string(n) + ", " + std::to_string(data.info.num_classes) + "] (or more classes): " +
                      data_text);
  }
}

}  // namespace basin
