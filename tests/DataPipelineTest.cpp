#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include <ATen/ATen.h>

#include "basin/core/data/data_pipeline.h"

namespace basin {
namespace {

at::Tensor balanced_labels(int64_t n, int64_t classes) { return at::arange(n, at::kLong).remainder(classes); }

TEST(DataPipelineTest, LabelNoiseRateIsWithinToleranceAndChangesEachNoisyLabel) {
  const int64_t n = 60000;
  const at::Tensor clean = balanced_labels(n, 10);
  at::Tensor noisy = clean.clone();
  const int64_t replaced = add_label_noise(noisy, 0.2, 10, 7);
  const int64_t changed = noisy.ne(clean).sum().item<int64_t>();
  EXPECT_EQ(replaced, changed);  // a replaced label always differs from the true one
  // Binomial(60000, 0.2) has std ~98 labels: 0.005 is about 3 standard deviations.
  EXPECT_NEAR(static_cast<double>(changed) / n, 0.2, 0.005);
  EXPECT_GE(noisy.min().item<int64_t>(), 0);
  EXPECT_LE(noisy.max().item<int64_t>(), 9);
  // Symmetric: every wrong class is about equally likely (n*0.2/9 ~ 1333 each).
  const at::Tensor wrong = noisy.masked_select(noisy.ne(clean)).sub(clean.masked_select(noisy.ne(clean))).remainder(10);
  const at::Tensor counts = at::bincount(wrong, {}, 10).slice(0, 1);
  EXPECT_LT((counts.max() - counts.min()).item<int64_t>(), 200);
}

TEST(DataPipelineTest, LabelNoiseIsDeterministicPerSeed) {
  at::Tensor a = balanced_labels(5000, 10), b = balanced_labels(5000, 10), c = balanced_labels(5000, 10);
  add_label_noise(a, 0.3, 10, 11);
  add_label_noise(b, 0.3, 10, 11);
  add_label_noise(c, 0.3, 10, 12);
  EXPECT_TRUE(a.equal(b));
  EXPECT_FALSE(a.equal(c));
  at::Tensor untouched = balanced_labels(100, 10);
  EXPECT_EQ(add_label_noise(untouched, 0.0, 10, 1), 0);
  EXPECT_TRUE(untouched.equal(balanced_labels(100, 10)));
}

TEST(DataPipelineTest, EpochOrderIsASeededPermutationThatChangesPerEpoch) {
  const auto e0 = epoch_order(1000, 5, 0, true);
  EXPECT_EQ(e0, epoch_order(1000, 5, 0, true));
  EXPECT_NE(e0, epoch_order(1000, 5, 1, true));
  EXPECT_NE(e0, epoch_order(1000, 6, 0, true));
  auto sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  const auto plain = epoch_order(5, 5, 3, false);
  EXPECT_EQ(plain, (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(DataPipelineTest, SubsetIsDeterministicAndDistinct) {
  const TensorDataset data(at::arange(100, at::kFloat).unsqueeze(1), at::arange(100, at::kLong));
  const TensorDataset a = take_subset(data, 30, 1);
  const TensorDataset b = take_subset(data, 30, 1);
  EXPECT_EQ(a.size(), 30);
  EXPECT_TRUE(a.targets().equal(b.targets()));
  const auto values = a.targets();
  std::set<int64_t> unique(values.data_ptr<int64_t>(), values.data_ptr<int64_t>() + 30);
  EXPECT_EQ(unique.size(), 30u);
  // Inputs stay paired with their targets.
  EXPECT_TRUE(a.inputs().squeeze(1).to(at::kLong).equal(a.targets()));
  EXPECT_EQ(take_subset(data, 0, 1).size(), 100);
}

}  // namespace
}  // namespace basin
