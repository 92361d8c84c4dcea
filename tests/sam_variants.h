#pragma once

// The SAM family's variants by name, for the tests that drive a step
// directly (no trainer): make_sam_optimizer with SAMOptions as the
// family's config keys.

#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "basin/algorithms/sam/sam_family.h"

namespace basin::test {

/// `keys`, with SAMOptions' step settings where they differ from the defaults.
inline Json sam_keys(const SAMOptions& options, Json keys = Json::object()) {
  const SAMOptions defaults;
  keys["rho"] = options.rho;
  keys["epsilon"] = options.epsilon;
  if (options.interval != defaults.interval) keys["interval"] = options.interval;
  if (options.start != defaults.start) keys["start"] = options.start;
  return keys;
}

/// What a step may need of a run, beyond the loop: the seed (ESAM), the
/// run's length (AE-SAM) and a model naming the parameters (ASAM's "scale").
struct RunFacts {
  int64_t seed = 0;
  int64_t run_steps = 0;
  std::shared_ptr<torch::nn::Module> model;
};

inline RunFacts run_facts(int64_t seed, int64_t run_steps = 0) {
  RunFacts facts;
  facts.seed = seed;
  facts.run_steps = run_steps;
  return facts;
}

inline std::shared_ptr<SAMOptimizer> sam_variant(const std::string& name, std::shared_ptr<torch::optim::Optimizer> base,
                                                 const Json& keys, const RunFacts& facts = {}) {
  State state;
  state.seed = facts.seed;
  state.max_steps = facts.run_steps;
  state.model = facts.model;
  return make_sam_optimizer(name, std::move(base), keys, state);
}

/// A module holding `params` under `names` (ASAM's "scale": "weights" reads them).
inline std::shared_ptr<torch::nn::Module> module_naming(const std::vector<at::Tensor>& params,
                                                        const std::vector<std::string>& names) {
  auto module = std::make_shared<torch::nn::Module>();
  for (std::size_t i = 0; i < params.size(); ++i) module->register_parameter(names[i], params[i]);
  return module;
}

}  // namespace basin::test
