/* ncclpool.h: the C ABI of ncclpool.
 *
 * One memory pool per device whose segments are registered with NCCL (ncclCommRegister and symmetric
 * windows) for every communicator attached to it. This header is plain C (C99) and is the surface
 * the Python package binds with ctypes.
 *
 * Conventions
 *  - Handles are opaque. A pool owns the communicator handles attached to it.
 *  - Every function that can fail returns ncclpool_status_t. On failure, ncclpool_last_error() holds
 *    a message for the calling thread (it is not cleared by later successful calls). No C++
 *    exception ever crosses this ABI.
 *  - A failed call leaves the pool consistent: nothing half-registered, no memory lost.
 *  - Streams are passed as `void*` (a cudaStream_t / CUstream; NULL = the legacy default stream;
 *    the simulator treats the value as an id).
 *  - Thread safety: every pool call is thread safe. Scopes are per thread.
 */
#ifndef NCCLPOOL_NCCLPOOL_H
#define NCCLPOOL_NCCLPOOL_H

#include <stddef.h>
#include <stdint.h>

#include <ncclpool/stats_fields.h>

#if defined(__GNUC__)
#define NCCLPOOL_C_API __attribute__((visibility("default")))
#else
#define NCCLPOOL_C_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Status codes (1..12 equal ncclpool::ErrorCode) ---- */
typedef enum ncclpool_status {
  NCCLPOOL_SUCCESS = 0,
  NCCLPOOL_ERROR_INVALID_ARGUMENT = 1,     /* a parameter out of its documented range, NULL handle */
  NCCLPOOL_ERROR_SIZE_TOO_LARGE = 2,       /* larger than the device or the pool's max_reserved */
  NCCLPOOL_ERROR_OUT_OF_MEMORY = 3,        /* out of memory even after releasing cached segments */
  NCCLPOOL_ERROR_DOUBLE_FREE = 4,
  NCCLPOOL_ERROR_FOREIGN_POINTER = 5,      /* not memory of this pool */
  NCCLPOOL_ERROR_INVALID_POINTER = 6,      /* inside the pool but not the start of a live block */
  NCCLPOOL_ERROR_BACKEND = 7,              /* a CUDA driver call failed */
  NCCLPOOL_ERROR_UNSUPPORTED = 8,          /* not available in this build or on this machine */
  NCCLPOOL_ERROR_INVARIANT_VIOLATION = 9,  /* internal consistency check failed: a bug, please report */
  NCCLPOOL_ERROR_INVALID_STATE = 10,       /* not allowed now (graph capture, live blocks, scope order) */
  NCCLPOOL_ERROR_REGISTRATION = 11,        /* NCCL refused a registration or deregistration */
  NCCLPOOL_ERROR_AGREEMENT = 12,           /* ranks disagree at an agreement point, or it timed out */
  NCCLPOOL_ERROR_INTERNAL = 13             /* an unexpected C++ exception (std::bad_alloc, ...) */
} ncclpool_status_t;

/* Short, stable name of a status ("success", "out_of_memory", ...). Never NULL. */
NCCLPOOL_C_API const char* ncclpool_status_string(ncclpool_status_t status);
/* The message of the calling thread's last failed call ("" if none). Valid until the thread's next
 * failing call. */
NCCLPOOL_C_API const char* ncclpool_last_error(void);
/* The status of the calling thread's last failed call (NCCLPOOL_SUCCESS if none). */
NCCLPOOL_C_API ncclpool_status_t ncclpool_last_status(void);
NCCLPOOL_C_API void ncclpool_clear_last_error(void);

/* ---- Names of the enums' values ---- */
typedef enum ncclpool_names {
  NCCLPOOL_NAMES_SOURCE = 0,       /* ncclpool_source_t: "auto", "sim", "cuda", "vmm", "vmm_host_numa", "nccl" */
  NCCLPOOL_NAMES_REGISTRATION = 1, /* ncclpool_registration_t: "default", "local", "symmetric", "auto" */
  NCCLPOOL_NAMES_COLLECTIVE = 2    /* ncclpool_collective_t: "any", "all_gather", "reduce_scatter", "all_reduce" */
} ncclpool_names_t;
/* The name of `value` in the enum `names` (an ncclpool_names_t), or NULL for a value it does not have
 * (static storage). Bindings build or check their name tables with it. */
NCCLPOOL_C_API const char* ncclpool_value_name(int names, int value);

/* ---- Version and features ---- */
/* The version of project() in CMakeLists.txt, which configuring checks these against. */
#define NCCLPOOL_VERSION_MAJOR 0
#define NCCLPOOL_VERSION_MINOR 1
#define NCCLPOOL_VERSION_PATCH 0
/* major * 10000 + minor * 100 + patch of the loaded library. */
NCCLPOOL_C_API int ncclpool_version(void);
NCCLPOOL_C_API const char* ncclpool_version_string(void);

