#include "basin/core/train/model.h"

namespace basin {

Registry<Model, const DatasetInfo&>& model_registry() {
  static Registry<Model, const DatasetInfo&> registry("model");
  return registry;
}

}  // namespace basin
