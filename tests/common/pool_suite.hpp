#pragma once
// The typed pool suite: every rule a pool must keep whatever its source. Instantiate with
// INSTANTIATE_TYPED_TEST_SUITE_P(Name, PoolSuite, ::testing::Types<Fixture...>).
// A fixture provides: kName, available(std::string*), make(), fill(ptr, n, byte), read(ptr, n),
// stream(i) for i in 0..3 (real streams on CUDA sources; 0 is the default stream).

#include "source_fixtures.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

namespace ncclpool::testing {

template <typename Fixture>
class PoolSuite : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!Fixture::available(&why)) GTEST_SKIP() << Fixture::kName << " source unavailable: " << why;
    source_ = Fixture::make();
  }
  std::unique_ptr<Pool> make_pool(PoolConfig config = {}) { return std::make_unique<Pool>(source_, std::move(config)); }
  std::shared_ptr<SegmentSource> source_;
};

TYPED_TEST_SUITE_P(PoolSuite);

TYPED_TEST_P(PoolSuite, AllocateWriteReadBackFree) {
  auto pool = this->make_pool();
  std::vector<std::pair<void*, std::size_t>> blocks;
  std::uint8_t tag = 1;
  for (std::size_t size = 1024; size <= (16u << 20); size *= 4) {
    void* p = pool->allocate(size);
    ASSERT_NE(p, nullptr);
    TypeParam::fill(p, size, tag++);
    blocks.emplace_back(p, size);
  }
  tag = 1;
  for (auto [p, size] : blocks) {
    const auto bytes = TypeParam::read(p, size);
    const std::uint8_t expected = tag++;
    ASSERT_TRUE(std::all_of(bytes.begin(), bytes.end(), [&](std::uint8_t b) { return b == expected; }))
        << "block of " << size << " bytes lost its contents";
  }
  pool->check_invariants();
  for (auto [p, size] : blocks) pool->deallocate(p);
  EXPECT_EQ(pool->stats().allocated_bytes, 0u);
  pool->check_invariants();
}

TYPED_TEST_P(PoolSuite, AlignmentAndRounding) {
  PoolConfig config;
  const std::size_t align = std::min<std::size_t>(4096, this->source_->properties().alignment);
  config.alignment = align;
  auto pool = this->make_pool(config);
  void* a = pool->allocate(1);
  void* b = pool->allocate(align + 1);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % align, 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b) % align, 0u);
  EXPECT_EQ(pool->locate(a)->size, align);
  EXPECT_EQ(pool->locate(b)->size, 2 * align);
  EXPECT_EQ(pool->stats().requested_bytes, align + 2);
  pool->deallocate(a);
  pool->deallocate(b);
  pool->check_invariants();
}

TYPED_TEST_P(PoolSuite, SameStreamReuseDoesNotGrow) {
  auto pool = this->make_pool();
  void* a = pool->allocate(1 << 20, TypeParam::stream(3));
  pool->deallocate(a);
  const auto before = pool->stats();
  void* b = pool->allocate(1 << 20, TypeParam::stream(3));
  EXPECT_EQ(a, b) << "a block freed on a stream is reusable at once on that stream";
  EXPECT_EQ(pool->stats().segments_created, before.segments_created);
  pool->deallocate(b);
}

TYPED_TEST_P(PoolSuite, SplitAndCoalesceRestoreOneBlock) {
  auto pool = this->make_pool();
  void* a = pool->allocate(256 << 10);
  void* b = pool->allocate(256 << 10);
  void* c = pool->allocate(256 << 10);
  const auto seg = pool->segment_of(a);
  ASSERT_TRUE(seg);
  EXPECT_EQ(pool->segment_of(c)->sequence, seg->sequence);
  EXPECT_EQ(static_cast<char*>(b) - static_cast<char*>(a), 256 << 10) << "blocks are carved in order";
  pool->deallocate(b);
  pool->deallocate(a);
  pool->deallocate(c);
  pool->check_invariants();
  pool->publish_frees(0);  // freed blocks wait unpublished (apart) until their stream publishes
  pool->check_invariants();
  EXPECT_EQ(pool->stats().largest_free_block, seg->size) << "freed neighbours coalesce into one block";
}

TYPED_TEST_P(PoolSuite, GrowthReserveAndTrim) {
  PoolConfig config;
  config.growth_chunk = 4 << 20;
  auto pool = this->make_pool(config);
  pool->reserve(8 << 20);
  auto s = pool->stats();
  EXPECT_GE(s.reserved_bytes, 8u << 20);
  EXPECT_EQ(s.segment_count, 1u);
  void* a = pool->allocate(6 << 20);
  EXPECT_EQ(pool->stats().segment_count, 1u) << "reserved memory serves requests without growth";
  void* big = pool->allocate(20 << 20);
  s = pool->stats();
  EXPECT_EQ(s.segment_count, 2u);
  EXPECT_EQ(pool->segment_of(big)->size % (4u << 20), 0u) << "segments are multiples of growth_chunk";
  EXPECT_EQ(pool->trim(), 0u) << "segments with live blocks stay";
  pool->deallocate(big);
  EXPECT_GE(pool->trim(), 20u << 20);
  EXPECT_EQ(pool->stats().segment_count, 1u);
  pool->deallocate(a);
  pool->trim();
  s = pool->stats();
  EXPECT_EQ(s.reserved_bytes, 0u);
  EXPECT_EQ(s.segments_released, 2u);
  pool->check_invariants();
}