typedef struct ncclpool_features {
  size_t struct_size;          /* set by the caller to sizeof(ncclpool_features_t) */
  int built_with_cuda;         /* CUDA headers were found at build time (cuda/vmm sources compiled) */
  int cuda_available;          /* the driver loads and sees a device */
  int cuda_device_count;
  int nccl_available;          /* NCCL loads and has the symbols ncclpool needs */
  int nccl_version;            /* ncclGetVersion(), e.g. 22809; 0 if unavailable */
  int nccl_windows;            /* symmetric windows supported (NCCL >= 2.27 with the window API) */
  int nccl_reused_loaded;      /* the process had NCCL loaded already and ncclpool uses that copy */
  char nccl_library[512];      /* path of the NCCL library in use ("" if none) */
  char why_not[512];           /* why CUDA or NCCL is unavailable ("" when both are) */
  /* Added in 0.1 after the fields above; a caller built before passes the smaller struct_size and
     gets the fields above only. */
  int symmetric_ctas_decided;  /* 1 once this process registered a window (the count is then fixed) */
  int symmetric_ctas;          /* CTAs of NCCL's symmetric kernels asked through NCCL_SYM_CTAS; 0 = NCCL's choice */
  char symmetric_ctas_source[256]; /* where the count comes from (see SymmetricCtas in nccl.hpp) */
  /* Added in 0.1 after the CTA fields (the same rule: an older struct_size gets none of them). */
  int nccl_other_copies;       /* NCCL libraries loaded in this process besides nccl_library, as of the
                                  call: 0 normally; more when another file is loaded too (an LD_PRELOAD-ed
                                  libnccl.so.2 beside the one torch loads): "one NCCL per process", a
                                  communicator must be used with the library that made it */
  int nccl_other_version;      /* ncclGetVersion() of the first of them; 0 if none */
  char nccl_other_library[512]; /* path of the first of them ("" if none) */
  /* Added in 0.1 after the copies (the same rule). Whether windows carry NCCL_WIN_COLL_SYMMETRIC, so
     that NCCL's symmetric kernels run on them (SymmetricKernels in nccl.hpp; NCCLPOOL_SYMMETRIC_KERNELS):
     fixed at the process's first symmetric attach; before it, what it would decide on device 0. */
  int symmetric_kernels_decided;
  int symmetric_kernels_enabled;
  int symmetric_kernels_hazard;  /* this NCCL, GPU and driver launch symmetric kernels that can read
                                    their input early (NCCL 2.28.0-2.30.6, sm_90+, driver >= 12.3) */
  char symmetric_kernels_why[512];
  /* Added in 0.1 after symmetric_kernels_why (the same rule). The decision in one word and the fence
     (ncclpool_symmetric_fence below; docs/python.md, "NCCL versions"). */
  char symmetric_kernels_decision[16]; /* "on", "fence" (windows carry the flag, collectives on them are
                                          fenced), "guard" (off because of the hazard) or "off" */
  int symmetric_fence_declared;  /* this process called ncclpool_prefer_symmetric_fence */
  char symmetric_fence_kind[16]; /* "node", "kernel" or "memset" (NCCLPOOL_SYMMETRIC_FENCE) */
  uint64_t symmetric_fence_calls;     /* ncclpool_symmetric_fence calls so far (all threads) */
  uint64_t symmetric_fences_launched; /* of them, fences launched (nodes added under capture) */
  uint64_t symmetric_fences_skipped_in_capture; /* of them, captures where NCCL's own event-wait node orders
                                                   the collective (NCCL < 2.29, graph mixing on) */
  /* Added in 0.1 after the fence's counters (the same rule). */
  int symmetric_ctas_nccl_preferred; /* this process called ncclpool_prefer_nccl_symmetric_ctas, recorded (its symmetric
                                        collectives overlap compute: NCCL's own CTA count before ncclpool's default) */
} ncclpool_features_t;
/* Fills *features (struct_size must be set; at least up to why_not). Loads the CUDA driver and NCCL
   if needed. */
NCCLPOOL_C_API ncclpool_status_t ncclpool_get_features(ncclpool_features_t* features);

/* ---- The symmetric fence (NCCL 2.28.0-2.30.6: symmetric kernels that can read their input early) ----
 * NCCL launches its symmetric kernels with PDL, and 2.28.0-2.30.6 left their wait for the kernel
 * before them out: after a kernel that triggers its dependents early, a collective on windows with
 * the symmetric flag can read its input before it is written. Where the process decides `fence`
 * (NCCLPOOL_SYMMETRIC_KERNELS=fence, or auto in a process that declared the fence), windows carry the
 * flag and every collective on them must follow ncclpool_symmetric_fence on its stream; elsewhere the
 * call does nothing. */
