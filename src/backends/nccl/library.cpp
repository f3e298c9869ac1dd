#include "library.hpp"

#include "../cuda/driver.hpp"
#include "core/environment.hpp"

#include <ncclpool/errors.hpp>

#include <dlfcn.h>
#include <link.h>

#include <cstddef>
#include <cstring>
#include <vector>

namespace ncclpool::nccl {

namespace {

Library load() {
  Library lib;
  NcclInfo& info = lib.info;
  void* handle = ::dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
  info.reused_loaded = handle != nullptr;
  const std::string explicit_path = environment::nccl_library();
  if (handle == nullptr && !explicit_path.empty()) {
    handle = ::dlopen(explicit_path.c_str(), RTLD_NOW | RTLD_LOCAL);
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
  if (::dladdr(reinterpret_cast<void*>(lib.ncclGetVersion), &dl) != 0 && dl.dli_fname != nullptr) {
    info.library_path = dl.dli_fname;
    lib.base = dl.dli_fbase;
  }
  lib.ncclCommQueryProperties = reinterpret_cast<decltype(lib.ncclCommQueryProperties)>(::dlsym(handle, "ncclCommQueryProperties"));
  lib.ncclGetVersion(&info.version);
  info.windows = info.version >= 22700 && lib.ncclCommWindowRegister != nullptr && lib.ncclCommWindowDeregister != nullptr;
  info.available = true;
  lib.handle = handle;
  return lib;
}

// Every NCCL library mapped in this process, told apart by where it is mapped, except the one at
// `own_base`. An NCCL is an object that itself defines ncclGetVersion (libnccl.so.2 under any name
// or path, or NCCL linked into another library that exports its API). Names prove nothing: the same
// file is reached by soname, RPATH, LD_PRELOAD or a full path, and two files can share a name
// (torch's nvidia/nccl/lib/libnccl.so.2 and an LD_PRELOAD-ed libnccl.so.2 both load, as two copies).
// Nor does a version: torch.cuda.nccl.version() is the version torch was built with, not the
// loaded library's. The dynamic loader maps a file at most once per namespace (it compares device and
// inode), so one load address is one file and one library instance. How: dl_iterate_phdr lists the
// loaded objects; each is opened by its loader name with RTLD_NOLOAD (never loads anything, only
// takes a reference, dropped at once; done outside the callback, which holds the loader's list
// lock), dlsym finds ncclGetVersion in it or its dependencies, and dladdr names the object that
// defines it. dlsym(RTLD_DEFAULT) covers the executable. Other link-map namespaces (dlmopen) are not
// looked at: nothing there can hand this namespace a communicator by symbol resolution. Calling
// ncclGetVersion only writes the version.
std::vector<NcclCopy> other_copies(const void* own_base) {
  std::vector<std::string> names;
  ::dl_iterate_phdr(
      [](dl_phdr_info* object, std::size_t, void* out) {
        if (object->dlpi_name != nullptr && object->dlpi_name[0] != '\0')
          static_cast<std::vector<std::string>*>(out)->emplace_back(object->dlpi_name);
        return 0;
      },
      &names);
  std::vector<const void*> seen{own_base};
  std::vector<NcclCopy> out;
  auto add = [&](void* symbol) {
    Dl_info dl{};
    if (symbol == nullptr || ::dladdr(symbol, &dl) == 0) return;
    for (const void* b : seen)
      if (b == dl.dli_fbase) return;
    seen.push_back(dl.dli_fbase);
    NcclCopy copy;
    copy.path = dl.dli_fname != nullptr ? dl.dli_fname : "?";
    reinterpret_cast<decltype(&::ncclGetVersion)>(symbol)(&copy.version);
    out.push_back(std::move(copy));
  };
  add(::dlsym(RTLD_DEFAULT, "ncclGetVersion"));
  for (const std::string& name : names) {
    void* handle = ::dlopen(name.c_str(), RTLD_LAZY | RTLD_NOLOAD);
    if (handle == nullptr) continue;
    add(::dlsym(handle, "ncclGetVersion"));
    ::dlclose(handle);
  }
  ::dlerror();  // failed lookups above leave an error text that is nobody's business
  return out;
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

// ncclCommProperties_t as NCCL 2.29.7 and 2.30.7 lay it out (size, magic, version, then the fields;
// later versions append fields). The struct handed over is 4 KiB of zeros with this head and version
// 2.29.7, so that whatever a later NCCL writes for that version stays inside it.
struct CommPropertiesV22907 {
  std::size_t size;
  unsigned int magic;
  unsigned int version;
  int rank, n_ranks, cuda_dev, nvml_dev;
  bool device_api_support, multimem_support;
  int gin_type, n_lsa_teams;
  bool host_rma_support;
  int railed_gin_type;
};
#if NCCL_VERSION_CODE >= 22907 && __has_include(<nccl_device/host.h>)
// Built against NCCL >= 2.29.7's headers (scripts/check-nccl-headers.sh): the fields read are where NCCL puts them.
#include <nccl_device/host.h>
static_assert(offsetof(ncclCommProperties_t, version) == offsetof(CommPropertiesV22907, version));
static_assert(offsetof(ncclCommProperties_t, deviceApiSupport) == offsetof(CommPropertiesV22907, device_api_support));
#endif

int symmetric_support(const Library& lib, ncclComm_t comm) {
  if (lib.ncclCommQueryProperties == nullptr || lib.info.version < 22907) return -1;  // 2.29.2-3 laid it out otherwise
  alignas(8) unsigned char buffer[4096] = {};
  CommPropertiesV22907 head{};
  head.size = sizeof head;
  head.magic = 0xcafebeef;  // NCCL_API_MAGIC
  head.version = 22907;
  std::memcpy(buffer, &head, sizeof head);
  if (lib.ncclCommQueryProperties(comm, buffer) != ncclSuccess) return -1;
  std::memcpy(&head, buffer, sizeof head);
  return head.device_api_support ? 1 : 0;
}

}  // namespace ncclpool::nccl

namespace ncclpool {
NcclInfo nccl_info() {
  NcclInfo info;
  const void* own_base = nullptr;
  try {
    const nccl::Library& lib = nccl::library();
    info = lib.info;
    own_base = lib.base;
  } catch (const Error& e) {
    info.why_not = e.what();
  }
  info.other_copies = nccl::other_copies(own_base);
  return info;
}

SymmetricKernels symmetric_kernels_on(int device, bool as_declared) {
  if (const SymmetricKernels decided = symmetric_kernels(); decided.decided) return decided;
  SymmetricKernels out;
  out.enabled = false;
  out.decision = "off";
  try {
    const nccl::Library& lib = nccl::library();
    const cuda::Driver& d = cuda::driver();
    CUdevice dev = 0;
    int major = 0;
    if (d.cuDeviceGet(&dev, device) != CUDA_SUCCESS || d.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) != CUDA_SUCCESS) {
      out.why = "no GPU " + std::to_string(device);
      return out;
    }
    out = choose_symmetric_kernels(environment::symmetric_kernels(), lib.info.version, major, d.version, as_declared || symmetric_fence_declared());
    out.decided = false;  // what a first symmetric attach would decide now
  } catch (const Error& e) {
    out.why = e.what();
  }
  return out;
}

CopyEngineVote copy_engine_vote(CopyEngineRequest requested, int device, int ranks, const std::function<ProfileLookup(const MachineKey&)>& lookup) {
  try {
    const nccl::Library& lib = nccl::library();
    ProfileLookup profile;
    const bool asks_profile = requested == CopyEngineRequest::automatic && lookup;
    if (asks_profile) {
      const cuda::Driver& d = cuda::driver();
      CUdevice dev = 0;
      char name[256] = {};
      if (d.cuDeviceGet(&dev, device) != CUDA_SUCCESS || d.cuDeviceGetName(name, sizeof name - 1, dev) != CUDA_SUCCESS) name[0] = '\0';
      try {
        profile = lookup(MachineKey{name, lib.info.version, ranks});
      } catch (const std::exception& e) {
        profile.why_not = std::string("the profile lookup failed: ") + e.what();
      }
    }
    return choose_copy_engine(requested, environment::copy_engine(), lib.info.version, symmetric_kernels_on(device), asks_profile ? &profile : nullptr);
  } catch (const Error& e) {
    CopyEngineVote out;
    out.why = std::string("off: ") + e.what();
    return out;
  }
}

}  // namespace ncclpool
