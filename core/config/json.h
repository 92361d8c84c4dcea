#pragma once

#include <nlohmann/json.hpp>

namespace basin {

/// basin's JSON value. Configs keep the order of their keys: algorithms run
/// in the order written.
using Json = nlohmann::ordered_json;

}  // namespace basin