/* Declares that this process's collectives on windows follow ncclpool_symmetric_fence (auto then
   resolves to `fence` instead of the guard where the hazard exists). Call it before the process's
   first symmetric attach. Idempotent. INVALID_STATE, naming the decision, when the process decided
   already without it (the guard). ncclpool.torch.init and ncclpool.sglang call it. */
NCCLPOOL_C_API ncclpool_status_t ncclpool_prefer_symmetric_fence(void);
/* Right before a collective on windows that the caller enqueues on `stream` (a cudaStream_t / CUstream;
   NULL: the legacy default stream): where the process decided `fence`, launches one fence on it
   (NCCLPOOL_SYMMETRIC_FENCE: node, the default, an empty graph node in a capture and the kernel
   eagerly; kernel, an empty kernel without PDL; memset, a 1-byte memset), a node when the stream is
   capturing a graph, except in a capture that NCCL orders itself (NCCL < 2.29 with graph mixing on).
   *launched (may be NULL) gets 1 when a fence was launched, else 0. Cheap when nothing is needed (no
   CUDA call before the decision is `fence`). BACKEND with the CUDA error text when the launch fails. */
NCCLPOOL_C_API ncclpool_status_t ncclpool_symmetric_fence(void* stream, int* launched);

/* ---- The symmetric kernels' CTA count (SymmetricCtas in nccl.hpp; docs/python.md) ---- */
/* Declares that this process's symmetric collectives overlap compute (training): ncclpool's measured
   default CTA count for NCCL's symmetric kernels (32 on compute capability 9.x, measured where nothing
   overlaps the collective) then yields to NCCL's own choice; NCCL_SYM_CTAS, NCCLPOOL_SYM_CTAS and a
   profile's count still win (SymmetricCtas in nccl.hpp). Call it before the process's first symmetric
   attach, on every rank (the count is compared at the attach agreement). Idempotent. INVALID_STATE,
   naming the decision, when the process decided ncclpool's measured default already; after any other
   decision it only records the declaration. ncclpool.torch.fsdp's helper and
   ncclpool.torch.megatron.install() call it. */
NCCLPOOL_C_API ncclpool_status_t ncclpool_prefer_nccl_symmetric_ctas(void);

/* This rank's vote for running all-gather on a communicator made with NCCL's CTA policy ZERO (NCCL's
   copy-engine collectives on windows: no SMs; CopyEngineVote in nccl.hpp, docs/python.md "Copy-engine
   all-gather"). requested: -1 auto (yes where this machine's `ncclpool tune` profile for `ranks` ranks
   says it is faster), 0 off, 1 on; NCCLPOOL_COPY_ENGINE=off wins over it, NCCL < 2.28 and symmetric
   kernels off (the NCCL-version guard, judged on GPU `device`) vote no. *use gets 0 or 1 and `why`
   (why_size bytes, may be NULL when why_size is 0) the reason. A vote is local: creating the group is
   collective, so the ranks must combine their votes (all yes, or no group), as ncclpool.torch does. */
NCCLPOOL_C_API ncclpool_status_t ncclpool_copy_engine_vote(int requested, int device, int ranks, int* use, char* why, size_t why_size);
/* The node this process runs on, as NCCL tells nodes apart (NCCL_HOSTID when set, else host name and
   boot id; ncclpool's own hash): processes with different values are different nodes to NCCL, which
   runs symmetric kernels and copy engines within one node only. */
NCCLPOOL_C_API ncclpool_status_t ncclpool_node_id(uint64_t* node);

/* ---- Pools ---- */
typedef struct ncclpool_pool_s* ncclpool_pool_t;
typedef struct ncclpool_comm_s* ncclpool_comm_t;

/* The segment sources a pool can be created with: X(UPPER, value, name, doc), the one list (the enum
 * below, the names ncclpool_value_name gives, which the Python package checks its table against). */
#define NCCLPOOL_SOURCES(X)                                                                  \
  X(AUTO, 0, auto, "vmm when a GPU is there, else sim")                                      \
  X(SIM, 1, sim, "host memory standing in for a device (CPU tests)")                         \
  X(CUDA, 2, cuda, "cuMemAlloc: local registration only, no windows")                        \
  X(VMM, 3, vmm, "cuMem device memory with shareable handles: windows OK")                   \
  X(VMM_HOST_NUMA, 4, vmm_host_numa, "cuMem host memory on the device's NUMA node")          \
  X(NCCL, 5, nccl, "ncclMemAlloc: windows OK")
