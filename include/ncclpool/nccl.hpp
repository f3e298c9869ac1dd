#pragma once
/// @file nccl.hpp
/// @brief NCCL, loaded at run time. ncclpool uses the libnccl.so.2 already loaded in the process
/// when there is one (a PyTorch process has one, and its communicators must be used with it), else
/// NCCLPOOL_NCCL_LIBRARY, else the default search path.

#include <ncclpool/communicator.hpp>
#include <ncclpool/export.hpp>
#include <ncclpool/profile.hpp>
#include <ncclpool/segment_source.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace ncclpool {

/// An NCCL library mapped in this process.
struct NcclCopy {
  std::string path;  ///< the file it was loaded from (as the loader names it)
  int version = 0;   ///< its ncclGetVersion
};

struct NcclInfo {
  bool available = false;
  std::string why_not;       ///< when !available
  std::string library_path;  ///< the file the symbols came from
  int version = 0;           ///< ncclGetVersion, e.g. 22809
  bool windows = false;      ///< ncclCommWindowRegister present and version >= 2.27
  bool reused_loaded = false; ///< the library was already loaded by the process
  /// NCCL libraries mapped in this process besides the one above, as of this call (normally none).
  /// A communicator must be used with the library that made it: with two copies loaded (an
  /// LD_PRELOAD-ed libnccl.so.2 beside the one torch finds through its RPATH, NCCL linked into
  /// another library), a communicator handed to ncclpool may come from the other one. ncclpool.torch
  /// refuses such a process ("one NCCL per process"); the same file loaded once is one copy, whatever
  /// version the caller was built with.
  std::vector<NcclCopy> other_copies;
};

/// @brief Loads NCCL if needed and says what was found (other_copies: looked for at each call).
/// Never throws.
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

/// The CTA (thread block) count of NCCL's symmetric kernels, the ones that run on windows.
/// NCCL >= 2.27 picks the fewest blocks its model puts near peak; on H200 that is too few: a
/// symmetric window then loses to plain memory at some sizes (decode all-reduce on 2x H200: 0.91x
/// at 1 MiB), while 32 CTAs make it faster at every size (1.06-1.46x; docs/benchmarks/decode.md).
/// NCCL reads the count once per process, from NCCL_SYM_CTAS, at its first symmetric collective.
/// ncclpool therefore decides it once per process, when it first attaches an NCCL communicator for
/// symmetric registration (before any window), and every rank's decision is compared there:
///   * NCCL_SYM_CTAS set by the user: left alone (source "NCCL_SYM_CTAS");
///   * else NCCLPOOL_SYM_CTAS: "nccl" leaves NCCL's choice, 1-64 sets NCCL_SYM_CTAS to that count;
///   * else the count of this machine's profile (profile.hpp, `ncclpool tune`), when it was measured
///     on this GPU model, NCCL version and rank count (that communicator);
///   * else ncclpool's measured default for the GPU (compute capability 9.x: 32); none for a GPU it
///     has no measurement of (NCCL's choice, and the source says so). A profile that exists but does
///     not apply is named in the source, with why.
/// It affects only symmetric kernels, in this whole process (torch's own symmetric memory too), and
/// nothing if a symmetric collective ran before (NCCL has read its value then). Ranks that decide
/// differently would hang in their first symmetric kernel: the attach fails on every rank instead.
struct SymmetricCtas {
  int ctas = 0;               ///< the count asked of NCCL; 0 = NCCL's own choice
  bool decided = false;       ///< false until the process's first symmetric attach
  bool set_by_ncclpool = false; ///< ncclpool put NCCL_SYM_CTAS in the environment
  bool ignored_setting = false; ///< NCCLPOOL_SYM_CTAS held a value that is not "nccl" or 1-64
  std::string source;         ///< where the count comes from, for `ncclpool info`, stats and logs
};

/// @brief The decision for a GPU of compute capability `cc_major`.`cc_minor` given the values of
/// NCCL_SYM_CTAS and NCCLPOOL_SYM_CTAS (nullptr: unset). Pure: reads and changes nothing. A value of
/// NCCLPOOL_SYM_CTAS that is neither "nccl" nor 1-64 yields NCCL's choice with a source saying why
/// (never an exception: the decision is made inside a collective registration, where one rank
/// throwing would leave the others waiting).
/// `profile`: the lookup for this machine (nullptr: none looked at).
NCCLPOOL_API SymmetricCtas choose_symmetric_ctas(const char* nccl_sym_ctas, const char* ncclpool_sym_ctas, int cc_major, int cc_minor,
                                                 const ProfileLookup* profile = nullptr);

/// @brief Decides (the first call in the process) and applies it: looks up the profile for `gpu`,
/// `nccl_version` and `ranks`, sets NCCL_SYM_CTAS when the decision is ncclpool's and the variable
/// is unset. Later calls return the first decision.
NCCLPOOL_API SymmetricCtas apply_symmetric_ctas(int cc_major, int cc_minor, const std::string& gpu = "", int nccl_version = 0, int ranks = 0);

/// @brief What apply_symmetric_ctas decided in this process (decided = false before any window).
NCCLPOOL_API SymmetricCtas symmetric_ctas();

/// @brief Wraps a caller-owned ncclComm_t (passed as void*). ncclpool never creates or destroys it.
/// Blocking and non-blocking (ncclInProgress) communicators both work. Destroying the wrapper never
/// waits for the device.
/// @throws Unsupported (no NCCL), BackendError (NCCL refused a query).
NCCLPOOL_API std::shared_ptr<Communicator> make_nccl_communicator(void* nccl_comm, NcclCommunicatorOptions options = {});

/// @brief Segments from ncclMemAlloc/ncclMemFree on `device`: can back symmetric windows.
NCCLPOOL_API std::shared_ptr<SegmentSource> make_nccl_source(int device);

}  // namespace ncclpool
