// RoPE as checkpoints configure it (models/rope.h): every type's inverse
// frequencies and attention factor against transformers' own functions
// (PyPI) at lengths below and above the original context and the model's
// positions; without Python, each type's formula written out here in
// double; a partial rotation; and bad keys refused naming them.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "basin/core/serialization/torch_save_file.h"
#include "basin/models/rope.h"
#include "hugging_face_python.h"
#include "test_paths.h"
#include "test_util.h"

namespace basin {
namespace {

using llama::RopeParameters;

const int64_t kHeadDim = 16, kPositions = 64;

RopeParameters rope_of(const Json& object, int64_t head_dim = kHeadDim) {
  return llama::read_rope(object, 10000.0, 1.0, head_dim, kPositions,
                          [](const std::string& key, const std::string& expected, const Json& value) {
                            throw std::invalid_argument("'" + key + "': expected " + expected + ", found " + value.dump());
                          });
}

at::Tensor inverse_of(const Json& object, int64_t positions) {
  return llama::rope_frequencies(rope_of(object), kHeadDim, kPositions, positions).inverse;
}

/// theta^(-2i/d) for i < dim / 2, in double.
std::vector<double> powers(double theta, int64_t dim) {
  std::vector<double> inverse;
  for (int64_t i = 0; i < dim / 2; ++i) inverse.push_back(std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(dim)));
  return inverse;
}

/// The largest relative difference from `expected`.
double relative_gap(const at::Tensor& got, const std::vector<double>& expected) {
  double gap = 0;
  EXPECT_EQ(got.numel(), static_cast<int64_t>(expected.size()));
  for (std::size_t i = 0; i < expected.size(); ++i) {
    gap = std::max(gap, std::abs(got[static_cast<int64_t>(i)].item<double>() - expected[i]) / std::abs(expected[i]));
  }
  return gap;
}

// fp32 against double: theta^x rounded once or twice and inverted (and for
// llama3 a few more fp32 operations), each within 2^-24 relative: 1e-6 is
// more than ten of them.
const double kFp32Bound = 1e-6;

TEST(RopeTest, EachTypeIsItsFormula) {
  const double theta = 500.0;
  const std::vector<double> base = powers(theta, kHeadDim);
  EXPECT_LT(relative_gap(inverse_of({{"rope_theta", theta}}, 10), base), kFp32Bound);
  std::vector<double> linear = base;
  for (double& f : linear) f /= 4;
  EXPECT_LT(relative_gap(inverse_of({{"rope_type", "linear"}, {"factor", 4.0}, {"rope_theta", theta}}, 10), linear), kFp32Bound);

  // Llama 3.1: wavelengths below original / high kept, above original / low divided by factor, smoothed between.
  const double factor = 8, low = 1, high = 4, original = 64;
  std::vector<double> llama3;
  int bands[3] = {0, 0, 0};
  for (double f : base) {
    const double wavelength = 2 * M_PI / f;
    if (wavelength < original / high) {
      llama3.push_back(f), ++bands[0];
    } else if (wavelength > original / low) {
      llama3.push_back(f / factor), ++bands[2];
    } else {
      const double smooth = (original / wavelength - low) / (high - low);
      llama3.push_back((1 - smooth) * f / factor + smooth * f), ++bands[1];
    }
  }
  ASSERT_TRUE(bands[0] > 0 && bands[1] > 0 && bands[2] > 0) << "every band of the formula is seen";
  const Json llama3_keys{{"rope_type", "llama3"}, {"factor", factor}, {"low_freq_factor", low}, {"high_freq_factor", high},
                         {"original_max_position_embeddings", 64}, {"rope_theta", theta}};
  EXPECT_LT(relative_gap(inverse_of(llama3_keys, 10), llama3), kFp32Bound);

  // Dynamic NTK: the default's bits within the model's positions, a larger base past them.
  const Json dynamic{{"rope_type", "dynamic"}, {"factor", 2.0}, {"rope_theta", theta}};
  EXPECT_TRUE(inverse_of(dynamic, kPositions).equal(inverse_of({{"rope_theta", theta}}, 10)));
  const double length = 100, grown = theta * std::pow(2.0 * length / kPositions - 1, kHeadDim / (kHeadDim - 2.0));
  EXPECT_LT(relative_gap(inverse_of(dynamic, 100), powers(grown, kHeadDim)), kFp32Bound);

  // LongRoPE: short factors within the original context, long ones past it; the attention factor by
  // the implied factor max_position_embeddings / original (64 / 16).
  std::vector<double> shorts, longs;
  for (int64_t i = 0; i < kHeadDim / 2; ++i) shorts.push_back(1.0 + 0.1 * static_cast<double>(i)), longs.push_back(2.0 + static_cast<double>(i));
  const Json longrope{{"rope_type", "longrope"}, {"short_factor", shorts}, {"long_factor", longs},
                      {"original_max_position_embeddings", 16}, {"rope_theta", theta}};
  std::vector<double> short_expected = base, long_expected = base;
  for (std::size_t i = 0; i < base.size(); ++i) short_expected[i] /= shorts[i], long_expected[i] /= longs[i];
  EXPECT_LT(relative_gap(inverse_of(longrope, 16), short_expected), kFp32Bound);
  EXPECT_LT(relative_gap(inverse_of(longrope, 17), long_expected), kFp32Bound);
  const auto with_factor = llama::rope_frequencies(rope_of(longrope), kHeadDim, kPositions, 17);
  EXPECT_NEAR(with_factor.attention_factor, std::sqrt(1 + std::log(4.0) / std::log(16.0)), 1e-12);

  // YaRN's attention factor, 0.1 ln(factor) + 1, and its mscale ratio.
  const Json yarn{{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 16}};
  EXPECT_NEAR(llama::rope_frequencies(rope_of(yarn), kHeadDim, kPositions, 10).attention_factor, 0.1 * std::log(4.0) + 1, 1e-12);
  Json scaled = yarn;
  // A null truncate is false, as transformers tests it for truth; absent, true.
  const Json long_yarn{{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 64}};
  Json untruncated = long_yarn, null_truncate = long_yarn;
  untruncated["truncate"] = false, null_truncate["truncate"] = nullptr;
  EXPECT_TRUE(inverse_of(null_truncate, 10).equal(inverse_of(untruncated, 10)));
  EXPECT_FALSE(inverse_of(long_yarn, 10).equal(inverse_of(untruncated, 10))) << "truncation moved no bound here";
  scaled["mscale"] = 2.0, scaled["mscale_all_dim"] = 1.0;
  EXPECT_NEAR(llama::rope_frequencies(rope_of(scaled), kHeadDim, kPositions, 10).attention_factor,
              (0.2 * std::log(4.0) + 1) / (0.1 * std::log(4.0) + 1), 1e-12);
}

TEST(RopeTest, APartialRotationTurnsTheFirstFeaturesAndPassesTheRest) {
  const RopeParameters rope = rope_of({{"rope_type", "linear"}, {"factor", 2.0}, {"partial_rotary_factor", 0.5}}, 8);
  EXPECT_EQ(rope.rotary_dim(8), 4);
  const llama::Rotary rotary = llama::Rotary::of(6, rope, 8, kPositions, at::TensorOptions(at::kFloat));
  ASSERT_EQ(rotary.cos.sizes(), (std::vector<int64_t>{6, 4}));
  at::manual_seed(0);
  const at::Tensor x = at::randn({2, 3, 6, 8});
  const at::Tensor y = rotary.apply(x);
  EXPECT_TRUE(y.narrow(-1, 4, 4).equal(x.narrow(-1, 4, 4))) << "the features past rotary_dim pass through";
  // Pair (i, i + 2) of the first four turned by position * inverse[i].
  const at::Tensor inverse = llama::rope_frequencies(rope, 8, kPositions, 6).inverse;
  for (int64_t p = 0; p < 6; ++p) {
    for (int64_t i = 0; i < 2; ++i) {
      const double angle = static_cast<double>(p) * inverse[i].item<double>();
      const at::Tensor a = x.select(2, p).select(-1, i), b = x.select(2, p).select(-1, i + 2);
      EXPECT_LT((y.select(2, p).select(-1, i) - (a * std::cos(angle) - b * std::sin(angle))).abs().max().item<double>(), 1e-5);
      EXPECT_LT((y.select(2, p).select(-1, i + 2) - (b * std::cos(angle) + a * std::sin(angle))).abs().max().item<double>(), 1e-5);
    }
  }
}

TEST(RopeTest, BadKeysAreRefusedNamingThem) {
  auto refused = [](const Json& object, const std::string& word) {
    try {
      rope_of(object);
      ADD_FAILURE() << "accepted " << object.dump();
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find(word), std::string::npos) << error.what();
    }
  };
  refused({{"rope_type", "su"}}, "'rope_type'");
  refused({{"rope_type", "linear"}}, "'factor'");
  refused({{"rope_type", "linear"}, {"factor", 0.5}}, "'factor'");
  refused({{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 4.0}, {"high_freq_factor", 1.0}}, "'high_freq_factor'");
  refused({{"rope_type", "longrope"}, {"short_factor", {1.0}}, {"long_factor", {1.0}}}, "'short_factor'");
  refused({{"rope_type", "yarn"}, {"factor", 2.0}, {"original_max_position_embeddings", 0}}, "'original_max_position_embeddings'");
  refused({{"rope_theta", 1.0}}, "'rope_theta'");
  refused({{"partial_rotary_factor", 0.01}}, "'partial_rotary_factor'");
}