#define NCCLPOOL_SOURCE_ENUMERATOR(upper, value, name, doc) NCCLPOOL_SOURCE_##upper = value,
typedef enum ncclpool_source { NCCLPOOL_SOURCES(NCCLPOOL_SOURCE_ENUMERATOR) } ncclpool_source_t;
#undef NCCLPOOL_SOURCE_ENUMERATOR

typedef enum ncclpool_registration {
  NCCLPOOL_REGISTRATION_DEFAULT = -1, /* the pool's default_registration */
  NCCLPOOL_REGISTRATION_LOCAL = 0,    /* ncclCommRegister: zero-copy */
  NCCLPOOL_REGISTRATION_SYMMETRIC = 1, /* ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC): collective */
  NCCLPOOL_REGISTRATION_AUTO = 2       /* per size class, what is fastest on this machine (an `auto`
                                          pool: docs/pool.md, "Auto pools"): its parts are registered
                                          none / local / symmetric and each request is routed to one
                                          by its size; collective where a part is symmetric */
} ncclpool_registration_t;

/* The collective a buffer is for (an auto pool routes it by that collective's measurements). */
typedef enum ncclpool_collective {
  NCCLPOOL_COLLECTIVE_ANY = 0,
  NCCLPOOL_COLLECTIVE_ALL_GATHER = 1,
  NCCLPOOL_COLLECTIVE_REDUCE_SCATTER = 2,
  NCCLPOOL_COLLECTIVE_ALL_REDUCE = 3
} ncclpool_collective_t;

typedef struct ncclpool_pool_options {
  size_t struct_size;        /* sizeof(ncclpool_pool_options_t); set by ncclpool_pool_options_init */
  const char* name;          /* used in every message about the pool; copied; NULL = "ncclpool" */
  int device;                /* CUDA device ordinal (the simulator's device id for SIM) */
  ncclpool_source_t source;
  ncclpool_registration_t default_registration; /* kind used by attach with ..._DEFAULT; AUTO makes an
                                auto pool (the only kind of pool that attach with AUTO accepts) */
  size_t growth_chunk;       /* segments are the requests' own sizes (at least min_segment) within a
                                segment budget; past it chunks that start at growth_chunk/16 and grow with
                                the pool up to growth_chunk (docs/pool.md); 0 = 2 MiB,
                                or 1 GiB when symmetric (auto pools: 1 GiB for the symmetric part, 2 MiB
                                for the others) */
  size_t alignment;          /* block alignment, power of two >= 256; 0 = 512 (torch's block size) */
  size_t max_reserved;       /* cap on reserved bytes; 0 = none */
  int deterministic;         /* 1: timing never steers placement (required for symmetric and auto); -1 =
                                on when default_registration is symmetric or auto */
  size_t sim_capacity;       /* SIM only: simulated device memory; 0 = 64 GiB */
  int check;                 /* check mode (docs/registry.md): 0 off, 1 layout, 2 collectives;
                                -1 = $NCCLPOOL_CHECK (off|layout|collectives or 0|1|2), else off */
  size_t min_segment;        /* the smallest segment growth makes; 0 = growth_chunk/128. Larger: fewer
                                segments, so fewer windows, for more reserve (1 GiB: 64 torch segments
                                of 32 MiB share 2 windows per group instead of 64;
                                docs/benchmarks/growth.md). Auto pools: their symmetric part only */
  /* Added in 0.1 after min_segment: a caller built before passes the smaller struct_size (up to
     min_segment), which ncclpool_pool_create and ncclpool_pool_get_options still accept. */
  const char* agreed_settings; /* settings every rank must have alike (the caller's text: a kind, buffer
                                checks, debug modes...); copied; NULL or "" = none. With settings, every
                                attach of the pool is collective, a LOCAL one included: an attach
                                agreement compares the kind and a digest of this text, and ranks whose
                                kind or settings differ all get AGREEMENT_ERROR (naming this rank's text
                                and kind); a symmetric attach and an auto pool's routes agreement
                                compare the digest too (docs/registry.md, "Lockstep") */
} ncclpool_pool_options_t;

/* Fills *options with the defaults above (device 0, AUTO source, local registration). */
NCCLPOOL_C_API void ncclpool_pool_options_init(ncclpool_pool_options_t* options);
NCCLPOOL_C_API ncclpool_status_t ncclpool_pool_create(const ncclpool_pool_options_t* options, ncclpool_pool_t* pool);
/* Detaches local communicators and releases every segment. Refused (INVALID_STATE) while blocks are
 * live, a scope of the pool is open in any thread, or a symmetric communicator is attached (detach or
 * forget it first). */
