// A plain LibTorch training loop, written the way a user already has one,
// with basin's engine plugged in at the loop's own points: SAM comes from a
// JSON snippet and wraps the loop's optimizer on AFTER_SHARDING.
//
//   basin-hand-loop ['{"esam": {}}']   (the "algorithms" object; default SAM)
//
// Exit code 0 when the loss fell and every algorithm acted; the test runs it.

#include <iostream>

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include "basin/core/config/config.h"
#include "basin/core/engine/engine.h"

namespace {

struct Net : torch::nn::Module {
  Net() : hidden(register_module("hidden", torch::nn::Linear(8, 16))), out(register_module("out", torch::nn::Linear(16, 3))) {}
  at::Tensor forward(const at::Tensor& x) { return out->forward(at::relu(hidden->forward(x))); }
  torch::nn::Linear hidden, out;
};

}  // namespace

int main(int argc, char** argv) try {
  at::manual_seed(0);
  const at::Tensor inputs = at::randn({256, 8});
  const at::Tensor targets = inputs.matmul(at::randn({8, 3})).argmax(1);

  auto net = std::make_shared<Net>();
  basin::State state;
  state.model = net;
  state.forward = [&net](const at::Tensor& x) { return net->forward(x); };  // MESA runs its average through it
  state.train_size = inputs.size(0);                                        // SAF keeps outputs per sample
  state.optimizer = std::make_shared<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));

  basin::Engine engine(state);
  const basin::Json config = basin::Json::parse(argc > 1 ? argv[1] : R"({"sam": {"rho": 0.05}})");
  basin::Params algorithms(config, "algorithms");
  engine.add_algorithms(algorithms);

  engine.run(basin::Event::INIT);
  engine.run(basin::Event::AFTER_SHARDING);  // SAM wraps state.optimizer here
  engine.run(basin::Event::FIT_START);
  double first_loss = 0, last_loss = 0;
  for (int64_t step = 0; step < 40; ++step) {
    const auto rows = at::arange((step % 8) * 32, (step % 8) * 32 + 32, at::kLong);
    state.batch = {inputs.index_select(0, rows), targets.index_select(0, rows), rows};  // rows: the samples' ids
    state.timestamp.epoch = step / 8;  // 8 batches make an epoch
    engine.run(basin::Event::BATCH_START);
    auto closure = [&] {
      // What the optimizer asks of this pass: the whole batch and its mean
      // loss, but for mSAM's parts and ESAM's samples, forward alone and
      // per-sample losses (see basin::PassRequest).
      const basin::PassRequest& ask = state.request;
      if (ask.backward) state.optimizer->zero_grad();
      at::AutoGradMode grad_mode(ask.backward);
      state.microbatch = basin::requested_samples(state.batch, ask);
      engine.run(basin::Event::BEFORE_FORWARD);
      state.outputs = net->forward(state.microbatch.inputs);
      engine.run(basin::Event::AFTER_FORWARD);
      const at::Tensor each = at::cross_entropy_loss(state.outputs, state.microbatch.targets, {}, at::Reduction::None);
      state.loss = each.mean();
      engine.run(basin::Event::AFTER_LOSS);  // loss-side algorithms (SAF) add their term here
      if (ask.backward) {
        engine.run(basin::Event::BEFORE_BACKWARD);
        state.loss.backward();
        engine.run(basin::Event::AFTER_BACKWARD);
      }
      return ask.per_sample_losses ? each.detach() : state.loss.detach();
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
  bool every_algorithm_acted = true;
  for (const auto& item : config.items()) {
    bool acted = false;
    for (const auto& entry : engine.trace()) acted = acted || entry.rfind(item.key() + "/", 0) == 0;
    every_algorithm_acted = every_algorithm_acted && acted;
  }
  return every_algorithm_acted && last_loss < first_loss ? 0 : 1;
} catch (const std::exception& error) {
  std::cerr << "basin-hand-loop: " << error.what() << std::endl;
  return 2;
}
