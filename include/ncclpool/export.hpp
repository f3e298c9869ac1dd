#pragma once
/// @file export.hpp
/// @brief Symbol visibility: libncclpool is built with hidden visibility; only the public API is exported.

#if defined(__GNUC__)
#define NCCLPOOL_API __attribute__((visibility("default")))
#else
#define NCCLPOOL_API
#endif

/// Exported for ncclpool's own tools, benches and tests only, never API: the run-time loaders (the
/// CUDA driver table, NCCL) and the JSON reader, declared in the library's private headers (src/).
/// They are compiled once, into libncclpool, so a process holds one loader state (see
/// src/CMakeLists.txt, target ncclpool_internal).
#define NCCLPOOL_INTERNAL NCCLPOOL_API
