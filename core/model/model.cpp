#include "basin/core/model/model.h"

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include <ATen/ATen.h>

#include "basin/core/config/config_error.h"
#include "basin/core/serialization/torch_save_file.h"

namespace basin {

at::Tensor Model::run(const at::Tensor& inputs) {
  if (runner_ == nullptr) return forward(inputs);
  return runner_->run_model([&] { return forward(inputs); });
}

at::Tensor Model::forward_loss(const at::Tensor& /*inputs*/, const at::Tensor& /*targets*/) {
  throw std::logic_error("Model: forward_loss called on a model that computes no loss of its own");
}

at::Tensor Model::run_loss(const at::Tensor& inputs, const at::Tensor& targets) {
  at::Tensor loss = runner_ == nullptr ? forward_loss(inputs, targets)
                                       : runner_->run_model([&] { return forward_loss(inputs, targets); });
  if (loss.dim() != 0 || !at::isFloatingType(loss.scalar_type())) {
    throw ConfigError("config key 'loss': \"model\": the model's forward(x, y) returned shape " + c10::str(loss.sizes()) +
                      " (" + std::string(c10::toString(loss.scalar_type())) + ") for a batch of " +
                      std::to_string(inputs.size(0)) + "; expected the batch's mean loss, a floating-point scalar");
  }
  return loss;
}

void Model::declare_unit(torch::nn::Module& block, Recompute recompute) {
  if (std::find(units_.begin(), units_.end(), &block) != units_.end()) {
    throw std::logic_error("Model: unit '" + block.name() + "' declared twice");
  }
  units_.push_back(&block);
  recomputable_.push_back(recompute == Recompute::kAllowed);
}

std::size_t Model::unit_index(torch::nn::Module& block) const {
  const auto found = std::find(units_.begin(), units_.end(), &block);
  if (found == units_.end()) {
    throw std::logic_error("Model: '" + block.name() + "' runs as a unit but was never declared (declare_unit)");
  }
  return static_cast<std::size_t>(found - units_.begin());
}

at::Tensor Model::unit(torch::nn::Module& block, const std::function<at::Tensor()>& forward) {
  if (runner_ == nullptr && recomputed_.empty()) return forward();
  const std::size_t u = unit_index(block);
  if (!recomputed_.empty() && recomputed_[u]) {
    throw ConfigError("config key 'parallel.activation_checkpointing': unit '" + unit_names().at(u) +
                      "' runs as unit(block, forward), which cannot run again in backward; the model must run it "
                      "as unit(block, input, forward) to be checkpointed");
  }
  return runner_ != nullptr ? runner_->run_unit(u, forward) : forward();
}

at::Tensor Model::unit(torch::nn::Module& block, const at::Tensor& input, UnitForward forward) {
  if (runner_ == nullptr && recomputed_.empty()) return forward(input);
  const std::size_t u = unit_index(block);
  std::function<at::Tensor()> body = [&] { return forward(input); };
  if (!recomputed_.empty() && recomputed_[u]) {
    // Backward runs it again, through the runner (zero3 gathers it for that).
    RunAgain run_again = [runner = runner_, u](const std::function<at::Tensor()>& again) {
      return runner != nullptr ? runner->recompute_unit(u, again) : again();
    };
    body = [&, run_again] { return forward_without_activations(block, input, forward, run_again); };
  }
  return runner_ != nullptr ? runner_->run_unit(u, body) : body();
}

at::Tensor Model::lookup(torch::nn::Module& block, const std::function<at::Tensor()>& forward) {
  if (runner_ == nullptr) return forward();
  return runner_->run_lookup(unit_index(block), forward);
}

std::vector<std::string> Model::unit_names() {
  std::vector<std::string> names(units_.size());
  for (const auto& item : named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
    const auto found = std::find(units_.begin(), units_.end(), item.value().get());
    if (found != units_.end() && names[static_cast<std::size_t>(found - units_.begin())].empty()) {
      names[static_cast<std::size_t>(found - units_.begin())] = item.key();
    }
  }
  return names;
}

void Model::set_recomputed_units(std::vector<bool> recomputed) {
  if (recomputed.size() != units_.size()) {
    throw std::logic_error("Model: one flag per unit expected for the recomputed units");
  }
  for (std::size_t u = 0; u < units_.size(); ++u) {
    if (recomputed[u] && !recomputable_[u]) {
      throw std::logic_error("Model: unit '" + unit_names().at(u) + "' is declared never to be recomputed");
    }
  }
  const bool any = std::find(recomputed.begin(), recomputed.end(), true) != recomputed.end();
  recomputed_ = any ? std::move(recomputed) : std::vector<bool>();
}

void Model::export_trained(const std::string& dir) {
  c10::Dict<std::string, at::Tensor> state;
  at::NoGradGuard no_grad;
  for (const auto& p : named_parameters(/*recurse=*/true)) state.insert(p.key(), p.value().detach().cpu().clone());
  for (const auto& b : named_buffers(/*recurse=*/true)) state.insert(b.key(), b.value().detach().cpu().clone());
  write_torch_save_file((std::filesystem::path(dir) / kStateDictFile).string(), state);
}

NamedTensors Model::import_pretrained(const std::string& dir) {
  throw ConfigError("config key 'init_from': '" + dir + "' is a directory, and this model reads weights from a file "
                    "(a state_dict or a checkpoint); a directory of another library's layout is read by models "
                    "that know it (\"gpt\": a Hugging Face GPT-2 directory)");
}

Registry<Model, const DatasetInfo&>& model_registry() {
  static Registry<Model, const DatasetInfo&> registry("model");
  return registry;
}

}  // namespace basin
