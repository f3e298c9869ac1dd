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
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

struct CUstream_st;  // cuda.h's CUstream (and the runtime's cudaStream_t) points to it: no CUDA header needed

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
  /// The tuning profile for this communicator's machine (GPU model, NCCL version, rank count), looked
  /// up by the caller: the backend reads no files. Asked at most once per process, at the first
  /// symmetric attach, which decides the symmetric kernels' CTA count (SymmetricCtas: a matching
  /// profile's count comes after NCCL_SYM_CTAS and NCCLPOOL_SYM_CTAS, before the measured default).
  /// Empty: no profile is looked at. ncclpool_attach_nccl (hence Python and the torch layer) passes
  /// find_profile. An exception it throws counts as no profile (the source says why).
  std::function<ProfileLookup(const MachineKey&)> profile_lookup = nullptr;
};

/// @brief NCCLPOOL_AGREEMENT_TIMEOUT_S (seconds, fractions allowed) if set, else `fallback`.
/// @throws InvalidArgument on anything but a positive number (it used to become 0 ms).
NCCLPOOL_API std::chrono::milliseconds agreement_timeout_from_env(std::chrono::milliseconds fallback);

/// @brief NCCLPOOL_AGREEMENT_BUFFERS: true for `device` (agreement records staged through device
/// memory), false for `host` or unset. Read when an NCCL communicator is wrapped.
/// @throws InvalidArgument on anything else.
NCCLPOOL_API bool agreement_buffers_on_device_from_env();

/// A variable of ncclpool's environment that holds a value it does not accept.
struct EnvironmentProblem {
  std::string variable;  ///< e.g. "NCCLPOOL_SYM_CTAS"
  std::string value;
  std::string message;   ///< names the variable and the value, says what is accepted and what happens
};

/// @brief Checks every variable ncclpool reads that takes a value (NCCLPOOL_AGREEMENT_TIMEOUT_S,
/// NCCLPOOL_AGREEMENT_BUFFERS, NCCLPOOL_SYM_CTAS, NCCLPOOL_SYMMETRIC_KERNELS, NCCLPOOL_COPY_ENGINE, NCCLPOOL_GROWTH_CHUNK,
/// NCCLPOOL_MIN_SEGMENT, NCCLPOOL_CHECK, NCCLPOOL_SGLANG_KIND) as the code that reads it would, without NCCL or a
/// GPU: for `ncclpool info` on any machine. Where they are read, the first two are InvalidArgument, the
/// sizes (ncclpool.torch), NCCLPOOL_CHECK (check_level_from_env, the same parse) and NCCLPOOL_SGLANG_KIND
/// (ncclpool.sglang) too, and the symmetric kernels' two and the copy engine's are ignored with a message (they
/// are read inside a collective attach, where one rank throwing would leave the others waiting). Never throws.
NCCLPOOL_API std::vector<EnvironmentProblem> environment_problems();

