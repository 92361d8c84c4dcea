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

std::vector<bool> UnitSelection::resolve(const std::vector<std::string>& all, const std::vector<bool>& eligible) const {
  std::vector<std::string> names;  // the ones it may choose
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (eligible.empty() || eligible.at(i)) names.push_back(all[i]);
  }
  std::vector<bool> chosen(all.size(), false);
  auto choose = [&](const std::string& name) {
    chosen[static_cast<std::size_t>(std::find(all.begin(), all.end(), name) - all.begin())] = true;
  };
  if (spec_.is_boolean() || spec_.is_null()) {
    if (spec_ == Json(true) && names.empty()) {
      throw ConfigError("config key '" + key_ + "': the model declares no units " +
                        (all.empty() ? "to apply it to" : "it can apply to (" + listed(all) + " cannot)"));
    }
    if (spec_ == Json(true)) std::for_each(names.begin(), names.end(), choose);
    return chosen;
  }
  if (spec_.is_string()) {
    const std::regex pattern(spec_.get<std::string>());
    bool any = false;
    for (const auto& name : names) {
      if (std::regex_match(name, pattern)) choose(name), any = true;
    }
    if (!any) {
      throw ConfigError("config key '" + key_ + "': the pattern \"" + spec_.get<std::string>() +
                        "\" matches no unit; the model's units are " + listed(names));
    }
    return chosen;
  }
  for (const auto& wanted : spec_) {
    const std::string name = wanted.get<std::string>();
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      const bool passed_over = std::find(all.begin(), all.end(), name) != all.end();
      throw ConfigError("config key '" + key_ + "': \"" + name + "\" is " +
                        (passed_over ? "a unit it cannot apply to" : "not a unit of the model") + "; its units are " +
                        listed(names));
    }
    choose(name);
  }
  return chosen;
}

}  // namespace basin
