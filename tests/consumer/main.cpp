// Links against an installed basin through its umbrella header: builds SAM
// from the registry and runs an event through an engine, then compiles the
// snippets of README.md and docs/sam-family.md as written there (run.sh
// extracts them): a SAM variant of the user's own, registered and named in a
// config, and make_sam_optimizer in a loop of the user's own. Exit code 0 on
// success.
#include <iostream>
#include <memory>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <basin/basin.h>

// docs/sam-family.md's variant of your own (Extending), as written there:
#include "readme_variant.inc"

namespace {

int engine_runs(const char* config, const char* expected_name) {
  basin::State state;
  basin::Engine engine(state);
  basin::Params algorithms(basin::Json::parse(config), "algorithms");
  engine.add_algorithms(algorithms);
  engine.run(basin::Event::INIT);
  std::cout << "consumer: " << engine.algorithms().size() << " algorithm(s): " << engine.algorithms().front()->name()
            << std::endl;
  return engine.algorithms().front()->name() == expected_name ? 0 : 1;
}

}  // namespace

int main() {
  std::cout << "consumer: nccl " << (basin::nccl_available() ? "on" : "off") << "; summary keys "
            << basin::FitSummary{}.to_json().size() << std::endl;
  if (engine_runs(R"({"sam": {"rho": 0.1}})", "sam") != 0) return 1;
  if (engine_runs(R"({"sign_sam": {"rho": 0.1}})", "sign_sam") != 0) return 1;

  auto model = torch::nn::Linear(4, 3);
  const std::vector<std::pair<at::Tensor, at::Tensor>> batches{{at::randn({8, 4}), at::randint(0, 3, {8})}};
  // README's "SAM in a loop you already have", as written there:
#include "readme_loop.inc"
  std::cout << "consumer: README's loop took " << sam->sam_steps() << " SAM step(s)" << std::endl;
  if (sam->sam_steps() != 1) return 1;
  auto own = basin::make_sam_optimizer("sign_sam", std::make_shared<torch::optim::SGD>(model->parameters(), 0.1),
                                       {{"rho", 0.1}});
  for (const auto& [x, y] : batches) {
    own->step([&] {
      own->zero_grad();
      at::Tensor loss = at::cross_entropy_loss(model->forward(x), y);
      loss.backward();
      return loss.detach();
    });
  }
  std::cout << "consumer: sign_sam took " << own->sam_steps() << " SAM step(s)" << std::endl;
  return own->sam_steps() == 1 ? 0 : 1;
}
