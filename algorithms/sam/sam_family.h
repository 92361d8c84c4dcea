#pragma once

#include <memory>
#include <string>

#include "basin/algorithms/sam/sam.h"
#include "basin/algorithms/sam/sam_optimizer.h"
#include "basin/algorithms/sam/sam_registry.h"
#include "basin/core/config/config.h"
#include "basin/core/engine/state.h"

namespace basin {

/// The SAM step of the family's algorithm `name` (any that
/// sam_family_registry() holds) around `base`, for a training loop the user
/// already has: `options` is the algorithm's config object ({"rho": 0.1,
/// "alpha": 0.4}; null or {} for the defaults), checked as in a config (a
/// ConfigError names a bad or unknown key, as 'algorithms.<name>.<key>').
/// `step(closure)` runs that variant. What the variant keeps between steps
/// lives in it, and the returned step owns it.
std::shared_ptr<SAMOptimizer> make_sam_optimizer(const std::string& name, std::shared_ptr<torch::optim::Optimizer> base,
                                                 const Json& options = Json::object());
/// The same with what a variant may need of the run (see SAM::make_optimizer):
/// the model (ASAM's default "scale", "perturb", the BatchNorm snapshot of
/// the descent), the seed (ESAM), the run's length (AE-SAM, a fractional
/// "start") and the world size. A `base` that steps shards of the parameters
/// (a ShardedOptimizer built by hand) is found to be one (shards_of).
std::shared_ptr<SAMOptimizer> make_sam_optimizer(const std::string& name, std::shared_ptr<torch::optim::Optimizer> base,
                                                 const Json& options, const State& state);

}  // namespace basin
