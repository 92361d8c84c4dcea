#include "basin/core/train/evaluation.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>

#include "basin/core/engine/engine.h"
#include "basin/core/model/model.h"
#include "basin/core/train/autocast.h"

namespace basin {

EvalResult evaluate(Model& model, const TensorDataset& test, const Loss& loss, int64_t batch_size, State& state,
                    Engine& engine) {
  engine.run(Event::EVAL_START);
  at::NoGradGuard no_grad;
  model.eval();
  double loss_sum = 0;
  int64_t correct = 0;
  int64_t counted = 0;  // what the loss is a mean over: samples, or counted tokens
  int64_t predicted = 0;  // what the accuracy is over: classes, or counted tokens
  for (int64_t begin = 0; begin < test.size(); begin += batch_size) {
    const Batch batch = test.slice(begin, std::min(begin + batch_size, test.size()));
    const at::Tensor targets = batch.targets.to(state.device);
    const at::Tensor inputs = batch.inputs.to(state.device);
    auto autocast = [&](const auto& forward) {
      AutocastGuard guard(state.precision, state.device.type());
      return forward();
    };
    if (loss.from_model()) {
      // The model's mean loss over the batch; logits, when forward(x) alone gives them, for the accuracy.
      const at::Tensor mean = autocast([&] { return model.run_loss(inputs, targets); });
      loss_sum += mean.to(at::kDouble).item<double>() * static_cast<double>(batch.size());
      counted += batch.size();
      predicted += loss.count(targets);
      if (model.gives_logits()) correct += loss.correct(autocast([&] { return model.run(inputs); }), targets).item<int64_t>();
      continue;
    }
    const at::Tensor logits = autocast([&] { return model.run(inputs); }).to(at::kFloat);
    loss_sum += loss.sum(logits, targets).item<double>();
    counted += loss.count(targets);
    predicted += loss.count(targets);
    correct += loss.correct(logits, targets).item<int64_t>();
  }
  model.train();
  const bool tokens = test.size() > 0 && test.per_token();
  EvalResult result;
  result.samples = test.size();
  result.accuracy = predicted > 0 ? static_cast<double>(correct) / static_cast<double>(predicted) : 0.0;
  if (loss.from_model() && !model.gives_logits()) result.accuracy = std::nan("");  // not measured: no logits
  result.loss = counted > 0 ? loss_sum / static_cast<double>(counted) : 0.0;
  if (tokens && loss.gives_perplexity()) result.perplexity = std::exp(result.loss);
  state.test_accuracy = result.accuracy;
  state.test_loss = result.loss;
  engine.run(Event::EVAL_END);
  return result;
}

}  // namespace basin
