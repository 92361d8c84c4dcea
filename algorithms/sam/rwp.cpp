// RWP (Li et al. 2022, "Efficient generalization improvement guided by
// random weight perturbation", arXiv 2211.11489): SAM's adversarial ascent
// replaced by random noise, so a step takes one pass. Each step runs its
// pass at w + e and the base steps at w with that gradient, where e is
// filter-wise Gaussian noise:
//     e_row ~ N(0, (gamma * ||w_row||)^2 I)
// for each row (dim 0: an output unit of a linear layer, a filter of a
// convolution) of a parameter of two or more dimensions, and
//     e ~ N(0, (gamma * ||w||)^2 I)
// over a vector (biases, normalization weights), as the authors' code
// draws it. gamma 0.01 is their default.
//
//     {"algorithms": {"rwp": {"gamma": 0.01, ...SAM's other keys but rho}}}
//
// This is the paper's one-pass form (the perturbed loss alone; its mixed
// form with the clean gradient is another member). The noise of a row is
// drawn from a seed fixed by (run seed, step, parameter, row): a resumed
// run draws what the uninterrupted one did, ranks draw the same, and under
// zero3 each rank draws its own rows as one process would. The authors'
// code draws fresh noise per rank from the global generator; here data
// parallel ranks share one e, as SAM's synced ascent shares one. Cost: one
// pass and the noise's draw; memory: the copy of w to restore, and e while
// it is applied (about two parameter copies at the peak).
#include <cmath>

#include <ATen/ATen.h>

#include "basin/algorithms/sam/sam.h"
#include "basin/algorithms/sam/sam_registry.h"
#include "basin/core/base/seeded_noise.h"

namespace basin {
namespace {

Params& without_rho(Params& params) {
  if (params.has("rho")) params.fail("rho", "absent: rwp's noise scale is \"gamma\"", params.raw("rho"));
  return params;
}

}  // namespace

class RWP : public SAM {
 public:
  explicit RWP(Params& params) : SAM(without_rho(params)) {
    if (adaptive()) params.fail("adaptive", "false (rwp scales its noise by each filter's norm)", Json(true));
    gamma_ = params.number("gamma", 0.01, 0);
  }
  std::string name() const override { return "rwp"; }

  bool ascent_pass() const override { return false; }

  std::vector<Perturbation> perturbation(SAMOptimizer& step, std::vector<GroupView>& groups) override {
    const int64_t index = step.steps() - 1;  // this step's, counted from 0
    // A vector's scale is its whole norm, summed over the ranks that hold parts of it.
    std::vector<at::Tensor> vector_squares;
    for (const auto& group : groups) {
      for (std::size_t j = 0; j < group.params.size(); ++j) {
        const at::Tensor& p = group.params[j];
        if (p.dim() >= 2) continue;
        vector_squares.push_back(group.shares[j].counted_here ? p.detach().to(at::kFloat).pow(2).sum()
                                                              : at::zeros({}, p.options().dtype(at::kFloat)));
      }
    }
    at::Tensor vector_norms;
    if (!vector_squares.empty()) vector_norms = step.sum_over_shards(at::stack(vector_squares).to(step.device())).cpu().sqrt();

    std::vector<Perturbation> result(groups.size());
    int64_t parameter = 0, vector = 0;
    for (std::size_t k = 0; k < groups.size(); ++k) {
      result[k].scale = gamma_;
      for (std::size_t j = 0; j < groups[k].params.size(); ++j, ++parameter) {
        const at::Tensor& p = groups[k].params[j];
        const int64_t rows = p.dim() == 0 ? 1 : p.size(0);
        const int64_t width = rows == 0 ? 0 : p.numel() / rows;
        const at::Tensor noise = seeded_normal_rows(noise_seed(seed_, index, parameter), groups[k].shares[j].first_row, rows, width);
        at::Tensor scale;
        if (p.dim() >= 2) {
          scale = p.detach().reshape({rows, width}).to(at::kFloat).norm(2, {1}, /*keepdim=*/true).cpu();
        } else {
          scale = vector_norms[vector++];
        }
        result[k].directions.push_back((noise * scale).view(p.sizes()).to(p.device(), p.scalar_type()));
      }
    }
    return result;
  }

 protected:
  void prepare(SAMOptimizer& /*step*/, const State& state) override { seed_ = static_cast<uint64_t>(state.seed); }

 private:
  double gamma_ = 0.01;
  uint64_t seed_ = 0;
};

BASIN_REGISTER_SAM("rwp", RWP);

}  // namespace basin
