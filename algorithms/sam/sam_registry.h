#pragma once

#include "basin/core/config/registry.h"
#include "basin/core/engine/algorithm.h"

namespace basin {

class SAM;

/// The optimizer-side algorithms of the SAM family by name: every variant
/// registered with BASIN_REGISTER_SAM (which also registers it as an
/// algorithm for configs). make_sam_optimizer creates from it; tests,
/// benchmarks and the study iterate it.
Registry<SAM>& sam_family_registry();

}  // namespace basin

/// Registers a SAM variant, `Type(Params&)`, under `name` as an algorithm
/// and in the family: `BASIN_REGISTER_SAM("gsam", GSAM);`
#define BASIN_REGISTER_SAM(name, Type)                                                \
  BASIN_REGISTER(basin::algorithm_registry(), name, Type);                            \
  [[maybe_unused]] static const bool BASIN_CONCAT(basin_registered_sam_, __LINE__) = \
      basin::sam_family_registry().add_type<Type>(name)
