#include "basin/core/train/loss.h"

#include <algorithm>
#include <stdexcept>

#include <ATen/ATen.h>

namespace basin {

Loss Loss::from_config(Params& root) {
  Loss loss;
  const Json value = root.raw("loss");
  if (value.is_null()) return loss;
  if (value.is_string()) {
    loss.name_ = value.get<std::string>();
    if (loss.name_ != "cross_entropy" && loss.name_ != "mse" && loss.name_ != "model") {
      root.fail("loss", "\"cross_entropy\", \"mse\" or \"model\" (or an object with \"name\")", value);
    }
    return loss;
  }
  if (!value.is_object()) root.fail("loss", "a name (\"cross_entropy\", \"mse\", \"model\") or an object with \"name\"", value);
  Params params(value, root.path_of("loss"));
  loss.name_ = params.choice("name", "cross_entropy", {"cross_entropy", "mse", "model"});
  if (loss.name_ == "cross_entropy") {
    loss.label_smoothing_ = params.number("label_smoothing", 0.0, 0.0, 1.0);
    loss.ignore_index_ = params.integer("ignore_index", -100);
  }
  params.finish();
  return loss;
}

void Loss::check_computable() const {
  if (from_model()) throw std::logic_error("Loss: \"model\" is the model's to compute (Model::forward_loss)");
}

at::Tensor Loss::one_hot(const at::Tensor& outputs, const at::Tensor& targets) const {
  if (per_token(targets)) throw std::invalid_argument("Loss: \"mse\" takes one class per sample, not token targets");
  return at::one_hot(targets, outputs.size(1)).to(outputs.scalar_type());
}

at::Tensor Loss::cross_entropy_each(const at::Tensor& outputs, const at::Tensor& targets) const {
  // [n, T, V] logits as n*T rows of V: the per-row loss, shaped as the targets.
  const at::Tensor rows = outputs.reshape({-1, outputs.size(-1)});
  return at::cross_entropy_loss(rows, targets.reshape({-1}), {}, at::Reduction::None, ignore_index_, label_smoothing_)
      .view(targets.sizes());
}

at::Tensor Loss::mean(const at::Tensor& outputs, const at::Tensor& targets) const {
  check_computable();
  if (name_ == "mse") return at::mse_loss(outputs, one_hot(outputs, targets));
  if (per_token(targets)) return sum(outputs, targets) / static_cast<double>(std::max<int64_t>(count(targets), 1));
  return at::cross_entropy_loss(outputs, targets, {}, at::Reduction::Mean, ignore_index_, label_smoothing_);
}

at::Tensor Loss::per_sample(const at::Tensor& outputs, const at::Tensor& targets) const {
  check_computable();
  if (name_ == "mse") return (outputs - one_hot(outputs, targets)).pow(2).mean(1);
  if (per_token(targets)) {
    const at::Tensor counted = targets.ne(ignore_index_).flatten(1).sum(1).clamp_min(1).to(outputs.scalar_type());
    return sequence_sums(outputs, targets) / counted;
  }
  return at::cross_entropy_loss(outputs, targets, {}, at::Reduction::None, ignore_index_, label_smoothing_);
}

at::Tensor Loss::sequence_sums(const at::Tensor& outputs, const at::Tensor& targets) const {
  check_computable();
  if (!per_token(targets)) throw std::invalid_argument("Loss::sequence_sums: token targets [n, T] expected");
  return cross_entropy_each(outputs, targets).flatten(1).sum(1);
}

at::Tensor Loss::sum(const at::Tensor& outputs, const at::Tensor& targets) const {
  check_computable();
  if (name_ == "mse") return per_sample(outputs, targets).sum();
  if (per_token(targets)) {
    return at::cross_entropy_loss(outputs.reshape({-1, outputs.size(-1)}), targets.reshape({-1}), {},
                                  at::Reduction::Sum, ignore_index_, label_smoothing_);
  }
  return at::cross_entropy_loss(outputs, targets, {}, at::Reduction::Sum, ignore_index_, label_smoothing_);
}

int64_t Loss::count(const at::Tensor& targets) const {
  if (name_ == "mse") return targets.size(0);
  return targets.ne(ignore_index_).sum().item<int64_t>();
}

at::Tensor Loss::correct(const at::Tensor& outputs, const at::Tensor& targets) const {
  return outputs.argmax(-1).eq(targets).logical_and(targets.ne(ignore_index_)).sum();
}

}  // namespace basin
