// The pool's data structures on their own: the TLSF free index and the pointer map.

#include "core/free_index.hpp"
#include "core/pointer_map.hpp"

#include <gtest/gtest.h>

#include <random>
#include <unordered_map>
#include <vector>

namespace ncclpool::detail {
namespace {

TEST(FreeIndex, BinsAreMonotoneAndSixteenPerPowerOfTwo) {
  EXPECT_EQ(FreeIndex::bin_of(256).fl, 8u);
  EXPECT_EQ(FreeIndex::bin_of(256).sl, 0u);
  EXPECT_EQ(FreeIndex::bin_of(256 + 16).sl, 1u);
  EXPECT_EQ(FreeIndex::bin_of(511).sl, 15u);
  unsigned last = 0;
  for (std::size_t size = 256; size < (1ull << 40); size += size / 7 + 256) {
    const auto b = FreeIndex::bin_of(size);
    const unsigned linear = b.fl * FreeIndex::kSubBins + b.sl;
    EXPECT_GE(linear, last) << size;
    last = linear;
  }
}

TEST(FreeIndex, FindReturnsALargeEnoughBlockOrNothing) {
  std::mt19937_64 rng(7);
  std::vector<Block> blocks(2000);
  FreeIndex index;
  for (auto& b : blocks) {
    b.size = 256 * (1 + rng() % 40000);
    index.insert(&b);
  }
  std::size_t max_size = 0;
  for (auto& b : blocks) max_size = std::max(max_size, b.size);
  EXPECT_EQ(index.largest(), max_size);
  for (int i = 0; i < 5000; ++i) {
    const std::size_t want = 256 * (1 + rng() % 45000);
    const Block* found = index.find(want);
    if (want <= max_size - max_size / 16) {
      ASSERT_NE(found, nullptr) << want;
    }
    if (found != nullptr) {
      ASSERT_GE(found->size, want);
      // Good fit: at most one bin above the request's bin.
      const auto wb = FreeIndex::bin_of(want), fb = FreeIndex::bin_of(found->size);
      const bool near = fb.fl * 16 + fb.sl <= wb.fl * 16 + wb.sl + 1;
      bool none_between = true;
      if (!near) {
        for (auto& b : blocks) {
          const auto bb = FreeIndex::bin_of(b.size);
          const unsigned lin = bb.fl * 16 + bb.sl;
          if (b.size >= want && lin < fb.fl * 16 + fb.sl && lin > wb.fl * 16 + wb.sl) none_between = false;
        }
      }
      ASSERT_TRUE(near || none_between) << "skipped a smaller fitting bin for " << want;
    } else {
      for (auto& b : blocks) ASSERT_LT(b.size, want + want / 8 + 256) << "missed a fit for " << want;
    }
  }
  for (auto& b : blocks) index.remove(&b);
  EXPECT_EQ(index.size(), 0u);
  EXPECT_EQ(index.find(256), nullptr);
  EXPECT_EQ(index.largest(), 0u);
}

TEST(FreeIndex, ExactClassHeadIsPreferred) {
  FreeIndex index;
  Block exact, bigger;
  exact.size = 20 << 20;       // 20 MiB
  bigger.size = 100 << 20;
  index.insert(&bigger);
  index.insert(&exact);
  EXPECT_EQ(index.find(20 << 20), &exact);
  EXPECT_EQ(index.find((20 << 20) - 4096), &exact);
  index.remove(&exact);
  EXPECT_EQ(index.find(20 << 20), &bigger);
}

TEST(PointerMap, MatchesAReferenceMapUnderRandomInsertErase) {
  std::mt19937_64 rng(11);
  PointerMap map;
  std::unordered_map<std::uintptr_t, Block*> ref;
  std::vector<Block> blocks(64);
  std::vector<std::uintptr_t> keys;
  for (int i = 0; i < 200000; ++i) {
    if (keys.empty() || rng() % 3 != 0) {
      const std::uintptr_t key = (1 + rng() % 100000) * 256;
      if (ref.count(key)) continue;
      Block* value = &blocks[rng() % blocks.size()];
      map.insert(key, value);
      ref[key] = value;
      keys.push_back(key);
    } else {
      const std::size_t k = rng() % keys.size();
      ASSERT_TRUE(map.erase(keys[k]));
      ref.erase(keys[k]);
      keys[k] = keys.back();
      keys.pop_back();
    }
    if (i % 997 == 0) {
      for (auto [key, value] : ref) ASSERT_EQ(map.find(key), value);
      ASSERT_EQ(map.size(), ref.size());
    }
  }
  EXPECT_FALSE(map.erase(12345 * 256 + 1));
  EXPECT_EQ(map.find(1), nullptr);
}

}  // namespace
}  // namespace ncclpool::detail
