#pragma once

#include <string>
#include <vector>

#include "basin/core/config/json.h"

namespace basin {

class Params;

/// Which of a model's declared units a setting applies to, as the config
/// says it ("parallel.activation_checkpointing"): true or false (every unit
/// or none), a list of unit names (their paths in the model: "h.0",
/// "fc1"), or one string, a regular expression a whole name must match
/// ("h\\.[0-9]*[02468]": every other block).
class UnitSelection {
 public:
  UnitSelection() = default;
  /// Reads `key` of `section` (absent: none); a value of another type is a ConfigError naming it.
  UnitSelection(Params& section, const std::string& key);

  /// One flag per unit of `names`, chosen among those `eligible` says (one
  /// flag per unit; empty: all): true and a pattern pass the others over. A
  /// name in the list that is no eligible unit, or a pattern that matches
  /// none, is a ConfigError naming the key and listing the eligible units.
  std::vector<bool> resolve(const std::vector<std::string>& names, const std::vector<bool>& eligible = {}) const;

 private:
  Json spec_;
  std::string key_;
};

}  // namespace basin
