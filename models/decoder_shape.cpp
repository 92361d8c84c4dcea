#include "basin/models/decoder_shape.h"

#include <algorithm>

namespace basin::llama {

namespace {

/// A key given, not null: transformers reads a null as the key's absence (but Mistral's window).
bool given(const Json& value) { return !value.is_null() && !value.is_discarded(); }

}  // namespace

void read_windows(Shape& shape, const KeyLookup& key, const RopeFailure& fail) {
  const Family& family = *shape.family;
  const auto layers = static_cast<std::size_t>(shape.num_hidden_layers);
  shape.layer_types.assign(layers, "full_attention");
  shape.sliding_window = 0;
  shape.window_keys = Json::object();
  if (family.windows == WindowRule::kNone) return;
  auto window_key = [&](const Json& value) {
    if (!given(value)) return int64_t{0};
    if (!value.is_number_integer() || value.get<int64_t>() < 1) {
      fail("sliding_window", "a window of at least 1 position, or null for none", value);
    }
    return value.get<int64_t>();
  };
  const Json window = key("sliding_window");
  // Absent, the config class's default; null, none.
  const int64_t size = window_key(window.is_discarded() ? Json(family.hf_window > 0 ? Json(family.hf_window) : Json()) : window);
  bool use = true;
  if (family.windows == WindowRule::kFromWindowLayer) {
    const Json use_key = key("use_sliding_window");
    if (given(use_key) && !use_key.is_boolean()) fail("use_sliding_window", "true or false", use_key);
    use = given(use_key) && use_key.get<bool>();
    const Json from = key("max_window_layers");
    if (given(from) && !(from.is_number_integer() && from.get<int64_t>() >= 0)) {
      fail("max_window_layers", "a layer index (0 or more)", from);
    }
    const int64_t first = given(from) ? from.get<int64_t>() : 28;
    shape.window_keys["use_sliding_window"] = use;
    shape.window_keys["max_window_layers"] = first;
    for (std::size_t i = 0; i < layers; ++i) {
      if (use && size > 0 && static_cast<int64_t>(i) >= first) shape.layer_types[i] = "sliding_attention";
    }
  } else if (family.windows == WindowRule::kPattern) {
    int64_t pattern = family.window_pattern;
    if (family.window_pattern_key) {
      const Json given_pattern = key(family.window_pattern_key);
      if (given(given_pattern) && !(given_pattern.is_number_integer() && given_pattern.get<int64_t>() >= 1)) {
        fail(family.window_pattern_key, "a count of layers (1 or more)", given_pattern);
      }
      if (given(given_pattern)) pattern = given_pattern.get<int64_t>();
    }
    for (std::size_t i = 0; i < layers; ++i) {
      if ((static_cast<int64_t>(i) + 1) % pattern != 0) shape.layer_types[i] = "sliding_attention";
    }
  } else {
    for (auto& type : shape.layer_types) type = size > 0 ? "sliding_attention" : "full_attention";
  }
  const Json types = family.windows == WindowRule::kEveryLayer ? Json() : key("layer_types");
  if (given(types)) {
    bool valid = types.is_array() && types.size() == layers;
    for (std::size_t i = 0; valid && i < layers; ++i) {
      valid = types[i] == "full_attention" || types[i] == "sliding_attention";
      if (valid) shape.layer_types[i] = types[i].get<std::string>();
    }
    if (!valid) {
      fail("layer_types", std::to_string(layers) + " of \"full_attention\" and \"sliding_attention\", one a layer", types);
    }
  }
  // Qwen's window counts only where use_sliding_window says so; a sliding layer without a window is
  // one transformers' mask cannot make.
  shape.sliding_window = use ? size : 0;
  const bool sliding_layers =
      std::find(shape.layer_types.begin(), shape.layer_types.end(), "sliding_attention") != shape.layer_types.end();
  if (sliding_layers && shape.sliding_window == 0 && family.windows != WindowRule::kEveryLayer) {
    if (family.windows == WindowRule::kFromWindowLayer) {
      fail("layer_types", "sliding layers only with use_sliding_window true and a sliding_window", types);
    }
    fail("sliding_window", std::string("a window of at least 1 position: ") + family.architecture + "'s sliding layers need one",
         window.is_discarded() ? Json() : window);
  }
  shape.window_keys["sliding_window"] = size > 0 ? Json(size) : Json();
  if (family.windows != WindowRule::kEveryLayer) shape.window_keys["layer_types"] = shape.layer_types;
}

void read_rope_of_layers(Shape& shape, const KeyLookup& key, const RopeFailure& fail) {
  const Family& family = *shape.family;
  auto number = [&](const char* name, double fallback, double above) {
    const Json value = key(name);
    if (!given(value)) return fallback;
    if (!value.is_number() || !(value.get<double>() > above)) fail(name, "a number above " + Json(above).dump(), value);
    return value.get<double>();
  };
  const double theta = number("rope_theta", family.hf_theta, 1);
  const double local_theta = family.rope_per_layer_type ? number("rope_local_base_freq", family.hf_local_theta, 1) : theta;
  const double partial = number("partial_rotary_factor", 1.0, 0);
  const std::string whole_heads = std::string("1: ") + family.architecture + " rotates whole heads";
  if (partial != 1.0) fail("partial_rotary_factor", whole_heads, Json(partial));
  // transformers gives a top-level original length priority over the RoPE object's (Phi-3 stores it so).
  const Json original = key("original_max_position_embeddings");
  if (given(original) && !(original.is_number_integer() && original.get<int64_t>() > 0)) {
    fail("original_max_position_embeddings", "a positive integer", original);
  }
  const Json parameters = key("rope_parameters"), scaling = key("rope_scaling");
  for (const auto& [name, value] : {std::pair<const char*, const Json&>{"rope_parameters", parameters},
                                    std::pair<const char*, const Json&>{"rope_scaling", scaling}}) {
    if (given(value) && !value.is_object()) fail(name, "an object of RoPE's keys, or null", value);
  }
  // Nested by layer type where the family's layers differ (Gemma 3, as transformers 5 writes it); one
  // object for every layer elsewhere.
  const bool nested = given(parameters) && (parameters.contains("full_attention") || parameters.contains("sliding_attention"));
  if (nested != family.rope_per_layer_type && given(parameters)) {
    fail("rope_parameters", nested ? std::string("one object: ") + family.architecture + " has one RoPE for every layer"
                                   : "an object by layer type, {\"full_attention\": {...}, \"sliding_attention\": {...}}",
         parameters);
  }
  shape.rope.clear();
  for (const std::string& type : shape.layer_types) {
    if (shape.rope.count(type) != 0) continue;
    Json object = Json::object();
    std::string where = "rope_parameters.";
    if (family.rope_per_layer_type) {
      // Gemma 3's config class starts each type at the default and lays rope_scaling over the full one.
      object = {{"rope_type", "default"}};
      if (nested && parameters.contains(type) && given(parameters.at(type))) object = parameters.at(type);
      where += type + ".";
      if (given(scaling) && type == "full_attention") object.update(scaling), where = "rope_scaling.";
    } else if (given(scaling)) {
      object = scaling, where = "rope_scaling.";  // transformers 5 reads it before rope_parameters
    } else if (given(parameters)) {
      object = parameters;
    }
    auto text = [&](const char* name) {
      const auto found = object.find(name);
      return found != object.end() && found->is_string() ? found->get<std::string>() : std::string();
    };
    const std::string type_name = !text("rope_type").empty() ? text("rope_type") : text("type");
    if (given(original) && (type_name == "yarn" || type_name == "llama3" || type_name == "longrope")) {
      object["original_max_position_embeddings"] = original;
    }
    const double type_theta = family.rope_per_layer_type && type == "sliding_attention" ? local_theta : theta;
    RopeParameters rope = read_rope(object, type_theta, 1.0, shape.head_dim, shape.max_position_embeddings,
                                    [&](const std::string& inner, const std::string& expected, const Json& value) {
                                      fail(inner.empty() ? where.substr(0, where.size() - 1) : where + inner, expected, value);
                                    });
    if (rope.partial_rotary_factor != 1.0) fail(where + "partial_rotary_factor", whole_heads, Json(rope.partial_rotary_factor));
    shape.rope.emplace(type, std::move(rope));
  }
}

}  // namespace basin::llama
