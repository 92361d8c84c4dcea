// Sharding as placements: a test-only ShardedParameters that places its
// parameters several ways at once runs every SAM-family rule as one process
// does. No rule knows these ways of sharding: they read placements, owners
// and who counts what in a sum, so a way of sharding made of these
// placements needs no rule changed. Two mixes: every rank, optimizer state
// on an owner and synced gradient there too (all whole, synced or
// rank-local); and rows beside those whole parameters (the shape of HSDP
// beside frozen or small parameters), where the ascent is synced.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
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

/// Where parameter i of `world_size` ranks' model is placed.
using PlacementPlan = std::function<ParameterPlacement(std::size_t i, int world_size)>;

/// Places each parameter as `plan` says. Owners hold whole tensors; where a
/// parameter is in rows, the optimizer steps this rank's rows of it (a
/// leaf tensor of its own, stepped()), as zero3 does, and gather_rows()
/// makes the model's parameter whole from every rank's rows before a pass.
class MixedShards : public torch::optim::Optimizer, public ShardedParameters {
 public:
  MixedShards(const std::vector<at::Tensor>& params, const PlacementPlan& plan, const torch::optim::SGDOptions& options,
              std::shared_ptr<Communicator> communicator)
      : Optimizer({torch::optim::OptimizerParamGroup(stepped_for(params, plan, *communicator))},
                  std::make_unique<torch::optim::SGDOptions>(options)),
        params_(params),
        communicator_(std::move(communicator)) {
    const auto& stepped_tensors = param_groups().front().params();
    std::vector<at::Tensor> stepped_here;
    for (std::size_t i = 0; i < params.size(); ++i) {
      const ParameterPlacement placed = plan(i, communicator_->world_size());
      stepped_.push_back(stepped_tensors[i]);
      placements_[params[i].unsafeGetTensorImpl()] = placed;
      placements_[stepped_tensors[i].unsafeGetTensorImpl()] = placed;
      if (owns(stepped_tensors[i])) stepped_here.push_back(stepped_tensors[i]);
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
    return !state.owned() || state.owner == communicator_->rank();
  }
  at::Tensor stepped(const at::Tensor& param) const override {
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (params_[i].is_same(param)) return stepped_[i];
    }
    return param;
  }
  int64_t first_row(const at::Tensor& param) const override {
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (!params_[i].is_same(param) && !stepped_[i].is_same(param)) continue;
      if (!placement(param).parameter.in_rows()) return 0;
      const int64_t rows = params_[i].size(0), world = communicator_->world_size();
      return std::min(rows, communicator_->rank() * ((rows + world - 1) / world));  // as chunk() splits them
    }
    throw std::invalid_argument("MixedShards: a parameter it was not given");
  }
  void broadcast_parameters() override { broadcast_from_owners(stepped_, stepped_); }
  void broadcast_from_owners(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& values) override {
    at::NoGradGuard no_grad;
    for (std::size_t i = 0; i < params.size(); ++i) {
      const Placement state = placement(params[i]).optimizer_state;
      if (!state.owned()) continue;  // every rank computed it, or its own rows of it
      std::vector<at::Tensor> value{values[i].detach()};
      communicator_->broadcast(value, state.owner);
    }
  }
  Communicator& communicator() override { return *communicator_; }
  torch::optim::Optimizer* local_optimizer() override { return local_.get(); }

  /// The model's parameters in rows made whole from every rank's rows (a
  /// sum of each rank's rows over zeros elsewhere). Collective.
  void gather_rows() {
    at::NoGradGuard no_grad;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (!placement(params_[i]).parameter.in_rows()) continue;
      std::vector<at::Tensor> whole{at::zeros_like(params_[i])};
      whole.front().chunk(communicator_->world_size()).at(communicator_->rank()).copy_(stepped_[i]);
      communicator_->all_reduce_sum(whole);
      params_[i].copy_(whole.front());
    }
  }

  /// A synced backward's end, as a data-parallel mode's sync does it: every
  /// gradient that some rank has averaged over ranks (a rank without one
  /// adds zeros), then kept by the owner alone where the gradient's
  /// placement is an owner, and each rank's rows where it is in rows.
  /// Synced where stepped, a gradient whose state another rank owns stays
  /// this rank's own (as zero1's does).
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
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const Placement gradient = placement(params_[i]).gradient;
      if (gradient.owned() && gradient.owner != communicator_->rank()) at::Tensor(params_[i]).mutable_grad() = at::Tensor();
      if (gradient.in_rows() && grads[i].defined()) {
        at::Tensor(stepped_[i]).mutable_grad() =
            grads[i].chunk(communicator_->world_size()).at(communicator_->rank()).clone();
      }
    }
  }

 private:
  /// The tensors the optimizer steps: each parameter, or this rank's rows of it.
  static std::vector<at::Tensor> stepped_for(const std::vector<at::Tensor>& params, const PlacementPlan& plan,
                                             Communicator& communicator) {
    std::vector<at::Tensor> stepped;
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (!plan(i, communicator.world_size()).parameter.in_rows()) {
        stepped.push_back(params[i]);
        continue;
      }
      const at::Tensor rows = params[i].detach().chunk(communicator.world_size()).at(communicator.rank());
      stepped.push_back(rows.clone().requires_grad_(true));
    }
    return stepped;
  }

  std::vector<at::Tensor> params_;
  std::vector<at::Tensor> stepped_;
  std::shared_ptr<Communicator> communicator_;
  std::unordered_map<const c10::TensorImpl*, ParameterPlacement> placements_;
  std::shared_ptr<torch::optim::SGD> local_;
};

