// Resolving the benches' CUDA entry points from the library's libcuda handle (see bench_driver.hpp).

#include "bench_driver.hpp"

#include <ncclpool/errors.hpp>

#include <dlfcn.h>

namespace ncclpool::tool {
namespace {

struct LoadResult {
  BenchDriver driver;
  std::string error;  // empty = loaded
};

LoadResult load() {
  LoadResult r;
  const cuda::Driver* library_driver = cuda::try_driver(&r.error);
  if (library_driver == nullptr) return r;
  BenchDriver& d = r.driver;
  static_cast<cuda::Driver&>(d) = *library_driver;
  void* handle = library_driver->handle;
#define NCCLPOOL_RESOLVE_BENCH_FN(name)                                                  \
  d.name = reinterpret_cast<decltype(d.name)>(::dlsym(handle, #name));                   \
  if (d.name == nullptr) {                                                               \
    r.error = "the CUDA driver lacks " #name " (driver too old for the ncclpool benches)"; \
    return r;                                                                            \
  }
  NCCLPOOL_BENCH_CUDA_FUNCTIONS(NCCLPOOL_RESOLVE_BENCH_FN)
#undef NCCLPOOL_RESOLVE_BENCH_FN
  void* elapsed = ::dlsym(handle, "cuEventElapsedTime_v2");
  if (elapsed == nullptr) elapsed = ::dlsym(handle, "cuEventElapsedTime");
  if (elapsed == nullptr) {
    r.error = "the CUDA driver lacks cuEventElapsedTime";
    return r;
  }
  d.event_elapsed_time = reinterpret_cast<decltype(d.event_elapsed_time)>(elapsed);
  return r;
}

const LoadResult& loaded() {
  static const LoadResult result = load();
  return result;
}

}  // namespace

const BenchDriver* try_bench_driver(std::string* why) noexcept {
  try {
    const LoadResult& r = loaded();
    if (!r.error.empty()) {
      if (why) *why = r.error;
      return nullptr;
    }
    return &r.driver;
  } catch (...) {
    if (why) *why = "unexpected failure while loading the CUDA driver";
    return nullptr;
  }
}

const BenchDriver& bench_driver() {
  std::string why;
  const BenchDriver* d = try_bench_driver(&why);
  if (d == nullptr) throw Unsupported(why);
  return *d;
}

}  // namespace ncclpool::tool
