#include "basin/algorithms/msam.h"

namespace basin {

MSAM::MSAM(Params& params) : SAM(params) { options_.parts = params.integer("m", 4, 1); }

BASIN_REGISTER(algorithm_registry(), "msam", MSAM);

}  // namespace basin