TEST(RopeTest, EveryTypeEqualsTransformersBelowAndAboveTheOriginalLength) {
  const std::string python = test::hugging_face_python();
  if (python.empty()) {
    GTEST_SKIP() << "no Python with PyPI's transformers: run scripts/hf-python.sh (or set BASIN_HF_PYTHON)";
  }
  std::vector<double> shorts, longs;
  for (int64_t i = 0; i < kHeadDim / 2; ++i) shorts.push_back(1.0 + 0.3 * static_cast<double>(i)), longs.push_back(1.5 + static_cast<double>(i));
  const Json cases = Json::array({
      Json{{"rope_type", "default"}, {"rope_theta", 500.0}},
      Json{{"rope_type", "linear"}, {"factor", 4.0}},
      Json{{"rope_type", "linear"}, {"factor", 2.0}, {"partial_rotary_factor", 0.75}},
      Json{{"rope_type", "dynamic"}, {"factor", 2.0}, {"rope_theta", 1000.0}},
      Json{{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 16}},
      Json{{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 16}, {"beta_fast", 16.0},
           {"beta_slow", 2.0}, {"mscale", 1.0}, {"mscale_all_dim", 0.5}, {"truncate", false}},
      Json{{"rope_type", "yarn"}, {"factor", 2.0}, {"original_max_position_embeddings", 32}, {"attention_factor", 1.3}},
      Json{{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
           {"original_max_position_embeddings", 16}, {"rope_theta", 500.0}},
      Json{{"rope_type", "longrope"}, {"short_factor", shorts}, {"long_factor", longs}, {"original_max_position_embeddings", 16}},
      Json{{"rope_type", "longrope"}, {"short_factor", std::vector<double>(shorts.begin(), shorts.begin() + 4)},
           {"long_factor", std::vector<double>(longs.begin(), longs.begin() + 4)}, {"original_max_position_embeddings", 16},
           {"partial_rotary_factor", 0.5}, {"factor", 2.0}, {"attention_factor", 1.2}},
  });
  // Below the original context (16), past it, and past the model's positions (64).
  const std::vector<int64_t> lengths{10, 40, 100};
  test::TempDir dir;
  test::write_text(dir.file("cases.json"),
                   Json{{"head_dim", kHeadDim}, {"max_position_embeddings", kPositions}, {"lengths", lengths}, {"cases", cases}}.dump());
  const auto made = test::run_command(python + " " + std::string(BASIN_SOURCE_DIR) + "/tests/hugging_face/rope_reference.py " +
                                      dir.file("cases.json") + " " + dir.file("reference.pt"), 300);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const auto reference = read_torch_save_file(dir.file("reference.pt"), "test").toGenericDict();
  for (std::size_t c = 0; c < cases.size(); ++c) {
    const RopeParameters rope = rope_of(cases[c]);
    for (const int64_t length : lengths) {
      const std::string key = std::to_string(c) + "/" + std::to_string(length) + "/";
      const auto frequencies = llama::rope_frequencies(rope, kHeadDim, kPositions, length);
      const at::Tensor expected = reference.at(key + "inverse").toTensor();
      ASSERT_EQ(frequencies.inverse.sizes(), expected.sizes()) << cases[c].dump();
      EXPECT_LT(((frequencies.inverse - expected).abs() / expected.abs()).max().item<double>(), kFp32Bound)
          << cases[c].dump() << " at " << length;
      EXPECT_NEAR(frequencies.attention_factor, reference.at(key + "attention_factor").toTensor().item<double>(), 1e-6)
          << cases[c].dump() << " at " << length;
    }
  }
}

}  // namespace
}  // namespace basin
