// LookSAM (Liu et al., CVPR 2022): SAM's second pass only every k-th SAM
// step. A refresh step is SAM's, and keeps g_v, the part of the perturbed
// gradient g_s orthogonal to the clean g: g_v = g_s - (<g_s, g> / ||g||^2) g.
// The steps between take one pass and step with
//     g + alpha * ||g|| / ||g_v|| * g_v,
// norms over the whole model, as in the paper.
//
//     {"algorithms": {"looksam": {"k": 5, "alpha": 0.7, "rho": 0.05, ...SAM's other keys}}}
//
// g_v and its norm are saved in checkpoints; a refresh whose descent
// overflows (the step is skipped) is retried at the next step. Under
// data-parallel training the ascent is synced ("sync_ascent" stays true): a
// reuse step steps with it. Under ZeRO-1 a rank's descent gradients are
// averaged for its own shard only: each owner computes g_v for its shard
// (the sums over shards) and the owners all-gather it after a refresh, so
// every rank (and rank 0's checkpoint) holds the whole g_v. Cost: 1 + 1/k passes a
// step; one copy of the parameters and two of the gradients (g_v, and the
// clean g kept for the refresh).
#include <cmath>

#include <ATen/ATen.h>

#include "basin/algorithms/sam/clean_gradients.h"
#include "basin/algorithms/sam/sam.h"
#include "basin/algorithms/sam/sam_registry.h"

namespace basin {
class LookSAM : public SAM {
 public:
  explicit LookSAM(Params& params) : SAM(params, SAMDefaults().synced()) {
    k_ = params.integer("k", 5, 1);
    alpha_ = params.number("alpha", 0.7, 0);
    rule_state().keep(orthogonal_);
    rule_state().keep("looks", looks_);
    rule_state().keep("orthogonal_norm", orthogonal_norm_);
  }
  std::string name() const override { return "looksam"; }

  bool descend(StepView& step, std::vector<GroupView>& groups) override {
    // A refresh whose descent overflowed (the step was skipped) is retried at the next step.
    const bool refresh = looks_ % k_ == 0 || orthogonal_norm_ < 0 || refresh_pending_;
    ++looks_;
    if (refresh) {
      refresh_pending_ = true;
      clean_.take(parameters_of(groups));
      return true;
    }
    // Reuse: g + alpha * ||g|| / ||g_v|| * g_v. The synced g is the same on every rank.
    at::NoGradGuard no_grad;
    const double norm = std::sqrt(step.gradient_squares(groups, step.ascent_ranks()).item<double>());
    if (!(orthogonal_norm_ > 1e-12)) return false;  // g_s was parallel to g: nothing to add
    const double scale = alpha_ * norm / orthogonal_norm_;
    for (auto& g : groups) {
      for (std::size_t j = 0; j < g.params.size(); ++j) {
        const at::Tensor& orthogonal = orthogonal_.of(g.params[j]);
        if (orthogonal.defined()) g.grads[j].add_(orthogonal, scale);
      }
    }
    return false;
  }

  void adjust_descent(StepView& step, std::vector<GroupView>& groups) override {
    // g_v = g_s - (<g_s, g> / ||g||^2) g, over the whole model: each rank sums
    // over what it counts (all of it unsharded), where its g_s is averaged.
    at::NoGradGuard no_grad;
    const at::Device device = step.device();  // where the sums can cross ranks (NCCL too)
    at::Tensor sums = at::zeros({2}, at::TensorOptions(at::kDouble).device(device));
    for (const auto& g : groups) {
      for (std::size_t j = 0; j < g.params.size(); ++j) {
        const at::Tensor* clean = clean_.of(g.params[j]);
        if (clean == nullptr || !g.shares[j].counted_here) continue;
        sums += at::stack(
            {(g.grads[j].to(at::kDouble) * clean->to(at::kDouble)).sum(), clean->to(at::kDouble).pow(2).sum()});
      }
    }
    sums = step.sum(sums, Ranks::kJob).cpu();
    const double dot = sums[0].item<double>(), clean_squares = sums[1].item<double>();
    const double along = clean_squares > 0 ? dot / clean_squares : 0;
    // Synced under ZeRO-2, a rank holds its own gradients only, but g_v stays
    // whole on every rank (as under ZeRO-1, and as checkpoints save it): every
    // parameter's from its owner, zero where the owner had no g_s. Elsewhere
    // each parameter with a g_s, from the rank that steps it.
    const bool every_parameter = step.ascent_sharded();
    std::vector<at::Tensor> params, orthogonals;
    std::vector<bool> in_rows;  // per listed parameter: its gradient is in rows
    const std::vector<GroupView> all = every_parameter ? step.parameter_groups() : std::vector<GroupView>();
    for (const auto& g : every_parameter ? all : groups) {
      for (std::size_t j = 0; j < g.params.size(); ++j) {
        const at::Tensor& p = g.params[j];
        const at::Tensor* clean = clean_.of(p);
        at::Tensor& orthogonal = orthogonal_.of(p);
        if (clean == nullptr && !every_parameter) {
          orthogonal = at::Tensor();
          continue;
        }
        if (!g.shares[j].stepped_here) {
          orthogonal = at::empty_like(p);  // another rank's: its owner's g_v arrives below
        } else if (clean == nullptr || !p.grad().defined()) {
          orthogonal = at::zeros_like(p);
        } else {
          orthogonal = p.grad() - *clean * along;
        }
        params.push_back(p);
        orthogonals.push_back(orthogonal);
        in_rows.push_back(g.shares[j].placement.gradient.in_rows());
      }
    }
    step.broadcast_from_owners(params, orthogonals);
    // g_v is whole on every rank now, the same, but where a gradient is in
    // rows: there each rank holds its rows of g_v, and the ranks' squares add up.
    const auto options = at::TensorOptions(at::kDouble).device(device);
    at::Tensor whole_squares = at::zeros({1}, options), row_squares = at::zeros({1}, options);
    for (std::size_t i = 0; i < orthogonals.size(); ++i) {
      (in_rows[i] ? row_squares : whole_squares) += orthogonals[i].to(at::kDouble).pow(2).sum();
    }
    if (step.gradients_in_rows()) row_squares = step.sum(row_squares, Ranks::kJob);
    orthogonal_norm_ = std::sqrt((row_squares + whole_squares).item<double>());
    refresh_pending_ = false;
  }

 protected:
  std::string why_synced_ascent() const override {
    return "steps with the ascent gradient between refreshes, which must be the same on every rank";
  }

 private:
  int64_t k_ = 5;
  double alpha_ = 0.7;
  int64_t looks_ = 0;             // SAM-path steps so far: refresh when looks_ % k == 0
  double orthogonal_norm_ = -1;   // ||g_v||; -1 before the first refresh
  bool refresh_pending_ = false;  // a refresh's descent has not completed yet
  CleanGradients clean_;
  ParameterBuffers orthogonal_{"orthogonal_gradient"};
};

BASIN_REGISTER_SAM("looksam", LookSAM);

}  // namespace basin
