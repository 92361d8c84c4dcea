#pragma once

#include <functional>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "basin/core/config/registry.h"
#include "basin/core/data/dataset.h"
#include "basin/core/model/activation_checkpoint.h"
#include "basin/core/model/unit_runner.h"
#include "basin/core/serialization/safetensors_file.h"

namespace basin {

/// A classifier the trainer can run: inputs [N, ...] to logits [N, classes].
/// torch::nn::Module has no virtual forward; this adds the one the loop calls.
///
/// Units (fully sharded training, "parallel.mode" zero3): a model declares
/// its blocks as units in its constructor and runs each through `unit()` in
/// forward; under zero3 a unit's parameters are gathered whole only while it
/// runs, so a rank's peak holds its shards plus a unit or two. A model that
/// declares none is one unit: 1/N of the parameters at rest, all of them
/// whole during a step.
///
///     fc1_ = register_module("fc1", torch::nn::Linear(784, 256));
///     declare_unit(*fc1_);
///     ...
///     x = unit(*fc1_, x, [this](const at::Tensor& in) { return fc1_->forward(in); });
///
/// A unit given its input (as here) can also be checkpointed
/// ("parallel.activation_checkpointing"): its forward keeps no activations
/// and runs again in backward, so it must not capture locals by reference.
class Model : public torch::nn::Module {
 public:
  virtual at::Tensor forward(const at::Tensor& inputs) = 0;

  /// forward(inputs) as the trainer runs it: under zero3, through the units' runner.
  at::Tensor run(const at::Tensor& inputs);

  /// A model that computes its own loss ("loss": "model"): forward(inputs,
  /// targets) returns the batch's mean loss, a scalar.
  virtual bool computes_loss() const { return false; }
  virtual at::Tensor forward_loss(const at::Tensor& inputs, const at::Tensor& targets);
  /// Whether forward(inputs) alone gives logits [batch, classes]; a model
  /// that computes its own loss may need the targets for every forward.
  virtual bool gives_logits() const { return true; }
  /// forward_loss as the trainer runs it (see run); a ConfigError names
  /// anything but a floating-point scalar.
  at::Tensor run_loss(const at::Tensor& inputs, const at::Tensor& targets);

  /// The declared units, in declaration order (which should be that of
  /// their first runs in forward).
  const std::vector<torch::nn::Module*>& units() const { return units_; }
  /// Whether unit `u` may run again in backward ("parallel.activation_checkpointing").
  bool recomputable(std::size_t u) const { return recomputable_.at(u); }
  /// Their names: each one's path in the model ("h.0"), as named_modules() gives it.
  std::vector<std::string> unit_names();
  /// Which units run their forward again in backward instead of keeping its
  /// activations (one flag per unit, false for every unit declared
  /// Recompute::kNever; empty: none).
  void set_recomputed_units(std::vector<bool> recomputed);
  /// Writes the trained model where Python reads it back: `state_dict.pt`
  /// (every parameter and buffer by name, for model.load_state_dict(
  /// torch.load(path))); a TorchScript model also writes `model.pt`. Its
  /// parameters must be whole (Trainer::export_model sees to it).
  virtual void export_trained(const std::string& dir);
  /// The file export_trained writes in its folder, and basin-generate reads.
  static constexpr const char* kStateDictFile = "state_dict.pt";
  /// Weights in another library's layout, from the directory `dir`
  /// ("init_from": a directory), read into this model's names and shapes;
  /// what disagrees with the model is a ConfigError naming the file. The
  /// default knows no such layout and says so.
  virtual NamedTensors import_pretrained(const std::string& dir);
  /// A module's name in the Hugging Face layout export_trained writes to hf/
  /// ("h.0.attn.c_attn" is "transformer.h.0.attn.c_attn" in GPT-2's), and
  /// whether that layout stores projections [in, out] (GPT-2's Conv1D): what
  /// an adapter in PEFT's layout names (core/model/peft_adapter.h).
  virtual std::string hugging_face_module(const std::string& name) const { return name; }
  virtual bool hugging_face_transposes_projections() const { return false; }
  /// Installed by fully sharded training; null runs units as plain calls.
  void set_unit_runner(UnitRunner* runner) { runner_ = runner; }
  UnitRunner* unit_runner() const { return runner_; }

 protected:
  /// Whether activation checkpointing may choose a unit: an embedding table
  /// and a vocabulary head are declared kNever (the lookup keeps nothing to
  /// save, and the head's recompute costs several blocks' forwards).
  enum class Recompute { kAllowed, kNever };
  /// Declares a registered submodule (with every parameter below it) as one unit.
  void declare_unit(torch::nn::Module& block, Recompute recompute = Recompute::kAllowed);
  /// Runs `forward(input)`, the forward of the declared unit `block`.
  at::Tensor unit(torch::nn::Module& block, const at::Tensor& input, UnitForward forward);
  /// Runs `forward`, the forward of the declared unit `block`, which cannot be checkpointed.
  at::Tensor unit(torch::nn::Module& block, const std::function<at::Tensor()>& forward);
  /// Runs `forward`, a lookup into the declared unit `block`'s table by id
  /// (at::embedding of its weight), whose backward reads only the ids: under
  /// zero3 the table is whole for the lookup alone. The same unit may run
  /// again as a tied head through unit(), reading the table only inside that
  /// run, its output feeding what follows (zero3 frees the table once
  /// backward has passed it). Anything but an embedding of the table is refused.
  at::Tensor lookup(torch::nn::Module& block, const std::function<at::Tensor()>& forward);

 private:
  std::size_t unit_index(torch::nn::Module& block) const;

  std::vector<torch::nn::Module*> units_;
  std::vector<bool> recomputable_;
  std::vector<bool> recomputed_;
  UnitRunner* runner_ = nullptr;
};

/// Models by name; a factory is given the dataset's input shape and classes.
Registry<Model, const DatasetInfo&>& model_registry();

}  // namespace basin
