#pragma once

// zero3's gathers in a low precision against fp32 gathers under the same
// autocast, ranks as threads (ZeroThreeMixedPrecisionTest).

#include <cstddef>
#include <iostream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "basin/core/parallel/zero3/mixed_precision.h"
#include "fully_sharded_of.h"
#include "distributed_util.h"
#include "test_util.h"

namespace basin::test {

inline constexpr const char* kBf16Gathers = R"({"param_dtype": "bf16", "reduce_dtype": "fp32", "buffers": true})";

/// What one rank ends with: the weights gathered whole, its own fp32 shards,
/// and the dtype its model's parameters have (the gathers').
struct Held {
  Weights whole, shards;
  at::ScalarType gathered = at::kFloat;
};

inline std::vector<Held> train_and_hold_gathers(int world, const Json& config) {
  std::vector<Held> held(static_cast<std::size_t>(world));
  run_ranks(world, [&](int rank, std::shared_ptr<Communicator> communicator) {
    Trainer trainer(config, {}, {}, communicator);
    trainer.fit();
    Held& mine = held[static_cast<std::size_t>(rank)];
    mine.whole = weights_of(trainer);
    for (const auto& s : fully_sharded_of(trainer)->shards()) mine.shards.push_back(s.detach().clone());
    mine.gathered = fully_sharded_of(trainer)->parameters().front().scalar_type();
  });
  return held;
}

/// `config` (zero3, under the amp of `policy`'s param_dtype) trained with
/// and without the policy's gathers (bf16 unless said), fp32 either way:
/// each rank's shards and whole weights the same bits (`bit_for_bit`), or
/// else apart, and nearer to each other than to the start. No rounding
/// bounds runs that compute differently over steps (a bf16 op where the
/// other's is fp32; SAM's ascent point rounded otherwise), so the yardstick
/// is a run that did not train: it sits exactly as far as training moved.
inline void expect_gathers_follow_autocast(Json config, const std::string& what, bool bit_for_bit, int world = 2,
                                    const char* policy = kBf16Gathers) {
  const Json gathers = Json::parse(policy);
  config["precision"] = "amp_" + gathers["param_dtype"].get<std::string>();
  config["parallel"]["mode"] = "zero3";
  config["parallel"].erase("mixed_precision");
  const auto fp32_gathers = train_and_hold_gathers(world, config);
  double moved = 0;
  if (!bit_for_bit) {
    Trainer untrained(config);
    moved = max_difference(fp32_gathers[0].whole, untrained.whole_parameters());
  }
  config["parallel"]["mixed_precision"] = gathers;
  const auto bf16_gathers = train_and_hold_gathers(world, config);
  for (int r = 0; r < world; ++r) {
    const auto& low = bf16_gathers[static_cast<std::size_t>(r)];
    const auto& high = fp32_gathers[static_cast<std::size_t>(r)];
    ASSERT_EQ(high.gathered, at::kFloat) << what;
    ASSERT_EQ(dtype_name(low.gathered), gathers["param_dtype"].get<std::string>()) << what << ": the policy took";
    for (const auto& s : low.shards) ASSERT_EQ(s.scalar_type(), at::kFloat) << what << ": the fp32 masters";
    for (const auto& w : low.whole) ASSERT_EQ(w.scalar_type(), at::kFloat) << what << ": whole from the masters";
    const double apart = max_difference(low.whole, high.whole);
    if (bit_for_bit) {
      EXPECT_EQ(max_difference(low.shards, high.shards), 0.0) << what << ", rank " << r << "'s shards";
      EXPECT_EQ(apart, 0.0) << what << ", rank " << r;
      continue;
    }
    EXPECT_LT(max_difference(low.shards, high.shards), moved) << what << ", rank " << r << "'s shards";
    EXPECT_LT(apart, moved) << what << ", rank " << r << " (moved " << moved << ")";
    EXPECT_GT(apart, 0.0) << what << ", rank " << r << ": the comparison is not of a run with itself";
    if (r == 0) std::cout << what << ": apart " << apart << ", " << apart / moved << " of what training moved" << std::endl;
  }
}

}  // namespace basin::test
