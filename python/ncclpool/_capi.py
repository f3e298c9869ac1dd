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
from ctypes import POINTER, byref, c_char, c_char_p, c_double, c_int, c_size_t, c_uint64, c_void_p

from . import _arguments, _environment, errors

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
        ("agreed_settings", c_char_p),
    ]


# ncclpool_features_t's members after struct_size, in order, the one list here: (name, kind), kind
# "flag" (an int read as a bool), "int", "u64" (uint64_t), or a text's capacity in bytes. Features and
# features() are made from it.
FEATURE_FIELDS = [
    ("built_with_cuda", "flag"), ("cuda_available", "flag"), ("cuda_device_count", "int"), ("nccl_available", "flag"),
    ("nccl_version", "int"), ("nccl_windows", "flag"), ("nccl_reused_loaded", "flag"), ("nccl_library", 512), ("why_not", 512),
    ("symmetric_ctas_decided", "flag"), ("symmetric_ctas", "int"), ("symmetric_ctas_source", 256),
    ("nccl_other_copies", "int"), ("nccl_other_version", "int"), ("nccl_other_library", 512),
    ("symmetric_kernels_decided", "flag"), ("symmetric_kernels_enabled", "flag"), ("symmetric_kernels_hazard", "flag"),
    ("symmetric_kernels_why", 512), ("symmetric_kernels_decision", 16), ("symmetric_fence_declared", "flag"),
    ("symmetric_fence_kind", 16), ("symmetric_fence_calls", "u64"), ("symmetric_fences_launched", "u64"),
    ("symmetric_fences_skipped_in_capture", "u64"), ("symmetric_ctas_nccl_preferred", "flag"),
]
_FEATURE_CTYPES = {"flag": c_int, "int": c_int, "u64": c_uint64}


class Features(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t)] + [(name, _FEATURE_CTYPES[kind] if kind in _FEATURE_CTYPES else c_char * kind)
                                              for name, kind in FEATURE_FIELDS]


def features_dict(f: Features) -> dict:
    """A filled Features as Python values: flags as bool, texts as str."""
    out = {}
    for name, kind in FEATURE_FIELDS:
        value = getattr(f, name)
        out[name] = bool(value) if kind == "flag" else value if kind in ("int", "u64") else value.decode(errors="replace")
    return out


class _StatsField(ctypes.Structure):
    """ncclpool_stats_field_t: one member of a stats struct, as the loaded library has it."""
    _fields_ = [("name", c_char_p), ("type", c_int), ("offset", c_size_t), ("doc", c_char_p)]


# ncclpool_field_type_t -> its ctypes type (REGISTRATION is an int holding an ncclpool_registration_t).
_FIELD_CTYPES = {0: c_size_t, 1: c_uint64, 2: c_int, 3: c_double, 4: c_int}
# The stats structs: name -> (ncclpool_stats_kind_t, the function that fills one).
_STATS = {"pool": (0, "ncclpool_pool_stats"), "comm": (1, "ncclpool_comm_stats")}
_stats_structs: dict[str, type] = {}


def _build_stats_struct(lib: ctypes.CDLL, name: str) -> type:
    """The ctypes Structure of stats struct `name`, made from the library's own table of its fields
    (ncclpool_stats_fields, made from include/ncclpool/stats_fields.h): no field list is written here."""
    kind, function = _STATS[name]
    table = POINTER(_StatsField)()
    count = c_size_t()
    status = lib.ncclpool_stats_fields(kind, byref(table), byref(count))
    if status != 0:
        _raise(lib, status)
    rows = [(table[i].name.decode(), table[i].type, table[i].offset, table[i].doc.decode()) for i in range(count.value)]
    unknown = [(field, type_) for field, type_, _, _ in rows if type_ not in _FIELD_CTYPES]
    if unknown:
        raise errors.InternalError(f"ncclpool: {function}'s fields {unknown} have types this package does not know: "
                                   "the library is newer than the package")
    struct = type(f"{name.capitalize()}Stats", (ctypes.Structure,), {
        "_fields_": [(field, _FIELD_CTYPES[type_]) for field, type_, _, _ in rows],
        "__doc__": f"The struct {function} fills, as the loaded library has it (docs: what each field says)."})
    struct.docs = {field: doc for field, _, _, doc in rows}
    moved = [(field, offset, getattr(struct, field).offset) for field, _, offset, _ in rows if getattr(struct, field).offset != offset]
    if moved:
        raise errors.InternalError(f"ncclpool: {function}'s fields are at other offsets in the library than in ctypes "
                                   f"(field, library, ctypes): {moved}")
    return struct


