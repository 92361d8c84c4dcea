// Links against an installed basin: builds SAM from the registry and runs an
// event through an engine, with headers from each of core's folders (their
// install paths follow the source tree), and runs README's SAMOptimizer
// snippet as written there. Exit code 0 on success.
#include <iostream>
#include <memory>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <basin/algorithms/sam_optimizer.h>
#include <basin/core/algorithm.h>
#include <basin/core/engine.h>
#include <basin/core/parallel/communicator.h>
#include <basin/core/train/trainer.h>

int main() {
  basin::State state;
  basin::Engine engine(state);
  basin::Params algorithms(basin::Json::parse(R"({"sam": {"rho": 0.1}})"), "algorithms");
  engine.add_algorithms(algorithms);
  engine.run(basin::Event::INIT);
  std::cout << "consumer: " << engine.algorithms().size() << " algorithm(s): " << engine.algorithms().front()->name()
            << "; nccl " << (basin::nccl_available() ? "on" : "off") << "; summary keys "
            << basin::FitSummary{}.to_json().size() << std::endl;
  if (engine.algorithms().front()->name() != "sam") return 1;

  auto model = torch::nn::Linear(4, 3);
  const std::vector<std::pair<at::Tensor, at::Tensor>> batches{{at::randn({8, 4}), at::randint(0, 3, {8})}};
  // README, "SAM around the optimizer of a loop you already have":
  auto base = std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  basin::SAMOptions options;
  options.rho = 0.05;
  basin::SAMOptimizer sam(base, options);
  for (const auto& [x, y] : batches) {
    sam.step([&] {  // SAM runs the closure twice: at w, then at w + e
      sam.zero_grad();
      at::Tensor loss = at::cross_entropy_loss(model->forward(x), y);
      loss.backward();
      return loss.detach();
    });
  }
  std::cout << "consumer: README's loop took " << sam.sam_steps() << " SAM step(s)" << std::endl;
  return sam.sam_steps() == 1 ? 0 : 1;
}