NCCLPOOL_C_API ncclpool_status_t ncclpool_pool_destroy(ncclpool_pool_t pool);
/* The options the pool runs with (source resolved, defaults filled in; name and agreed_settings point
 * into the pool). Fills agreed_settings only when options->struct_size is sizeof(ncclpool_pool_options_t)
 * (a caller built before it may leave struct_size unset: it then gets the fields up to min_segment). */
NCCLPOOL_C_API ncclpool_status_t ncclpool_pool_get_options(ncclpool_pool_t pool, ncclpool_pool_options_t* options);
/* Describes the segment source, e.g. "vmm device 0 (posix-fd)". Valid while the pool lives. */
NCCLPOOL_C_API const char* ncclpool_pool_source_description(ncclpool_pool_t pool);

NCCLPOOL_C_API ncclpool_status_t ncclpool_alloc(ncclpool_pool_t pool, size_t size, void* stream, void** ptr);
/* Frees a block last used on `stream` (reusable there at once, elsewhere behind an event). NULL is the
 * legacy default stream, as in CUDA. */
/* ncclpool_alloc for a buffer of one collective: an auto pool routes it by that collective's profile
 * (other pools ignore `collective`). */
NCCLPOOL_C_API ncclpool_status_t ncclpool_alloc_for(ncclpool_pool_t pool, size_t size, void* stream, ncclpool_collective_t collective, void** ptr);
NCCLPOOL_C_API ncclpool_status_t ncclpool_free(ncclpool_pool_t pool, void* ptr, void* stream);
/* Frees a block last used on the stream it was allocated on. */
NCCLPOOL_C_API ncclpool_status_t ncclpool_free_on_alloc_stream(ncclpool_pool_t pool, void* ptr);
/* Makes every block freed on `stream` so far reusable by other streams (records an event on it). The
 * pool does this by itself at later frees; call it after a stream's last free, before destroying it. */
NCCLPOOL_C_API ncclpool_status_t ncclpool_publish_frees(ncclpool_pool_t pool, void* stream);
NCCLPOOL_C_API ncclpool_status_t ncclpool_reserve(ncclpool_pool_t pool, size_t bytes);
/* Releases empty segments (collectively over symmetric communicators, which must all call it). */
NCCLPOOL_C_API ncclpool_status_t ncclpool_trim(ncclpool_pool_t pool, size_t* released_bytes);
/* Checks every internal invariant of the pool and its registrations (INVARIANT_VIOLATION if broken). */
NCCLPOOL_C_API ncclpool_status_t ncclpool_check(ncclpool_pool_t pool);

/* A pool's counters: the fields and what each says are NCCLPOOL_POOL_STATS_FIELDS in
 * stats_fields.h (an auto pool's: its parts' combined). */
typedef struct {
  size_t struct_size; /* set by the caller to sizeof(ncclpool_pool_stats_t) */
  NCCLPOOL_POOL_STATS_FIELDS(NCCLPOOL_STATS_C_MEMBER)
} ncclpool_pool_stats_t;
/* Fills *stats. struct_size must be set: a caller built against an older header passes its smaller
 * size and gets the fields it has (a newer one gets this library's, and struct_size says how many
 * bytes were written); a size smaller than the first release's struct, or one that is no version's
 * size, is INVALID_ARGUMENT. */
NCCLPOOL_C_API ncclpool_status_t ncclpool_pool_stats(ncclpool_pool_t pool, ncclpool_pool_stats_t* stats);
/* Statistics as JSON (the pool's counters plus one object per attached communicator; an auto pool's
 * routes, where they came from, and each part's counters). Writes at
 * most `capacity` bytes including the terminating NUL; *needed (if not NULL) gets the full length + 1.
 * buffer = NULL with capacity = 0 only asks for the size. Returns INVALID_ARGUMENT when the buffer is
 * too small (nothing partial is written then). */
NCCLPOOL_C_API ncclpool_status_t ncclpool_pool_stats_json(ncclpool_pool_t pool, char* buffer, size_t capacity, size_t* needed);

/* The fields of the stats structs as this library has them, for bindings that build the structs at
 * run time (the Python package's ctypes): from the same lists as the structs (stats_fields.h). */
typedef enum ncclpool_stats_kind {
  NCCLPOOL_STATS_POOL = 0, /* ncclpool_pool_stats_t */
  NCCLPOOL_STATS_COMM = 1  /* ncclpool_comm_stats_t */
} ncclpool_stats_kind_t;
typedef enum ncclpool_field_type {
  NCCLPOOL_FIELD_SIZE = 0,        /* size_t (struct_size) */
  NCCLPOOL_FIELD_UINT64 = 1,      /* uint64_t */
  NCCLPOOL_FIELD_INT = 2,         /* int */
  NCCLPOOL_FIELD_DOUBLE = 3,      /* double */
  NCCLPOOL_FIELD_REGISTRATION = 4 /* int holding an ncclpool_registration_t */
} ncclpool_field_type_t;
typedef struct ncclpool_stats_field {
  const char* name;           /* the member's name */
  ncclpool_field_type_t type;
  size_t offset;              /* offsetof the member in the struct */
  const char* doc;            /* what it says */
} ncclpool_stats_field_t;
/* kind: an ncclpool_stats_kind_t, passed as an int so that any value a caller passes is defined
 * behaviour (in C++ an enum of two values holds no other). *fields: the struct's members in order,
 * struct_size first (static storage, valid for the life of the process); *count: how many.
 * INVALID_ARGUMENT for another kind. */
