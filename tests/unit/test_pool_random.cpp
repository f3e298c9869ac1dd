// Randomized sequences with the invariant checker after every step, and multi-threaded stress.
// Each live block carries a tag at both ends; a tag that changes means two blocks overlapped.

#include <gtest/gtest.h>

#include <ncclpool/pool.hpp>
#include <ncclpool/sim.hpp>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace ncclpool {
namespace {

struct Live {
  void* ptr;
  std::size_t size;
  std::uint64_t tag;
};

void stamp(const Live& b) {
  std::memcpy(b.ptr, &b.tag, sizeof b.tag);
  std::memcpy(static_cast<char*>(b.ptr) + b.size - sizeof b.tag, &b.tag, sizeof b.tag);
}
bool intact(const Live& b) {
  std::uint64_t head = 0, tail = 0;
  std::memcpy(&head, b.ptr, sizeof head);
  std::memcpy(&tail, static_cast<const char*>(b.ptr) + b.size - sizeof tail, sizeof tail);
  return head == b.tag && tail == b.tag;
}

class RandomSequence : public ::testing::TestWithParam<unsigned> {};

TEST_P(RandomSequence, InvariantsHoldAfterEveryStep) {
  std::mt19937_64 rng(GetParam());
  SimSourceConfig sc;
  sc.capacity = 96ull << 20;  // small enough that OOM paths run
  auto source = std::make_shared<SimSource>(sc);
  PoolConfig config;
  config.deterministic = (GetParam() % 2) == 0;
  config.growth_chunk = (GetParam() % 3 == 0) ? (8u << 20) : (2u << 20);
  Pool pool(source, config);
  std::vector<Live> live;
  std::uint64_t next_tag = 1;
  int ooms = 0;
  for (int step = 0; step < 3000; ++step) {
    const auto op = static_cast<unsigned>(rng() % 100);
    if (op < 50) {
      // Mostly small, sometimes large sizes.
      const std::size_t size = (rng() % 10 == 0) ? 16 + rng() % (12u << 20) : 16 + rng() % (64u << 10);
      const stream_t stream = rng() % 4;
      try {
        Live b{pool.allocate(size, stream), size, next_tag++};
        stamp(b);
        live.push_back(b);
      } catch (const OutOfMemory&) {
        ++ooms;
      }
    } else if (op < 90 && !live.empty()) {
      const std::size_t k = rng() % live.size();
      ASSERT_TRUE(intact(live[k])) << "block overwritten at step " << step;
      if (rng() % 2) {
        pool.deallocate(live[k].ptr);
      } else {
        pool.deallocate(live[k].ptr, rng() % 4);
      }
      live[k] = live.back();
      live.pop_back();
    } else if (op < 94) {
      pool.trim();
    } else if (op < 96) {
      source->inject_oom(1 + static_cast<int>(rng() % 2));
    } else if (op < 98) {
      try {
        pool.reserve(pool.stats().reserved_bytes + (rng() % (8u << 20)));
      } catch (const OutOfMemory&) {
        ++ooms;
      }
    } else if (!live.empty()) {
      // Misuse never changes anything: a pointer strictly inside a live block.
      const Live& b = live[rng() % live.size()];
      if (b.size > 256) {
        const std::size_t offset = 256 * (1 + rng() % ((b.size - 1) / 256));
        EXPECT_THROW(pool.deallocate(static_cast<char*>(b.ptr) + offset), InvalidPointer);
      }
    }
    source->inject_oom(0);
    ASSERT_NO_THROW(pool.check_invariants()) << "step " << step;
    ASSERT_EQ(source->live_segments(), pool.stats().segment_count);
  }
  for (const Live& b : live) {
    ASSERT_TRUE(intact(b));
    pool.deallocate(b.ptr);
  }
  pool.trim();
  pool.check_invariants();
  EXPECT_EQ(pool.stats().reserved_bytes, 0u);
  EXPECT_EQ(source->bytes_in_use(), 0u);
  RecordProperty("ooms", ooms);
}

INSTANTIATE_TEST_SUITE_P(Seeds, RandomSequence, ::testing::Values(1u, 2u, 3u, 4u, 5u, 6u));

TEST(Threads, ConcurrentAllocateFreeFromManyThreads) {
  auto source = std::make_shared<SimSource>();
  Pool pool(source);
  constexpr int kThreads = 4;
  constexpr int kOps = 20000;
  std::vector<std::thread> threads;
  std::atomic<int> corrupted{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(100 + t);
      std::vector<Live> mine;
      for (int i = 0; i < kOps; ++i) {
        if (mine.size() < 64 && (mine.empty() || rng() % 2)) {
          const std::size_t size = 16 + rng() % (256u << 10);
          // Half the threads share stream 0, the rest have their own.
          Live b{pool.allocate(size, t % 2 ? static_cast<stream_t>(t) : 0), size, (static_cast<std::uint64_t>(t) << 32) | static_cast<std::uint64_t>(i)};
          stamp(b);
          mine.push_back(b);
        } else {
          const std::size_t k = rng() % mine.size();
          if (!intact(mine[k])) ++corrupted;
          pool.deallocate(mine[k].ptr);
          mine[k] = mine.back();
          mine.pop_back();
        }
        if (i % 5000 == 0) (void)pool.stats();
      }
      for (const Live& b : mine) pool.deallocate(b.ptr);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(corrupted.load(), 0);
  pool.check_invariants();
  const auto s = pool.stats();
  EXPECT_EQ(s.active_allocations, 0u);
  EXPECT_EQ(s.allocation_count, s.deallocation_count);
}

}  // namespace
}  // namespace ncclpool
