#pragma once

#include <functional>

#include <ATen/core/Tensor.h>

namespace torch::nn { class Module; }

namespace basin {

/// A unit's forward as a function of its input (so it can run again).
using UnitForward = std::function<at::Tensor(const at::Tensor&)>;
/// Runs a unit's body again in backward (zero3: with the unit gathered).
using RunAgain = std::function<at::Tensor(const std::function<at::Tensor()>&)>;

/// Activation checkpointing of one unit, as torch.utils.checkpoint's
/// reentrant form: runs `forward(input)` without autograd, keeping only
/// `input`, and gives its output a backward that runs `forward` again through
/// `run_again`, with autograd, and backpropagates through that (the unit's
/// parameters' gradients accumulate as they would have).
///
/// The recompute sees what the forward saw: the generators' state (CPU, and
/// the input's device's: dropout draws the same masks) when the forward drew
/// from them, and the autocast state; and it leaves what it found: the
/// generators where backward had them, and `unit`'s buffers (BatchNorm's
/// statistics are not updated twice). So a run with it equals the run
/// without, bit for bit.
///
/// `forward` runs after this call returned: it must not capture locals by
/// reference, and tensors it uses besides `input` must not need gradients
/// (parameters aside). Its input must not change in place before backward
/// (refused then), backward runs through it once, and through backward()
/// only (autograd::grad is refused, as torch.utils.checkpoint's reentrant
/// form refuses it). Ranks as threads of one process share a generator: a
/// unit that draws must not checkpoint there while another rank draws.
at::Tensor forward_without_activations(torch::nn::Module& unit, const at::Tensor& input, UnitForward forward,
                                       RunAgain run_again);

}  // namespace basin
