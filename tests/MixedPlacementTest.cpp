// Sharding as placements: a test-only ShardedParameters that places its
// parameters three ways at once (every rank, optimizer state on an owner,
// synced gradient on the owner too) runs every SAM-family rule as one
// process does. No rule knows this way of sharding: they read placements,
// owners and who counts what in a sum, so a way of sharding made of these
// placements needs no rule changed. (Rows beside whole parameters are not
// covered here: rows need zero3's gathering model.)
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include "basin/algorithms/sam/sam_family.h"
#include "basin/algorithms/sam/sam_optimizer.h"
#include "basin/core/communication/communicator.h"
#include "basin/core/engine/pass_request.h"
#include "basin/core/parallel/zero/agreed_gradients.h"
#include "basin/core/sharding/sharded_parameters.h"
#include "distributed_util.h"
#include "test_util.h"

namespace basin {
namespace {

/// Parameter i is placed by i % 3: 0 replicated (every rank steps it, as
/// under ddp), 1 its optimizer state on an owner (as under zero1), 2 its
/// synced gradient there too (as under zero2). Owners take turns by i / 3.
class MixedShards : public torch::optim::Optimizer, public ShardedParameters {
 public:
  MixedShards(const std::vector<at::Tensor>& params, const torch::optim::SGDOptions& options,
              std::shared_ptr<Communicator> communicator)
      : Optimizer({torch::optim::OptimizerParamGroup(params)}, std::make_unique<torch::optim::SGDOptions>(options)),
        params_(params),
        communicator_(std::move(communicator)) {
    std::vector<at::Tensor> stepped_here;
    for (std::size_t i = 0; i < params.size(); ++i) {
      const Placement owner = Placement::owned_by(static_cast<int>(i / 3) % communicator_->world_size());
      ParameterPlacement placed;
      if (i % 3 >= 1) placed.optimizer_state = owner;
      if (i % 3 == 2) placed.gradient = owner;
      placements_[params[i].unsafeGetTensorImpl()] = placed;
      if (owns(params[i])) stepped_here.push_back(params[i]);
    }
    local_ = std::make_shared<torch::optim::SGD>(stepped_here, options);
  }

  at::Tensor step(LossClosure closure) override {
    const at::Tensor loss = step_shard(closure, [] {}, *local_);
    broadcast_parameters();
    return loss;
  }

  ParameterPlacement placement(const at::Tensor& param) const override {
    const auto found = placements_.find(param.unsafeGetTensorImpl());
    if (found == placements_.end()) throw std::invalid_argument("MixedShards: a parameter it was not given");
    return found->second;
  }
  bool owns(const at::Tensor& param) const override {
    const Placement state = placement(param).optimizer_state;
    return state.replicated_everywhere() || state.owner == communicator_->rank();
  }
  void broadcast_parameters() override {
    std::vector<at::Tensor> values;
    for (const auto& p : params_) values.push_back(p.detach());
    broadcast_from_owners(params_, values);
  }
  void broadcast_from_owners(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& values) override {
    at::NoGradGuard no_grad;
    for (std::size_t i = 0; i < params.size(); ++i) {
      const Placement state = placement(params[i]).optimizer_state;
      if (state.replicated_everywhere()) continue;  // every rank computed it
      std::vector<at::Tensor> value{values[i]};
      communicator_->broadcast(value, state.owner);
    }
  }
  Communicator& communicator() override { return *communicator_; }
  torch::optim::Optimizer* local_optimizer() override { return local_.get(); }

  /// A synced backward's end, as a data-parallel mode's sync does it: every
  /// gradient that some rank has averaged over ranks (a rank without one
  /// adds zeros), then kept by the owner alone where the gradient's
  /// placement is an owner. Synced where stepped, a gradient whose state
  /// another rank owns stays this rank's own (as zero1's does).
  void sync_gradients(GradientSync sync) {
    const std::vector<at::Tensor> grads = agreed_gradients(params_, *communicator_);
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (!grads[i].defined()) continue;
      const Placement state = placement(params_[i]).optimizer_state;
      const bool stays_own = sync == GradientSync::kWhereStepped && state.owned() && state.owner != communicator_->rank();
      const at::Tensor own = stays_own ? grads[i].clone() : at::Tensor();
      std::vector<at::Tensor> grad{grads[i]};
      communicator_->all_reduce_sum(grad);  // the owner's average (a reduce to it, done as an all-reduce)
      grads[i].div_(communicator_->world_size());
      if (stays_own) grads[i].copy_(own);
    }
    for (const auto& p : params_) {
      const Placement gradient = placement(p).gradient;
      if (gradient.owned() && gradient.owner != communicator_->rank()) at::Tensor(p).mutable_grad() = at::Tensor();
    }
  }