NCCLPOOL_C_API ncclpool_status_t ncclpool_stats_fields(int kind, const ncclpool_stats_field_t** fields, size_t* count);

/* ---- Communicators ---- */
/* Attaches a caller-owned ncclComm_t (from the process's NCCL; ncclpool never destroys it) on the
 * pool's device. Local: registers every segment now and every new one as it appears. Symmetric
 * (collective: every rank attaches in the same order): agrees across ranks, registers existing
 * segments as windows; later segments wait for ncclpool_commit / the end of a scope.
 * INVALID_ARGUMENT for a SIM pool and for a nccl_comm that is NULL, negative (as intptr_t) or not
 * aligned to a pointer; any other value that is not a live ncclComm_t of the process's NCCL is
 * undefined behaviour (a communicator pointer cannot be validated). */
NCCLPOOL_C_API ncclpool_status_t ncclpool_attach_nccl(ncclpool_pool_t pool, void* nccl_comm, ncclpool_registration_t kind, ncclpool_comm_t* comm);
/* An auto pool (default_registration AUTO) attached with AUTO or DEFAULT registers each part with its
 * placement; its routes are fixed at its first attach (from the profile measured for the communicator's
 * GPU, NCCL version and size, else built in) unless an allocation came first; where a part is
 * symmetric the attach is collective and first compares every rank's routes (AGREEMENT_ERROR when
 * they differ). LOCAL or SYMMETRIC on an auto pool register every part that way. */
/* Removes all of comm's registrations (collective for symmetric) and frees the handle. */
NCCLPOOL_C_API ncclpool_status_t ncclpool_detach(ncclpool_comm_t comm);
/* Drops comm's registrations without calling NCCL (the communicator was destroyed or aborted) and
 * frees the handle. */
NCCLPOOL_C_API ncclpool_status_t ncclpool_forget(ncclpool_comm_t comm);
/* An agreement point: registers every pending window after agreement. Collective over every attached
 * symmetric communicator on every call (a rank with nothing pending joins without waiting and learns
 * of a mismatch later: from ncclpool_poll, or at its next agreement point, where it votes no so that
 * every rank fails there together). */
NCCLPOOL_C_API ncclpool_status_t ncclpool_commit(ncclpool_pool_t pool);
/* The agreement point of ncclpool_commit reached on an error path of this rank (code that commits on
 * every rank, left by an exception): joins the agreement voting no, so every rank fails there and
 * nothing is registered, instead of leaving the other ranks' agreement to pair with this rank's next
 * collective. Never reports the agreement's own error (the caller has one): OK, or INVALID_ARGUMENT. */
NCCLPOOL_C_API ncclpool_status_t ncclpool_commit_after_error(ncclpool_pool_t pool);
/* Records a failure found on this rank alone (`why`, copied; NULL = none given) as this rank's "no" at
 * the pool's next collective step: an attach agreement (symmetric, or any attach of a pool with agreed
 * settings), a commit or scheduled scope end with a symmetric communicator attached, a symmetric
 * detach, a trim with one, an auto pool's routes agreement (whichever part's agreement comes first).
 * That step takes it: this rank still joins and votes no, nothing is registered or released anywhere,
 * the other ranks fail with AGREEMENT_ERROR ("voted no"), and this rank with INVALID_STATE whose
 * message contains `why`. The first failure is kept until a step takes it (a scope ended with
 * ncclpool_scope_end_after_error where it is not an agreement point keeps its "no" the same way).
 * Never collective, never waits: OK, or INVALID_ARGUMENT for a NULL pool. */
NCCLPOOL_C_API ncclpool_status_t ncclpool_vote_no(ncclpool_pool_t pool, const char* why);
/* Checks earlier agreements whose results arrived; AGREEMENT_ERROR names one that differed (reported
 * once). Never waits, nothing collective. */
NCCLPOOL_C_API ncclpool_status_t ncclpool_poll(ncclpool_pool_t pool);
/* Collective over comm's communicator: proves that `buffers` (one collective's, same order on every
 * rank) sit at the same offset of the same symmetric window on every rank, or in none (check mode 2
 * calls it before every collective of ncclpool.torch). AGREEMENT_ERROR names ranks and offsets. */
