#pragma once
// The typed pool-kind suite: what every kind of registered pool keeps (a SinglePool of one part, an
// AutoPool whose routes send small requests to one part and large ones to another), whatever its
// source. pool_suite.hpp holds the rules of one Pool over each source; this suite runs the same kind
// of rules through RegisteredPool, the surface the C ABI and Python use, over each pool kind.
// Instantiate with INSTANTIATE_TYPED_TEST_SUITE_P(Name, PoolKindSuite, ::testing::Types<SingleKind<F>,
// AutoKind<F>...>) for source fixtures F of source_fixtures.hpp.

#include "source_fixtures.hpp"

#include <ncclpool/auto_pool.hpp>
#include <ncclpool/errors.hpp>
#include <ncclpool/registered_pool.hpp>
#include <ncclpool/routes.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ncclpool::testing {

inline constexpr std::size_t kKindMiB = std::size_t{1} << 20;

// One part over Fixture's source.
template <class Fixture>
struct SingleKind {
  using Source = Fixture;
  static std::string name() { return std::string(Fixture::kName) + "_single"; }
  static std::unique_ptr<RegisteredPool> make(const PoolConfig& config) {
    return std::make_unique<SinglePool>(std::make_shared<Pool>(Fixture::make(), config), RegistryOptions{CheckLevel::off});
  }
  // The part a request of `bytes` goes to.
  static RegistrationKind part_for(std::size_t, bool) { return RegistrationKind::none; }
};

// Two parts, each its own Pool over Fixture's source with the same configuration: requests below
// 1 MiB to the local part, from 1 MiB to the symmetric one (fixed routes, as an auto pool has after
// its first attach).
template <class Fixture>
struct AutoKind {
  using Source = Fixture;
  static std::string name() { return std::string(Fixture::kName) + "_auto"; }
  static std::unique_ptr<RegisteredPool> make(const PoolConfig& config) {
    auto make_part = [config](RegistrationKind part) {
      PoolConfig mine = config;
      mine.name = config.name + "/" + std::string(to_string(part));
      return std::make_shared<Pool>(Fixture::make(), mine);
    };
    return std::make_unique<AutoPool>(config.name, make_part, SizeRoutes({{0, RegistrationKind::local}, {kKindMiB, RegistrationKind::symmetric}}),
                                      "set by the test", RegistryOptions{CheckLevel::off});
  }
  // A source that cannot back windows (cuMemAlloc) makes an auto pool drop them: its symmetric sizes go
  // to the local part (as AutoPool.WithoutWindowsSymmetricSizesGoToTheLocalPart says).
  static RegistrationKind part_for(std::size_t bytes, bool windows) {
    return bytes < kKindMiB || !windows ? RegistrationKind::local : RegistrationKind::symmetric;
  }
};

struct PoolKindName {
  template <class Kind>
  static std::string GetName(int) {
    return Kind::name();
  }
};

template <typename Kind>
class PoolKindSuite : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!Kind::Source::available(&why)) GTEST_SKIP() << Kind::Source::kName << " source unavailable: " << why;
  }
  static std::unique_ptr<RegisteredPool> make_pool(PoolConfig config = {}) {
    if (config.name.empty()) config.name = "kinds";
    return Kind::make(config);
  }
  // Where ptr lives: its part's kind, segment and offset, "nowhere" when no part has it.
  static std::string place(const RegisteredPool& pool, const void* ptr) {
    const PoolPart* part = pool.part_of(ptr);
    if (part == nullptr) return "nowhere";
    const auto where = part->pool->locate(ptr);
    if (!where) return "unlocated";
    return std::string(to_string(part->kind)) + " segment " + std::to_string(where->segment_sequence) + " offset " + std::to_string(where->offset);
  }
  static std::size_t parts_allocated(const RegisteredPool& pool) {
    std::size_t sum = 0;
    for (const PoolPart& part : pool.parts()) sum += part.pool->stats().allocated_bytes;
    return sum;
  }
};

TYPED_TEST_SUITE_P(PoolKindSuite);

TYPED_TEST_P(PoolKindSuite, AllocateWriteReadBackFreeAcrossParts) {
  auto pool = this->make_pool();
  std::vector<std::pair<void*, std::size_t>> blocks;
  std::uint8_t tag = 1;
  for (std::size_t size = 1024; size <= (16u << 20); size *= 4) {
    void* p = pool->allocate(size);
    ASSERT_NE(p, nullptr);
    TypeParam::Source::fill(p, size, tag++);
    blocks.emplace_back(p, size);
  }
  tag = 1;
  for (auto [p, size] : blocks) {
    const auto bytes = TypeParam::Source::read(p, size);
    const std::uint8_t expected = tag++;
    ASSERT_TRUE(std::all_of(bytes.begin(), bytes.end(), [&](std::uint8_t b) { return b == expected; })) << "block of " << size << " bytes lost its contents";
  }
  pool->check_invariants();
  EXPECT_EQ(pool->stats().allocated_bytes, this->parts_allocated(*pool)) << "the pool's statistics are its parts' sums";
  for (auto [p, size] : blocks) pool->deallocate(p);
  EXPECT_EQ(pool->stats().allocated_bytes, 0u);
  pool->check_invariants();
}