 private:
  std::vector<at::Tensor> params_;
  std::shared_ptr<Communicator> communicator_;
  std::unordered_map<const c10::TensorImpl*, ParameterPlacement> placements_;
  std::shared_ptr<torch::optim::SGD> local_;
};

struct Net : torch::nn::Module {
  Net()
      : first(register_module("first", torch::nn::Linear(8, 16))),
        second(register_module("second", torch::nn::Linear(16, 16))),
        out(register_module("out", torch::nn::Linear(16, 3))) {}
  at::Tensor forward(const at::Tensor& x) {
    return out->forward(at::tanh(second->forward(at::tanh(first->forward(x)))));
  }
  torch::nn::Linear first, second, out;
};

/// What a variant may need of the run: the seed (ESAM), the run's length
/// (AE-SAM), the model, the ranks (a variant refuses a rank-local ascent
/// among several).
State run_state(std::shared_ptr<torch::nn::Module> model, int world_size) {
  State state;
  state.seed = 7;
  state.max_steps = 6;
  state.model = std::move(model);
  state.world_size = world_size;
  return state;
}

/// Trains `name` for six steps of 64 samples from `initial`: alone over
/// plain SGD without a communicator, else over MixedShards, each rank on
/// its half of every batch (`halves`) or on all of it (each rank's
/// gradient is then the synced one, exactly: what a rank-local ascent, and
/// a rule that chooses samples or splits the batch by rank, need to equal
/// one process). Returns the weights.
test::Weights train(const std::string& name, const Json& keys, const test::Weights& initial,
                    std::shared_ptr<Communicator> communicator, bool halves = false) {
  auto net = std::make_shared<Net>();
  const auto params = net->parameters();
  {
    at::NoGradGuard no_grad;
    for (std::size_t i = 0; i < params.size(); ++i) params[i].copy_(initial[i]);
  }
  const auto options = torch::optim::SGDOptions(0.1).momentum(0.9);
  std::shared_ptr<MixedShards> mixed;
  std::shared_ptr<torch::optim::Optimizer> base;
  if (communicator) {
    mixed = std::make_shared<MixedShards>(params, options, communicator);
    base = mixed;
  } else {
    base = std::make_shared<torch::optim::SGD>(params, options);
  }
  auto sam = make_sam_optimizer(name, base, keys, run_state(net, communicator ? communicator->world_size() : 1));
  const at::Tensor inputs = at::linspace(-2, 2, 128 * 8).reshape({128, 8}).sin();
  const at::Tensor targets = at::arange(128, at::kLong).remainder(3);
  for (int64_t step = 0; step < 6; ++step) {
    int64_t first = (step % 2) * 64, size = 64;
    if (communicator && halves) {
      size = 64 / communicator->world_size();
      first += communicator->rank() * size;
    }
    const auto rows = at::arange(first, first + size, at::kLong);
    const Batch batch{inputs.index_select(0, rows), targets.index_select(0, rows), rows};
    sam->step([&] {
      const PassRequest ask = sam->request();
      if (ask.backward) sam->zero_grad();
      at::AutoGradMode grad_mode(ask.backward);
      const Batch picked = requested_samples(batch, ask);
      const at::Tensor each =
          at::cross_entropy_loss(net->forward(picked.inputs), picked.targets, {}, at::Reduction::None);
      if (ask.backward) {
        each.mean().backward();
        if (mixed && ask.sync != GradientSync::kNone) mixed->sync_gradients(ask.sync);
      }
      return ask.per_sample_losses ? each.detach() : each.mean().detach();
    });
  }
  test::Weights weights;
  for (const auto& p : params) weights.push_back(p.detach().clone());
  return weights;
}

class MixedPlacementTest : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(MixedPlacementTest, EqualsOneProcessWithNoRuleChanged) {
  const auto& [name, given] = GetParam();
  test::Weights initial;
  for (const auto& p : Net().parameters()) initial.push_back(p.detach().clone());
  for (const bool synced : {true, false}) {
    Json keys = Json::parse(given);
    keys["sync_ascent"] = synced;
    if (!synced) {
      try {  // among ranks, a variant that steps with its ascent gradient refuses it rank-local
        auto net = std::make_shared<Net>();
        make_sam_optimizer(name, std::make_shared<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(0.1)),
                           keys, run_state(net, 2));
      } catch (const ConfigError&) {
        continue;
      }
    }
    // ESAM chooses samples by rank, mSAM splits each rank's batch: their ranks see it all.
    const bool halves = synced && name != "esam" && name != "msam";
    const test::Weights alone = train(name, keys, initial, nullptr);
    std::vector<test::Weights> ranks(2);
    test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
      ranks[static_cast<std::size_t>(rank)] = train(name, keys, initial, std::move(communicator), halves);
    });
    EXPECT_GT(test::max_difference(alone, initial), 1e-3) << name << ": it trained";
    EXPECT_LE(test::max_difference(ranks[0], alone), 1e-5) << name << (synced ? ", synced" : ", rank-local");
    EXPECT_EQ(test::max_difference(ranks[0], ranks[1]), 0.0) << name << (synced ? ", synced" : ", rank-local");
  }
}

std::vector<std::pair<std::string, std::string>> whole_family() {
  auto family = test::sam_family();
  family.emplace(family.begin(), "sam", "{}");
  return family;
}

INSTANTIATE_TEST_SUITE_P(Family, MixedPlacementTest, ::testing::ValuesIn(whole_family()),
                         [](const auto& info) { return info.param.first; });

}  // namespace
}  // namespace basin
