#include "basin/core/parallel/zero3/zero3_strategy.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <utility>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "basin/core/base/checkpoint_error.h"
#include "basin/core/communication/communicator.h"
#include "basin/core/config/config_error.h"
#include "basin/core/optim/optimizer_state.h"
#include "basin/core/parallel/ddp/data_parallel.h"
#include "basin/core/parallel/zero3/fully_sharded_model.h"
#include "basin/core/parallel/zero3/fully_sharded_optimizer.h"

namespace basin {

Zero3Strategy::Zero3Strategy(std::shared_ptr<Communicator> communicator, FullyShardedOptions options)
    : Zero3Strategy("zero3", communicator, communicator, nullptr, std::move(options)) {}

Zero3Strategy::Zero3Strategy(std::string mode, std::shared_ptr<Communicator> job, std::shared_ptr<Communicator> shards,
                             std::shared_ptr<Communicator> replicas, FullyShardedOptions options)
    : DistributedStrategy(std::move(mode), job),
      options_(std::move(options)),
      shard_group_(std::move(shards)),
      replica_group_(std::move(replicas)),
      replicas_(std::make_unique<DataParallel>(std::move(job))) {}

Zero3Strategy::~Zero3Strategy() = default;

void Zero3Strategy::wrap(State& state, const std::vector<torch::nn::Module*>& units,
                         const LocalOptimizerFactory& make_local) {
  DistributedStrategy::wrap(state, units, make_local);
  replicas_->broadcast_model(*state.model);  // replicas start from rank 0's weights and buffers
  // Each rank keeps its shard of every parameter; the model's own hold
  // bytes only while their unit runs, and the optimizer steps the shards.
  lower_buffers(*state.model);
  model_ = std::make_shared<FullyShardedModel>(*state.model, units, shard_group_, options_, replica_group_);
  // The sums over the shards (SAM's norm, the rules' flags) run within one group: the replicas' rows are alike.
  auto optimizer = std::make_shared<FullyShardedOptimizer>(*state.optimizer, make_local, model_, shard_group_);
  optimizer_ = optimizer.get();
  state.optimizer = std::move(optimizer);
}

void Zero3Strategy::lower_buffers(torch::nn::Module& model) const {
  if (!options_.mixed_precision.active()) return;
  // Each floating buffer, and whether its module's floating parameters are
  // gathered in param_dtype beside it: a layer such as BatchNorm computes
  // with its weight and its statistics in one dtype, so there the buffers
  // must follow the weights.
  std::vector<std::string> floating, beside_lowered;
  auto note = [&](const std::string& prefix, torch::nn::Module& module) {
    const auto params = module.parameters(/*recurse=*/false);
    const bool lowered = std::any_of(params.begin(), params.end(), [](const at::Tensor& p) { return p.is_floating_point(); });
    for (const auto& item : module.named_buffers(/*recurse=*/false)) {
      if (!item.value().is_floating_point()) continue;
      floating.push_back(prefix + item.key());
      if (lowered) beside_lowered.push_back(prefix + item.key());
    }
  };
  note("", model);
  for (const auto& item : model.named_modules("", /*include_self=*/false)) note(item.key() + ".", *item.value());
  if (floating.empty()) return;
  const MixedPrecisionPolicy& policy = options_.mixed_precision;
  const std::string low = dtype_name(*policy.param_dtype);
  auto some = [](const std::vector<std::string>& names) {
    return "'" + names.front() + "'" + (names.size() > 1 ? " and " + std::to_string(names.size() - 1) + " more" : "");
  };
  const std::string key = "config key '" + policy.key + ".buffers': ";
  if (!beside_lowered.empty() && (!policy.buffers_given || !policy.buffers)) {
    // false cannot serve them: it is not offered, and refused when given.
    throw ConfigError(key + (policy.buffers_given ? "false keeps " : "the model has floating-point buffers (") +
                      some(beside_lowered) + (policy.buffers_given ? " as it is" : ")") +
                      " beside parameters of their own module gathered in " + low +
                      ", and a layer such as BatchNorm computes with its weight and statistics in one dtype; say "
                      "true to keep the floating buffers in " + low + " too");
  }
  if (!policy.buffers_given) {
    throw ConfigError(key + "the model has floating-point buffers (" + some(floating) + "); say true to keep them in " +
                      low + " or false to keep them as they are (none sits beside a parameter gathered in " + low + ")");
  }
  if (!policy.buffers) return;
  at::NoGradGuard no_grad;
  for (const auto& item : model.named_buffers(/*recurse=*/true)) {
    if (item.value().is_floating_point()) item.value().set_data(item.value().to(*policy.param_dtype));
  }
}

UnitRunner* Zero3Strategy::unit_runner() { return model_.get(); }

ShardedParameters* Zero3Strategy::shards() { return optimizer_; }

void Zero3Strategy::prepare_gradient_sync(GradientSync) {
  model_->prepare_for_backward();  // every backward's gradients go to the shards, unit by unit
}

void Zero3Strategy::finish_gradient_sync(GradientSync) { model_->finish_backward(); }

void Zero3Strategy::abandon_gradient_sync() { model_->abandon_backward(); }

void Zero3Strategy::after_step() { replicas_->broadcast_buffers(*state().model); }

std::vector<Engine::CheckpointPart> Zero3Strategy::checkpoint_parts() {
  return {{"shards", [this] { return shards_state(); }, [this](const c10::IValue& saved) { load_shards_state(saved); }}};
}

void Zero3Strategy::check_resume(int64_t saved_world_size) const {
  const int64_t world = communicator()->world_size();
  if (saved_world_size != world) {
    throw CheckpointError("this rank's file of a sharded (zero3 or hsdp) checkpoint holds the shards of " +
                          std::to_string(saved_world_size) + " ranks and this run has " + std::to_string(world) +
                          ": resume from the checkpoint's manifest with resharding (basin-train --reshard), "
                          "which joins the ranks' files and cuts them anew");
  }
}

std::optional<RowsLayout> Zero3Strategy::rows_layout() const {
  RowsLayout layout;
  layout.rank = shard_group_->rank();
  layout.world_size = shard_group_->world_size();
  layout.replica = replica_group_ ? replica_group_->rank() : 0;
  layout.replicas = replica_group_ ? replica_group_->world_size() : 1;
  const auto named = state().model->named_parameters(/*recurse=*/true);
  std::unordered_map<const c10::TensorImpl*, std::string> names;  // of each shard, which the optimizer steps
  for (const auto& item : named) {
    layout.shapes[item.key()] = item.value().sizes().vec();
    names[model_->shard_of(item.value()).unsafeGetTensorImpl()] = item.key();
  }
  const ParameterNumbering order(*state().optimizer);
  for (const auto& shard : order.parameters()) {
    layout.numbering.push_back(names.at(shard.unsafeGetTensorImpl()));
  }
  return layout;
}

void Zero3Strategy::with_whole_parameters(const std::function<void()>& body) {
  model_->with_whole_parameters(body);  // collective
}

std::vector<at::Tensor> Zero3Strategy::whole_parameters() { return model_->whole_parameters(); }

c10::IValue Zero3Strategy::shards_state() const {
  // This rank's rows of every parameter, by the model's names, and each
  // parameter's whole shape (basin-consolidate joins the ranks' rows).
  StateDict parameters = new_state_dict();
  StateDict shapes = new_state_dict();
  const auto named = state().model->named_parameters(/*recurse=*/true);
  for (const auto& item : named) {
    parameters.insert(item.key(), model_->shard_of(item.value()).detach().cpu());
    c10::List<int64_t> shape;
    for (const int64_t d : item.value().sizes()) shape.push_back(d);
    shapes.insert(item.key(), shape);
  }
  // The optimizer numbers the shards (optimizer_state.h): their names in that order.
  const c10::List<std::string> numbering(rows_layout()->numbering);
  StateDict shards = new_state_dict();
  shards.insert("layout", std::string("rows"));
  shards.insert("group_size", static_cast<int64_t>(shard_group_->world_size()));  // the ranks the rows are cut among
  shards.insert("numbering", numbering);
  shards.insert("parameters", parameters);
  shards.insert("shapes", shapes);
  return shards;
}

void Zero3Strategy::load_shards_state(const c10::IValue& saved) {
  const StateDict shards = saved.toGenericDict();
  const StateDict parameters = shards.at("parameters").toGenericDict();
  at::NoGradGuard no_grad;
  for (const auto& item : state().model->named_parameters(/*recurse=*/true)) {
    if (!parameters.contains(item.key())) throw CheckpointError("checkpoint shards lack parameter '" + item.key() + "'");
    at::Tensor shard = model_->shard_of(item.value());
    const at::Tensor value = parameters.at(item.key()).toTensor();
    if (value.sizes() != shard.sizes()) {
      throw CheckpointError("checkpoint shard of '" + item.key() + "' does not fit this rank's (another layout)");
    }
    shard.copy_(value);
  }
  model_->shards_stepped();  // a unit still whole holds the old values
}

}  // namespace basin
