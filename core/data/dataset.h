#pragma once

#include <cstdint>
#include <memory>
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

class TokenStream;

/// Samples held in memory: inputs [N, ...] (float, or integer ids for models
/// that start with an embedding), targets [N] class indices or [N, T] token
/// ids, ids possibly stored narrow (uint8, int32). Or a language corpus's
/// windows, cut from its token stream as batches are gathered: window k is
/// x = ids [k * block, (k + 1) * block) and y the same shifted by one, so
/// nothing is held per window. Batches carry ids as int64.
class TensorDataset {
 public:
  TensorDataset() = default;
  TensorDataset(at::Tensor inputs, at::Tensor targets);
  /// The windows of `stream` (at least block + 1 ids long).
  TensorDataset(TokenStream stream, int64_t block);

  int64_t size() const;
  /// Whether targets are token sequences ([N, T]), not one class per sample.
  bool per_token() const;
  /// Whether the samples are windows of a token stream, read at gather time.
  bool windowed() const { return stream_ != nullptr; }
  /// The stream windows are cut from (windowed datasets only).
  const TokenStream& stream() const;
  /// Samples held in memory. A windowed dataset holds none: these throw
  /// std::logic_error saying so (gather or slice it instead).
  const at::Tensor& inputs() const;
  const at::Tensor& targets() const;
  at::Tensor& mutable_targets();

  /// The samples at `indices`, in that order.
  Batch gather(const std::vector<int64_t>& indices) const;
  /// Samples [begin, end).
  Batch slice(int64_t begin, int64_t end) const;

 private:
  Batch windows(const at::Tensor& indices) const;

  at::Tensor inputs_;
  at::Tensor targets_;
  std::shared_ptr<const TokenStream> stream_;
  int64_t block_ = 0;
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
