#include "basin/models/rope.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace basin::llama {
namespace {

const double kPi = 3.14159265358979323846;

bool is_number(const Json& value) { return value.is_number() && !value.is_boolean(); }

/// A key whose null means absent, as transformers reads it.
const Json* present(const Json& object, const char* key) {
  const auto found = object.find(key);
  return found == object.end() || found->is_null() ? nullptr : &*found;
}

/// YaRN's attention scale for a context `scale` times longer (its Eq. 21).
double yarn_mscale(double scale, double mscale = 1.0) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

/// theta^(2i/dim) for i < dim / 2 in fp32, as transformers takes a Python float's power of an fp32 tensor.
at::Tensor powers(double theta, int64_t dim) {
  return at::pow(theta, at::arange(0, dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(dim));
}

}  // namespace

int64_t RopeParameters::rotary_dim(int64_t head_dim) const {
  return static_cast<int64_t>(static_cast<double>(head_dim) * partial_rotary_factor);
}

RopeParameters read_rope(const Json& object, double default_theta, double default_partial_rotary_factor,
                         int64_t head_dim, int64_t max_position_embeddings, const RopeFailure& fail) {
  RopeParameters rope;
  if (!object.is_object()) fail("", "an object with \"rope_type\" and its keys", object);
  rope.keys = object;
  const Json* type = present(object, "rope_type");
  if (type == nullptr) type = present(object, "type");
  if (type != nullptr && !type->is_string()) fail("rope_type", "a string", *type);
  rope.type = type == nullptr ? "default" : type->get<std::string>();
  rope.keys.erase("type");
  rope.keys["rope_type"] = rope.type;
  static const std::set<std::string> kTypes{"default", "linear", "dynamic", "yarn", "llama3", "longrope"};
  if (kTypes.count(rope.type) == 0) {
    fail("rope_type", "one of \"default\", \"linear\", \"dynamic\", \"yarn\", \"llama3\" and \"longrope\"", Json(rope.type));
  }
  auto number = [&](const char* key, bool required, double fallback) {
    const Json* value = present(object, key);
    if (value == nullptr) {
      if (required) fail(key, "a number (RoPE \"" + rope.type + "\" needs it)", Json());
      return fallback;
    }
    if (!is_number(*value)) fail(key, "a number", *value);
    return value->get<double>();
  };
  rope.theta = number("rope_theta", false, default_theta);
  if (!(rope.theta > 1)) fail("rope_theta", "a base above 1", Json(rope.theta));
  rope.keys["rope_theta"] = rope.theta;
  rope.partial_rotary_factor = number("partial_rotary_factor", false, default_partial_rotary_factor);
  if (!(rope.partial_rotary_factor > 0 && rope.partial_rotary_factor <= 1)) {
    fail("partial_rotary_factor", "a share of the head in (0, 1]", Json(rope.partial_rotary_factor));
  }
  // Written only where it differs from the whole head, as a config that leaves it out means.
  if (rope.partial_rotary_factor != 1.0) {
    rope.keys["partial_rotary_factor"] = rope.partial_rotary_factor;
  } else {
    rope.keys.erase("partial_rotary_factor");
  }
  const int64_t dim = rope.rotary_dim(head_dim);
  if (dim < 2 || dim % 2 != 0) {
    fail("partial_rotary_factor", "a share that rotates an even number of head_dim's " + std::to_string(head_dim) +
         " features", Json(rope.partial_rotary_factor));
  }
  if (rope.type == "default") return rope;

  // What every scaled type but llama3 may leave to the pretraining length: the original length.
  const bool has_original = rope.type == "yarn" || rope.type == "llama3" || rope.type == "longrope";
  double original = static_cast<double>(max_position_embeddings);
  if (has_original) {
    const Json* given = present(object, "original_max_position_embeddings");
    if (given != nullptr && !(given->is_number_integer() && given->get<int64_t>() > 0)) {
      fail("original_max_position_embeddings", "a positive integer", *given);
    }
    // Absent, the model's positions, as transformers standardizes it (kept out of `keys`: derived, not given).
    if (given != nullptr) original = static_cast<double>(given->get<int64_t>());
    rope.original_max_position_embeddings = original;
  }
  const bool factor_required = rope.type != "longrope";
  rope.factor = number("factor", factor_required, static_cast<double>(max_position_embeddings) / original);
  if (present(object, "factor") != nullptr && !(rope.factor >= 1)) fail("factor", "a number of at least 1", Json(rope.factor));

  if (rope.type == "yarn") {
    for (const char* key : {"attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim"}) number(key, false, 0);
    if (const Json* truncate = present(object, "truncate"); truncate != nullptr && !truncate->is_boolean()) {
      fail("truncate", "true or false", *truncate);
    }
  } else if (rope.type == "llama3") {
    const double low = number("low_freq_factor", true, 0), high = number("high_freq_factor", true, 0);
    if (!(high > low)) fail("high_freq_factor", "a number above low_freq_factor (" + Json(low).dump() + ")", Json(high));
  } else if (rope.type == "longrope") {
    number("attention_factor", false, 0);
    for (const char* key : {"short_factor", "long_factor"}) {
      const Json* factors = present(object, key);
      const auto expected = std::to_string(dim / 2) + " numbers, one for each rotated pair";
      if (factors == nullptr || !factors->is_array() || static_cast<int64_t>(factors->size()) != dim / 2 ||
          !std::all_of(factors->begin(), factors->end(), is_number)) {
        fail(key, expected, factors == nullptr ? Json() : *factors);
      }
    }
  }
  return rope;
}

RopeFrequencies rope_frequencies(const RopeParameters& rope, int64_t head_dim, int64_t max_position_embeddings,
                                 int64_t positions) {
  const int64_t dim = rope.rotary_dim(head_dim);
  const Json& keys = rope.keys;
  auto value = [&](const char* key, double fallback) {
    const Json* given = present(keys, key);
    return given == nullptr ? fallback : given->get<double>();
  };
  RopeFrequencies result;
  if (rope.type == "default" || rope.type == "linear" || rope.type == "llama3") {
    result.inverse = 1.0 / powers(rope.theta, dim);
    if (rope.type == "linear") result.inverse = result.inverse / rope.factor;
  }
  if (rope.type == "dynamic") {
    // NTK: a larger base once the sequence outgrows the positions the model was made for.
    const double length = static_cast<double>(std::max(positions, max_position_embeddings));
    const double base = rope.theta * std::pow(rope.factor * length / static_cast<double>(max_position_embeddings) - (rope.factor - 1),
                                              static_cast<double>(dim) / static_cast<double>(dim - 2));
    result.inverse = 1.0 / powers(base, dim);
  } else if (rope.type == "llama3") {
    // Long wavelengths divided by factor, short ones kept, and a smooth ramp between.
    const double original = rope.original_max_position_embeddings;
    const double low = value("low_freq_factor", 0), high = value("high_freq_factor", 0);
    const double low_wavelength = original / low, high_wavelength = original / high;
    const at::Tensor inverse = result.inverse;
    const at::Tensor wavelength = 2 * kPi / inverse;
    at::Tensor scaled = at::where(wavelength > low_wavelength, inverse / rope.factor, inverse);
    const at::Tensor smooth = (original / wavelength - low) / (high - low);
    const at::Tensor smoothed = (1 - smooth) * scaled / rope.factor + smooth * scaled;
    const at::Tensor medium = (wavelength >= high_wavelength).logical_and(wavelength <= low_wavelength);
    result.inverse = at::where(medium, smoothed, scaled);
  } else if (rope.type == "yarn") {
    const double original = rope.original_max_position_embeddings;
    const double mscale = value("mscale", 0), mscale_all_dim = value("mscale_all_dim", 0);
    result.attention_factor = present(keys, "attention_factor") != nullptr ? value("attention_factor", 1)
                              : mscale != 0 && mscale_all_dim != 0
                                  ? yarn_mscale(rope.factor, mscale) / yarn_mscale(rope.factor, mscale_all_dim)
                                  : yarn_mscale(rope.factor);
    // transformers takes 0 as absent here (`or`).
    const double beta_fast = value("beta_fast", 0) != 0 ? value("beta_fast", 0) : 32;
    const double beta_slow = value("beta_slow", 0) != 0 ? value("beta_slow", 0) : 1;
    // The dimension at which a wavelength fits `rotations` times into the original context.
    auto correction_dim = [&](double rotations) {
      return static_cast<double>(dim) * std::log(original / (rotations * 2 * kPi)) / (2 * std::log(rope.theta));
    };
    double low = correction_dim(beta_fast), high = correction_dim(beta_slow);
    // Absent, true; null, false (transformers tests it for truth).
    const auto truncate = keys.find("truncate");
    if (truncate == keys.end() || (!truncate->is_null() && truncate->get<bool>())) low = std::floor(low), high = std::ceil(high);
    low = std::max(low, 0.0), high = std::min(high, static_cast<double>(dim - 1));
    if (low == high) high += 0.001;  // as transformers avoids the singularity
    const at::Tensor position_powers = powers(rope.theta, dim);
    const at::Tensor extrapolated = 1.0 / position_powers, interpolated = 1.0 / (rope.factor * position_powers);
    const at::Tensor ramp = ((at::arange(dim / 2, at::kFloat) - low) / (high - low)).clamp(0, 1);
    const at::Tensor kept = 1 - ramp;
    result.inverse = interpolated * (1 - kept) + extrapolated * kept;
  } else if (rope.type == "longrope") {
    const double original = rope.original_max_position_embeddings;
    result.attention_factor = present(keys, "attention_factor") != nullptr ? value("attention_factor", 1)
                              : rope.factor <= 1 ? 1.0
                                                 : std::sqrt(1 + std::log(rope.factor) / std::log(original));
    // The long factors once the sequence is longer than the pretraining context.
    const auto& factors = keys.at(static_cast<double>(positions) > original ? "long_factor" : "short_factor");
    const at::Tensor scale = at::tensor(factors.get<std::vector<float>>(), at::kFloat);
    result.inverse = 1.0 / (scale * powers(rope.theta, dim));
  }
  return result;
}

Rotary Rotary::of(int64_t positions, const RopeParameters& rope, int64_t head_dim, int64_t max_position_embeddings,
                  const at::TensorOptions& options) {
  const RopeFrequencies frequencies = rope_frequencies(rope, head_dim, max_position_embeddings, positions);
  const at::Tensor inverse = frequencies.inverse.to(options.device());
  const at::Tensor angles = at::arange(positions, options.dtype(at::kFloat)).unsqueeze(1) * inverse.unsqueeze(0);
  const at::Tensor both = at::cat({angles, angles}, -1);
  at::Tensor cos = both.cos(), sin = both.sin();
  if (frequencies.attention_factor != 1.0) cos = cos * frequencies.attention_factor, sin = sin * frequencies.attention_factor;
  return {cos.to(options.dtype()), sin.to(options.dtype())};
}

at::Tensor Rotary::apply(const at::Tensor& x) const {
  const int64_t dim = cos.size(-1), half = dim / 2;
  auto rotated = [&](const at::Tensor& part) {
    return part * cos + at::cat({-part.narrow(-1, half, half), part.narrow(-1, 0, half)}, -1) * sin;
  };
  if (dim == x.size(-1)) return rotated(x);
  return at::cat({rotated(x.narrow(-1, 0, dim)), x.narrow(-1, dim, x.size(-1) - dim)}, -1);
}

}  // namespace basin::llama
