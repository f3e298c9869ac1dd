#pragma once
// The process environment as ncclpool's C++ code sees it: one accessor per variable of
// docs/environment.md that the library or the `ncclpool` command reads, and the one variable the
// library sets. Nothing else in src/ or tools/ reads or sets the environment (a search for the C
// library's call lists environment.cpp only), so what ncclpool reads, and where, is this list. Each
// variable's meaning stays with the code that owns it: the raw accessors hand its text (nullptr when
// unset) to that code (choose_symmetric_ctas, choose_symmetric_kernels, check_level_from_env, ...);
// the typed ones parse where the parse needs nothing above the core. Internal: exported
// (NCCLPOOL_INTERNAL) for the tool, never API.

#include <ncclpool/export.hpp>

#include <chrono>
#include <optional>
#include <string>

namespace ncclpool::environment {

// --- Read when NCCL is first loaded (src/backends/nccl/library.cpp) ---------------------------------

/// NCCLPOOL_NCCL_LIBRARY: the NCCL file to load when the process has none loaded; "" when unset or empty.
NCCLPOOL_INTERNAL std::string nccl_library();

// --- Read at the process's first symmetric attach (and by `ncclpool info`, environment_problems) ---

/// NCCLPOOL_SYMMETRIC_KERNELS as set (auto|on|off|fence expected; nullptr: unset). choose_symmetric_kernels reads it.
NCCLPOOL_INTERNAL const char* symmetric_kernels();
/// NCCLPOOL_SYMMETRIC_FENCE as set (kernel|memset|node expected; nullptr: unset). choose_symmetric_fence_kind reads it.
NCCLPOOL_INTERNAL const char* symmetric_fence();
/// NCCLPOOL_SYM_CTAS as set ("nccl" or 1-64 expected; nullptr: unset). choose_symmetric_ctas reads it.
NCCLPOOL_INTERNAL const char* ncclpool_sym_ctas();
/// NCCL_SYM_CTAS (NCCL's own) as set (nullptr: unset). choose_symmetric_ctas reads it.
NCCLPOOL_INTERNAL const char* nccl_sym_ctas();
/// Sets NCCL_SYM_CTAS to `ctas` unless it is set already: the only variable the library sets. False
/// (errno says why) when setenv fails.
NCCLPOOL_INTERNAL bool set_nccl_sym_ctas(int ctas);

// --- Read by symmetric_fence on a capturing stream, where the process decided `fence` ------------

/// NCCL_GRAPH_MIXING_SUPPORT (NCCL's own) as set (nullptr: unset). choose_symmetric_fence reads it.
NCCLPOOL_INTERNAL const char* nccl_graph_mixing_support();

// --- Read at each copy-engine vote (copy_engine_vote; ncclpool.torch.copy_engine_group) -----------

/// NCCLPOOL_COPY_ENGINE as set (auto|on|off expected; nullptr: unset). choose_copy_engine reads it.
NCCLPOOL_INTERNAL const char* copy_engine();

// --- Read each time an NCCL communicator is wrapped (src/backends/nccl) ----------------------------

/// NCCLPOOL_AGREEMENT_TIMEOUT_S as set (nullptr: unset).
NCCLPOOL_INTERNAL const char* agreement_timeout_text();
/// NCCLPOOL_AGREEMENT_TIMEOUT_S in milliseconds (seconds, fractions allowed, rounded up); nullopt when
/// unset or empty. @throws InvalidArgument unless a positive number of seconds up to 1e7.
NCCLPOOL_INTERNAL std::optional<std::chrono::milliseconds> agreement_timeout();
/// NCCLPOOL_AGREEMENT_BUFFERS as set (nullptr: unset).
NCCLPOOL_INTERNAL const char* agreement_buffers_text();
/// NCCLPOOL_AGREEMENT_BUFFERS: true for `device`, false for `host`, unset or empty.
/// @throws InvalidArgument on anything else.
NCCLPOOL_INTERNAL bool agreement_buffers_on_device();

// --- Read at each pool's (registry's) creation with its check level left unset (src/registry) ------

/// NCCLPOOL_CHECK as set (nullptr: unset). check_level_from_env reads it.
NCCLPOOL_INTERNAL const char* check();

// --- Read wherever the tuning profile is looked up (src/routing/profile.cpp) -----------------------

/// Where the profile is: NCCLPOOL_PROFILE, else $XDG_CACHE_HOME/ncclpool/profile.json, else
/// $HOME/.cache/ncclpool/profile.json (an empty variable counts as unset); "" when none is set.
NCCLPOOL_INTERNAL std::string profile_path();
// NCCLPOOL_PROFILE as set (a file, or a folder of profiles per rank count); "" when unset.
NCCLPOOL_INTERNAL std::string profile_setting();
// The folder of profiles when NCCLPOOL_PROFILE is unset: $XDG_CACHE_HOME/ncclpool, else
// $HOME/.cache/ncclpool; "" when both are unset.
NCCLPOOL_INTERNAL std::string profile_cache_dir();

// --- Read by the Python package; checked here only (environment_problems) --------------------------

/// NCCLPOOL_GROWTH_CHUNK as set (nullptr: unset); ncclpool.torch.create_nccl_mem_pool reads it itself.
NCCLPOOL_INTERNAL const char* growth_chunk();
/// NCCLPOOL_MIN_SEGMENT as set (nullptr: unset); ncclpool.torch.create_nccl_mem_pool reads it itself.
NCCLPOOL_INTERNAL const char* min_segment();

/// NCCLPOOL_SGLANG_KIND as set (nullptr: unset); ncclpool.sglang reads it itself (_environment.sglang_kind).
NCCLPOOL_INTERNAL const char* sglang_kind();

// --- Read once per process, for the node a rank runs on (Communicator::node) ---------------------

/// NCCL_HOSTID (NCCL's own) as set (nullptr: unset): NCCL tells nodes apart by it.
NCCLPOOL_INTERNAL const char* nccl_hostid();

// --- Read by the `ncclpool` command only -------------------------------------------------------------

/// NCCL_NVLS_ENABLE (NCCL's own) as set (nullptr: unset): `bench coll` records it. ncclpool never sets it.
NCCLPOOL_INTERNAL const char* nccl_nvls_enable();

}  // namespace ncclpool::environment