/// Parameter i by i % 3: 0 replicated (every rank steps it, as under ddp),
/// 1 its optimizer state on an owner (as under zero1), 2 its synced
/// gradient there too (as under zero2). Owners take turns by i / 3.
ParameterPlacement whole_mix(std::size_t i, int world_size) {
  const Placement owner = Placement::owned_by(static_cast<int>(i / 3) % world_size);
  ParameterPlacement placed;
  if (i % 3 >= 1) placed.optimizer_state = owner;
  if (i % 3 == 2) placed.gradient = owner;
  return placed;
}

/// The two weights and the second bias in rows (as under zero3), beside a
/// gradient and its state on rank 0 (first bias), state on rank 1 (out's
/// weight) and what every rank steps (out's bias). Rows split evenly here
/// (16 for 2 ranks): this double cuts no uneven rows.
ParameterPlacement rows_beside_whole(std::size_t i, int /*world_size*/) {
  const Placement rows = Placement::rows();
  switch (i) {
    case 0: case 2: case 3: return {rows, rows, rows};
    case 1: return {Placement::replicated(), Placement::owned_by(0), Placement::owned_by(0)};
    case 4: return {Placement::replicated(), Placement::replicated(), Placement::owned_by(1)};
    default: return {};
  }
}

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
/// plain SGD without a communicator, else over MixedShards placed by
/// `plan`, each rank on
/// its half of every batch (`halves`) or on all of it (each rank's
/// gradient is then the synced one, exactly: what a rank-local ascent, and
/// a rule that chooses samples or splits the batch by rank, need to equal
/// one process). Returns the weights.
test::Weights train(const std::string& name, const Json& keys, const test::Weights& initial,
                    std::shared_ptr<Communicator> communicator, const PlacementPlan& plan, bool halves = false) {
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
    mixed = std::make_shared<MixedShards>(params, plan, options, communicator);
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
      if (ask.backward) {
        sam->zero_grad();
        net->zero_grad();  // the model's parameters in rows are no optimizer's
      }
      if (mixed) mixed->gather_rows();
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
  if (mixed) mixed->gather_rows();
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
    const test::Weights alone = train(name, keys, initial, nullptr, whole_mix);
    std::vector<test::Weights> ranks(2);
    test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
      ranks[static_cast<std::size_t>(rank)] = train(name, keys, initial, std::move(communicator), whole_mix, halves);
    });
    EXPECT_GT(test::max_difference(alone, initial), 1e-3) << name << ": it trained";
    EXPECT_LE(test::max_difference(ranks[0], alone), 1e-5) << name << (synced ? ", synced" : ", rank-local");
    EXPECT_EQ(test::max_difference(ranks[0], ranks[1]), 0.0) << name << (synced ? ", synced" : ", rank-local");
  }
}

TEST_P(MixedPlacementTest, RowsBesideWholeParametersEqualOneProcessWithNoRuleChanged) {
  const auto& [name, given] = GetParam();
  test::Weights initial;
  for (const auto& p : Net().parameters()) initial.push_back(p.detach().clone());
  const Json keys = Json::parse(given);
  // ESAM chooses samples by rank, mSAM splits each rank's batch: their ranks see it all.
  const bool halves = name != "esam" && name != "msam";
  const test::Weights alone = train(name, keys, initial, nullptr, rows_beside_whole);
  std::vector<test::Weights> ranks(2);
  test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
    ranks[static_cast<std::size_t>(rank)] = train(name, keys, initial, std::move(communicator), rows_beside_whole, halves);
  });
  EXPECT_GT(test::max_difference(alone, initial), 1e-3) << name << ": it trained";
  EXPECT_LE(test::max_difference(ranks[0], alone), 1e-5) << name;
  EXPECT_EQ(test::max_difference(ranks[0], ranks[1]), 0.0) << name;
  // No rank holds a gradient in rows whole, so a rank-local ascent is refused, naming the key and
  // the rows (a rule that refuses it among ranks anyway says so first).
  if (name != "sam") return;
  Json local = keys;
  local["sync_ascent"] = false;
  std::vector<std::string> refusals(2);
  test::run_ranks(2, [&](int rank, std::shared_ptr<Communicator> communicator) {
    try {
      train(name, local, initial, communicator, rows_beside_whole);
    } catch (const ConfigError& error) {
      refusals[static_cast<std::size_t>(rank)] = error.what();
    }
    // Refused before any collective: a rank that left at once could close its connections while the
    // other still makes its own. One collective keeps both until both are done.
    std::vector<at::Tensor> done{at::zeros({1})};
    communicator->all_reduce_sum(done);
  });
  for (const auto& refusal : refusals) {
    EXPECT_NE(refusal.find("sync_ascent"), std::string::npos) << refusal;
    EXPECT_NE(refusal.find("rows"), std::string::npos) << refusal;
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