/// The CTA (thread block) count of NCCL's symmetric kernels, the ones that run on windows.
/// NCCL >= 2.27 picks the fewest blocks its model puts near peak; on H200 that is too few: a
/// symmetric window then loses to plain memory at some sizes (decode all-reduce on 2x H200), while
/// 32 CTAs make it faster at every size (figures in docs/benchmarks/decode.md).
/// NCCL reads the count once per process, from NCCL_SYM_CTAS, at its first symmetric collective.
/// ncclpool therefore decides it once per process, when it first attaches an NCCL communicator for
/// symmetric registration (before any window), and every rank's decision is compared there:
///   * NCCL_SYM_CTAS set by the user: left alone (source "NCCL_SYM_CTAS");
///   * else NCCLPOOL_SYM_CTAS: "nccl" leaves NCCL's choice, 1-64 sets NCCL_SYM_CTAS to that count;
///   * else the count of this machine's profile (profile.hpp, `ncclpool tune`), when it was measured
///     on this GPU model, NCCL version and rank count (that communicator; looked up by the caller of
///     make_nccl_communicator: NcclCommunicatorOptions::profile_lookup);
///   * else, in a process that declared that its symmetric collectives overlap compute
///     (prefer_nccl_symmetric_ctas: training, where the FSDP2 helper and ncclpool.torch.megatron's
///     install() declare it), NCCL's own choice: the measured default yields (the source says so,
///     with the count it would otherwise have been);
///   * else ncclpool's measured default for the GPU (compute capability 9.x: 32, measured on decode
///     all-reduces in CUDA graphs, where nothing overlaps the collective); none for a GPU it has no
///     measurement of (NCCL's choice, and the source says so). A profile that exists but does not
///     apply is named in the source, with why.
/// It affects only symmetric kernels, in this whole process (torch's own symmetric memory too), and
/// nothing if a symmetric collective ran before (NCCL has read its value then). Ranks that decide
/// differently (a declaration on some ranks only included) would hang in their first symmetric
/// kernel: the attach fails on every rank instead.
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
/// `profile`: the lookup for this machine (nullptr: none looked at). `nccl_ctas_preferred`: the
/// process declared that its symmetric collectives overlap compute (prefer_nccl_symmetric_ctas).
NCCLPOOL_API SymmetricCtas choose_symmetric_ctas(const char* nccl_sym_ctas, const char* ncclpool_sym_ctas, int cc_major, int cc_minor,
                                                 const ProfileLookup* profile = nullptr, bool nccl_ctas_preferred = false);

/// @brief Decides (the first call in the process) with `profile`, the caller's lookup for this
/// machine (nullptr: none), and whether prefer_nccl_symmetric_ctas was called, and applies it: sets
/// NCCL_SYM_CTAS when the decision is ncclpool's and the variable is unset. Later calls return the
/// first decision. Reads no files.
NCCLPOOL_API SymmetricCtas apply_symmetric_ctas(int cc_major, int cc_minor, const ProfileLookup* profile = nullptr);

/// @brief What apply_symmetric_ctas decided in this process (decided = false before any window).
NCCLPOOL_API SymmetricCtas symmetric_ctas();

/// @brief Declares that this process's symmetric collectives overlap compute (training: FSDP2's
/// all-gathers and reduce-scatters run beside the forward and backward), so ncclpool's measured
/// default count, taken where nothing overlaps the collective, yields to NCCL's own choice: more CTAs
/// take SMs the overlapping compute needs. NCCL_SYM_CTAS, NCCLPOOL_SYM_CTAS and a profile's count
/// still win. Call it before the process's first symmetric attach, on every rank (the count is
/// compared at the attach agreement); ncclpool.torch.fsdp's helper and ncclpool.torch.megatron's
/// install() do, the decode paths (ncclpool.sglang, ncclpool.torch.init) do not. Idempotent; after
/// the decision it changes nothing, and where the decision was ncclpool's measured default (which
/// the declaration would have changed)
/// @throws InvalidState naming the decision.
NCCLPOOL_API void prefer_nccl_symmetric_ctas();

/// @brief Whether prefer_nccl_symmetric_ctas was called (and recorded) in this process.
NCCLPOOL_API bool nccl_symmetric_ctas_preferred() noexcept;

