#include "basin/core/engine/state.h"

namespace basin {

const char* pass_name(Pass pass) {
  switch (pass) {
    case Pass::kPlain: return "plain";
    case Pass::kAscent: return "ascent";
    case Pass::kDescent: return "descent";
  }
  return "unknown";
}

}  // namespace basin
