#pragma once

// What the sharded-checkpoint readers share (sharded_checkpoint.cpp,
// resharding.cpp): the dicts of a checkpoint, and which rows of a
// parameter a rank holds (rows_layout.h).

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "basin/core/base/checkpoint_error.h"
#include "basin/core/base/state_dict.h"

namespace basin::checkpoint_rows {

inline StateDict dict_at(const StateDict& dict, const std::string& key, const std::string& file) {
  if (!dict.contains(key) || !dict.at(key).isGenericDict()) {
    throw CheckpointError("checkpoint '" + file + "' has no '" + key + "' dict");
  }
  return dict.at(key).toGenericDict();
}

inline std::string shape_text(c10::IntArrayRef shape) {
  std::ostringstream text;
  text << shape;
  return text.str();
}

/// The rows [first, first + count) of a parameter of `shape` that `rank` of
/// `world_size` holds: c = ceil(d / world_size) rows each, the last ranks
/// fewer or none; a 0-dimensional parameter is one row.
struct Rows {
  int64_t first = 0;
  int64_t count = 0;
};
inline Rows rows_held(const std::vector<int64_t>& shape, int rank, int world_size) {
  const int64_t rows = shape.empty() ? 1 : shape[0];
  const int64_t each = (rows + world_size - 1) / world_size;
  return Rows{std::min(rows, rank * each), std::clamp<int64_t>(rows - rank * each, 0, each)};
}
/// The shape of `count` rows of a parameter of `shape`.
inline std::vector<int64_t> rows_shape(const std::vector<int64_t>& shape, int64_t count) {
  std::vector<int64_t> piece = shape.empty() ? std::vector<int64_t>{1} : shape;
  piece[0] = count;
  return piece;
}

/// `algorithms` with each rule's per-parameter state ("parameters") made by `change(rule name)`.
template <class Change>
StateDict with_rule_states(const StateDict& algorithms, Change&& change) {
  StateDict changed = algorithms.copy();
  for (const auto& entry : algorithms) {
    if (!entry.value().isGenericDict()) continue;
    const StateDict rule = entry.value().toGenericDict();
    if (!rule.contains("parameters") || !rule.at("parameters").isGenericDict()) continue;
    StateDict copy = rule.copy();
    copy.insert_or_assign("parameters", change(entry.key().toStringRef()));
    changed.insert_or_assign(entry.key(), copy);
  }
  return changed;
}

}  // namespace basin::checkpoint_rows
