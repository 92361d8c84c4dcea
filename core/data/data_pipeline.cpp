#include "basin/core/data/data_pipeline.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

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

namespace {
constexpr int kFeistelRounds = 6;

uint64_t mixed(uint64_t z) {  // SplitMix64's finalizer
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
}  // namespace

EpochOrder::EpochOrder(int64_t size, uint64_t seed, int64_t epoch, bool shuffle, bool computed)
    : size_(size), shuffle_(shuffle) {
  if (!shuffle) return;
  if (!computed) {
    held_ = epoch_order(size, seed, epoch, true);
    return;
  }
  while ((int64_t{1} << (2 * half_bits_)) < size) ++half_bits_;
  Rng rng(seed, kEpochStream + static_cast<uint64_t>(epoch));
  for (int round = 0; round < kFeistelRounds; ++round) keys_.push_back(rng.next());
}

int64_t EpochOrder::at(int64_t position) const {
  if (!shuffle_) return position;
  if (!held_.empty()) return held_[static_cast<std::size_t>(position)];
  // A balanced Feistel network permutes [0, 2^(2h)); applied again until the
  // value lands below size_, it permutes [0, size_) (cycle walking; the
  // domain is under 4 * size_, so under 4 rounds of walking on average).
  const uint64_t mask = (uint64_t{1} << half_bits_) - 1;
  auto x = static_cast<uint64_t>(position);
  do {
    uint64_t left = x >> half_bits_, right = x & mask;
    for (uint64_t key : keys_) {
      const uint64_t next = left ^ (mixed(right ^ key) & mask);
      left = right;
      right = next;
    }
    x = (left << half_bits_) | right;
  } while (x >= static_cast<uint64_t>(size_));
  return static_cast<int64_t>(x);
}

std::vector<int64_t> EpochOrder::take(int64_t first, int64_t count) const {
  if (first < 0 || count < 0 || first + count > size_) {
    throw std::out_of_range("EpochOrder::take: positions [" + std::to_string(first) + ", " +
                            std::to_string(first + count) + ") of " + std::to_string(size_));
  }
  std::vector<int64_t> samples(static_cast<std::size_t>(count));
  for (int64_t i = 0; i < count; ++i) samples[static_cast<std::size_t>(i)] = at(first + i);
  return samples;
}

}  // namespace basin
