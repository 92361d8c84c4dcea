// Links against an installed basin through its umbrella header: builds SAM
// from the registry and runs an event through an engine, then compiles the
// snippets of README.md and docs/sam-family.md as written there (run.sh
// extracts them): a SAM variant of the user's own, registered and named in a
// config, and make_sam_optimizer in a loop of the user's own. Then the
// installed library parts: a model and a dataset made by the names a config
// gives them (basin::models, basin::datasets: nothing in this program names
// their symbols, so their registrations must survive the link), and two local
// ranks started and watched by the launcher's machinery (basin::launch).
// Exit code 0 on success.
#include <iostream>
#include <memory>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <basin/basin.h>
#include <basin/launch/local_ranks.h>
#include <basin/models/sampling.h>  // installed with basin::models

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

// A model and a dataset by name, as a config names them; the model's forward
// on the dataset's first samples gives one row of logits per sample.
int parts_by_name() {
  basin::Params data_params(basin::Json::parse(R"({"train_size": 8, "test_size": 4, "input_shape": [1, 4, 4]})"),
                            "data");
  const auto splits = basin::dataset_registry().create("synthetic", data_params, 7);
  basin::Params model_params(basin::Json::parse(R"({"hidden": [16]})"), "model");
  const auto model = basin::model_registry().create("mlp", model_params, splits->info);
  const at::Tensor logits = model->forward(splits->train.inputs().slice(0, 0, 3));
  std::cout << "consumer: synthetic " << splits->train.size() << "/" << splits->test.size() << " samples, mlp logits "
            << logits.sizes() << std::endl;
  return splits->train.size() == 8 && logits.size(0) == 3 && logits.size(1) == splits->info.num_classes ? 0 : 1;
}

// Two local ranks of a job, each checking the rank the launcher gave it.
int launched_ranks() {
  basin::launch::install_launcher_signals();
  basin::launch::LocalRanks plan;
  plan.nproc = 2;
  plan.world_size = 2;
  plan.master_addr = "127.0.0.1";
  plan.master_port = 29500;
  plan.command = {"sh", "-c", R"(test "$RANK" = "$LOCAL_RANK" && test "$WORLD_SIZE" = 2)"};
  const auto outcome = basin::launch::run_local_ranks(
      plan, [] { return std::string(); }, [](const std::string&) {});
  std::cout << "consumer: launched 2 ranks, " << (outcome.failed < 0 ? "none failed" : "a rank failed") << std::endl;
  return outcome.failed < 0 && outcome.statuses.size() == 2 ? 0 : 1;
}

}  // namespace

int main() {
  if (parts_by_name() != 0 || launched_ranks() != 0) return 1;
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