/// Whether windows are registered for NCCL's symmetric kernels (NCCL_WIN_COLL_SYMMETRIC) or without
/// them (NCCL_WIN_DEFAULT: still zero-copy, NCCL's ring/tree kernels), decided once per process.
///
/// Why: NCCL launches its symmetric kernels with programmatic stream serialization allowed (sm_90+,
/// driver >= 12.3), so such a kernel may start before the kernel before it on the same stream has
/// finished; it must call cudaGridDependencySynchronize() before it reads its input. NCCL 2.28.0 to
/// 2.30.6 left that call out (restored in 2.30.7, NCCL commit 2948185d). After a kernel that triggers
/// its dependents early (griddepcontrol.launch_dependents: PDL-enabled kernels of flashinfer,
/// TensorRT-LLM, sgl-kernel, CUTLASS) a symmetric collective on the same stream can read its buffer
/// before it is written: silently wrong results (SGLang PR #37768). Exposed: any NCCL call enqueued
/// on the producer's stream, which includes torch's synchronous collectives (ProcessGroupNCCL runs
/// async_op=False collectives on the current stream since torch 2.8) and every PyNccl-style caller.
/// Plain memory and windows without the symmetric flag are not affected (their kernels have no PDL).
///
/// NCCLPOOL_SYMMETRIC_KERNELS: `auto` (default) uses them except where the hazard exists, and there
/// fences them when the process declared that its collectives go through ncclpool's fences
/// (prefer_symmetric_fence: ncclpool.torch, ncclpool.sglang, `ncclpool bench coll` and `tune`), else
/// leaves them off (the guard); `fence` uses them and fences (symmetric_fence) where the hazard
/// exists, declared or not; `on` uses them unfenced (for callers that know the kernel before each
/// collective never triggers early); `off` never. The decision is one of four (`decision`): "on",
/// "fence" (windows carry the flag; every collective on them must follow symmetric_fence on its
/// stream), "guard" (off because of the hazard) and "off". Ranks must decide alike (a symmetric
/// kernel on some ranks and a ring kernel on others would pair wrong collectives, and a fenced rank
/// beside an unfenced one runs another launch sequence): the registry's attach agreement compares the
/// decision, with the CTA count (Communicator::prepare_symmetric_kernels). Auto pools route no size
/// to windows while they are off.
struct SymmetricKernels {
  bool decided = false;  ///< false until the process's first symmetric attach of an NCCL communicator
  bool enabled = true;   ///< windows carry NCCL_WIN_COLL_SYMMETRIC
  bool fence = false;    ///< enabled, the hazard exists, and ncclpool fences each collective it launches or wraps on windows
  bool hazard = false;   ///< this NCCL, GPU and driver have the missing grid-dependency sync
  bool ignored_setting = false;  ///< NCCLPOOL_SYMMETRIC_KERNELS held something else than auto|on|off|fence
  bool fence_declared = false;   ///< the process had called prefer_symmetric_fence when it decided
  int nccl_version = 0;  ///< the NCCL it decided for (the fence skips where NCCL's own graph edges suffice)
  std::string decision = "on";  ///< "on", "fence", "guard" or "off"
  std::string why;       ///< the decision in words, for `ncclpool info`, stats and logs
};

/// @brief True for NCCL 2.28.0-2.30.6 on compute capability >= 9.0 with a driver >= 12.3: NCCL
/// launches symmetric kernels with PDL and they lack cudaGridDependencySynchronize().
NCCLPOOL_API bool symmetric_kernels_hazard(int nccl_version, int cc_major, int driver_version) noexcept;

/// @brief The decision for NCCLPOOL_SYMMETRIC_KERNELS = `setting` (nullptr: unset) in a process that
/// declared the fence (`fence_declared`) or not. Pure. A value other than auto|on|off|fence is `auto`
/// with ignored_setting (never an exception: it is decided inside a collective attach, where one rank
/// throwing would leave the others waiting).
NCCLPOOL_API SymmetricKernels choose_symmetric_kernels(const char* setting, int nccl_version, int cc_major, int driver_version,
                                                       bool fence_declared = false);

/// @brief Decides (the first call in the process, from NCCLPOOL_SYMMETRIC_KERNELS and whether
/// prefer_symmetric_fence was called) and returns the decision; later calls return the first one.
NCCLPOOL_API SymmetricKernels apply_symmetric_kernels(int nccl_version, int cc_major, int driver_version);

/// @brief What apply_symmetric_kernels decided in this process (decided = false before).
NCCLPOOL_API SymmetricKernels symmetric_kernels();

/// @brief The decision of this process, or (decided = false) what its first symmetric attach on GPU
/// `device` would decide now with the loaded NCCL (`as_declared`: as if prefer_symmetric_fence had
/// been called): for `ncclpool info`, features() and reports. Never throws (no NCCL or GPU: enabled =
/// false, decision "off", and why says so).
NCCLPOOL_API SymmetricKernels symmetric_kernels_on(int device, bool as_declared = false);