TYPED_TEST_P(PoolKindSuite, EachRequestGoesToThePartItsSizeIsRoutedTo) {
  auto pool = this->make_pool();
  for (std::size_t size : {std::size_t{4096}, std::size_t{64} << 10, kKindMiB - 1, kKindMiB, std::size_t{8} << 20}) {
    void* p = pool->allocate(size);
    const PoolPart* part = pool->part_of(p);
    ASSERT_NE(part, nullptr) << size;
    if (pool->parts().size() > 1) {
      const bool windows = pool->parts().front().pool->source_properties().window_capable;
      EXPECT_EQ(part->kind, TypeParam::part_for(size, windows)) << size << " bytes";
    }
    EXPECT_GE(part->pool->locate(p)->size, size);
    pool->deallocate(p);
  }
  pool->check_invariants();
}

TYPED_TEST_P(PoolKindSuite, ForeignPointersAndDoubleFreesThrowAndChangeNothing) {
  auto pool = this->make_pool();
  void* small = pool->allocate(4096);
  void* large = pool->allocate(2 * kKindMiB);
  int local = 0;
  EXPECT_THROW(pool->deallocate(&local), ForeignPointer);
  EXPECT_EQ(pool->part_of(&local), nullptr);
  pool->deallocate(small);
  EXPECT_THROW(pool->deallocate(small), DoubleFree);
  pool->deallocate(large);
  EXPECT_THROW(pool->deallocate(large), DoubleFree);
  EXPECT_THROW((void)pool->allocate(0), InvalidArgument);
  EXPECT_EQ(pool->stats().active_allocations, 0u);
  pool->check_invariants();
}

TYPED_TEST_P(PoolKindSuite, ReserveServesLaterRequestsOfThatSizeWithoutGrowth) {
  PoolConfig config;
  config.growth_chunk = 4 << 20;
  auto pool = this->make_pool(config);
  pool->reserve(8 << 20);
  const auto reserved = pool->stats();
  EXPECT_GE(reserved.reserved_bytes, 8u << 20);
  void* a = pool->allocate(6 << 20);
  EXPECT_EQ(pool->stats().segments_created, reserved.segments_created) << "reserved memory serves requests without growth";
  pool->deallocate(a);
  pool->check_invariants();
}

TYPED_TEST_P(PoolKindSuite, TrimReleasesEverySegmentOnceAllIsFree) {
  auto pool = this->make_pool();
  void* small = pool->allocate(64 << 10);
  void* large = pool->allocate(4 * kKindMiB);
  EXPECT_EQ(pool->trim(), 0u) << "segments with live blocks stay";
  pool->deallocate(small);
  pool->deallocate(large);
  pool->publish_frees(0);
  EXPECT_GT(pool->trim(), 0u);
  const auto s = pool->stats();
  EXPECT_EQ(s.reserved_bytes, 0u);
  EXPECT_EQ(s.segment_count, 0u);
  pool->check_invariants();
}

TYPED_TEST_P(PoolKindSuite, SameRequestsGiveSamePlaces) {
  PoolConfig config;
  config.deterministic = true;
  auto first = this->make_pool(config);
  auto second = this->make_pool(config);
  std::vector<void*> live_a, live_b;
  std::uint64_t state = 12345;
  for (int i = 0; i < 300; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const bool do_free = !live_a.empty() && (state >> 60) < 6;
    if (do_free) {
      const std::size_t k = (state >> 20) % live_a.size();
      const stream_t stream = TypeParam::Source::stream(static_cast<int>((state >> 10) % 3));
      first->deallocate(live_a[k], stream);
      second->deallocate(live_b[k], stream);
      live_a.erase(live_a.begin() + static_cast<long>(k));
      live_b.erase(live_b.begin() + static_cast<long>(k));
    } else {
      const std::size_t size = 1 + (state >> 40) % (3 << 20);
      const stream_t stream = TypeParam::Source::stream(static_cast<int>((state >> 8) % 3));
      live_a.push_back(first->allocate(size, stream));
      live_b.push_back(second->allocate(size, stream));
      ASSERT_EQ(this->place(*first, live_a.back()), this->place(*second, live_b.back())) << "step " << i << ", " << size << " bytes";
    }
  }
  for (void* p : live_a) first->deallocate(p);
  for (void* p : live_b) second->deallocate(p);
  first->check_invariants();
  second->check_invariants();
}

TYPED_TEST_P(PoolKindSuite, ScopesWithoutCommunicatorsOpenAndCloseOnEveryPart) {
  auto pool = this->make_pool();
  {
    RegisteredPool::ScopeSet scope(*pool);
    EXPECT_GT(pool->open_scopes(), 0);
    void* p = pool->allocate(2 * kKindMiB);
    pool->deallocate(p);
    scope.close();
  }
  EXPECT_EQ(pool->open_scopes(), 0);
  pool->commit();  // nothing attached: nothing to agree
  EXPECT_EQ(pool->attached_count(), 0u);
  {
    RegisteredPool::ScopeSet left(*pool);  // destroyed open (an exception on its way): close_after_error
  }
  EXPECT_EQ(pool->open_scopes(), 0);
  pool->check_invariants();
}

REGISTER_TYPED_TEST_SUITE_P(PoolKindSuite, AllocateWriteReadBackFreeAcrossParts, EachRequestGoesToThePartItsSizeIsRoutedTo,
                            ForeignPointersAndDoubleFreesThrowAndChangeNothing, ReserveServesLaterRequestsOfThatSizeWithoutGrowth,
                            TrimReleasesEverySegmentOnceAllIsFree, SameRequestsGiveSamePlaces, ScopesWithoutCommunicatorsOpenAndCloseOnEveryPart);

}  // namespace ncclpool::testing
