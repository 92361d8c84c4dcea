#include "basin/core/data/dataset.h"

#include <stdexcept>

#include <ATen/ATen.h>

namespace basin {

TensorDataset::TensorDataset(at::Tensor inputs, at::Tensor targets)
    : inputs_(std::move(inputs)), targets_(std::move(targets)) {
  if (inputs_.size(0) != targets_.size(0)) {
    throw std::invalid_argument("TensorDataset: " + std::to_string(inputs_.size(0)) + " inputs but " +
                                std::to_string(targets_.size(0)) + " targets");
  }
}

namespace {

/// Ids stored narrow (bytes, int32 tokens) reach models as int64, as embeddings and losses take them.
at::Tensor widened(const at::Tensor& values) {
  return at::isIntegralType(values.scalar_type(), /*includeBool=*/false) && values.scalar_type() != at::kLong
             ? values.to(at::kLong)
             : values;
}

}  // namespace

Batch TensorDataset::gather(const std::vector<int64_t>& indices) const {
  auto index = at::tensor(indices, at::kLong);
  return {widened(inputs_.index_select(0, index)), widened(targets_.index_select(0, index)), index};
}

Batch TensorDataset::slice(int64_t begin, int64_t end) const {
  return {widened(inputs_.slice(0, begin, end)), widened(targets_.slice(0, begin, end)), at::arange(begin, end, at::kLong)};
}

Registry<DataSplits, int64_t>& dataset_registry() {
  static Registry<DataSplits, int64_t> registry("dataset");
  return registry;
}

}  // namespace basin