/// @brief Declares that this process's collectives on windows go through ncclpool's fences (the
/// layers that launch or wrap them call symmetric_fence before each): `auto` then resolves to `fence`
/// instead of the guard where the hazard exists. Call it before the process's first symmetric attach
/// (ncclpool.torch.init, ncclpool.sglang, `ncclpool bench coll` and `tune` do). Idempotent; after the
/// decision it changes nothing, and where the decision would have been another with it (the guard)
/// @throws InvalidState naming the decision.
NCCLPOOL_API void prefer_symmetric_fence();

/// @brief Whether prefer_symmetric_fence was called in this process.
NCCLPOOL_API bool symmetric_fence_declared() noexcept;

/// How symmetric_fence orders a stream (NCCLPOOL_SYMMETRIC_FENCE).
enum class SymmetricFenceKind {
  kernel = 0,  ///< one empty 1-thread kernel, launched without PDL: it starts only after the kernel before it ended
  memset = 1,  ///< a 1-byte cuMemsetD8Async into a scratch byte of the stream's context
  node = 2,    ///< in a capture, an empty graph node the collective's kernel then depends on (a full
               ///< edge: a programmatic one joins kernel nodes only); eagerly, the kernel
};

/// @brief "kernel", "memset" or "node".
NCCLPOOL_API const char* to_string(SymmetricFenceKind kind) noexcept;

/// @brief The fence kind for NCCLPOOL_SYMMETRIC_FENCE = `setting` (nullptr or "": node); `ignored`
/// (may be nullptr) is set when the value is not kernel, memset or node (then node). Pure.
NCCLPOOL_API SymmetricFenceKind choose_symmetric_fence_kind(const char* setting, bool* ignored = nullptr);

/// @brief The fence kind of this process: fixed when it decides its symmetric kernels; before that,
/// what NCCLPOOL_SYMMETRIC_FENCE says now.
NCCLPOOL_API SymmetricFenceKind symmetric_fence_kind();

/// What symmetric_fence does on one call, and why: the policy, testable without a GPU.
struct SymmetricFenceStep {
  bool launch = false;
  const char* why = "";  ///< static text
};

/// @brief Whether a fence is launched before a collective on windows, given the decision, whether the
/// stream is capturing a CUDA graph and NCCL_GRAPH_MIXING_SUPPORT (nullptr: unset). Pure. No fence
/// unless the decision is `fence`. In a capture, NCCL < 2.29 with graph mixing on (NCCL's default:
/// the variable unset, or a value NCCL reads as non-zero) puts an event-wait node, a full dependency,
/// before its kernel: no fence needed. From 2.29 a communicator's own config (graphUsageMode) can turn
/// mixing off unseen, so the fence is launched in captures too.
NCCLPOOL_API SymmetricFenceStep choose_symmetric_fence(const SymmetricKernels& kernels, bool capturing, const char* graph_mixing_support) noexcept;

/// Counters of symmetric_fence over the process (all threads).
struct SymmetricFenceStats {
  std::uint64_t calls = 0;     ///< symmetric_fence calls
  std::uint64_t launched = 0;  ///< fences launched (a node added where the stream was capturing)
  std::uint64_t skipped_in_capture = 0;  ///< calls in a capture where NCCL's own event-wait node orders the collective
};

/// @brief The process's counters.
NCCLPOOL_API SymmetricFenceStats symmetric_fence_stats() noexcept;

/// @brief Orders `stream` (a CUstream / cudaStream_t; nullptr: the legacy default stream) so that a
/// collective enqueued next on it starts only after the work before it ended: launches a fence of the
/// process's kind (NCCLPOOL_SYMMETRIC_FENCE, read at the decision) where choose_symmetric_fence says
/// so, else nothing. Cheap when nothing is needed (one atomic load: no driver call before the
/// process decided `fence`). Call it right before each collective on windows (symmetric pools, auto
/// pools' windows) that this process enqueues itself. Returns whether a fence was launched.
/// @throws BackendError with the CUDA error text when the launch (or the first-use set-up of the
/// stream's context: the fence's module, the scratch byte) fails; nothing is left half-made.
NCCLPOOL_API bool symmetric_fence(::CUstream_st* stream);

