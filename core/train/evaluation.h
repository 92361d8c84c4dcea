#pragma once

#include <cmath>
#include <cstdint>

#include "basin/core/data/dataset.h"
#include "basin/core/engine/state.h"
#include "basin/core/train/loss.h"

namespace basin {

class Engine;
class Model;

/// Test-set figures of one evaluation.
struct EvalResult {
  double accuracy = 0;  // NaN where it cannot be measured: a model whose forward needs the targets
  double loss = 0;  // mean over the samples (or counted tokens), of the run's loss
  double perplexity = std::nan("");  // exp(loss) of a token cross-entropy; NaN otherwise
  int64_t samples = 0;
};

/// Accuracy and mean loss of `model` on `test` (of token targets: the mean
/// over the tokens that are not ignore_index, next-token accuracy and
/// perplexity), in batches of `batch_size`,
/// without grad and in eval mode (training mode again after), under the
/// run's autocast; fires EVAL_START and EVAL_END and leaves the figures in
/// the state (test_accuracy, test_loss). Under "loss": "model" the loss is
/// the model's (forward_loss), and the accuracy comes from forward(x) where
/// the model gives logits without the targets (else it is NaN: JSON null).
EvalResult evaluate(Model& model, const TensorDataset& test, const Loss& loss, int64_t batch_size, State& state,
                    Engine& engine);

}  // namespace basin
