#include "basin/algorithms/sam/sam_registry.h"

#include "basin/algorithms/sam/sam.h"

namespace basin {

Registry<SAM>& sam_family_registry() {
  static Registry<SAM> registry("SAM-family algorithm");
  return registry;
}

}  // namespace basin
