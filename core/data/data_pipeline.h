#pragma once

#include <cstdint>
#include <vector>

#include "basin/core/data/dataset.h"

namespace basin {

/// Keeps `size` samples chosen by a seeded shuffle (the class mix stays
/// representative, unlike taking the first `size`).
TensorDataset take_subset(const TensorDataset& dataset, int64_t size, uint64_t seed);

/// Symmetric label noise: each target, with probability `rate`, is replaced
/// by a different class drawn uniformly. Returns how many were replaced.
int64_t add_label_noise(at::Tensor& targets, double rate, int64_t num_classes, uint64_t seed);

/// The order in which epoch `epoch` visits `size` samples: a permutation
/// fixed by (seed, epoch), or 0..size-1 when not shuffling.
std::vector<int64_t> epoch_order(int64_t size, uint64_t seed, int64_t epoch, bool shuffle);

/// Epoch `epoch`'s order, read by position. For samples held in memory it is
/// epoch_order's permutation, held whole. For windows of a token stream it is
/// computed per position (a seeded Feistel permutation, cycle-walked onto
/// 0..size-1), so a corpus of any size costs no memory for its order; every
/// rank computes the same one, and a resumed run the same again.
class EpochOrder {
 public:
  EpochOrder(int64_t size, uint64_t seed, int64_t epoch, bool shuffle, bool computed);
  /// The samples at positions [first, first + count).
  std::vector<int64_t> take(int64_t first, int64_t count) const;

 private:
  int64_t at(int64_t position) const;

  int64_t size_;
  bool shuffle_;
  std::vector<int64_t> held_;  // the whole order, or empty when computed
  int half_bits_ = 0;  // the Feistel network's domain is 2^(2 * half_bits_) >= size
  std::vector<uint64_t> keys_;  // one per round
};

}  // namespace basin
