#include "basin/algorithms/gsam.h"

#include <cmath>

#include <ATen/ATen.h>

namespace basin {

namespace {

constexpr double kEps = 1e-12;  // the authors' code's, in both divisions

SAMDefaults gsam_defaults() {
  SAMDefaults defaults;
  defaults.sync_ascent = true;
  return defaults;
}

}  // namespace

GSAM::GSAM(Params& params) : SAM(params, gsam_defaults()) { alpha_ = params.number("alpha", 0.4, 0); }

std::shared_ptr<SAMOptimizer> GSAM::make_optimizer(std::shared_ptr<torch::optim::Optimizer> base,
                                                   const SAMOptions& options, const State& /*state*/) {
  return std::make_shared<GSAMOptimizer>(std::move(base), options, alpha_);
}

GSAMOptimizer::GSAMOptimizer(std::shared_ptr<torch::optim::Optimizer> base, SAMOptions options, double alpha)
    : SAMOptimizer(std::move(base), options), alpha_(alpha) {}

std::vector<SAMOptimizer::Perturbation> GSAMOptimizer::perturbation(std::vector<GroupView>& groups) {
  clean_.take(parameters_of(groups_with_grads()));  // every parameter's, perturbed or not
  return SAMOptimizer::perturbation(groups);
}

void GSAMOptimizer::adjust_descent_gradients(std::vector<GroupView>& groups) {
  at::NoGradGuard no_grad;
  // <g, g_p>, ||g_p||^2, ||g||^2 over the parameters this rank owns, in fp32.
  at::Tensor sums;
  for (const auto& g : groups) {
    for (std::size_t j = 0; j < g.params.size(); ++j) {
      const at::Tensor* clean = clean_.of(g.params[j]);
      if (clean == nullptr || !owns(g.params[j])) continue;
      const at::Tensor perturbed = g.grads[j].to(at::kFloat);
      const at::Tensor plain = clean->to(at::kFloat);
      const at::Tensor part = at::stack({(perturbed * plain).sum(), perturbed.pow(2).sum(), plain.pow(2).sum()});
      sums = sums.defined() ? sums + part : part;
    }
  }
  if (!sums.defined()) {  // a rank that owns nothing joins the sum all the same
    at::Device device = at::kCPU;
    for (const auto& g : groups) {
      if (!g.grads.empty()) device = g.grads.front().device();
    }
    sums = at::zeros({3}, at::TensorOptions(at::kFloat).device(device));
  }
  const at::Tensor total = sum_over_shards(sums).to(at::kDouble).cpu();
  const double dot = total[0].item<double>();
  const double perturbed_norm = std::sqrt(total[1].item<double>());
  const double clean_norm = std::sqrt(total[2].item<double>());
  const double cosine = dot / (perturbed_norm * clean_norm + kEps);
  const double along = cosine * clean_norm / (perturbed_norm + kEps);  // g_perp = g - along * g_p
  for (auto& g : groups) {
    for (std::size_t j = 0; j < g.params.size(); ++j) {
      const at::Tensor* clean = clean_.of(g.params[j]);
      if (clean == nullptr || !owns(g.params[j])) continue;
      const at::Tensor orthogonal = *clean - g.grads[j] * along;
      g.grads[j].add_(orthogonal, -alpha_);
    }
  }
}

BASIN_REGISTER(algorithm_registry(), "gsam", GSAM);

}  // namespace basin
