// mSAM, m-sharpness within one process (Foret et al., 2021; Behdin et al.,
// 2023): the batch is split into m equal parts; each part climbs from its
// own gradient, e_i = rho * g_i / ||g_i||, and the base steps with the mean
// of the parts' descent gradients g_i(w + e_i). Across ranks the rank-local
// ascent already is m-sharpness; this is it within a rank. The closure runs
// on part `SAMOptimizer::part()` of `parts()` and returns that part's mean
// loss (the trainer's reads `state.request`, see PassRequest); one that
// ignores the parts gives SAM's update at m times the cost. Not to be taken
// for Momentum-SAM, which its own paper also calls MSAM: that is
// `momentum_sam`.
//
//     {"algorithms": {"msam": {"m": 4, "rho": 0.05, ...SAM's other keys}}}
//
// Cost: the same two passes' compute over the batch as SAM, in 2m smaller
// passes, plus one copy of the gradients (the parts' descent sum). Under
// data-parallel training each part's descent gradients are synced: m
// all-reduces per step (under ZeRO-1, m reduce-scatters and m - 1 more
// parameter broadcasts). m = 1 is SAM. The batch (data.batch_size) must
// split into m parts of equal microbatches; the first step says so if not.
#include "basin/algorithms/sam/sam.h"
#include "basin/algorithms/sam/sam_registry.h"

namespace basin {

class MSAM : public SAM {
 public:
  explicit MSAM(Params& params) : SAM(params) { options_.parts = params.integer("m", 4, 1); }
  std::string name() const override { return "msam"; }
};

BASIN_REGISTER_SAM("msam", MSAM);

}  // namespace basin
