// Bi-LoRA (Liu, Li, Huang, Yang, Huang, ICLR 2026, arXiv 2508.19564): SAM
// for LoRA adapters in one pass. SAM on the adapters perturbs only their
// subspace and takes two passes; Bi-LoRA gives every adapted layer a second,
// auxiliary adapter B2 A2 that models SAM's perturbation of W:
//     W = W0 + s B1 A1 + s B2 A2,
// and one forward and backward serve both: the main adapter (B1, A1)
// descends with the base optimizer, the auxiliary one ascends (eq. 9):
//     B2 <- B2 + eta2 dL/dB2,  A2 <- A2 + eta2 dL/dA2,
// then, over all layers at once (eq. 10, the paper's global clip),
//     c = sqrt(sum_l ||s B2_l A2_l||_F^2);  if c > rho: B2, A2 *= sqrt(rho / c).
// After training the auxiliary adapters are dropped: export and evaluation
// see W0 + s B1 A1.
//
//     {"algorithms": {"bi_lora": {"rho": 0.05, "rank": 8, "ascent_lr": 5e-4}},
//      "adapters": {"lora": {...}}}
//
// Where the paper is silent, chosen here:
//   - "rank" (r2) defaults to the main adapter's r (the paper's r2 = r1 = 8);
//   - the auxiliary adapter is scaled by the main one's s = alpha / r, so
//     rho bounds the change to W itself, s B2 A2;
//   - it starts as the main one does: A2 by adapters.lora.init, B2 zero (a
//     zero product with both factors zero would never move);
//   - "ascent_lr" (eta2) is a plain gradient step, as eq. 9 writes it; absent,
//     it is the first param group's lr at each step (the paper's eta2 = eta1,
//     scheduled alike);
//   - its gradients are averaged over data-parallel ranks (the authors' DDP
//     syncs every module's), so every rank holds one perturbation; a grad
//     scaler unscales and checks them with the rest, and an overflowing step
//     leaves them unchanged; without a scaler, non-finite ones are left out
//     of the ascent (the trainer's loss check decides the step);
//   - it sees the layer's input without the adapters' dropout, as a change
//     to W would.
// The auxiliary adapters are saved in checkpoints with the rule's state.
// Cost: one more low-rank product per adapted layer in forward and backward;
// memory: the auxiliary adapters and their gradients (as large as LoRA's).
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "basin/algorithms/sam/auxiliary_adapter.h"
#include "basin/algorithms/sam/sam.h"
#include "basin/algorithms/sam/sam_registry.h"
#include "basin/core/base/random.h"
#include "basin/core/communication/communicator.h"
#include "basin/core/config/config_error.h"
#include "basin/core/model/lora.h"
#include "basin/core/optim/loss_scaler.h"

namespace basin {
namespace {

constexpr uint64_t kAuxiliaryStream = 0x42694c6f5241;  // "BiLoRA"

}  // namespace

class BiLoRA : public SAM {
 public:
  explicit BiLoRA(Params& params) : SAM(params, SAMDefaults().synced()) {
    if (adaptive()) params.fail("adaptive", "false (bi_lora's perturbation is its auxiliary adapters)", Json(true));
    if (params.has("perturb")) {
      params.fail("perturb", "absent: bi_lora perturbs every adapted layer (adapters.lora.targets chooses them)",
                  params.raw("perturb"));
    }
    rank_ = params.has("rank") ? params.integer("rank", 8, 1) : 0;
    ascent_lr_ = params.has("ascent_lr") ? params.number("ascent_lr", 0.0, 0) : -1;
  }
  std::string name() const override { return "bi_lora"; }

  bool ascent_pass() const override { return false; }

  /// The main adapters stay at w; the perturbation is the auxiliary adapters, armed for this step's pass.
  std::vector<Perturbation> perturbation(StepView& /*step*/, std::vector<GroupView>& groups) override {
    *armed_ = true;
    return std::vector<Perturbation>(groups.size());  // scale 0: no directions needed
  }
  /// The auxiliary adapters, armed, perturb the pass's forward once they have moved from their start
  /// (B is zero until their first ascent, as a LoRA's is): asked of the tensors, so a resumed run knows too.
  bool perturbs(const std::vector<Perturbation>& /*perturbation*/) const override {
    if (!*armed_) return false;
    if (!moved_) {
      moved_ = std::any_of(adapters_.begin(), adapters_.end(),
                           [](const auto& adapter) { return adapter->B.count_nonzero().template item<int64_t>() > 0; });
    }
    return moved_;
  }

  /// The step is final and its gradients finite: the auxiliary adapters ascend, then are clipped to rho.
  void adjust_descent(StepView& /*step*/, std::vector<GroupView>& groups) override {
    if (!ascended_) return;  // a plain step (interval, start): the auxiliary adapters took no part
    ascended_ = false;
    if (scaler_ == nullptr && !all_finite()) return;  // unscaled: the trainer's loss check decides the step, not this
    const double lr = ascent_lr_ >= 0 ? ascent_lr_ : groups.empty() ? 0.0 : groups.front().get("lr");
    std::vector<at::Tensor> squares;
    for (auto& adapter : adapters_) {
      adapter->A.add_(adapter->A.grad(), lr);
      adapter->B.add_(adapter->B.grad(), lr);
      // ||s B A||_F^2 = s^2 sum((B^T B) * (A A^T)): r x r products, never the [out, in] one.
      const at::Tensor& a = adapter->A;
      const at::Tensor& b = adapter->B;
      squares.push_back((at::matmul(b.t(), b) * at::matmul(a, a.t())).sum() * (adapter->scaling * adapter->scaling));
    }
    const double norm = at::stack(squares).sum().clamp_min(0).sqrt().item<double>();
    const double rho = groups.empty() ? options_.rho : groups.front().get("rho");
    if (norm <= rho) return;
    const double shrink = std::sqrt(rho / norm);
    for (auto& adapter : adapters_) {
      adapter->A.mul_(shrink);
      adapter->B.mul_(shrink);
    }
  }

