#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "basin/core/config/registry.h"
#include "basin/core/data/batch.h"

namespace basin {

/// What a model needs to know about its data.
struct DatasetInfo {
  DatasetInfo() = default;
  DatasetInfo(std::vector<int64_t> input_shape, int64_t num_classes)
      : input_shape(std::move(input_shape)), num_classes(num_classes) {}

  std::vector<int64_t> input_shape;  // one sample, e.g. {1, 28, 28}
  int64_t num_classes = 0;
  std::string tokenizer;  // the tokenizer.json a text corpus was tokenized with; empty for bytes or ids
};

/// Samples held in memory: inputs [N, ...] (float, or integer ids for models
/// that start with an embedding), targets [N] class indices or [N, T] token
/// ids. Ids may be stored narrow (uint8, int32) and as views of one token
/// stream (a language corpus's windows overlap by a token); batches carry
/// them as int64.
class TensorDataset {
 public:
  TensorDataset() = default;
  TensorDataset(at::Tensor inputs, at::Tensor targets);

  int64_t size() const { return inputs_.defined() ? inputs_.size(0) : 0; }
  const at::Tensor& inputs() const { return inputs_; }
  const at::Tensor& targets() const { return targets_; }
  at::Tensor& mutable_targets() { return targets_; }

  /// The samples at `indices`, in that order.
  Batch gather(const std::vector<int64_t>& indices) const;
  /// Samples [begin, end).
  Batch slice(int64_t begin, int64_t end) const;

 private:
  at::Tensor inputs_;
  at::Tensor targets_;
};

/// A dataset's training and test splits.
struct DataSplits {
  TensorDataset train;
  TensorDataset test;
  DatasetInfo info;
};

/// Datasets by name; factories get the run's seed for anything they draw.
Registry<DataSplits, int64_t>& dataset_registry();

}  // namespace basin
