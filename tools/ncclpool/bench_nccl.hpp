#pragma once
// NCCL as the tools, benches and GPU tests see it: the library's table (src/backends/nccl/library.hpp,
// loaded once, in libncclpool, so the same NCCL instance) plus the entry points only they call
// (collectives, making and destroying communicators), resolved from the library's handle.

#include "backends/nccl/library.hpp"

namespace ncclpool::tool {

#define NCCLPOOL_BENCH_NCCL_FUNCTIONS(X)                                                       \
  X(ncclCommInitAll) X(ncclCommInitRankConfig) X(ncclGetUniqueId) X(ncclCommSplit)              \
  X(ncclCommDestroy) X(ncclCommAbort) X(ncclAllReduce) X(ncclReduceScatter) X(ncclGroupStart)   \
  X(ncclGroupEnd)

// A copy of the library's table (its function pointers and what it found: the state stays the
// library's) with the benches' entry points after it.
struct BenchNccl : nccl::Library {
#define NCCLPOOL_DECLARE_BENCH_NCCL_FN(name) decltype(&::name) name = nullptr;
  NCCLPOOL_BENCH_NCCL_FUNCTIONS(NCCLPOOL_DECLARE_BENCH_NCCL_FN)
#undef NCCLPOOL_DECLARE_BENCH_NCCL_FN
};

// The library's NCCL with the benches' entry points. Throws Unsupported with the reason when there
// is none or it lacks one of them.
const BenchNccl& bench_nccl();

}  // namespace ncclpool::tool
