#include "basin/core/model/unit_selection.h"

#include <algorithm>
#include <regex>

#include "basin/core/config/config.h"

namespace basin {

namespace {

std::string listed(const std::vector<std::string>& names) {
  if (names.empty()) return "none: the model declares no units";
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

}  // namespace

UnitSelection::UnitSelection(Params& section, const std::string& key) : key_(section.path_of(key)) {
  spec_ = section.raw(key);
  const bool list_of_names = spec_.is_array() && std::all_of(spec_.begin(), spec_.end(), [](const Json& v) {
                               return v.is_string();
                             });
  if (!spec_.is_null() && !spec_.is_boolean() && !spec_.is_string() && !list_of_names) {
    section.fail(key, "true, false, a list of unit names or a pattern (a string)", spec_);
  }
  if (spec_.is_string()) {
    try {
      std::regex pattern(spec_.get<std::string>());
    } catch (const std::regex_error& error) {
      section.fail(key, std::string("a valid regular expression (") + error.what() + ")", spec_);
    }
  }
}

std::vector<bool> UnitSelection::resolve(const std::vector<std::string>& names) const {
  std::vector<bool> chosen(names.size(), spec_.is_boolean() && spec_.get<bool>());
  if (spec_.is_boolean() || spec_.is_null()) {
    if (spec_ == Json(true) && names.empty()) {
      throw ConfigError("config key '" + key_ + "': the model declares no units to apply it to");
    }
    return chosen;
  }
  if (spec_.is_string()) {
    const std::regex pattern(spec_.get<std::string>());
    for (std::size_t i = 0; i < names.size(); ++i) chosen[i] = std::regex_match(names[i], pattern);
    if (std::none_of(chosen.begin(), chosen.end(), [](bool c) { return c; })) {
      throw ConfigError("config key '" + key_ + "': the pattern \"" + spec_.get<std::string>() +
                        "\" matches no unit; the model's units are " + listed(names));
    }
    return chosen;
  }
  for (const auto& wanted : spec_) {
    const auto found = std::find(names.begin(), names.end(), wanted.get<std::string>());
    if (found == names.end()) {
      throw ConfigError("config key '" + key_ + "': \"" + wanted.get<std::string>() +
                        "\" is not a unit of the model; its units are " + listed(names));
    }
    chosen[static_cast<std::size_t>(found - names.begin())] = true;
  }
  return chosen;
}

}  // namespace basin