TYPED_TEST_P(PoolSuite, BadInputsThrowDistinctErrorsAndChangeNothing) {
  auto pool = this->make_pool();
  void* a = pool->allocate(4096);
  const std::string before = pool->stats_json();
  EXPECT_THROW((void)pool->allocate(0), InvalidArgument);
  EXPECT_THROW((void)pool->allocate(SIZE_MAX), SizeTooLarge);
  EXPECT_THROW((void)pool->allocate(pool->source_properties().capacity + 1), SizeTooLarge);
  int local = 0;
  EXPECT_THROW(pool->deallocate(&local), ForeignPointer);
  EXPECT_THROW(pool->deallocate(static_cast<char*>(a) + 256), InvalidPointer);
  pool->deallocate(a);
  EXPECT_THROW(pool->deallocate(a), DoubleFree);
  pool->check_invariants();
  EXPECT_EQ(pool->stats().active_allocations, 0u);
  EXPECT_NE(before, pool->stats_json()) << "the one valid free was counted";
}

TYPED_TEST_P(PoolSuite, ErrorMessagesNamePoolDeviceAndSize) {
  PoolConfig config;
  config.name = "grads";
  auto pool = this->make_pool(config);
  try {
    (void)pool->allocate(SIZE_MAX / 2);
    FAIL() << "expected SizeTooLarge";
  } catch (const SizeTooLarge& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("pool 'grads'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("device " + std::to_string(pool->source_properties().device)), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::to_string(SIZE_MAX / 2)), std::string::npos) << msg;
    EXPECT_EQ(e.code(), ErrorCode::size_too_large);
  }
}

TYPED_TEST_P(PoolSuite, SameRequestsGiveSameOffsets) {
  PoolConfig config;
  config.deterministic = true;
  auto first = this->make_pool(config);
  auto second = std::make_unique<Pool>(TypeParam::make(), config);
  std::vector<void*> live_a, live_b;
  std::uint64_t state = 12345;
  for (int i = 0; i < 300; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const bool do_free = !live_a.empty() && (state >> 60) < 6;
    if (do_free) {
      const std::size_t k = (state >> 20) % live_a.size();
      const stream_t stream = TypeParam::stream(static_cast<int>((state >> 10) % 3));
      first->deallocate(live_a[k], stream);
      second->deallocate(live_b[k], stream);
      live_a.erase(live_a.begin() + static_cast<long>(k));
      live_b.erase(live_b.begin() + static_cast<long>(k));
    } else {
      const std::size_t size = 1 + (state >> 40) % (3 << 20);
      const stream_t stream = TypeParam::stream(static_cast<int>((state >> 8) % 3));
      live_a.push_back(first->allocate(size, stream));
      live_b.push_back(second->allocate(size, stream));
      const auto la = first->locate(live_a.back());
      const auto lb = second->locate(live_b.back());
      ASSERT_EQ(la->segment_sequence, lb->segment_sequence) << "step " << i;
      ASSERT_EQ(la->offset, lb->offset) << "step " << i;
    }
  }
  for (void* p : live_a) first->deallocate(p);
  for (void* p : live_b) second->deallocate(p);
}

TYPED_TEST_P(PoolSuite, StatsAsJson) {
  auto pool = this->make_pool();
  void* a = pool->allocate(1000);
  const std::string json = pool->stats_json();
  EXPECT_NE(json.find("\"allocated_bytes\":1024"), std::string::npos) << json;
  EXPECT_NE(json.find("\"requested_bytes\":1000"), std::string::npos) << json;
  EXPECT_NE(json.find("\"segment_count\":1"), std::string::npos) << json;
  EXPECT_NE(json.find("\"oom_count\":0"), std::string::npos) << json;
  pool->deallocate(a);
}

REGISTER_TYPED_TEST_SUITE_P(PoolSuite, AllocateWriteReadBackFree, AlignmentAndRounding, SameStreamReuseDoesNotGrow,
                            SplitAndCoalesceRestoreOneBlock, GrowthReserveAndTrim,
                            BadInputsThrowDistinctErrorsAndChangeNothing, ErrorMessagesNamePoolDeviceAndSize,
                            SameRequestsGiveSameOffsets, StatsAsJson);

}  // namespace ncclpool::testing
