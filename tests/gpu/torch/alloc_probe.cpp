// Allocators that fail on purpose, to observe what torch does when a pluggable allocator's alloc
// returns null or throws (scripts/gpu-check.sh runs tests/gpu/torch/probe_alloc_failures.py).
#include <cstddef>
#include <stdexcept>
#include <string>

#define PROBE_API extern "C" __attribute__((visibility("default")))

PROBE_API void* probe_null_alloc(std::size_t, int, void*) { return nullptr; }

PROBE_API void* probe_throw_alloc(std::size_t size, int, void*) {
  throw std::runtime_error("probe allocator: refused " + std::to_string(size) + " bytes");
}

PROBE_API void probe_free(void*, std::size_t, int, void*) {}