/// Whether this rank votes to run all-gather on a communicator made with NCCL's CTA policy ZERO:
/// NCCL (>= 2.28) then moves an all-gather whose buffers are symmetric windows with the copy engines
/// (no SMs taken from compute) when the communicator is within one node and has symmetric support.
/// The policy is fixed when a communicator is created, and ncclpool creates none: the torch layer
/// makes a dedicated all-gather group with it (ncclpool.torch.copy_engine_group) when every rank of
/// the group votes yes (an all-gather of the votes: creating a group is collective, so no rank may
/// decide alone). The vote, in order:
///   * NCCLPOOL_COPY_ENGINE=off, or requested off: no (the environment's off wins over a request);
///   * NCCL older than 2.28 (no CTA policy), or none loaded: no;
///   * symmetric kernels off in this process (SymmetricKernels: the NCCL-version guard): no. The copy
///     engines need windows with NCCL_WIN_COLL_SYMMETRIC, and where NCCL cannot use them it runs its
///     symmetric kernels on the same buffers, which the guard is there to keep off;
///   * requested on, or NCCLPOOL_COPY_ENGINE=on: yes;
///   * auto: yes when this machine's profile (`ncclpool tune`, with compute beside) measured it
///     faster (Profile::copy_engine_all_gather), else no: off by default until measured.
struct CopyEngineVote {
  bool use = false;
  bool ignored_setting = false;  ///< NCCLPOOL_COPY_ENGINE held something else than auto|on|off
  std::string why;               ///< the vote in words, for errors, stats and `ncclpool info`
};

/// The first NCCL version (2.28.0) with ncclConfig_t.CTAPolicy and NCCL_CTA_POLICY_ZERO: NCCL's
/// copy-engine collectives (the vote above, and the tools that make such communicators).
inline constexpr int kNcclFirstWithCtaPolicy = 22800;

/// What a caller asks of copy_engine_vote: auto (the profile), on or off.
enum class CopyEngineRequest { automatic = -1, off = 0, on = 1 };

/// @brief The vote (rules above). Pure. `setting`: NCCLPOOL_COPY_ENGINE (nullptr: unset; anything but
/// auto|on|off counts as auto with ignored_setting); `kernels`: this process's symmetric-kernels
/// decision (or what it would decide); `profile`: the lookup for this machine (nullptr: none).
NCCLPOOL_API CopyEngineVote choose_copy_engine(CopyEngineRequest requested, const char* setting, int nccl_version, const SymmetricKernels& kernels,
                                               const ProfileLookup* profile);

/// @brief This rank's vote with the loaded NCCL, the symmetric-kernels decision on GPU `device`,
/// NCCLPOOL_COPY_ENGINE and the profile `lookup` returns for this GPU, NCCL version and `ranks`
/// (empty lookup: no profile). Never throws (no NCCL or GPU: no, and why says so).
NCCLPOOL_API CopyEngineVote copy_engine_vote(CopyEngineRequest requested, int device, int ranks,
                                             const std::function<ProfileLookup(const MachineKey&)>& lookup);

/// @brief Wraps a caller-owned ncclComm_t (passed as void*). ncclpool never creates or destroys it.
/// Blocking and non-blocking (ncclInProgress) communicators both work. Destroying the wrapper never
/// waits for the device.
/// @throws Unsupported (no NCCL), BackendError (NCCL refused a query).
NCCLPOOL_API std::shared_ptr<Communicator> make_nccl_communicator(void* nccl_comm, NcclCommunicatorOptions options = {});

/// @brief Segments from ncclMemAlloc/ncclMemFree on `device`: can back symmetric windows.
NCCLPOOL_API std::shared_ptr<SegmentSource> make_nccl_source(int device);

}  // namespace ncclpool
