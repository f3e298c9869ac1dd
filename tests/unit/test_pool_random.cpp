// Randomized sequences with the invariant checker after every step, and multi-threaded stress.
// Each live block carries a tag at both ends; a tag that changes means two blocks overlapped.

#include <gtest/gtest.h>

#include <ncclpool/pool.hpp>
#include <ncclpool/sim.hpp>

#include <cstring>
#include <iterator>
#include <map>
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
  PoolConfig config;
  config.deterministic = (GetParam() % 2) == 0;
  // Seeds 1 and 4: 256 MiB chunks on 512 MiB, enough segments of their own to spend the segment
  // budget and grow by ramped chunks past it; the others small enough that OOM paths run.
  const bool past_budget = GetParam() % 3 == 1;
  sc.capacity = past_budget ? (512ull << 20) : (96ull << 20);
  config.growth_chunk = past_budget ? (256u << 20) : (GetParam() % 3 == 0) ? (8u << 20) : (2u << 20);
  auto source = std::make_shared<SimSource>(sc);
  Pool pool(source, config);
  std::size_t most_past_budget = 0;  // segments beyond 64 + reserved / chunk, the most seen
  std::vector<Live> live;
  std::uint64_t next_tag = 1;
  int ooms = 0;
  for (int step = 0; step < 3000; ++step) {
    const auto op = static_cast<unsigned>(rng() % 100);
    if (op < 50) {
      // Mostly small, sometimes large sizes.
      // Past-budget seeds: a third 1-4 MiB, each likely a segment of its own.
      const std::size_t size = past_budget ? ((rng() % 3 == 0) ? (1u << 20) + rng() % (3u << 20) : 16 + rng() % (64u << 10))
                               : (rng() % 10 == 0) ? 16 + rng() % (12u << 20) : 16 + rng() % (64u << 10);
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
      } catch (const SizeTooLarge&) {  // more than the device's capacity in all: refused before anything
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
    const MemoryBreakdown m = pool.memory_breakdown();
    const PoolStats st = pool.stats();
    ASSERT_EQ(m.reserved, st.reserved_bytes);
    ASSERT_EQ(m.requested, st.requested_bytes);
    ASSERT_EQ(m.requested + m.rounding, st.allocated_bytes);
    ASSERT_EQ(m.requested + m.rounding + m.free_in_used_segments + m.empty_segments, m.reserved) << "step " << step;
    ASSERT_LE(m.never_used, m.free_in_used_segments);
    ASSERT_EQ(source->live_segments(), pool.stats().segment_count);
    const std::size_t budget = 64 + st.reserved_bytes / config.growth_chunk;
    if (st.segment_count > budget) most_past_budget = std::max(most_past_budget, st.segment_count - budget);
  }
  if (past_budget) {
    EXPECT_GT(most_past_budget, 0u) << "the sequence never went past the segment budget";
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

// Stream safety against the simulator's record of publishes and waits: a byte freed on stream S
// reaches a request on another stream C only if C waited for a publish of S made after that free, or
// the device was synchronized after it. Random frees, explicit free streams, publishes refused (graph
// capture) and waits refused, trims, OOMs.
TEST_P(RandomSequence, NoByteCrossesStreamsAheadOfItsFree) {
  std::mt19937_64 rng(GetParam() * 7919u);
  SimSourceConfig sc;
  sc.capacity = 64ull << 20;
  auto source = std::make_shared<SimSource>(sc);
  SimStreamOrdering& ordering = source->sim_ordering();
  PoolConfig config;
  config.deterministic = true;  // every crossing goes through a wait (none through a poll)
  config.growth_chunk = (GetParam() % 2) ? (8u << 20) : (2u << 20);
  Pool pool(source, config);
  struct Freed {
    std::uintptr_t end;
    stream_t stream;
    std::uint64_t epoch;         // publishes of `stream` before the free
    std::uint64_t device_syncs;  // device synchronizations before the free
    std::uint64_t segment;       // sequence of the segment it was in (memory released since: no obligation)
  };
  std::map<std::uintptr_t, Freed> freed;  // disjoint ranges, keyed by start
  // Drops [lo, hi) from `freed`, keeping the parts of ranges outside it.
  auto forget = [&](std::uintptr_t lo, std::uintptr_t hi) {
    auto it = freed.lower_bound(lo);
    if (it != freed.begin() && std::prev(it)->second.end > lo) --it;
    while (it != freed.end() && it->first < hi) {
      const auto [start, f] = *it;
      it = freed.erase(it);
      if (start < lo) freed.emplace(start, Freed{lo, f.stream, f.epoch, f.device_syncs, f.segment});
      if (f.end > hi) freed.emplace(hi, Freed{f.end, f.stream, f.epoch, f.device_syncs, f.segment});
    }
  };
  struct Block {
    void* ptr;
    std::size_t size;
    stream_t stream;
  };
  std::vector<Block> live;
  std::uint64_t crossings = 0;
  for (int step = 0; step < 4000; ++step) {
    const auto op = static_cast<unsigned>(rng() % 100);
    if (op < 48) {
      const std::size_t size = 256 * (1 + rng() % ((rng() % 8 == 0) ? 16384 : 256));
      const stream_t stream = 1 + rng() % 4;
      void* p = nullptr;
      try {
        p = pool.allocate(size, stream);
      } catch (const OutOfMemory&) {
        continue;
      }
      const auto lo = reinterpret_cast<std::uintptr_t>(p), hi = lo + size;
      const std::uint64_t segment = pool.segment_of(p)->sequence;
      auto it = freed.lower_bound(lo);
      if (it != freed.begin() && std::prev(it)->second.end > lo) --it;
      for (; it != freed.end() && it->first < hi; ++it) {
        const Freed& f = it->second;
        if (f.stream == stream || f.segment != segment) continue;
        ++crossings;
        ASSERT_TRUE(ordering.waited_epoch(stream, f.stream) > f.epoch || ordering.device_synchronize_count() > f.device_syncs)
            << "step " << step << ": stream " << stream << " got bytes freed on stream " << f.stream
            << " with no wait on a publish after the free";
      }
      forget(lo, hi);
      live.push_back({p, size, stream});
    } else if (op < 90 && !live.empty()) {
      const std::size_t k = rng() % live.size();
      const Block b = live[k];
      const stream_t stream = (rng() % 3 == 0) ? 1 + rng() % 4 : b.stream;
      const Freed f{reinterpret_cast<std::uintptr_t>(b.ptr) + b.size, stream, ordering.epoch(stream),
                    ordering.device_synchronize_count(), pool.segment_of(b.ptr)->sequence};
      pool.deallocate(b.ptr, stream);
      forget(reinterpret_cast<std::uintptr_t>(b.ptr), f.end);
      freed.emplace(reinterpret_cast<std::uintptr_t>(b.ptr), f);
      live[k] = live.back();
      live.pop_back();
    } else if (op < 93) {
      pool.publish_frees(1 + rng() % 4);
    } else if (op < 95) {
      ordering.set_refuse_publishes(rng() % 2 == 0);
    } else if (op < 97) {
      ordering.set_refuse_waits(rng() % 3 == 0);
    } else if (op < 99) {
      pool.trim();
    } else {
      source->inject_oom(1);
    }
    ASSERT_NO_THROW(pool.check_invariants()) << "step " << step;
  }
  EXPECT_GT(crossings, 10u) << "the sequence should make blocks cross streams";
  for (const Block& b : live) pool.deallocate(b.ptr);
  RecordProperty("crossings", static_cast<int>(crossings));
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
