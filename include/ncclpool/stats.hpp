#pragma once
/// @file stats.hpp
/// @brief Pool statistics, readable as a struct and as JSON.

#include <ncclpool/export.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace ncclpool {

/// A consistent snapshot of a pool's counters (taken under the pool's lock).
struct PoolStats {
  std::size_t allocated_bytes = 0;       ///< bytes in live blocks (rounded to the pool alignment)
  std::size_t peak_allocated_bytes = 0;
  std::size_t requested_bytes = 0;       ///< bytes callers asked for in live blocks (before rounding)
  std::size_t reserved_bytes = 0;        ///< bytes in segments taken from the source
  std::size_t peak_reserved_bytes = 0;
  std::size_t segment_count = 0;
  std::size_t largest_free_block = 0;    ///< largest block a request could get without growing
  std::size_t active_allocations = 0;
  std::uint64_t allocation_count = 0;    ///< successful allocate() calls, ever
  std::uint64_t deallocation_count = 0;
  std::uint64_t segments_created = 0;
  std::uint64_t segments_released = 0;
  std::uint64_t oom_count = 0;           ///< allocate() calls refused for lack of memory (OutOfMemory or SizeTooLarge)
  std::uint64_t oom_recoveries = 0;      ///< source OOMs recovered by releasing cached segments
  std::uint64_t cross_stream_reuses = 0; ///< blocks handed to another stream behind a wait
  std::uint64_t hook_errors = 0;         ///< exceptions swallowed from release observers
  std::uint64_t stream_publishes = 0;    ///< events recorded so other streams may reuse freed blocks
  std::uint64_t unpublished_skips = 0;   ///< searches that passed over another stream's unpublished free block
  /// Largest free block that no stream owns (never used, or handed back after a device sync): any
  /// stream takes it without a wait, a capturing one included. What a CUDA graph capture can use
  /// without growing (ncclpool.torch.graph's reserve= checks it).
  std::size_t largest_fresh_block = 0;
};

/// @brief The snapshot as one JSON object (stable key names = the field names above).
NCCLPOOL_API std::string to_json(const PoolStats& stats);

}  // namespace ncclpool
