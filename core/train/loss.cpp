#include "basin/core/train/loss.h"

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
  if (loss.name_ == "cross_entropy") loss.label_smoothing_ = params.number("label_smoothing", 0.0, 0.0, 1.0);
  params.finish();
  return loss;
}

void Loss::check_computable() const {
  if (from_model()) throw std::logic_error("Loss: \"model\" is the model's to compute (Model::forward_loss)");
}

at::Tensor Loss::one_hot(const at::Tensor& outputs, const at::Tensor& targets) const {
  return at::one_hot(targets, outputs.size(1)).to(outputs.scalar_type());
}

at::Tensor Loss::mean(const at::Tensor& outputs, const at::Tensor& targets) const {
  check_computable();
  if (name_ == "mse") return at::mse_loss(outputs, one_hot(outputs, targets));
  return at::cross_entropy_loss(outputs, targets, {}, at::Reduction::Mean, -100, label_smoothing_);
}

at::Tensor Loss::per_sample(const at::Tensor& outputs, const at::Tensor& targets) const {
  check_computable();
  if (name_ == "mse") return (outputs - one_hot(outputs, targets)).pow(2).mean(1);
  return at::cross_entropy_loss(outputs, targets, {}, at::Reduction::None, -100, label_smoothing_);
}

at::Tensor Loss::sum(const at::Tensor& outputs, const at::Tensor& targets) const {
  check_computable();
  if (name_ == "mse") return per_sample(outputs, targets).sum();
  return at::cross_entropy_loss(outputs, targets, {}, at::Reduction::Sum, -100, label_smoothing_);
}

}  // namespace basin
