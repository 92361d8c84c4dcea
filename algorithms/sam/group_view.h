#pragma once

#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "basin/core/sharding/placement.h"

namespace torch::optim { class OptimizerOptions; }

namespace basin {

/// Where one parameter of a view is across the ranks, as a rule reads it
/// (ShardedParameters; everything here when the base steps no shards).
struct ParameterShare {
  ParameterPlacement placement;
  /// This rank steps it (all of it, or its rows): under ZeRO-1 its descent
  /// gradient is the average over ranks here.
  bool stepped_here = true;
  /// This rank adds its values into a sum over the whole model, which
  /// StepView::sum among the job completes (ShardedParameters::counted_here).
  /// A rule's sums go by it, never by stepped_here.
  bool counted_here = true;
  /// The first of the parameter's rows (dim 0) this rank's tensor holds: 0
  /// but where it is in rows (ShardedParameters::first_row).
  int64_t first_row = 0;
};

/// The parameters of one param group that take part in a phase of the SAM
/// step, with the group's options (one source of truth with the base's) and
/// where each parameter is placed.
struct GroupView {
  std::vector<at::Tensor> params;
  std::vector<at::Tensor> grads;  // one per parameter, or empty where the views hold none
  std::vector<ParameterShare> shares;  // one per parameter
  torch::optim::OptimizerOptions* options = nullptr;
  /// The group's hyper-parameter `name` ("lr", "rho", "eta").
  double get(const std::string& name) const;
};

/// e = scale * direction for every parameter of one group.
struct Perturbation {
  std::vector<at::Tensor> directions;  // one per parameter of the group's view
  double scale = 0;                    // 0: the group stays at w
};

/// The parameters of `groups`, in order.
std::vector<at::Tensor> parameters_of(const std::vector<GroupView>& groups);

}  // namespace basin
