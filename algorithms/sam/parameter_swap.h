#pragma once

#include <functional>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "basin/algorithms/sam/sam_rule.h"
#include "basin/core/base/reused_buffers.h"

namespace basin {

/// Moves parameters to w + e and back without a copy of w: w + e is written
/// into buffers allocated once and reused, each parameter takes its
/// buffer's storage, and its own storage (holding w) stays aside untouched
/// until it is swapped back. So w is restored bit-exact by construction
/// (never w + e - e) and SAM keeps one extra copy of what it perturbs.
class ParameterSwap {
 public:
  /// Whether this rank holds a parameter's w to restore (all of them, or
  /// its ZeRO-1 shard). The others are moved in place; their owners'
  /// broadcast brings w back.
  using Owns = std::function<bool(const at::Tensor&)>;

  /// Moves every parameter of `groups` by its group's e. Everything is
  /// checked before the first move, so a bad perturbation (std::logic_error)
  /// leaves w as it was.
  void move(const std::vector<GroupView>& groups, const std::vector<Perturbation>& perturbation, const Owns& owns);
  /// Gives every swapped parameter its own storage back.
  void restore();

  /// The buffers that held w + e, one per parameter this rank owns.
  const std::vector<at::Tensor>& buffers() const { return perturbed_.buffers(); }

 private:
  ReusedBuffers perturbed_;
  std::vector<std::pair<at::Tensor, at::Tensor>> swapped_;  // parameter, its own storage (w)
};

}  // namespace basin
