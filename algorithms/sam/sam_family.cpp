#include "basin/algorithms/sam/sam_family.h"

namespace basin {

std::shared_ptr<SAMOptimizer> make_sam_optimizer(const std::string& name, std::shared_ptr<torch::optim::Optimizer> base,
                                                 const Json& options) {
  State state;  // one process, no model: what a bare loop tells a rule
  return make_sam_optimizer(name, std::move(base), options, state);
}

std::shared_ptr<SAMOptimizer> make_sam_optimizer(const std::string& name, std::shared_ptr<torch::optim::Optimizer> base,
                                                 const Json& options, const State& state) {
  const std::string path = "algorithms." + name;
  // C++'s `{}` makes a null json: no keys, as an empty object.
  if (!options.is_object() && !options.is_null()) {
    throw ConfigError("config key '" + path + "': expected an object of the algorithm's keys, got " + options.dump());
  }
  Params params(options.is_null() ? Json::object() : options, path);
  return sam_family_registry().create(name, params)->make_optimizer(std::move(base), state);
}

}  // namespace basin
