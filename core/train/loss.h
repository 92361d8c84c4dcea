#pragma once

#include <string>

#include <ATen/core/Tensor.h>

#include "basin/core/config/config.h"

namespace basin {

/// The training and evaluation loss, from the config's "loss":
///
///     "loss": "cross_entropy"                                    the default
///     "loss": {"name": "cross_entropy", "label_smoothing": 0.1}  targets mixed with the uniform
///     "loss": "mse"                                              squared error to the one-hot targets
///     "loss": "model"                                            the model's own: forward(x, y) returns it
///
/// Outputs are the model's logits ([n, classes], computed in fp32 here) and
/// targets class indices, as every dataset gives them. "mse" is the mean over
/// the classes of (logit - one_hot)^2 (Hui and Belkin, ICLR 2021). With
/// "model" the trainer takes the batch's mean loss from Model::forward_loss
/// and none of the functions below applies (each sample's loss is not known).
class Loss {
 public:
  /// Reads `root`'s "loss" key (absent: cross-entropy); a ConfigError names a bad value.
  static Loss from_config(Params& root);

  /// The mean over the samples (what a pass backpropagates).
  at::Tensor mean(const at::Tensor& outputs, const at::Tensor& targets) const;
  /// Each sample's loss, a [n] tensor.
  at::Tensor per_sample(const at::Tensor& outputs, const at::Tensor& targets) const;
  /// The sum over the samples (evaluation adds batches up).
  at::Tensor sum(const at::Tensor& outputs, const at::Tensor& targets) const;

  const std::string& name() const { return name_; }
  /// "loss": "model": the model returns its own loss.
  bool from_model() const { return name_ == "model"; }

 private:
  void check_computable() const;
  at::Tensor one_hot(const at::Tensor& outputs, const at::Tensor& targets) const;

  std::string name_ = "cross_entropy";
  double label_smoothing_ = 0;
};

}  // namespace basin