 protected:
  void prepare(StepView& step, const RunFacts& run) override {
    std::vector<std::pair<std::string, AdaptableLinear*>> layers;
    if (run.model != nullptr) layers = adapted_layers(*run.model);
    if (layers.empty()) {
      throw ConfigError("config key 'adapters.lora': bi_lora pairs each low-rank adapter with an auxiliary one, "
                        "and the model has none; add \"adapters\": {\"lora\": {...}}");
    }
    communicator_ = run.communicator;
    scaler_ = run.scaler;
    at::Generator generator =
        at::detail::createCPUGenerator(Rng(static_cast<uint64_t>(run.seed), kAuxiliaryStream).next());
    for (std::size_t i = 0; i < layers.size(); ++i) {
      AdaptableLinear& layer = *layers[i].second;
      const LoraShape& shape = layer.lora_shape();
      const int64_t rank = rank_ > 0 ? rank_ : shape.rank;
      at::Tensor a = at::empty({rank, layer.in_features()}, at::kFloat);
      if (shape.init == LoraInit::kKaiming) {
        const double bound = 1.0 / std::sqrt(static_cast<double>(layer.in_features()));
        a.uniform_(-bound, bound, generator);
      } else {
        a.normal_(0.0, 1.0 / static_cast<double>(rank), generator);
      }
      auto adapter = std::make_shared<AuxiliaryAdapter>();
      adapter->A = a.to(run.device).requires_grad_(true);
      adapter->B = at::zeros({layer.out_features(), rank}, at::TensorOptions(at::kFloat).device(run.device))
                       .requires_grad_(true);
      adapter->scaling = shape.scaling;
      adapter->armed = armed_;
      layer.set_perturbation(adapter);
      rule_state().keep("auxiliary." + layers[i].first + ".A", adapter->A);
      rule_state().keep("auxiliary." + layers[i].first + ".B", adapter->B);
      adapters_.push_back(std::move(adapter));
    }
    // Armed for this step's pass only: not in a plain step between (interval), not in evaluation.
    step.add_pass_hooks({[this](Pass) {
                           in_pass_ = *armed_;
                           if (!in_pass_) return;
                           for (auto& adapter : adapters_) {
                             adapter->A.mutable_grad() = at::Tensor();
                             adapter->B.mutable_grad() = at::Tensor();
                           }
                         },
                         [this](Pass) { *armed_ = false; },
                         [this](Pass) { return ascent_gradients_finite(); }, nullptr});
  }

  std::string why_synced_ascent() const override {
    return "holds one auxiliary adapter for the whole job (checkpoints keep one), which every rank must ascend alike";
  }

 private:
  /// After the armed pass: the auxiliary gradients averaged over ranks, unscaled and checked.
  bool ascent_gradients_finite() {
    if (!in_pass_) return true;
    in_pass_ = false;
    std::vector<at::Tensor> grads;
    for (auto& adapter : adapters_) {
      for (at::Tensor* t : {&adapter->A, &adapter->B}) {
        if (!t->grad().defined()) t->mutable_grad() = at::zeros_like(*t);  // a layer the loss did not reach
        grads.push_back(t->grad());
      }
    }
    if (communicator_ != nullptr && communicator_->world_size() > 1) {
      communicator_->all_reduce_sum(grads);
      for (auto& g : grads) g.div_(communicator_->world_size());
    }
    ascended_ = true;
    if (scaler_ != nullptr) return ascended_ = scaler_->unscale_and_check(grads, communicator_.get());
    return true;
  }

  /// Whether every auxiliary gradient is finite (the same on every rank: they are averaged).
  bool all_finite() const {
    std::vector<at::Tensor> checks;
    for (const auto& adapter : adapters_) {
      checks.push_back(adapter->A.grad().isfinite().all());
      checks.push_back(adapter->B.grad().isfinite().all());
    }
    return at::stack(checks).all().item<bool>();
  }

  std::shared_ptr<bool> armed_ = std::make_shared<bool>(false);
  std::vector<std::shared_ptr<AuxiliaryAdapter>> adapters_;
  std::shared_ptr<Communicator> communicator_;
  std::shared_ptr<LossScaler> scaler_;
  int64_t rank_ = 0;        // 0: the main adapter's
  double ascent_lr_ = -1;  // < 0: the first group's lr
  bool in_pass_ = false;   // the pass running (or just run) is this rule's armed one
  bool ascended_ = false;  // its auxiliary gradients are in, final and finite
  mutable bool moved_ = false;  // the auxiliary adapters left their start (perturbs)
};

BASIN_REGISTER_SAM("bi_lora", BiLoRA);

}  // namespace basin
