// Loading libcuda.so.1 at run time; error translation; context helpers.

#include "driver.hpp"

#include <dlfcn.h>

#include <mutex>

namespace ncclpool::cuda {

namespace {

struct LoadResult {
  Driver driver;
  std::string error;  // empty = loaded
};

LoadResult load() {
  LoadResult r;
  // RTLD_NOLOAD first: reuse the driver a host program (e.g. PyTorch) has already loaded.
  void* handle = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
  if (handle == nullptr) handle = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr) {
    const char* e = ::dlerror();
    r.error = std::string("the CUDA driver (libcuda.so.1) could not be loaded: ") + (e ? e : "unknown error");
    return r;
  }
  Driver& d = r.driver;
#define NCCLPOOL_RESOLVE_FN(name)                                                  \
  d.name = reinterpret_cast<decltype(d.name)>(::dlsym(handle, #name));              \
  if (d.name == nullptr) {                                                          \
    r.error = "the CUDA driver lacks " #name " (driver too old for ncclpool)";     \
    return r;                                                                       \
  }
  NCCLPOOL_CUDA_FUNCTIONS(NCCLPOOL_RESOLVE_FN)
#undef NCCLPOOL_RESOLVE_FN
#define NCCLPOOL_RESOLVE_OPTIONAL_FN(name) d.name = reinterpret_cast<decltype(d.name)>(::dlsym(handle, #name));
  NCCLPOOL_CUDA_OPTIONAL_FUNCTIONS(NCCLPOOL_RESOLVE_OPTIONAL_FN)
#undef NCCLPOOL_RESOLVE_OPTIONAL_FN
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(d.cuInit), &info) != 0 && info.dli_fname != nullptr) d.library_path = info.dli_fname;
  if (CUresult res = d.cuInit(0); res != CUDA_SUCCESS) {
    const char* name = nullptr;
    d.cuGetErrorName(res, &name);
    r.error = std::string("cuInit failed: ") + (name ? name : "unknown") + (res == CUDA_ERROR_NO_DEVICE ? " (no CUDA device)" : "");
    return r;
  }
  d.cuDriverGetVersion(&d.version);
  d.handle = handle;
  return r;
}

const LoadResult& loaded() {
  static const LoadResult result = load();
  return result;
}

}  // namespace

const Driver* try_driver(std::string* why) noexcept {
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

const Driver& driver() {
  std::string why;
  const Driver* d = try_driver(&why);
  if (d == nullptr) throw Unsupported(why);
  return *d;
}

std::string error_text(CUresult result) {
  const Driver* d = try_driver(nullptr);
  const char* name = nullptr;
  const char* text = nullptr;
  if (d != nullptr) {
    d->cuGetErrorName(result, &name);
    d->cuGetErrorString(result, &text);
  }
  std::string out = name ? name : ("CUresult " + std::to_string(static_cast<int>(result)));
  if (text != nullptr) out += std::string(" (") + text + ")";
  return out;
}

void check(CUresult result, const std::string& what) {
  if (result == CUDA_SUCCESS) return;
  if (result == CUDA_ERROR_OUT_OF_MEMORY) throw OutOfMemory(what + ": " + error_text(result));
  throw BackendError(what + ": " + error_text(result));
}

ScopedContext::ScopedContext(CUcontext context) {
  const Driver& d = driver();
  check(d.cuCtxGetCurrent(&previous_), "cuCtxGetCurrent");
  if (previous_ != context) {
    check(d.cuCtxSetCurrent(context), "cuCtxSetCurrent");
    switched_ = true;
  }
}

ScopedContext::~ScopedContext() {
  if (switched_) driver().cuCtxSetCurrent(previous_);
}

PrimaryContext::PrimaryContext(int device) : ordinal_(device) {
  const Driver& d = driver();
  int count = 0;
  check(d.cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (device < 0 || device >= count)
    throw InvalidArgument("CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(count) + " devices)");
  check(d.cuDeviceGet(&device_, device), "cuDeviceGet");
  check(d.cuDevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain(device " + std::to_string(device) + ")");
}

PrimaryContext::~PrimaryContext() { driver().cuDevicePrimaryCtxRelease_v2(device_); }

}  // namespace ncclpool::cuda
