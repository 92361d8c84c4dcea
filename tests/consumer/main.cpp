// Links against an installed basin: builds SAM from the registry and runs an
// event through an engine, with headers from each of core's folders (their
// install paths follow the source tree), and runs README's SAMOptimizer
// snippet as written there (run.sh extracts it into readme_loop.inc).
// Exit code 0 on success.
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
  // README's "SAM in a loop you already have", as written there (run.sh extracts it):
#include "readme_loop.inc"
  std::cout << "consumer: README's loop took " << sam.sam_steps() << " SAM step(s)" << std::endl;
  return sam.sam_steps() == 1 ? 0 : 1;
}
