#pragma once

#include <cstdint>
#include <string>

#include <ATen/core/Tensor.h>

#include "basin/core/config/config.h"

namespace basin {

/// The training and evaluation loss, from the config's "loss":
///
///     "loss": "cross_entropy"                                    the default
///     "loss": {"name": "cross_entropy", "label_smoothing": 0.1}  targets mixed with the uniform
///     "loss": {"name": "cross_entropy", "ignore_index": -1}      targets that count for nothing (default -100)
///     "loss": "mse"                                              squared error to the one-hot targets
///     "loss": "model"                                            the model's own: forward(x, y) returns it
///
/// Class targets are [n] indices and outputs the model's logits [n, classes]
/// (computed in fp32 here). Token targets are [n, T] (a language model's next
/// tokens) and outputs [n, T, vocabulary]: cross-entropy is then over every
/// token, and its mean is over the tokens that are not ignore_index (the
/// closure makes that the step's mean across microbatches and ranks, with
/// `count`). "mse" is the mean over the classes of (logit - one_hot)^2 (Hui
/// and Belkin, ICLR 2021), for class targets. With "model" the trainer takes
/// the batch's mean loss from Model::forward_loss and none of the functions
/// below applies (each sample's loss is not known).
class Loss {
 public:
  /// Reads `root`'s "loss" key (absent: cross-entropy); a ConfigError names a bad value.
  static Loss from_config(Params& root);

  /// Whether `targets` are a sequence's tokens ([n, T]) rather than one class per sample.
  static bool per_token(const at::Tensor& targets) { return targets.dim() >= 2; }

  /// The mean over the samples, or over the counted tokens (what a pass backpropagates).
  at::Tensor mean(const at::Tensor& outputs, const at::Tensor& targets) const;
  /// Each sample's loss, a [n] tensor (a sequence's: the mean over its counted tokens).
  at::Tensor per_sample(const at::Tensor& outputs, const at::Tensor& targets) const;
  /// Token targets: each sequence's loss summed over its counted tokens, a [n] tensor.
  at::Tensor sequence_sums(const at::Tensor& outputs, const at::Tensor& targets) const;
  /// The sum over the samples, or over the counted tokens (evaluation adds batches up).
  at::Tensor sum(const at::Tensor& outputs, const at::Tensor& targets) const;
  /// What `mean` divides `sum` by: the targets that are not ignore_index (samples, or tokens).
  int64_t count(const at::Tensor& targets) const;
  /// How many of the counted targets `outputs` predicts (argmax), a 0-dim tensor where they are.
  at::Tensor correct(const at::Tensor& outputs, const at::Tensor& targets) const;

  const std::string& name() const { return name_; }
  /// "loss": "model": the model returns its own loss.
  bool from_model() const { return name_ == "model"; }
  int64_t ignore_index() const { return ignore_index_; }
  /// Whether exp(mean) is a perplexity: a cross-entropy against the targets themselves (no label smoothing).
  bool gives_perplexity() const { return name_ == "cross_entropy" && label_smoothing_ == 0; }

 private:
  void check_computable() const;
  at::Tensor one_hot(const at::Tensor& outputs, const at::Tensor& targets) const;
  /// Cross-entropy of every target, [n] or [n, T]; 0 where ignored.
  at::Tensor cross_entropy_each(const at::Tensor& outputs, const at::Tensor& targets) const;

  std::string name_ = "cross_entropy";
  double label_smoothing_ = 0;
  int64_t ignore_index_ = -100;
};

}  // namespace basin
