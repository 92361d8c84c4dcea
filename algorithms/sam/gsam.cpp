// GSAM (Zhuang et al., ICLR 2022): the base steps with
//     g(w + e) - alpha * g_perp,
// where g_perp is the part of the clean gradient g(w) orthogonal to g(w + e);
// it lowers the surrogate gap without raising the perturbed loss. As the
// authors' code: cos = <g, g_p> / (||g_p|| ||g|| + 1e-12),
// g_perp = g - cos ||g|| g_p / (||g_p|| + 1e-12).
//
//     {"algorithms": {"gsam": {"alpha": 0.4, "rho": 0.05, ...SAM's other keys}}}
//
// rho follows the lr as in the paper when a scheduler drives "rho" with the
// lr's schedule and "minimum": rho_min (docs/sam-family.md, GSAM). Under data-parallel
// training both gradients are the synced ones ("sync_ascent" must stay
// true), so every rank decomposes the same vectors; under ZeRO-1 the three
// sums are taken over shards (one all-reduce of 3 numbers). Cost: one more
// copy of the gradients.
#include <cmath>

#include <ATen/ATen.h>

#include "basin/algorithms/sam/clean_gradient_sam.h"
#include "basin/algorithms/sam/sam_registry.h"

namespace basin {
namespace {

constexpr double kEps = 1e-12;  // the authors' code's, in both divisions

}  // namespace

class GSAM : public CleanGradientSAM {
 public:
  explicit GSAM(Params& params) : CleanGradientSAM(params) { alpha_ = params.number("alpha", 0.4, 0); }
  std::string name() const override { return "gsam"; }

  void adjust_descent(StepView& step, std::vector<GroupView>& groups) override {
    at::NoGradGuard no_grad;
    // <g, g_p>, ||g_p||^2, ||g||^2 over the parameters this rank counts, in fp32.
    at::Tensor sums;
    for (const auto& g : groups) {
      for (std::size_t j = 0; j < g.params.size(); ++j) {
        const at::Tensor* clean = clean_gradient(g.params[j]);
        if (clean == nullptr || !g.shares[j].counted_here) continue;
        const at::Tensor perturbed = g.grads[j].to(at::kFloat);
        const at::Tensor plain = clean->to(at::kFloat);
        const at::Tensor part = at::stack({(perturbed * plain).sum(), perturbed.pow(2).sum(), plain.pow(2).sum()});
        sums = sums.defined() ? sums + part : part;
      }
    }
    if (!sums.defined()) {  // a rank that owns nothing joins the sum all the same
      sums = at::zeros({3}, at::TensorOptions(at::kFloat).device(step.device()));
    }
    const at::Tensor total = step.sum(sums, Ranks::kJob).to(at::kDouble).cpu();
    const double dot = total[0].item<double>();
    const double perturbed_norm = std::sqrt(total[1].item<double>());
    const double clean_norm = std::sqrt(total[2].item<double>());
    const double cosine = dot / (perturbed_norm * clean_norm + kEps);
    const double along = cosine * clean_norm / (perturbed_norm + kEps);  // g_perp = g - along * g_p
    for (auto& g : groups) {
      for (std::size_t j = 0; j < g.params.size(); ++j) {
        const at::Tensor* clean = clean_gradient(g.params[j]);
        if (clean == nullptr || !g.shares[j].stepped_here) continue;
        const at::Tensor orthogonal = *clean - g.grads[j] * along;
        g.grads[j].add_(orthogonal, -alpha_);
      }
    }
  }

 protected:
  std::string why_synced_ascent() const override {
    return "decomposes the clean gradient, which must be the same on every rank";
  }

 private:
  double alpha_ = 0.4;
};

BASIN_REGISTER_SAM("gsam", GSAM);

}  // namespace basin
