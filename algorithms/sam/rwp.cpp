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
//     {"algorithms": {"rwp": {"gamma": 0.01, "mix": 0.5, ...SAM's other keys but rho}}}
//
// This is the paper's one-pass form (the perturbed loss alone). With
// "mix": lambda it is the paper's mixed form (m-RWP in its sequel, arXiv
// 2404.00357): the base steps with lambda g(w + e) + (1 - lambda) g(w), run
// as the authors run it: the odd ranks take the perturbed gradient and the
// even ranks the clean one, each on its own batch, their losses weighted
// 2 lambda and 2 (1 - lambda), so that the gradients' average over ranks is
// the mix, at one pass's cost. It needs an even number of ranks (one
// process has no halves) and whole parameters on every rank (ddp, zero1,
// zero2; zero3's gathered units would mix the halves' weights). lambda 0.5
// is the authors' default. The noise of a row is
// drawn from a seed fixed by (run seed, step, parameter, row): a resumed
// run draws what the uninterrupted one did, ranks draw the same, and under
// zero3 each rank draws its own rows as one process would. The authors'
// code draws fresh noise per rank from the global generator; here data
// parallel ranks share one e, as SAM's synced ascent shares one. Cost: one
// pass and the noise's draw; memory: the copy of w to restore, and e while
// it is applied (about two parameter copies at the peak).
#include "basin/algorithms/sam/rwp.h"

#include <cmath>

#include <ATen/ATen.h>

#include "basin/algorithms/sam/sam_registry.h"
#include "basin/core/base/seeded_noise.h"
#include "basin/core/config/config_error.h"
#include "basin/core/optim/optimizer_state.h"

namespace basin {
namespace {

Params& without_rho(Params& params) {
  if (params.has("rho")) params.fail("rho", "absent: the noise's scale is \"gamma\"", params.raw("rho"));
  return params;
}

}  // namespace

RWP::RWP(Params& params) : SAM(without_rho(params)) {
  if (adaptive()) params.fail("adaptive", "false (the noise is scaled by each filter's norm)", Json(true));
  gamma_ = params.number("gamma", 0.01, 0);
  if (params.has("mix")) {
    mix_ = params.number("mix", 0.5, 0, 1);
    if (!(mix_ > 0)) params.fail("mix", "a number in (0, 1]: the perturbed gradient's share", Json(mix_));
  }
}

double RWP::pass_loss_weight() const {
  if (mix_ < 0) return 1;
  return clean_rank_ ? 2 * (1 - mix_) : 2 * mix_;
}

bool RWP::perturbs(const std::vector<Perturbation>& perturbation) const {
  return mix_ >= 0 ? gamma_ != 0 : SAM::perturbs(perturbation);
}

std::vector<Perturbation> RWP::perturbation(StepView& step, std::vector<GroupView>& groups) {
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
  if (!vector_squares.empty()) vector_norms = step.sum(at::stack(vector_squares).to(step.device()), Ranks::kJob).cpu().sqrt();

  if (clean_rank_) return std::vector<Perturbation>(groups.size());  // the mixed form's clean half: at w
  std::vector<Perturbation> result(groups.size());
  int64_t parameter = 0, vector = 0;
  for (std::size_t k = 0; k < groups.size(); ++k) {
    result[k].scale = gamma_;
    for (std::size_t j = 0; j < groups[k].params.size(); ++j, ++parameter) {
      const at::Tensor& p = groups[k].params[j];
      const ParameterShare& share = groups[k].shares[j];
      const at::Tensor vector_norm = p.dim() >= 2 ? at::Tensor() : vector_norms[vector++];
      if (perturbs_on_owners() && !share.stepped_here) {  // its owner perturbs it, and the step gathers it here
        result[k].directions.emplace_back();  // undefined: it stays at w here
        continue;
      }
      const int64_t rows = p.dim() == 0 ? 1 : p.size(0);
      const int64_t width = rows == 0 ? 0 : p.numel() / rows;
      const at::Tensor noise = seeded_normal_rows(noise_seed(seed_, index, parameter), share.first_row, rows, width);
      at::Tensor scale = p.dim() >= 2 ? p.detach().reshape({rows, width}).to(at::kFloat).norm(2, {1}, /*keepdim=*/true).cpu()
                                      : vector_norm;
      const at::Tensor divisor = row_divisor(p, rows);
      if (divisor.defined()) scale = scale / divisor;
      result[k].directions.push_back((noise * scale).view(p.sizes()).to(p.device(), p.scalar_type()));
    }
  }
  return result;
}

void RWP::prepare(StepView& step, const RunFacts& run) {
  seed_ = static_cast<uint64_t>(run.seed);
  if (mix_ < 0) return;
  if (run.world_size < 2 || run.world_size % 2 != 0) {
    throw ConfigError(key("mix") + ": the mixed form takes the clean and the perturbed gradient on two halves of "
                      "the ranks, and this job has " + std::to_string(run.world_size) +
                      " (an even number of 2 or more is needed); drop \"mix\" for the one-pass form");
  }
  if (perturbs_on_owners() || step.gradients_in_rows()) {
    throw ConfigError(key("mix") + ": the mixed form perturbs the weights of half the ranks, which needs whole "
                      "parameters on every rank: parallel.mode ddp, zero1 or zero2 (under zero3 the gathered "
                      "units would mix the halves' weights)");
  }
  clean_rank_ = run.rank % 2 == 0;
}

BASIN_REGISTER_SAM("rwp", RWP);

}  // namespace basin
