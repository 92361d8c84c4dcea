// Data saved in Python, one file per split:
//
//     torch.save({"x": X, "y": Y}, "train.pt")   # X [N, ...] floating point, Y [N] integer labels
//     torch.save({"x": X, "y": Y}, "train.pt")   # X [N, T] token ids, Y [N, T] next tokens (a language model)
//
//     {"data": {"name": "tensors", "train": "train.pt", "test": "test.pt", "num_classes": 10}}
//
// Integer x are ids, for models that start with an embedding. Token targets
// may hold the loss's ignore_index (default -100) where a token counts for
// nothing. "num_classes" (of tokens: the vocabulary) defaults to the largest
// label (or id) of both splits plus one (at least 2). The
// files go through the checks init_from's do (core/serialization); what
// does not fit (a dtype, a shape, x and y of different lengths, a label out
// of range, a non-finite input) is a ConfigError naming the key, the file
// and what was expected.
#include <ATen/ATen.h>

#include "basin/core/data/dataset.h"
#include "basin/core/serialization/torch_save_file.h"

namespace basin {
namespace {

std::string shape_text(at::IntArrayRef sizes) {
  std::string text = "[";
  for (std::size_t i = 0; i < sizes.size(); ++i) text += (i ? ", " : "") + std::to_string(sizes[i]);
  return text + "]";
}

TensorDataset read_split(Params& params, const std::string& key) {
  const std::string path = params.string(key);
  const std::string where = "config key '" + params.path_of(key) + "': '" + path + "'";
  const c10::IValue value = read_torch_save_file(path, params.path_of(key));
  if (!value.isGenericDict()) throw ConfigError(where + " holds no dict; expected torch.save({\"x\": X, \"y\": Y})");
  const auto dict = value.toGenericDict();
  auto tensor = [&](const char* name) {
    if (!dict.contains(name) || !dict.at(name).isTensor()) {
      throw ConfigError(where + " has no tensor \"" + name + "\"; expected torch.save({\"x\": X, \"y\": Y})");
    }
    return dict.at(name).toTensor();
  };
  const at::Tensor x = tensor("x"), y = tensor("y");
  const bool ids = at::isIntegralType(x.scalar_type(), /*includeBool=*/false);
  if (!ids && !at::isFloatingType(x.scalar_type())) {
    throw ConfigError(where + ": x is " + std::string(c10::toString(x.scalar_type())) +
                      "; expected floating point inputs (in Python: X.float()) or integer token ids");
  }
  if (x.dim() < 2) throw ConfigError(where + ": x has shape " + shape_text(x.sizes()) + "; expected [samples, ...]");
  if (!at::isIntegralType(y.scalar_type(), /*includeBool=*/false)) {
    throw ConfigError(where + ": y is " + std::string(c10::toString(y.scalar_type())) +
                      "; expected integer class labels or token ids (in Python: Y.long())");
  }
  if (y.dim() != 1 && y.dim() != 2) {
    throw ConfigError(where + ": y has shape " + shape_text(y.sizes()) +
                      "; expected [samples] class labels or [samples, tokens] token ids");
  }
  if (x.size(0) != y.size(0)) {
    throw ConfigError(where + ": x holds " + std::to_string(x.size(0)) + " samples and y " +
                      std::to_string(y.size(0)) + "; expected one label per sample");
  }
  if (x.size(0) == 0) throw ConfigError(where + " holds no samples");
  at::Tensor inputs;
  if (ids) {
    inputs = x.detach().to(at::kLong).contiguous();
    if (inputs.min().item<int64_t>() < 0) {
      throw ConfigError(where + ": x holds id " + std::to_string(inputs.min().item<int64_t>()) +
                        "; expected token ids 0, 1, ...");
    }
  } else {
    inputs = x.detach().to(at::kFloat).contiguous();
    const int64_t non_finite = inputs.isfinite().logical_not().sum().item<int64_t>();
    if (non_finite > 0) throw ConfigError(where + ": x holds non-finite values (NaN or inf), " + std::to_string(non_finite) + " of them");
  }
  const at::Tensor labels = y.detach().to(at::kLong).contiguous();
  // Token targets may hold the loss's ignore_index (negative; the trainer checks which).
  if (labels.dim() == 1 && labels.min().item<int64_t>() < 0) {
    throw ConfigError(where + ": y holds label " + std::to_string(labels.min().item<int64_t>()) +
                      "; expected labels 0, 1, ...");
  }
  return TensorDataset(inputs, labels);
}

std::shared_ptr<DataSplits> tensor_files(Params& params, int64_t /*seed*/) {
  auto splits = std::make_shared<DataSplits>();
  splits->train = read_split(params, "train");
  splits->test = read_split(params, "test");
  const auto sample = splits->train.inputs().sizes().slice(1);
  if (splits->test.inputs().sizes().slice(1) != sample) {
    throw ConfigError("config key '" + params.path_of("test") + "': its samples have shape " +
                      shape_text(splits->test.inputs().sizes().slice(1)) + ", the training samples " +
                      shape_text(sample));
  }
  if (splits->test.targets().sizes().slice(1) != splits->train.targets().sizes().slice(1)) {
    throw ConfigError("config key '" + params.path_of("test") + "': its y has shape " +
                      shape_text(splits->test.targets().sizes()) + ", the training y " +
                      shape_text(splits->train.targets().sizes()) + "; expected the same per sample");
  }
  int64_t largest = std::max(splits->train.targets().max().item<int64_t>(), splits->test.targets().max().item<int64_t>());
  if (at::isIntegralType(splits->train.inputs().scalar_type(), /*includeBool=*/false) && splits->train.targets().dim() == 2) {
    // Token ids: inputs and targets share one vocabulary.
    largest = std::max({largest, splits->train.inputs().max().item<int64_t>(), splits->test.inputs().max().item<int64_t>()});
  }
  const int64_t classes = params.integer("num_classes", std::max<int64_t>(largest + 1, 2), 2);
  if (largest >= classes) {
    throw ConfigError("config key '" + params.path_of("num_classes") + "': " + std::to_string(classes) +
                      " classes, but the labels reach " + std::to_string(largest));
  }
  splits->info = DatasetInfo{sample.vec(), classes};
  return splits;
}

[[maybe_unused]] const bool registered = dataset_registry().add("tensors", tensor_files);

}  // namespace
}  // namespace basin
