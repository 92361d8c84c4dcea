// Links against an installed basin: builds SAM from the registry and runs an
// event through an engine, with headers from each of core's folders (their
// install paths follow the source tree). Exit code 0 on success.
#include <iostream>

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
  return engine.algorithms().front()->name() == "sam" ? 0 : 1;
}
