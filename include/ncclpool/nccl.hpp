#pragma once
/// @file nccl.hpp
/// @brief NCCL, loaded at run time. ncclpool uses the libnccl.so.2 already loaded in the process
/// when there is one (a PyTorch process has one, and its communicators must be used with it), else
/// NCCLPOOL_NCCL_LIBRARY, else the default search path.

#include <ncclpool/communicator.hpp>
#include <ncclpool/export.hpp>
#include <ncclpool/segment_source.hpp>

#include <chrono>
#include <memory>
#include <string>

namespace ncclpool {

struct NcclInfo {
  bool available = false;
  std::string why_not;       ///< when !available
  std::string library_path;  ///< the file the symbols came from
  int version = 0;           ///< ncclGetVersion, e.g. 22809
  bool windows = false;      ///< ncclCommWindowRegister present and version >= 2.27
  bool reused_loaded = false; ///< the library was already loaded by the process
};

/// @brief Loads NCCL if needed and says what was found. Never throws.
NCCLPOOL_API NcclInfo nccl_info();

struct NcclCommunicatorOptions {
  /// How long an agreement all-gather may take, from its start, before AgreementError (the
  /// communicator is then broken and must be aborted by its owner). NCCLPOOL_AGREEMENT_TIMEOUT_S
  /// (seconds, > 0; anything else is InvalidArgument) overrides it.
  std::chrono::milliseconds agreement_timeout = std::chrono::seconds(60);
};

/// @brief NCCLPOOL_AGREEMENT_TIMEOUT_S (seconds, fractions allowed) if set, else `fallback`.
/// @throws InvalidArgument on anything but a positive number (it used to become 0 ms).
NCCLPOOL_API std::chrono::milliseconds agreement_timeout_from_env(std::chrono::milliseconds fallback);

/// @brief Wraps a caller-owned ncclComm_t (passed as void*). ncclpool never creates or destroys it.
/// Blocking and non-blocking (ncclInProgress) communicators both work. Destroying the wrapper never
/// waits for the device.
/// @throws Unsupported (no NCCL), BackendError (NCCL refused a query).
NCCLPOOL_API std::shared_ptr<Communicator> make_nccl_communicator(void* nccl_comm, NcclCommunicatorOptions options = {});

/// @brief Segments from ncclMemAlloc/ncclMemFree on `device`: can back symmetric windows.
NCCLPOOL_API std::shared_ptr<SegmentSource> make_nccl_source(int device);

}  // namespace ncclpool
