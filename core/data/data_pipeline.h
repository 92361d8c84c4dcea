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

}  // namespace basin
