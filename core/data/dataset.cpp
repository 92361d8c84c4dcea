#include "basin/core/data/dataset.h"

#include <stdexcept>
#include <string>

#include <ATen/ATen.h>

#include "basin/core/data/token_stream.h"

namespace basin {

TensorDataset::TensorDataset(at::Tensor inputs, at::Tensor targets)
    : inputs_(std::move(inputs)), targets_(std::move(targets)) {
  if (inputs_.size(0) != targets_.size(0)) {
    throw std::invalid_argument("TensorDataset: " + std::to_string(inputs_.size(0)) + " inputs but " +
                                std::to_string(targets_.size(0)) + " targets");
  }
}

TensorDataset::TensorDataset(TokenStream stream, int64_t block)
    : stream_(std::make_shared<const TokenStream>(std::move(stream))), block_(block) {
  if (block < 1 || stream_->size() < block + 1) {
    throw std::invalid_argument("TensorDataset: windows of " + std::to_string(block) + " need at least " +
                                std::to_string(block + 1) + " ids; the stream holds " + std::to_string(stream_->size()));
  }
}

int64_t TensorDataset::size() const {
  if (stream_) return (stream_->size() - 1) / block_;
  return inputs_.defined() ? inputs_.size(0) : 0;
}

bool TensorDataset::per_token() const { return stream_ != nullptr || (targets_.defined() && targets_.dim() >= 2); }

namespace {

[[noreturn]] void no_samples_held(const char* accessor) {
  throw std::logic_error(std::string("TensorDataset::") + accessor + ": the samples are windows of a token stream, "
                         "read when gathered, and none is held in memory: gather(indices) or slice(begin, end) cuts them");
}

}  // namespace

const at::Tensor& TensorDataset::inputs() const {
  if (stream_) no_samples_held("inputs");
  return inputs_;
}

const at::Tensor& TensorDataset::targets() const {
  if (stream_) no_samples_held("targets");
  return targets_;
}

at::Tensor& TensorDataset::mutable_targets() {
  if (stream_) no_samples_held("mutable_targets");
  return targets_;
}

const TokenStream& TensorDataset::stream() const {
  if (!stream_) throw std::logic_error("TensorDataset::stream: the samples are held in memory, not windows of a stream");
  return *stream_;
}

Batch TensorDataset::windows(const at::Tensor& indices) const {
  const int64_t n = indices.numel();
  at::Tensor rows = at::empty({n, block_ + 1}, at::kLong);
  const int64_t* index = indices.data_ptr<int64_t>();
  int64_t* row = rows.data_ptr<int64_t>();
  const int64_t count = size();
  for (int64_t i = 0; i < n; ++i, row += block_ + 1) {
    if (index[i] < 0 || index[i] >= count) {
      throw std::out_of_range("TensorDataset: window " + std::to_string(index[i]) + " of " + std::to_string(count));
    }
    stream_->read(index[i] * block_, block_ + 1, row);
  }
  return {rows.slice(1, 0, block_).contiguous(), rows.slice(1, 1, block_ + 1).contiguous(), indices};
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
  if (stream_) return windows(index);
  return {widened(inputs_.index_select(0, index)), widened(targets_.index_select(0, index)), index};
}

Batch TensorDataset::slice(int64_t begin, int64_t end) const {
  if (stream_) return windows(at::arange(begin, end, at::kLong));
  return {widened(inputs_.slice(0, begin, end)), widened(targets_.slice(0, begin, end)), at::arange(begin, end, at::kLong)};
}

Registry<DataSplits, int64_t>& dataset_registry() {
  static Registry<DataSplits, int64_t> registry("dataset");
  return registry;
}

}  // namespace basin
