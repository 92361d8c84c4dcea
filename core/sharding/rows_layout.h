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
///
/// Under HSDP `replicas` groups of `world_size` ranks each hold every row;
/// this rank is rank `rank` of group `replica`, rank
/// `replica * world_size + rank` of the job's `replicas * world_size`.
struct RowsLayout {
  std::vector<std::string> numbering;
  std::map<std::string, std::vector<int64_t>> shapes;
  int rank = 0;
  int world_size = 1;
  int replica = 0;
  int replicas = 1;

  int job_rank() const { return replica * world_size + rank; }
  int job_size() const { return replicas * world_size; }
};

}  // namespace basin
