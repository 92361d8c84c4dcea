#pragma once

#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "basin/core/config/config.h"

namespace basin {

/// Creates objects of one kind (algorithms, models, ...) by name from config.
/// Objects come as shared_ptr built by make_shared, so a type may use
/// enable_shared_from_this (the grad scaler does).
///
/// Factories take the object's config section as Params plus kind-specific
/// arguments (a model gets its dataset's shape). A type registers itself in
/// one line next to its definition with BASIN_REGISTER.
template <class T, class... Args>
class Registry {
 public:
  using Factory = std::function<std::shared_ptr<T>(Params&, Args...)>;

  explicit Registry(std::string kind) : kind_(std::move(kind)) {}

  /// Returns true so that it can initialise a static (see BASIN_REGISTER).
  bool add(const std::string& name, Factory factory) {
    if (!factories_.emplace(name, std::move(factory)).second) {
      throw std::logic_error("basin: " + kind_ + " '" + name + "' registered twice");
    }
    return true;
  }

  /// Registers a type constructible as `Type(Params&, Args...)`.
  template <class Type>
  bool add_type(const std::string& name) {
    return add(name, [](Params& params, Args... args) -> std::shared_ptr<T> {
      return std::make_shared<Type>(params, std::forward<Args>(args)...);
    });
  }

  bool contains(const std::string& name) const { return factories_.count(name) != 0; }

  /// Creates `name`, then rejects any key of `params` the factory did not read.
  std::shared_ptr<T> create(const std::string& name, Params& params, Args... args) const {
    auto it = factories_.find(name);
    if (it == factories_.end()) {
      throw ConfigError("unknown " + kind_ + " '" + name + "'" +
                        (params.path().empty() ? "" : " at '" + params.path() + "'") +
                        "; known: " + known_names());
    }
    std::shared_ptr<T> object = it->second(params, std::forward<Args>(args)...);
    params.finish();
    return object;
  }

  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& entry : factories_) out.push_back(entry.first);
    return out;
  }

  std::string known_names() const {
    std::string out;
    for (const auto& entry : factories_) out += (out.empty() ? "" : ", ") + entry.first;
    return out;
  }

  const std::string& kind() const { return kind_; }

 private:
  std::string kind_;
  std::map<std::string, Factory> factories_;
};

}  // namespace basin

#define BASIN_CONCAT_INNER(a, b) a##b
#define BASIN_CONCAT(a, b) BASIN_CONCAT_INNER(a, b)

/// Registers `Type` under `name` in `registry` at load time, e.g.
/// `BASIN_REGISTER(basin::algorithm_registry(), "sam", SAM);`
#define BASIN_REGISTER(registry, name, Type)                    \
  [[maybe_unused]] static const bool BASIN_CONCAT(basin_registered_, __LINE__) = \
      (registry).template add_type<Type>(name)
