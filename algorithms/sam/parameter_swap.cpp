#include "basin/algorithms/sam/parameter_swap.h"

#include <stdexcept>
#include <string>

#include <ATen/ATen.h>

namespace basin {

void ParameterSwap::move(const std::vector<GroupView>& groups, const std::vector<Perturbation>& perturbation,
                         const Owns& owns) {
  if (perturbation.size() != groups.size()) {
    throw std::logic_error("SAM: perturbation() returned " + std::to_string(perturbation.size()) + " groups for " +
                           std::to_string(groups.size()));
  }
  for (std::size_t k = 0; k < groups.size(); ++k) {
    if (perturbation[k].scale != 0 && perturbation[k].directions.size() != groups[k].params.size()) {
      throw std::logic_error("SAM: perturbation() gave " + std::to_string(perturbation[k].directions.size()) +
                             " directions for the " + std::to_string(groups[k].params.size()) + " parameters of group " +
                             std::to_string(k));
    }
  }
  bool any_moved = false;
  for (const auto& p : perturbation) any_moved = any_moved || p.scale != 0;
  if (!any_moved) return;  // every group at w (Flat-LoRA, Bi-LoRA, a clean rank): no copies to hold
  std::vector<at::Tensor> own;
  for (const auto& g : groups) {
    for (const auto& p : g.params) {
      if (owns(p)) own.push_back(p);
    }
  }
  perturbed_.match(own);
  std::size_t b = 0;
  for (std::size_t k = 0; k < groups.size(); ++k) {
    for (std::size_t j = 0; j < groups[k].params.size(); ++j) {
      at::Tensor param = groups[k].params[j];
      const bool mine = owns(param);
      // Scale 0 (a group at w) needs no directions; an undefined one leaves its parameter at w.
      if (perturbation[k].scale != 0 && perturbation[k].directions[j].defined()) {
        if (mine) {
          at::Tensor& buffer = perturbed_.buffers()[b];
          at::add_out(buffer, param, perturbation[k].directions[j], perturbation[k].scale);
          swapped_.emplace_back(param, param.data());
          param.set_data(buffer);
        } else {
          param.add_(perturbation[k].directions[j], perturbation[k].scale);
        }
      }
      if (mine) ++b;
    }
  }
}

void ParameterSwap::restore() {
  for (auto it = swapped_.rbegin(); it != swapped_.rend(); ++it) it->first.set_data(it->second);
  swapped_.clear();
}

}  // namespace basin
