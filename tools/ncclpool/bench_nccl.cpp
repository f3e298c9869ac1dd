// Resolving the benches' NCCL entry points from the library's handle (see bench_nccl.hpp).

#include "bench_nccl.hpp"

#include <ncclpool/errors.hpp>

#include <dlfcn.h>

#include <string>

namespace ncclpool::tool {
namespace {

struct LoadResult {
  BenchNccl lib;
  std::string error;  // empty = loaded
};

LoadResult load() {
  LoadResult r;
  try {
    static_cast<nccl::Library&>(r.lib) = nccl::library();
  } catch (const Error& e) {
    r.error = e.what();
    return r;
  }
  BenchNccl& lib = r.lib;
#define NCCLPOOL_RESOLVE_BENCH_NCCL_FN(name)                                                  \
  lib.name = reinterpret_cast<decltype(lib.name)>(::dlsym(lib.handle, #name));               \
  if (lib.name == nullptr) {                                                                  \
    r.error = "the loaded NCCL lacks " #name " (the ncclpool benches need NCCL >= 2.19)";    \
    return r;                                                                                 \
  }
  NCCLPOOL_BENCH_NCCL_FUNCTIONS(NCCLPOOL_RESOLVE_BENCH_NCCL_FN)
#undef NCCLPOOL_RESOLVE_BENCH_NCCL_FN
  return r;
}

}  // namespace

const BenchNccl& bench_nccl() {
  static const LoadResult result = load();
  if (!result.error.empty()) throw Unsupported(result.error);
  return result.lib;
}

}  // namespace ncclpool::tool
