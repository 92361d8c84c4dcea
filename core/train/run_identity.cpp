#include "basin/core/train/run_identity.h"

#include <string>
#include <vector>

#include "basin/core/parallel/distributed_strategy.h"

namespace basin {

namespace {

// What may change on resume: the run's length, what it shows and saves, and
// which units recompute, which change no number (their tests pin the same
// bits either way); besides, each parallel mode's own such keys
// (parallel_keys_resume_may_change).
const std::vector<std::string> kSafeToChange = {"max_epochs", "max_steps", "log_every", "threads", "init_from",
                                                "callbacks.progress", "callbacks.checkpoint",
                                                "parallel.activation_checkpointing"};

bool listed(const std::vector<std::string>& keys, const std::string& path) {
  for (const auto& key : keys) {
    if (path == key || path.rfind(key + ".", 0) == 0) return true;
  }
  return false;
}

std::string shown(const Json* value) {
  if (value == nullptr) return "absent";
  std::string text = value->dump();
  return text.size() > 80 ? text.substr(0, 77) + "..." : text;
}

// The first differing key outside the safe ones, depth first in file order.
bool first_difference(const Json* saved, const Json* current, const std::string& path,
                      const std::vector<std::string>& also_safe, std::string& where, std::string& was, std::string& now) {
  static const std::vector<std::string> parallel_safe = parallel_keys_resume_may_change();
  if (!path.empty() && (listed(kSafeToChange, path) || listed(parallel_safe, path) || listed(also_safe, path))) {
    return false;
  }
  if (saved != nullptr && current != nullptr && saved->is_object() && current->is_object()) {
    for (const auto& [key, value] : saved->items()) {
      const auto other = current->find(key);
      const std::string child = path.empty() ? key : path + "." + key;
      if (first_difference(&value, other == current->end() ? nullptr : &*other, child, also_safe, where, was, now)) return true;
    }
    for (const auto& [key, value] : current->items()) {
      if (saved->contains(key)) continue;
      const std::string child = path.empty() ? key : path + "." + key;
      if (first_difference(nullptr, &value, child, also_safe, where, was, now)) return true;
    }
    return false;
  }
  // A section on one side only differs where one of its keys would.
  const Json* only = saved == nullptr ? current : current == nullptr ? saved : nullptr;
  if (only != nullptr && only->is_object() && !only->empty()) {
    for (const auto& [key, value] : only->items()) {
      const std::string child = path.empty() ? key : path + "." + key;
      const Json* was_there = saved == nullptr ? nullptr : &value;
      const Json* is_there = current == nullptr ? nullptr : &value;
      if (first_difference(was_there, is_there, child, also_safe, where, was, now)) return true;
    }
    return false;
  }
  if (saved != nullptr && current != nullptr && *saved == *current) return false;
  where = path;
  was = shown(saved);
  now = shown(current);
  return true;
}

}  // namespace

void check_same_run(const Json& saved, const Json& current, const std::vector<std::string>& also_safe) {
  std::string where, was, now;
  if (first_difference(&saved, &current, "", also_safe, where, was, now)) {
    throw ConfigError("config key '" + where + "' is " + was + " in the checkpoint and " + now +
                      " now: resuming would make a different run. Resume with the checkpoint's config, or pass "
                      "--allow-config-change to resume anyway");
  }
}

}  // namespace basin
