#pragma once

// Independent references for the SAM tests: plain LibTorch tensor ops and
// autograd only, no basin code, so that the tests compare the library
// against the formulas rather than against itself.

#include <cmath>
#include <functional>
#include <vector>

#include <gtest/gtest.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/sgd.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

namespace basin::test {

using Tensors = std::vector<at::Tensor>;
using LossFn = std::function<at::Tensor(const Tensors&)>;

inline Tensors clone_all(const Tensors& ts) {
  Tensors out;
  for (const auto& t : ts) out.push_back(t.detach().clone());
  return out;
}

/// ||ts||, over all of them.
inline double norm_of(const Tensors& ts) {
  double squares = 0;
  for (const auto& t : ts) squares += t.pow(2).sum().item<double>();
  return std::sqrt(squares);
}

/// w + scale * direction.
inline Tensors moved(const Tensors& w, const Tensors& direction, double scale) {
  Tensors out;
  for (std::size_t i = 0; i < w.size(); ++i) out.push_back(w[i] + direction[i] * scale);
  return out;
}

/// Gradient of loss(w) at w.
inline Tensors gradient_at(const LossFn& loss, const Tensors& w) {
  Tensors leaves;
  for (const auto& t : w) leaves.push_back(t.detach().clone().requires_grad_(true));
  return torch::autograd::grad({loss(leaves)}, leaves);
}

/// The gradient at w + rho * d / (||d|| + eps), for a direction d a variant chooses.
inline Tensors gradient_after(const LossFn& loss, const Tensors& w, const Tensors& d, double rho, double eps) {
  return gradient_at(loss, moved(w, d, rho / (norm_of(d) + eps)));
}

/// SAM's descent gradient: g(w + rho_k * g / ||g||), with a per-tensor rho.
inline Tensors sam_gradient(const LossFn& loss, const Tensors& w, const std::vector<double>& rho, double eps = 1e-12) {
  const Tensors g = gradient_at(loss, w);
  double squares = 0;
  for (const auto& t : g) squares += t.pow(2).sum().item<double>();
  const double norm = std::sqrt(squares);
  Tensors perturbed;
  for (std::size_t i = 0; i < w.size(); ++i) perturbed.push_back(w[i] + g[i] * (rho[i] / (norm + eps)));
  return gradient_at(loss, perturbed);
}

/// ASAM's descent gradient: e = rho * T^2 g / ||T g||, T = |w| + eta.
inline Tensors asam_gradient(const LossFn& loss, const Tensors& w, double rho, double eta, double eps = 1e-12) {
  const Tensors g = gradient_at(loss, w);
  double squares = 0;
  for (std::size_t i = 0; i < w.size(); ++i) squares += ((w[i].abs() + eta) * g[i]).pow(2).sum().item<double>();
  const double norm = std::sqrt(squares);
  Tensors perturbed;
  for (std::size_t i = 0; i < w.size(); ++i) {
    perturbed.push_back(w[i] + (w[i].abs() + eta).pow(2) * g[i] * (rho / (norm + eps)));
  }
  return gradient_at(loss, perturbed);
}

// A small non-linear regression: loss(w1, w2) = mean((tanh(x w1) w2 - y)^2).
struct Problem {
  at::Tensor x, y;
  Problem() {
    at::manual_seed(11);
    x = at::randn({16, 4});
    y = at::randn({16, 2});
  }
  at::Tensor loss(const Tensors& w) const { return (x.matmul(w[0]).tanh().matmul(w[1]) - y).pow(2).mean(); }
  test::LossFn fn() const {
    return [this](const Tensors& w) { return loss(w); };
  }
  Tensors initial() const { return {at::randn({4, 3}), at::randn({3, 2})}; }
};

inline Tensors leaves(const Tensors& values) {
  Tensors out;
  for (const auto& v : values) out.push_back(v.detach().clone().requires_grad_(true));
  return out;
}

inline torch::optim::Optimizer::LossClosure closure_for(torch::optim::Optimizer& optimizer, const Problem& problem, const Tensors& w,
                                   int* calls = nullptr) {
  return [&optimizer, &problem, w, calls] {
    if (calls != nullptr) ++*calls;
    optimizer.zero_grad();
    at::Tensor loss = problem.loss(w);
    loss.backward();
    return loss.detach();
  };
}

inline void expect_close(const Tensors& actual, const Tensors& expected, double tolerance = 1e-6) {
  ASSERT_EQ(actual.size(), expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) {
    EXPECT_TRUE(at::allclose(actual[i], expected[i], tolerance, tolerance))
        << "tensor " << i << " max diff " << (actual[i] - expected[i]).abs().max().item<double>();
  }
}

/// SGD-momentum over w[0] (lr 0.1, weight decay 0.01) and w[1] (lr 0.05, no decay), two groups.
inline std::shared_ptr<torch::optim::SGD> two_group_sgd(const Tensors& w) {
  auto sgd = std::make_shared<torch::optim::SGD>(
      std::vector<torch::optim::OptimizerParamGroup>{torch::optim::OptimizerParamGroup({w[0]}),
                                                     torch::optim::OptimizerParamGroup({w[1]})},
      torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(0.01));
  sgd->param_groups()[1].options().set_lr(0.05);
  static_cast<torch::optim::SGDOptions&>(sgd->param_groups()[1].options()).weight_decay(0.0);
  return sgd;
}

/// SGD with momentum and weight decay (PyTorch's definition, no dampening).
struct SgdReference {
  double lr, momentum, weight_decay;
  Tensors buffers;
  void step(Tensors& w, const Tensors& g, const std::vector<double>& lrs, const std::vector<double>& decays) {
    for (std::size_t i = 0; i < w.size(); ++i) {
      at::Tensor d = g[i] + w[i] * decays[i];
      if (buffers.size() <= i) buffers.push_back(d.clone());
      else buffers[i] = buffers[i] * momentum + d;
      w[i] = w[i] - buffers[i] * lrs[i];
    }
  }
};

/// Adam (PyTorch's definition, L2 weight decay, no amsgrad).
struct AdamReference {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  int64_t t = 0;
  Tensors m, v;
  void step(Tensors& w, const Tensors& g, const std::vector<double>& lrs) {
    ++t;
    for (std::size_t i = 0; i < w.size(); ++i) {
      if (m.size() <= i) {
        m.push_back(at::zeros_like(w[i]));
        v.push_back(at::zeros_like(w[i]));
      }
      m[i] = m[i] * beta1 + g[i] * (1 - beta1);
      v[i] = v[i] * beta2 + g[i].pow(2) * (1 - beta2);
      const double c1 = 1 - std::pow(beta1, static_cast<double>(t));
      const double c2 = 1 - std::pow(beta2, static_cast<double>(t));
      w[i] = w[i] - (m[i] / c1) / ((v[i] / c2).sqrt() + eps) * lrs[i];
    }
  }
};

}  // namespace basin::test