NCCLPOOL_C_API ncclpool_status_t ncclpool_verify_buffers(ncclpool_comm_t comm, const void* const* buffers, size_t count);
NCCLPOOL_C_API ncclpool_status_t ncclpool_pending(ncclpool_pool_t pool, size_t* pending);

/* One attached communicator's counters: the fields and what each says are
 * NCCLPOOL_COMM_STATS_FIELDS in stats_fields.h (an auto pool's: summed over its parts). */
typedef struct {
  size_t struct_size; /* set by the caller to sizeof(ncclpool_comm_stats_t) */
  NCCLPOOL_COMM_STATS_FIELDS(NCCLPOOL_STATS_C_MEMBER)
} ncclpool_comm_stats_t;
/* Fills *stats; struct_size as for ncclpool_pool_stats. */
NCCLPOOL_C_API ncclpool_status_t ncclpool_comm_stats(ncclpool_comm_t comm, ncclpool_comm_stats_t* stats);
/* The window (or local registration handle) of the segment holding ptr, NULL if none. */
NCCLPOOL_C_API ncclpool_status_t ncclpool_comm_handle_of(ncclpool_comm_t comm, const void* ptr, void** handle);
/* The symmetric window of comm that holds ptr; NULL when its segment is registered locally with
 * comm, pending, or not in the pool (an auto pool: the part ptr is in decides). */
NCCLPOOL_C_API ncclpool_status_t ncclpool_comm_window_of(ncclpool_comm_t comm, const void* ptr, void** window);

/* ---- Scopes (per thread) ----
 * Between begin and end, this thread's PyTorch allocations through the pluggable allocator below
 * come from `pool`. end() is a scope end of the pool's registry (ncclpool::Scope::close): at its
 * scheduled scope ends (the first 16, then every 16th, counted per pool: the same on every rank;
 * every one in check mode) it commits pending windows (collective), at the others only what needs
 * no agreement; under CUDA graph capture on the pool's device nothing, and what is pending waits.
 * ncclpool_commit() commits at once. Scopes nest; end() must name the
 * innermost scope's pool (INVALID_STATE otherwise). The scope is closed even when the commit fails.
 * begin() never fails on an earlier agreement found to have differed (whether its result has arrived
 * is timing): that is this rank's "no" at its next agreement point. */
NCCLPOOL_C_API ncclpool_status_t ncclpool_scope_begin(ncclpool_pool_t pool);
/* A scope whose torch allocations are buffers of `collective` (an auto pool routes the segments torch
 * asks for in it by that collective's profile). */
NCCLPOOL_C_API ncclpool_status_t ncclpool_scope_begin_for(ncclpool_pool_t pool, ncclpool_collective_t collective);
NCCLPOOL_C_API ncclpool_status_t ncclpool_scope_end(ncclpool_pool_t pool);
/* Ends the innermost scope after an error inside it on this rank: a scope end like ncclpool_scope_end
 * (counted, so the schedule stays the same on every rank), where this rank votes no if the scope end
 * is scheduled (enqueued, no wait): every rank fails there together. At a scope end that is not an
 * agreement point the "no" is kept for the pool's next collective step (as ncclpool_vote_no), so one
 * rank's error in a scope always ends in an error on every rank there. Never reports the agreement's
 * own error: OK, or INVALID_STATE when the innermost scope is not `pool`'s. */
NCCLPOOL_C_API ncclpool_status_t ncclpool_scope_end_after_error(ncclpool_pool_t pool);
/* Leaves the innermost scope without a scope end: nothing counted, nothing collective; pending
 * windows wait for a later commit. Only where every rank leaves this scope so (the program's choice,
 * e.g. the caller commits right after): a rank that ends a scope while another leaves it would have
 * another schedule of agreement points from then on. */
NCCLPOOL_C_API ncclpool_status_t ncclpool_scope_leave(ncclpool_pool_t pool);
/* The pool of the calling thread's innermost scope (NULL if none). */
NCCLPOOL_C_API ncclpool_pool_t ncclpool_current_pool(void);
/* Whether the pool's next scope end is an agreement point: scheduled (the registry's schedule, the
 * same on every rank that made the same uses) and a communicator with windows attached. For layers
 * that prepare for the collective step (e.g. drain a stream first) without keeping a copy of the
 * schedule. Nothing collective, never waits. */
NCCLPOOL_C_API ncclpool_status_t ncclpool_scope_end_agrees(ncclpool_pool_t pool, int* agrees);

