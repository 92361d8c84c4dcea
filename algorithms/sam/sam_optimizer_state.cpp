// The SAM step's persistence: its counters for checkpoints, and LibTorch's
// archive for a loop of the user's own (torch::save of the optimizer).
#include "basin/algorithms/sam/sam_optimizer.h"

#include <stdexcept>

#include <ATen/ATen.h>
#include <torch/serialize/archive.h>

#include "basin/core/optim/hyperparameters.h"

namespace basin {

ParameterStates SAMOptimizer::parameter_states(const ParameterNumbering& numbering) {
  return basin::parameter_states(*base_, numbering);
}

void SAMOptimizer::load_parameter_states(const ParameterStates& states, const ParameterNumbering& numbering) {
  basin::load_parameter_states(*base_, states, numbering);
}

StateDict SAMOptimizer::counters() const {
  StateDict counters = new_state_dict();
  counters.insert("steps", steps_);
  counters.insert("sam_steps", sam_steps_);
  counters.insert("skipped_steps", skipped_steps_);
  return counters;
}

void SAMOptimizer::load_counters(const StateDict& counters) {
  for (const char* name : {"steps", "sam_steps", "skipped_steps"}) {
    if (!counters.contains(name) || !counters.at(name).isInt()) {
      throw std::invalid_argument(std::string("SAM state has no integer '") + name + "'");
    }
  }
  steps_ = counters.at("steps").toInt();
  sam_steps_ = counters.at("sam_steps").toInt();
  skipped_steps_ = counters.at("skipped_steps").toInt();
}

void SAMOptimizer::save(torch::serialize::OutputArchive& archive) const {
  // Values set on the base since the last step are saved too: agree first.
  const_cast<SAMOptimizer*>(this)->sync_param_groups();
  torch::serialize::OutputArchive base_archive;
  base_->save(base_archive);
  archive.write("base", base_archive);
  archive.write("steps", at::tensor(steps_, at::kLong));
  archive.write("sam_steps", at::tensor(sam_steps_, at::kLong));
  archive.write("skipped_steps", at::tensor(skipped_steps_, at::kLong));
  archive.write("groups", at::tensor(static_cast<int64_t>(param_groups_.size()), at::kLong));
  for (std::size_t i = 0; i < param_groups_.size(); ++i) {
    for (const auto& name : hyperparameter_names(param_groups_[i].options())) {
      archive.write("group/" + std::to_string(i) + "/" + name,
                    at::tensor(get_hyperparameter(param_groups_[i].options(), name), at::kDouble));
    }
  }
}

void SAMOptimizer::load(torch::serialize::InputArchive& archive) {
  sync_param_groups();  // groups added on either side exist on both before values are written
  torch::serialize::InputArchive base_archive;
  archive.read("base", base_archive);
  base_->load(base_archive);
  // A fresh tensor per key: reading into a defined tensor keeps its dtype.
  auto read = [&archive](const std::string& key) {
    at::Tensor value;
    archive.read(key, value);
    return value;
  };
  steps_ = read("steps").item<int64_t>();
  sam_steps_ = read("sam_steps").item<int64_t>();
  skipped_steps_ = read("skipped_steps").item<int64_t>();
  const int64_t groups = read("groups").item<int64_t>();
  if (groups != static_cast<int64_t>(param_groups_.size())) {
    throw std::runtime_error("SAM checkpoint has " + std::to_string(groups) + " param groups, this optimizer " +
                             std::to_string(param_groups_.size()));
  }
  // Group values go to both sides, then the sync records them as agreed.
  for (std::size_t i = 0; i < param_groups_.size(); ++i) {
    for (const auto& name : hyperparameter_names(param_groups_[i].options())) {
      const double value = read("group/" + std::to_string(i) + "/" + name).item<double>();
      set_hyperparameter(param_groups_[i].options(), name, value);
      if (has_hyperparameter(base_->param_groups()[i].options(), name)) {
        set_hyperparameter(base_->param_groups()[i].options(), name, value);
      }
    }
  }
  sync_.start(*this, *base_);
}

}  // namespace basin
