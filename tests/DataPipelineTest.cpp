#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

TEST(DataPipelineTest, AComputedEpochOrderIsASeededPermutationReadByPosition) {
  // Sizes at, below and just past the Feistel domain's powers of four, where cycle walking does the most.
  for (const int64_t size : {1, 2, 3, 4, 5, 17, 64, 65, 1000, 4097}) {
    const EpochOrder order(size, 5, 0, /*shuffle=*/true, /*computed=*/true);
    const auto all = order.take(0, size);
    auto sorted = all;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < size; ++i) ASSERT_EQ(sorted[static_cast<std::size_t>(i)], i) << "size " << size;
    // Read by position: any slice of positions is the same slice of the whole order (a rank's share, a resumed step's).
    const int64_t first = size / 3, count = size - first;
    const auto part = order.take(first, count);
    EXPECT_EQ(part, std::vector<int64_t>(all.begin() + first, all.end())) << "size " << size;
    EXPECT_EQ(all, EpochOrder(size, 5, 0, true, true).take(0, size)) << "the same on every rank and resume";
  }
  const int64_t n = 100000;
  const auto e0 = EpochOrder(n, 5, 0, true, true).take(0, n);
  EXPECT_NE(e0, EpochOrder(n, 5, 1, true, true).take(0, n));
  EXPECT_NE(e0, EpochOrder(n, 6, 0, true, true).take(0, n));
  // Shuffled, not shifted: few samples keep their position (1 expected of a uniform permutation), and the
  // order is uncorrelated with the position (|r| of a uniform one is about 1 / sqrt(n) = 0.003).
  int64_t fixed = 0;
  double sum_xy = 0;
  for (int64_t i = 0; i < n; ++i) {
    fixed += e0[static_cast<std::size_t>(i)] == i;
    sum_xy += static_cast<double>(i) * static_cast<double>(e0[static_cast<std::size_t>(i)]);
  }
  const double mean = (n - 1) / 2.0, variance = (static_cast<double>(n) * n - 1) / 12.0;
  const double correlation = (sum_xy / n - mean * mean) / variance;
  EXPECT_LT(fixed, 10);
  EXPECT_LT(std::abs(correlation), 0.02);
  // Neighbours in the order are not neighbours in the data: within n/100 of each other about 2% of the time.
  int64_t near = 0;
  for (int64_t i = 0; i + 1 < n; ++i) near += std::abs(e0[static_cast<std::size_t>(i + 1)] - e0[static_cast<std::size_t>(i)]) < n / 100;
  EXPECT_LT(near, n * 3 / 100);
  // Unshuffled it is the identity; held, it is epoch_order's permutation.
  EXPECT_EQ(EpochOrder(5, 5, 3, false, true).take(0, 5), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(EpochOrder(1000, 5, 2, true, false).take(0, 1000), epoch_order(1000, 5, 2, true));
  EXPECT_THROW(EpochOrder(10, 5, 0, true, true).take(8, 3), std::out_of_range);
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
