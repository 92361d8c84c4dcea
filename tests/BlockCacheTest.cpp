// BlockCache: a block let go is handed out again for its size, never while
// something holds it (a view of its tensor too); it holds no more than twice
// what it lent at once; large blocks are not kept; blocks may outlive the
// cache.

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include <ATen/ATen.h>

#include "basin/core/base/block_cache.h"
#include "basin/core/base/memory_reuse.h"

namespace basin {
namespace {

TEST(BlockCacheTest, ABlockLetGoServesTheNextRequestOfItsSize) {
  BlockCache cache;
  const void* first = nullptr;
  {
    const c10::DataPtr block = cache.take(4096);
    first = block.get();
    EXPECT_EQ(cache.made_bytes(), 4096u);
    EXPECT_EQ(cache.kept_bytes(), 0u);
  }
  EXPECT_EQ(cache.kept_bytes(), 4096u);
  const c10::DataPtr again = cache.take(4096);
  EXPECT_EQ(again.get(), first);
  EXPECT_EQ(cache.made_bytes(), 4096u) << "no new block";
  EXPECT_EQ(cache.kept_bytes(), 0u);

  const c10::DataPtr other_size = cache.take(8192);
  EXPECT_NE(other_size.get(), first);
  EXPECT_EQ(cache.made_bytes(), 4096u + 8192u);
}

TEST(BlockCacheTest, ABlockHeldIsNeverHandedOut) {
  BlockCache cache;
  c10::DataPtr one = cache.take(1024);
  const c10::DataPtr two = cache.take(1024);
  const void* first = one.get();
  one.clear();
  const c10::DataPtr three = cache.take(1024);
  EXPECT_EQ(three.get(), first);
  EXPECT_NE(three.get(), two.get());
  EXPECT_EQ(cache.made_bytes(), 2048u);
}

// Lent and kept together, never more than twice the most lent at once: a
// new block frees kept ones of other sizes, the oldest first.
TEST(BlockCacheTest, ItHoldsNoMoreThanTwiceTheMostItLentAtOnce) {
  BlockCache cache;
  {
    const c10::DataPtr a = cache.take(1024), b = cache.take(2048);  // 3 KiB lent at once
  }
  EXPECT_EQ(cache.kept_bytes(), 3072u);
  {
    c10::DataPtr c;
    {
      const c10::DataPtr a = cache.take(1024), b = cache.take(2048);
      EXPECT_EQ(cache.made_bytes(), 3072u) << "both kept blocks served";
      c = cache.take(512);  // 3.5 KiB lent: nothing kept to free
      EXPECT_EQ(cache.made_bytes(), 3584u);
    }
  }  // returned last
  EXPECT_EQ(cache.kept_bytes(), 3584u);
  {
    const c10::DataPtr big = cache.take(6144);  // within twice the most lent (7 KiB) with 1 KiB kept at most
    EXPECT_EQ(cache.kept_bytes(), 512u) << "the 2 KiB and 1 KiB blocks, returned first, were freed for it";
  }
  EXPECT_EQ(cache.kept_bytes(), 512u + 6144u);
  EXPECT_EQ(cache.made_bytes(), 3584u + 6144u);
}

TEST(BlockCacheTest, FreeingTheKeptBlocksStartsTheBoundAfresh) {
  BlockCache cache;
  {
    const c10::DataPtr a = cache.take(4096), b = cache.take(4096);
  }
  cache.free_kept();
  EXPECT_EQ(cache.kept_bytes(), 0u);
  cache.take(1024);  // let go at once: kept
  EXPECT_EQ(cache.kept_bytes(), 1024u);
  const c10::DataPtr other = cache.take(2048);  // the most lent is 1 KiB now, not 8: room for 2 KiB only
  EXPECT_EQ(cache.kept_bytes(), 0u);
}

TEST(BlockCacheTest, ATensorsBlockComesBackWhenItAndItsViewsAreGone) {
  BlockCache cache;
  at::Tensor view;
  const void* data = nullptr;
  {
    at::Tensor tensor = cache.empty(6, at::kFloat);
    ASSERT_EQ(tensor.numel(), 6);
    EXPECT_EQ(tensor.scalar_type(), at::kFloat);
    EXPECT_TRUE(tensor.is_contiguous());
    tensor.copy_(at::arange(6, at::kFloat));
    data = tensor.data_ptr();
    view = tensor.narrow(0, 2, 3).view({3, 1});
  }
  EXPECT_EQ(cache.kept_bytes(), 0u) << "a view holds the block";
  EXPECT_TRUE(at::equal(view.flatten(), at::arange(2, 5, at::kFloat)));
  view.reset();
  EXPECT_EQ(cache.kept_bytes(), 24u);
  const at::Tensor bf16 = cache.empty(12, at::kBFloat16);  // the same bytes, another dtype
  EXPECT_EQ(bf16.data_ptr(), data);
  EXPECT_EQ(cache.made_bytes(), 24u);
}

TEST(BlockCacheTest, BlocksAboveTheHeapsLargestAreNotKept) {
  BlockCache cache;
  const auto large = static_cast<std::size_t>(kLargestHeapBlock) + 64;
  {
    const c10::DataPtr block = cache.take(large);
    ASSERT_NE(block.get(), nullptr);
    static_cast<char*>(block.get())[large - 1] = 1;
  }
  EXPECT_EQ(cache.made_bytes(), 0u);
  EXPECT_EQ(cache.kept_bytes(), 0u);
}

TEST(BlockCacheTest, BlocksMayComeBackOnAnyThreadAndOutliveTheCache) {
  at::Tensor outlives;
  {
    BlockCache cache;
    std::vector<at::Tensor> tensors;
    for (int i = 0; i < 8; ++i) tensors.push_back(cache.empty(256, at::kFloat).fill_(i));
    outlives = tensors.back();
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&tensors, t] {
        for (std::size_t i = static_cast<std::size_t>(t); i + 1 < tensors.size(); i += 2) tensors[i].reset();
      });
    }
    for (auto& thread : threads) thread.join();
    EXPECT_EQ(cache.kept_bytes(), 7u * 1024u);
    EXPECT_EQ(cache.made_bytes(), 8u * 1024u);
  }
  EXPECT_EQ(outlives.sum().item<float>(), 7.0f * 256);
  outlives.reset();  // freed, not brought back to the cache that is gone
}

}  // namespace
}  // namespace basin
