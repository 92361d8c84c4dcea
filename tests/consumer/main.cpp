// Links against an installed basin: builds SAM from the registry and runs an
// event through an engine. Exit code 0 on success.
#include <iostream>

#include <basin/core/algorithm.h>
#include <basin/core/engine.h>

int main() {
  basin::State state;
  basin::Engine engine(state);
  basin::Params algorithms(basin::Json::parse(R"({"sam": {"rho": 0.1}})"), "algorithms");
  engine.add_algorithms(algorithms);
  engine.run(basin::Event::INIT);
  std::cout << "consumer: " << engine.algorithms().size() << " algorithm(s): " << engine.algorithms().front()->name()
            << std::endl;
  return engine.algorithms().front()->name() == "sam" ? 0 : 1;
}
