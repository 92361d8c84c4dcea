#pragma once

#include <cstdint>

#include "basin/core/train/dataset.h"
#include "basin/core/train/loss.h"

namespace basin {

class Model;

/// Before training: the first `samples` training samples run through the
/// model once (eval mode, no gradient: no BatchNorm statistic or random
/// number moves), and what comes out must fit the loss: logits [n, classes]
/// for the data's classes, or under "loss": "model" a scalar from
/// forward(x, y). A model that fails on the data, or whose output does not
/// fit, is a one-line ConfigError naming the data's sample shape and
/// classes and the model's output shape.
void check_model_fits_data(Model& model, const DataSplits& data, const Loss& loss, int64_t samples);

}  // namespace basin
