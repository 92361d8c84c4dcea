#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace basin {

/// Which rows of every parameter one rank of a sharded (zero3) run holds,
/// as its checkpoint file saves them: parameter `numbering[i]` is the
/// optimizer's i-th (optimizer_state.h's ParameterNumbering), `shapes` has
/// every parameter's whole shape by the model's names, and rank r of
/// `world_size` holds rows [r c, min(d, (r + 1) c)) of a d-row parameter
/// (its first dimension; one row for a 0-dimensional one), c = ceil(d / world_size).
struct RowsLayout {
  std::vector<std::string> numbering;
  std::map<std::string, std::vector<int64_t>> shapes;
  int rank = 0;
  int world_size = 1;
};

}  // namespace basin
