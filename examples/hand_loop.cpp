// A plain LibTorch training loop, written the way a user already has one,
// with basin's engine plugged in at the loop's own points: SAM comes from a
// JSON snippet and wraps the loop's optimizer on AFTER_SHARDING.
//
// Exit code 0 when the loss fell and SAM was applied; the test runs it.

#include <iostream>

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include "basin/core/config.h"
#include "basin/core/engine.h"

namespace {

struct Net : torch::nn::Module {
  Net() : hidden(register_module("hidden", torch::nn::Linear(8, 16))), out(register_module("out", torch::nn::Linear(16, 3))) {}
  at::Tensor forward(const at::Tensor& x) { return out->forward(at::relu(hidden->forward(x))); }
  torch::nn::Linear hidden, out;
};

}  // namespace

int main() {
  at::manual_seed(0);
  const at::Tensor inputs = at::randn({256, 8});
  const at::Tensor targets = inputs.matmul(at::randn({8, 3})).argmax(1);

  auto net = std::make_shared<Net>();
  basin::State state;
  state.model = net;
  state.optimizer = std::make_shared<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));

  basin::Engine engine(state);
  basin::Params algorithms(basin::Json::parse(R"({"sam": {"rho": 0.05}})"), "algorithms");
  engine.add_algorithms(algorithms);

  engine.run(basin::Event::INIT);
  engine.run(basin::Event::AFTER_SHARDING);  // SAM wraps state.optimizer here
  engine.run(basin::Event::FIT_START);
  double first_loss = 0, last_loss = 0;
  for (int64_t step = 0; step < 40; ++step) {
    const auto rows = at::arange((step % 8) * 32, (step % 8) * 32 + 32, at::kLong);
    state.batch = {inputs.index_select(0, rows), targets.index_select(0, rows)};
    engine.run(basin::Event::BATCH_START);
    auto closure = [&] {
      state.optimizer->zero_grad();
      engine.run(basin::Event::BEFORE_FORWARD);
      state.outputs = net->forward(state.batch.inputs);
      engine.run(basin::Event::AFTER_FORWARD);
      state.loss = at::cross_entropy_loss(state.outputs, state.batch.targets);
      engine.run(basin::Event::BEFORE_BACKWARD);
      state.loss.backward();
      engine.run(basin::Event::AFTER_BACKWARD);
      return state.loss.detach();
    };
    engine.run(basin::Event::BEFORE_STEP);
    const double loss = state.optimizer->step(closure).item<double>();
    engine.run(basin::Event::AFTER_STEP);
    ++state.timestamp.step;
    engine.run(basin::Event::BATCH_END);
    if (step < 8) first_loss += loss / 8;
    if (step >= 32) last_loss += loss / 8;
  }
  engine.run(basin::Event::FIT_END);

  std::cout << "trace:";
  for (const auto& entry : engine.trace()) std::cout << ' ' << entry;
  std::cout << "\nmean loss, first 8 steps " << first_loss << ", last 8 steps " << last_loss << std::endl;
  const bool sam_applied = !engine.trace().empty() && engine.trace().front() == "sam/after_sharding";
  return sam_applied && last_loss < first_loss ? 0 : 1;
}
