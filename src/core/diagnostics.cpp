// Error messages: what a bad free was, sizes and pointers in human units.

#include "pool_impl.hpp"

#include <cstdio>

namespace ncclpool::detail {

std::string format_bytes(std::size_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 5) {
    value /= 1024.0;
    ++unit;
  }
  char buf[64];
  if (unit == 0) {
    std::snprintf(buf, sizeof buf, "%zu B", bytes);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f %s (%zu B)", value, kUnits[unit], bytes);
  }
  return buf;
}

std::string format_pointer(const void* ptr) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", ptr);
  return buf;
}

// Runs only when `ptr` is not the start of a live block: tells a double free (ptr lies in free
// memory of a segment) from a pointer into a live block and from memory the pool never owned.
void PoolImpl::throw_bad_free(void* ptr) const {
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  const Segment* segment = segment_containing(address);
  if (segment == nullptr) {
    throw ForeignPointer(describe() + ": free of " + format_pointer(ptr) + ", which this pool does not own");
  }
  const std::size_t offset = address - reinterpret_cast<std::uintptr_t>(segment->base);
  const Block* b = segment->first;
  while (b != nullptr && offset >= b->offset + b->size) b = b->phys_next;
  if (b == nullptr || b->is_free) {
    throw DoubleFree(describe() + ": double free of " + format_pointer(ptr) + " (segment " +
                     std::to_string(segment->sequence) + ", offset " + std::to_string(offset) + " is already free)");
  }
  throw InvalidPointer(describe() + ": free of " + format_pointer(ptr) + ", which points " +
                       std::to_string(offset - b->offset) + " bytes into a live allocation of " +
                       format_bytes(b->requested) + " at " + format_pointer(segment->base + b->offset) +
                       "; free the address allocate() returned");
}

}  // namespace ncclpool::detail
