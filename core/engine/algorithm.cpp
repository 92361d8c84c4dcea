#include "basin/core/engine/algorithm.h"

namespace basin {

Registry<Algorithm>& algorithm_registry() {
  static Registry<Algorithm> registry("algorithm");
  return registry;
}

}  // namespace basin
