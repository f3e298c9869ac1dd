#pragma once
// NCCL loaded at run time. If the process already has libnccl.so.2 (PyTorch loads one), that same
// library instance is used: a communicator must be used with the library that created it. Else
// NCCLPOOL_NCCL_LIBRARY names the file, else the default search path finds libnccl.so.2.
// nccl.h supplies the types; nothing links against libnccl. Internal: compiled into libncclpool only
// and exported (NCCLPOOL_INTERNAL) for ncclpool's tools, benches and tests, which share this loader.

#include <ncclpool/export.hpp>
#include <ncclpool/nccl.hpp>

#include <nccl.h>

#include <string>

namespace ncclpool::nccl {

#define NCCLPOOL_NCCL_REQUIRED(X)                                                                \
  X(ncclGetVersion) X(ncclGetErrorString) X(ncclCommRegister) X(ncclCommDeregister)              \
  X(ncclCommCuDevice) X(ncclCommUserRank) X(ncclCommCount) X(ncclAllGather) X(ncclCommGetAsyncError) \
  X(ncclMemAlloc) X(ncclMemFree)
// Optional: windows (NCCL >= 2.27) and the last-error text. The tools, benches and GPU tests
// resolve more (collectives, making and destroying communicators) through their own table
// (tools/ncclpool/bench_nccl.hpp), from the same library handle.
#define NCCLPOOL_NCCL_OPTIONAL(X) X(ncclCommWindowRegister) X(ncclCommWindowDeregister) X(ncclGetLastError)

struct Library {
#define NCCLPOOL_DECLARE_NCCL_FN(name) decltype(&::name) name = nullptr;
  NCCLPOOL_NCCL_REQUIRED(NCCLPOOL_DECLARE_NCCL_FN)
  NCCLPOOL_NCCL_OPTIONAL(NCCLPOOL_DECLARE_NCCL_FN)
#undef NCCLPOOL_DECLARE_NCCL_FN
  // ncclCommQueryProperties (NCCL >= 2.29; nullptr before). Its struct is not in the 2.28 headers
  // ncclpool builds with: see symmetric_support() for how it is called.
  ncclResult_t (*ncclCommQueryProperties)(ncclComm_t, void*) = nullptr;
  NcclInfo info;
  const void* base = nullptr;  // where the library is mapped (dladdr's dli_fbase): its identity in the process
  void* handle = nullptr;      // dlopen's handle: the tools resolve their own entry points from it
};

// Whether NCCL gives `comm` symmetric memory (ncclCommQueryProperties' deviceApiSupport, NCCL >=
// 2.29: its ranks all CUDA-P2P and, from 2.29, NVLink-reachable in one node, NCCL_WIN_ENABLE and cuMem
// on). -1 where the library cannot say (NCCL 2.28: no query; ncclpool then checks what window
// registration returns). Local: no peer call.
NCCLPOOL_INTERNAL int symmetric_support(const Library& lib, ncclComm_t comm);

// The loaded library; throws Unsupported (with the reason) when there is none.
NCCLPOOL_INTERNAL const Library& library();

// "ncclInvalidUsage: invalid usage (run with NCCL_DEBUG=WARN for details); last error: ...".
NCCLPOOL_INTERNAL std::string error_text(ncclResult_t result);

}  // namespace ncclpool::nccl
