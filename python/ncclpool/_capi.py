"""Loads libncclpool and declares the C ABI (include/ncclpool/ncclpool.h) for ctypes.

The library is looked for, in order: ``$NCCLPOOL_LIBRARY``; ``libncclpool.so*`` next to this
package; the repository's build trees (``build/default``, ``build/gpu``) when the package runs from a
source checkout; then the system loader path (an installed ``libncclpool.so``).
"""
from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
import threading
from ctypes import POINTER, c_char, c_char_p, c_double, c_int, c_size_t, c_uint64, c_void_p

from . import errors

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_path: str | None = None


class PoolOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("name", c_char_p),
        ("device", c_int),
        ("source", c_int),
        ("default_registration", c_int),
        ("growth_chunk", c_size_t),
        ("alignment", c_size_t),
        ("max_reserved", c_size_t),
        ("deterministic", c_int),
        ("sim_capacity", c_size_t),
        ("check", c_int),
        ("min_segment", c_size_t),
    ]


class Features(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("built_with_cuda", c_int),
        ("cuda_available", c_int),
        ("cuda_device_count", c_int),
        ("nccl_available", c_int),
        ("nccl_version", c_int),
        ("nccl_windows", c_int),
        ("nccl_reused_loaded", c_int),
        ("nccl_library", c_char * 512),
        ("why_not", c_char * 512),
        ("symmetric_ctas_decided", c_int),
        ("symmetric_ctas", c_int),
        ("symmetric_ctas_source", c_char * 256),
        ("nccl_other_copies", c_int),
        ("nccl_other_version", c_int),
        ("nccl_other_library", c_char * 512),
        ("symmetric_kernels_decided", c_int),
        ("symmetric_kernels_enabled", c_int),
        ("symmetric_kernels_hazard", c_int),
        ("symmetric_kernels_why", c_char * 512),
    ]


_POOL_STATS_FIELDS = (
    "allocated_bytes", "peak_allocated_bytes", "requested_bytes", "reserved_bytes", "peak_reserved_bytes",
    "segment_count", "largest_free_block", "active_allocations", "allocation_count", "deallocation_count",
    "segments_created", "segments_released", "oom_count", "oom_recoveries", "cross_stream_reuses",
    "hook_errors", "attached_communicators", "pending_registrations", "stream_publishes", "unpublished_skips",
    "largest_fresh_block",
)


class PoolStats(ctypes.Structure):
    _fields_ = [(name, c_uint64) for name in _POOL_STATS_FIELDS]


class CommStats(ctypes.Structure):
    _fields_ = [
        ("kind", c_int), ("rank", c_int), ("size", c_int), ("device", c_int),
        ("registrations", c_uint64), ("deregistrations", c_uint64), ("registered_segments", c_uint64),
        ("bytes_registered", c_uint64), ("registration_seconds", c_double), ("pending", c_uint64),
        ("agreements", c_uint64), ("errors", c_uint64), ("agreements_waited", c_uint64),
        ("agreements_in_flight", c_uint64), ("segments_created_in_capture", c_uint64),
    ]


def _struct_to_dict(s: ctypes.Structure) -> dict:
    return {name: getattr(s, name) for name, _ in s._fields_}


_Status = c_int
_P = c_void_p
# name: (restype, argtypes). Status-returning functions are checked by `call`.
_PROTOTYPES = {
    "ncclpool_status_string": (c_char_p, [c_int]),
    "ncclpool_last_error": (c_char_p, []),
    "ncclpool_last_status": (c_int, []),
    "ncclpool_clear_last_error": (None, []),
    "ncclpool_version": (c_int, []),
    "ncclpool_version_string": (c_char_p, []),
    "ncclpool_get_features": (_Status, [POINTER(Features)]),
    "ncclpool_pool_options_init": (None, [POINTER(PoolOptions)]),
    "ncclpool_pool_create": (_Status, [POINTER(PoolOptions), POINTER(_P)]),
    "ncclpool_pool_destroy": (_Status, [_P]),
    "ncclpool_pool_get_options": (_Status, [_P, POINTER(PoolOptions)]),
    "ncclpool_pool_source_description": (c_char_p, [_P]),
    "ncclpool_alloc": (_Status, [_P, c_size_t, _P, POINTER(_P)]),
    "ncclpool_alloc_for": (_Status, [_P, c_size_t, _P, c_int, POINTER(_P)]),
    "ncclpool_free": (_Status, [_P, _P, _P]),
    "ncclpool_free_on_alloc_stream": (_Status, [_P, _P]),
    "ncclpool_publish_frees": (_Status, [_P, _P]),
    "ncclpool_reserve": (_Status, [_P, c_size_t]),
    "ncclpool_trim": (_Status, [_P, POINTER(c_size_t)]),
    "ncclpool_check": (_Status, [_P]),
    "ncclpool_pool_stats": (_Status, [_P, POINTER(PoolStats)]),
    "ncclpool_pool_stats_json": (_Status, [_P, c_char_p, c_size_t, POINTER(c_size_t)]),
    "ncclpool_attach_nccl": (_Status, [_P, _P, c_int, POINTER(_P)]),
    "ncclpool_detach": (_Status, [_P]),
    "ncclpool_forget": (_Status, [_P]),
    "ncclpool_commit": (_Status, [_P]),
    "ncclpool_commit_after_error": (_Status, [_P]),
    "ncclpool_pending": (_Status, [_P, POINTER(c_size_t)]),
    "ncclpool_poll": (_Status, [_P]),
    "ncclpool_verify_buffers": (_Status, [_P, POINTER(_P), c_size_t]),
    "ncclpool_comm_stats": (_Status, [_P, POINTER(CommStats)]),
    "ncclpool_comm_handle_of": (_Status, [_P, _P, POINTER(_P)]),
    "ncclpool_scope_begin": (_Status, [_P]),
    "ncclpool_scope_begin_for": (_Status, [_P, c_int]),
    "ncclpool_scope_end": (_Status, [_P]),
    "ncclpool_scope_end_after_error": (_Status, [_P]),
    "ncclpool_scope_leave": (_Status, [_P]),
    "ncclpool_current_pool": (_P, []),
    "ncclpool_torch_alloc": (_P, [c_size_t, c_int, _P]),
    "ncclpool_torch_free": (None, [_P, c_size_t, c_int, _P]),
    "ncclpool_torch_bind": (_Status, [_P]),
    "ncclpool_torch_unbind": (_Status, [_P]),
    "ncclpool_torch_failures": (c_uint64, []),
    "ncclpool_sim_group_create": (_Status, [c_char_p, c_int, c_int, POINTER(_P)]),
    "ncclpool_sim_group_create_matching": (_Status, [c_char_p, c_int, c_int, c_int, POINTER(_P)]),
    "ncclpool_sim_user_collective": (_Status, [_P, c_uint64]),
    "ncclpool_sim_group_destroy": (_Status, [_P]),
    "ncclpool_sim_group_live_registrations": (_Status, [_P, POINTER(c_uint64)]),
    "ncclpool_sim_group_inject_failure": (_Status, [_P, c_int, c_int, c_int]),
    "ncclpool_sim_group_set_symmetric_kernels": (_Status, [_P, c_int, c_int]),
    "ncclpool_sim_set_capturing": (_Status, [_P, c_int]),
    "ncclpool_sim_inject_oom": (_Status, [_P, c_int]),
}


