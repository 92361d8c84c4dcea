#pragma once

#include <cstdint>

#include <c10/core/Device.h>

#include "basin/core/data/dataset.h"
#include "basin/core/train/loss.h"

namespace basin {

class Model;

/// Before training: the first `samples` training samples run through the
/// model once (eval mode, no gradient: no BatchNorm statistic or random
/// number moves), and what comes out must fit the loss: logits [n, c] with
/// c at least the data's classes (of token targets [n, T]: logits [n, T, V]
/// past the largest id, targets below the vocabulary or the loss's
/// ignore_index, and no "mse"), and under "loss": "model" a
/// scalar from forward(x, y) (and logits from forward(x) where the model
/// gives them). A model that fails on the data, or whose output does not
/// fit, is a one-line ConfigError naming the data's sample shape and
/// classes and the model's output shape.
void check_model_fits_data(Model& model, const DataSplits& data, const Loss& loss, int64_t samples, c10::Device device);

}  // namespace basin
