// The benches' tables of CUDA driver and NCCL entry points (bench_driver.hpp, bench_nccl.hpp), resolved
// once from the handles the library opened. The NCCL one is built where NCCL's headers are
// (NCCLPOOL_BENCH_NCCL, set by tools/CMakeLists.txt).

#include "bench_driver.hpp"
#if NCCLPOOL_BENCH_NCCL
#include "bench_nccl.hpp"
#endif

#include <ncclpool/errors.hpp>

#include <dlfcn.h>

#include <string>

namespace ncclpool::tool {
namespace {

// A table and the reason it could not be loaded.
template <class Table>
struct LoadedTable {
  Table table;
  std::string error;  // empty = loaded

  // Resolves `name` from `handle` into `slot`; false, with `error` = missing + name, when absent.
  template <class Fn>
  bool resolve(void* handle, const char* name, Fn& slot, const std::string& missing) {
    slot = reinterpret_cast<Fn>(::dlsym(handle, name));
    if (slot == nullptr) error = missing + name;
    return slot != nullptr;
  }
  // The table, or Unsupported with the reason.
  const Table& get() const {
    if (!error.empty()) throw Unsupported(error);
    return table;
  }
};

LoadedTable<BenchDriver> load_driver() {
  LoadedTable<BenchDriver> r;
  const cuda::Driver* library_driver = cuda::try_driver(&r.error);
  if (library_driver == nullptr) return r;
  BenchDriver& d = r.table;
  static_cast<cuda::Driver&>(d) = *library_driver;
  void* handle = library_driver->handle;
  const std::string missing = "the CUDA driver (too old for the ncclpool benches) lacks ";
#define NCCLPOOL_RESOLVE_BENCH_FN(name) \
  if (!r.resolve(handle, #name, d.name, missing)) return r;
  NCCLPOOL_BENCH_CUDA_FUNCTIONS(NCCLPOOL_RESOLVE_BENCH_FN)
#undef NCCLPOOL_RESOLVE_BENCH_FN
  // cuEventElapsedTime_v2 where the driver has it (CUDA >= 12.8), else cuEventElapsedTime.
  if (!r.resolve(handle, "cuEventElapsedTime_v2", d.event_elapsed_time, missing)) {
    r.error.clear();
    if (!r.resolve(handle, "cuEventElapsedTime", d.event_elapsed_time, missing)) return r;
  }
  return r;
}

#if NCCLPOOL_BENCH_NCCL
LoadedTable<BenchNccl> load_nccl() {
  LoadedTable<BenchNccl> r;
  try {
    static_cast<nccl::Library&>(r.table) = nccl::library();
  } catch (const Error& e) {
    r.error = e.what();
    return r;
  }
  BenchNccl& lib = r.table;
  const std::string missing = "the loaded NCCL (the ncclpool benches need NCCL >= 2.19) lacks ";
#define NCCLPOOL_RESOLVE_BENCH_NCCL_FN(name) \
  if (!r.resolve(lib.handle, #name, lib.name, missing)) return r;
  NCCLPOOL_BENCH_NCCL_FUNCTIONS(NCCLPOOL_RESOLVE_BENCH_NCCL_FN)
#undef NCCLPOOL_RESOLVE_BENCH_NCCL_FN
  return r;
}
#endif

}  // namespace

const BenchDriver& bench_driver() {
  static const LoadedTable<BenchDriver> loaded = load_driver();
  return loaded.get();
}

#if NCCLPOOL_BENCH_NCCL
const BenchNccl& bench_nccl() {
  static const LoadedTable<BenchNccl> loaded = load_nccl();
  return loaded.get();
}
#endif

}  // namespace ncclpool::tool