def _candidates() -> list[str]:
    here = os.path.dirname(os.path.abspath(__file__))
    found = []
    env = os.environ.get("NCCLPOOL_LIBRARY")
    if env:
        return [env]  # explicit: use it or fail, never something else
    found += sorted(glob.glob(os.path.join(here, "libncclpool.so*")))
    repo = os.path.dirname(os.path.dirname(here))
    for build in ("default", "gpu"):
        found += sorted(glob.glob(os.path.join(repo, "build", build, "src", "libncclpool.so")))
    found.append("libncclpool.so")  # the system loader path
    return found


def prefer_torchs_nccl() -> str | None:
    """Points NCCLPOOL_NCCL_LIBRARY at the NCCL that torch ships (the `nvidia.nccl` package) when it is
    installed and nothing chose an NCCL yet; returns the path, or None.

    libncclpool loads NCCL on first use: an NCCL torch already loaded, else $NCCLPOOL_NCCL_LIBRARY,
    else the system's libnccl.so.2. If ncclpool loaded the system's before `import torch`, torch's own
    `libnccl.so.2` would resolve to that already-loaded library by its soname: torch would run on
    another NCCL than its own. Finding the package does not import torch."""
    if os.environ.get("NCCLPOOL_NCCL_LIBRARY"):
        return None
    try:
        spec = importlib.util.find_spec("nvidia.nccl")
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(folder, "lib", "libnccl.so.2")
        if os.path.exists(path):
            os.environ["NCCLPOOL_NCCL_LIBRARY"] = path
            return path
    return None


def library() -> ctypes.CDLL:
    """The loaded library (loaded on first use, once per process)."""
    global _lib, _path
    if _lib is not None:  # every C call comes here: no lock once loaded (it is never unloaded)
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        prefer_torchs_nccl()
        tried = []
        for candidate in _candidates():
            try:
                lib = ctypes.CDLL(candidate)
            except OSError as e:
                tried.append(f"{candidate}: {e}")
                continue
            for name, (restype, argtypes) in _PROTOTYPES.items():
                fn = getattr(lib, name)
                fn.restype = restype
                fn.argtypes = argtypes
            _lib, _path = lib, _resolved_path(lib, candidate)
            return lib
        raise errors.LibraryNotFound(
            "ncclpool: cannot load libncclpool.so; build it (scripts/run.sh) or set NCCLPOOL_LIBRARY. Tried:\n  "
            + "\n  ".join(tried))


def _resolved_path(lib: ctypes.CDLL, fallback: str) -> str:
    """The file the library was loaded from (torch's pluggable allocator needs a path)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                if "libncclpool.so" in line:
                    return line.split(None, 5)[-1].strip()
    except OSError:
        pass
    return os.path.abspath(fallback) if os.path.exists(fallback) else fallback


def library_path() -> str:
    library()
    assert _path is not None
    return _path


def call(name: str, *args) -> None:
    """Calls a status-returning function; raises the matching ncclpool error on failure."""
    status = getattr(library(), name)(*args)
    if status != 0:
        raise_last(status)


def raise_last(status: int | None = None):
    lib = library()
    if status is None:
        status = lib.ncclpool_last_status()
    message = (lib.ncclpool_last_error() or b"").decode(errors="replace")
    raise errors.from_status(status, message)