def stats_struct(name: str) -> type:
    """The ctypes Structure of the stats struct `name` ("pool": ncclpool_pool_stats_t, "comm":
    ncclpool_comm_stats_t) as the loaded library has it; ``.docs`` says what each field is."""
    library()
    return _stats_structs[name]


def read_stats(name: str, handle) -> dict:
    """Fills the stats struct `name` of a pool or communicator handle: a dict of its fields (without
    struct_size)."""
    out = stats_struct(name)()
    out.struct_size = ctypes.sizeof(out)
    call(_STATS[name][1], handle, byref(out))
    fields = _struct_to_dict(out)
    del fields["struct_size"]
    return fields


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
    "ncclpool_value_name": (c_char_p, [c_int, c_int]),
    "ncclpool_get_features": (_Status, [POINTER(Features)]),
    "ncclpool_copy_engine_vote": (_Status, [c_int, c_int, c_int, POINTER(c_int), c_char_p, c_size_t]),
    "ncclpool_node_id": (_Status, [POINTER(c_uint64)]),
    "ncclpool_prefer_symmetric_fence": (_Status, []),
    "ncclpool_symmetric_fence": (_Status, [_P, POINTER(c_int)]),
    "ncclpool_prefer_nccl_symmetric_ctas": (_Status, []),
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
    "ncclpool_pool_stats_json": (_Status, [_P, c_char_p, c_size_t, POINTER(c_size_t)]),
    "ncclpool_stats_fields": (_Status, [c_int, POINTER(POINTER(_StatsField)), POINTER(c_size_t)]),
    "ncclpool_attach_nccl": (_Status, [_P, _P, c_int, POINTER(_P)]),
    "ncclpool_detach": (_Status, [_P]),
    "ncclpool_forget": (_Status, [_P]),
    "ncclpool_commit": (_Status, [_P]),
    "ncclpool_commit_after_error": (_Status, [_P]),
    "ncclpool_vote_no": (_Status, [_P, c_char_p]),
    "ncclpool_pending": (_Status, [_P, POINTER(c_size_t)]),
    "ncclpool_poll": (_Status, [_P]),
    "ncclpool_verify_buffers": (_Status, [_P, POINTER(_P), c_size_t]),
    "ncclpool_comm_handle_of": (_Status, [_P, _P, POINTER(_P)]),
    "ncclpool_comm_window_of": (_Status, [_P, _P, POINTER(_P)]),
    "ncclpool_scope_begin": (_Status, [_P]),
    "ncclpool_scope_begin_for": (_Status, [_P, c_int]),
    "ncclpool_scope_end": (_Status, [_P]),
    "ncclpool_scope_end_after_error": (_Status, [_P]),
    "ncclpool_scope_leave": (_Status, [_P]),
    "ncclpool_current_pool": (_P, []),
    "ncclpool_scope_end_agrees": (_Status, [_P, POINTER(c_int)]),
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
    env = _environment.library_path()
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
    if _environment.nccl_library():
        return None
    try:
        spec = importlib.util.find_spec("nvidia.nccl")
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(folder, "lib", "libnccl.so.2")
        if os.path.exists(path):
            _environment.set_nccl_library(path)
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
            _arguments.check_names(lib.ncclpool_value_name)  # the name tables, as the library spells its enums
            for name, (_, function) in _STATS.items():  # the stats calls take structs made from the library's tables
                _stats_structs[name] = _build_stats_struct(lib, name)
                getattr(lib, function).restype = _Status
                getattr(lib, function).argtypes = [_P, POINTER(_stats_structs[name])]
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
    """The path of the loaded libncclpool (loads it first: $NCCLPOOL_LIBRARY, next to the package, the
    checkout's build/default or build/gpu, the loader's path). Raises ncclpool.errors.LibraryNotFound
    when none loads."""
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
    _raise(lib, lib.ncclpool_last_status() if status is None else status)


def _raise(lib: ctypes.CDLL, status: int):
    message = (lib.ncclpool_last_error() or b"").decode(errors="replace")
    raise errors.from_status(status, message)
