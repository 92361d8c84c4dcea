#pragma once

#include <memory>
#include <vector>

#include <ATen/ATen.h>

#include "basin/core/model/adaptable_linear.h"
#include "basin/core/model/model.h"
#include "basin/algorithms/sam/sam_optimizer.h"

namespace basin::test {

/// Two adaptable projections with a tanh between, a bias on the first: the
/// smallest model the rules made for adapters (Flat-LoRA, Bi-LoRA) train.
class TwoProjections : public Model {
 public:
  TwoProjections() {
    at::manual_seed(21);
    fc1 = register_module("fc1", std::make_shared<AdaptableLinear>(at::randn({5, 4}) * 0.5, at::randn({5}) * 0.1));
    fc2 = register_module("fc2", std::make_shared<AdaptableLinear>(at::randn({2, 5}) * 0.5, at::Tensor()));
  }
  at::Tensor forward(const at::Tensor& x) override { return fc2->forward(fc1->forward(x).tanh()); }
  std::shared_ptr<AdaptableLinear> fc1, fc2;

  /// What trains once adapters are attached: each layer's A and B, in order.
  std::vector<at::Tensor> trainable() {
    std::vector<at::Tensor> found;
    for (const auto& p : parameters()) {
      if (p.requires_grad()) found.push_back(p);
    }
    return found;
  }
};

/// The regression the adapter rules' tests train TwoProjections on: step t
/// takes the 16 samples rolled by t.
struct AdapterRegression {
  at::Tensor x, y;
  AdapterRegression() {
    at::manual_seed(4);
    x = at::randn({16, 4});
    y = at::randn({16, 2});
  }
  /// `steps` steps of `step`; returns how many times its closure ran.
  int train(SAMOptimizer& step, TwoProjections& model, int64_t steps) const {
    int calls = 0;
    for (int64_t t = 0; t < steps; ++t) {
      step.step([&] {
        ++calls;
        step.zero_grad();
        at::Tensor loss = (model.forward(x.roll(t, 0)) - y).pow(2).mean();
        loss.backward();
        return loss.detach();
      });
    }
    return calls;
  }
};

}  // namespace basin::test
