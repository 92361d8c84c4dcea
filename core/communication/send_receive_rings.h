#pragma once

// The collectives basin runs as rings of sends and receives over Gloo
// (its own reduce moves half as much again as a ring, and its reduce-scatter
// is an all-reduce). Internal to core/communication: not installed.

#include <functional>
#include <vector>

#include <ATen/core/Tensor.h>

#include <torch/csrc/distributed/c10d/Work.hpp>

#include "basin/core/base/torch_compat.h"

namespace basin::rings {

/// Issues one send or receive on the group: the communicator decides whether issues are serialized.
using Issue = std::function<c10::intrusive_ptr<c10d::Work>(const std::function<c10::intrusive_ptr<c10d::Work>()>&)>;

/// Sums every rank's `parts` so that part j ends summed at rank j (the
/// others' parts are left partly summed). A part travels in chunks of at
/// most 8 MiB (or a 1024th of it), received into two chunk-sized buffers in
/// turn: no buffer the size of a part, which on a large unit would be the
/// reduce's peak.
void reduce_scatter(compat::CollectiveBackend& group, const Issue& issue, std::vector<at::Tensor>& parts);

/// Copies every rank's pieces[rank] into the others' pieces[rank].
void all_gather(compat::CollectiveBackend& group, const Issue& issue, std::vector<std::vector<at::Tensor>>& pieces);

}  // namespace basin::rings
