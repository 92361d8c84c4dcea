#pragma once

#include <memory>
#include <string>

#include "basin/algorithms/sam/sam.h"
#include "basin/algorithms/sam/sam_optimizer.h"
#include "basin/core/config.h"
#include "basin/core/registry.h"
#include "basin/core/state.h"

namespace basin {

/// The optimizer-side algorithms of the SAM family by name: every variant
/// registered with BASIN_REGISTER_SAM (which also registers it as an
/// algorithm for configs). Tests, benchmarks and the study iterate it.
Registry<SAM>& sam_family_registry();

/// The SAM step of the family's algorithm `name` around `base`, for a
/// training loop the user already has: `options` is the algorithm's config
/// object ({"rho": 0.1, "alpha": 0.4}; null or {} for the defaults), checked as in a config (a ConfigError
/// names a bad or unknown key, as 'algorithms.<name>.<key>'). `step(closure)`
/// runs that variant. What the step keeps between steps lives in the
/// variant, which the returned step owns.
std::shared_ptr<SAMOptimizer> make_sam_optimizer(const std::string& name, std::shared_ptr<torch::optim::Optimizer> base,
                                                 const Json& options = Json::object());
/// The same with what a variant may need of the run (see SAM::make_optimizer):
/// the model (ASAM's default "scale", "perturb", the BatchNorm snapshot of
/// the descent), the seed (ESAM), the run's length (AE-SAM, a fractional
/// "start") and the world size.
std::shared_ptr<SAMOptimizer> make_sam_optimizer(const std::string& name, std::shared_ptr<torch::optim::Optimizer> base,
                                                 const Json& options, const State& state);

}  // namespace basin

/// Registers a SAM variant, `Type(Params&)`, under `name` as an algorithm
/// and in the family: `BASIN_REGISTER_SAM("gsam", GSAM);`
#define BASIN_REGISTER_SAM(name, Type)                                                        \
  BASIN_REGISTER(basin::algorithm_registry(), name, Type);                                    \
  [[maybe_unused]] static const bool BASIN_CONCAT(basin_registered_sam_, __LINE__) =         \
      basin::sam_family_registry().add_type<Type>(name)
