#include "basin/core/data/data_pipeline.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "basin/core/base/random.h"

namespace basin {

namespace {
// Stream ids keep the subset, the noise and the epoch shuffles independent.
constexpr uint64_t kSubsetStream = 0x5B5E7;
constexpr uint64_t kNoiseStream = 0x40153;
constexpr uint64_t kEpochStream = 0xE90C0000;
}  // namespace

TensorDataset take_subset(const TensorDataset& dataset, int64_t size, uint64_t seed) {
  if (size <= 0 || size >= dataset.size()) return dataset;
  Rng rng(seed, kSubsetStream);
  auto order = permutation(dataset.size(), rng);
  order.resize(static_cast<std::size_t>(size));
  std::sort(order.begin(), order.end());  // keep the file order among the chosen
  Batch subset = dataset.gather(order);
  return TensorDataset(subset.inputs, subset.targets);
}

int64_t add_label_noise(at::Tensor& targets, double rate, int64_t num_classes, uint64_t seed) {
  if (rate <= 0) return 0;
  if (num_classes < 2) throw std::invalid_argument("label noise needs at least two classes");
  auto labels = targets.contiguous();
  auto* data = labels.data_ptr<int64_t>();
  Rng rng(seed, kNoiseStream);
  int64_t replaced = 0;
  for (int64_t i = 0; i < labels.numel(); ++i) {
    if (rng.uniform() >= rate) continue;
    // A uniform class other than the true one: draw from num_classes-1 and skip over it.
    int64_t noisy = static_cast<int64_t>(rng.below(static_cast<uint64_t>(num_classes - 1)));
    if (noisy >= data[i]) ++noisy;
    data[i] = noisy;
    ++replaced;
  }
  targets = labels;
  return replaced;
}

std::vector<int64_t> epoch_order(int64_t size, uint64_t seed, int64_t epoch, bool shuffle) {
  if (!shuffle) {
    std::vector<int64_t> order(static_cast<std::size_t>(size));
    std::iota(order.begin(), order.end(), 0);
    return order;
  }
  Rng rng(seed, kEpochStream + static_cast<uint64_t>(epoch));
  return permutation(size, rng);
}

}  // namespace basin
