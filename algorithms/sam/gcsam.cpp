// GCSAM: SAM whose ascent follows the centralized gradient (gradient
// centralization, Yong et al., ECCV 2020, applied to SAM's ascent as
// pytorch_optimizer's SAM does with use_gc). Each tensor of more than one
// dimension has its mean over every dimension but the first taken out,
// gc(g) = g - mean_{dims 1..}(g) (one mean per output unit); 1-D tensors
// (biases, normalization) stay as they are. Then e = rho * gc(g) /
// (||gc(g)|| + epsilon): the norm is of the centralized gradient, so that
// ||e|| = rho as in SAM (pytorch_optimizer norms the raw g). The descent
// gradient and the base step are SAM's.
//
//     {"algorithms": {"gcsam": {"rho": 0.05, ...SAM's other keys}}}
#include <numeric>

#include <ATen/ATen.h>

#include "basin/algorithms/sam/sam.h"
#include "basin/algorithms/sam/sam_registry.h"

namespace basin {

class GCSAM : public SAM {
 public:
  explicit GCSAM(Params& params) : SAM(params) {}
  std::string name() const override { return "gcsam"; }

  std::vector<Perturbation> perturbation(StepView& step, std::vector<GroupView>& groups) override {
    for (auto& g : groups) {
      for (at::Tensor& grad : g.grads) {  // the views' gradients: the parameters' own stay as they are
        if (grad.dim() < 2) continue;
        std::vector<int64_t> dims(static_cast<std::size_t>(grad.dim() - 1));
        std::iota(dims.begin(), dims.end(), 1);
        grad = grad - grad.mean(dims, /*keepdim=*/true);
      }
    }
    return SAM::perturbation(step, groups);
  }
};

BASIN_REGISTER_SAM("gcsam", GCSAM);

}  // namespace basin
