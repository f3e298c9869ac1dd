#include "library.hpp"

#include <ncclpool/errors.hpp>

#include <dlfcn.h>

#include <cstdlib>

namespace ncclpool::nccl {

namespace {

Library load() {
  Library lib;
  NcclInfo& info = lib.info;
  void* handle = ::dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
  info.reused_loaded = handle != nullptr;
  const char* explicit_path = std::getenv("NCCLPOOL_NCCL_LIBRARY");
  std::string tried;
  if (handle == nullptr && explicit_path != nullptr && *explicit_path != '\0') {
    handle = ::dlopen(explicit_path, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* e = ::dlerror();
      info.why_not = std::string("NCCLPOOL_NCCL_LIBRARY=") + explicit_path + " could not be loaded: " + (e ? e : "?");
      return lib;
    }
  }
  if (handle == nullptr) handle = ::dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* e = ::dlerror();
    info.why_not = std::string("NCCL (libnccl.so.2) could not be loaded: ") + (e ? e : "?") +
                   " (set NCCLPOOL_NCCL_LIBRARY, or import torch first to use its NCCL)";
    return lib;
  }
#define NCCLPOOL_RESOLVE_REQUIRED(name)                                                     \
  lib.name = reinterpret_cast<decltype(lib.name)>(::dlsym(handle, #name));                   \
  if (lib.name == nullptr) {                                                                 \
    info.why_not = "the loaded NCCL lacks " #name " (ncclpool needs NCCL >= 2.19)";         \
    return lib;                                                                              \
  }
#define NCCLPOOL_RESOLVE_OPTIONAL(name) lib.name = reinterpret_cast<decltype(lib.name)>(::dlsym(handle, #name));
  NCCLPOOL_NCCL_REQUIRED(NCCLPOOL_RESOLVE_REQUIRED)
  NCCLPOOL_NCCL_OPTIONAL(NCCLPOOL_RESOLVE_OPTIONAL)
#undef NCCLPOOL_RESOLVE_REQUIRED
#undef NCCLPOOL_RESOLVE_OPTIONAL
  Dl_info dl{};
  if (::dladdr(reinterpret_cast<void*>(lib.ncclGetVersion), &dl) != 0 && dl.dli_fname != nullptr) info.library_path = dl.dli_fname;
  lib.ncclGetVersion(&info.version);
  info.windows = info.version >= 22700 && lib.ncclCommWindowRegister != nullptr && lib.ncclCommWindowDeregister != nullptr;
  info.available = true;
  return lib;
}

const Library& loaded() {
  static const Library lib = load();
  return lib;
}

}  // namespace

const Library& library() {
  const Library& lib = loaded();
  if (!lib.info.available) throw Unsupported(lib.info.why_not);
  return lib;
}

std::string error_text(ncclResult_t result) {
  const Library& lib = loaded();
  std::string out = lib.info.available ? lib.ncclGetErrorString(result) : "ncclResult " + std::to_string(static_cast<int>(result));
  if (lib.ncclGetLastError != nullptr) {
    const char* last = lib.ncclGetLastError(nullptr);
    if (last != nullptr && *last != '\0') out += std::string("; last error: ") + last;
  }
  return out;
}

}  // namespace ncclpool::nccl

namespace ncclpool {
NcclInfo nccl_info() {
  try {
    return nccl::library().info;
  } catch (const Error& e) {
    NcclInfo info;
    info.why_not = e.what();
    return info;
  }
}
}  // namespace ncclpool