/* ---- PyTorch CUDAPluggableAllocator entry points (torch's exact signatures) ----
 *   alloc = torch.cuda.memory.CUDAPluggableAllocator(libncclpool.so, "ncclpool_torch_alloc",
 *                                                    "ncclpool_torch_free")
 *   torch.cuda.MemPool(alloc.allocator())
 * torch asks for a segment (2 MiB, 20 MiB, ...); ncclpool carves it from the pool's large registered
 * chunks, so windows are counted in chunks, not in torch segments. The pool is the calling thread's
 * innermost scope's pool (on `device`); outside any scope, the one pool bound to `device` with
 * ncclpool_torch_bind (if exactly one is). On failure alloc returns NULL (torch then raises
 * torch.OutOfMemoryError) and ncclpool_last_error() says why. free finds the pool by address. */
NCCLPOOL_C_API void* ncclpool_torch_alloc(size_t size, int device, void* stream);
NCCLPOOL_C_API void ncclpool_torch_free(void* ptr, size_t size, int device, void* stream);
NCCLPOOL_C_API ncclpool_status_t ncclpool_torch_bind(ncclpool_pool_t pool);
NCCLPOOL_C_API ncclpool_status_t ncclpool_torch_unbind(ncclpool_pool_t pool);
/* Failed ncclpool_torch_alloc / ncclpool_torch_free calls so far (all threads). */
NCCLPOOL_C_API uint64_t ncclpool_torch_failures(void);

/* ---- Simulator (CPU tests): a group of ranks that are threads of this process ---- */
typedef struct ncclpool_sim_group_s* ncclpool_sim_group_t;
NCCLPOOL_C_API ncclpool_status_t ncclpool_sim_group_create(const char* name, int size, int timeout_ms, ncclpool_sim_group_t* group);
/* Same, with matching 0 = strict (mismatched calls fail on every rank) or 1 = nccl (calls pair by
 * position unchecked, as on real NCCL: a skipped collective pairs with the next one). */
NCCLPOOL_C_API ncclpool_status_t ncclpool_sim_group_create_matching(const char* name, int size, int timeout_ms, int matching, ncclpool_sim_group_t* group);
/* Stands in for an application collective on rank `rank` of the group (blocks until every rank made
 * its call in this position). */
NCCLPOOL_C_API ncclpool_status_t ncclpool_sim_user_collective(ncclpool_comm_t comm, uint64_t argument);
/* Drops the handle; communicators attached from the group keep its state alive until detached. */
NCCLPOOL_C_API ncclpool_status_t ncclpool_sim_group_destroy(ncclpool_sim_group_t group);
/* Attaches rank `rank` of the group (the simulated counterpart of ncclpool_attach_nccl). */
NCCLPOOL_C_API ncclpool_status_t ncclpool_attach_sim(ncclpool_pool_t pool, ncclpool_sim_group_t group, int rank, ncclpool_registration_t kind, ncclpool_comm_t* comm);
/* Registrations (local + windows) alive in the group over all ranks: 0 once everything is released. */
NCCLPOOL_C_API ncclpool_status_t ncclpool_sim_group_live_registrations(ncclpool_sim_group_t group, uint64_t* count);
/* Makes the nth (1-based) call of op (0 register_local, 1 deregister_local, 2 register_window,
 * 3 deregister_window) on rank (-1 = every rank) fail. */
NCCLPOOL_C_API ncclpool_status_t ncclpool_sim_group_inject_failure(ncclpool_sim_group_t group, int op, int rank, int nth);
/* What `rank`'s (-1: every rank's) simulated communicators report as their symmetric kernel setting
   (the CTA count 0-64, plus one of the flags below; default -1: nothing), compared across ranks at a
   symmetric attach: tests of ranks that would launch NCCL's symmetric kernels differently. */
#define NCCLPOOL_SIM_SYMMETRIC_KERNELS_OFF 0x10000    /* windows without the symmetric flag (off, the guard) */
#define NCCLPOOL_SIM_SYMMETRIC_KERNELS_FENCED 0x20000 /* collectives on windows fenced (the decision `fence`) */
NCCLPOOL_C_API ncclpool_status_t ncclpool_sim_group_set_symmetric_kernels(ncclpool_sim_group_t group, int rank, int setting);
/* Models a CUDA graph capture by the calling thread on a SIM pool's device (begins or ends it): the
 * calling thread's agreement points (commit, scope end) are skipped under it; another thread's are not. */
NCCLPOOL_C_API ncclpool_status_t ncclpool_sim_set_capturing(ncclpool_pool_t pool, int capturing);
/* The next `count` (>= 0; 0: none) segment allocations of a SIM pool fail with out of memory. */
NCCLPOOL_C_API ncclpool_status_t ncclpool_sim_inject_oom(ncclpool_pool_t pool, int count);

#ifdef __cplusplus
}
#endif

#endif /* NCCLPOOL_NCCLPOOL_H */
