"""ncclpool: one GPU memory pool whose segments are registered with NCCL for every communicator.

Pure Python over the C ABI (ctypes). The pieces:

* :class:`Pool` - a pool on one device (or the simulator): allocate/free, reserve, trim, statistics,
  :meth:`Pool.scope` (routes this thread's PyTorch allocations to the pool, commits windows at its
  scheduled exits).
* :class:`Communicator` - a communicator attached to a pool (``Pool.attach_nccl`` / ``attach_sim``).
* :class:`SimGroup` - simulated ranks (threads of this process) for tests without GPUs.
* :func:`features` - what this machine supports (CUDA, NCCL version, symmetric windows).
* :mod:`ncclpool.torch` - the PyTorch layer (Megatron-Core ``nccl_allocator`` compatible API).
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
from ctypes import byref, c_size_t, c_uint64, c_void_p

from . import errors
from ._capi import CommStats, Features, PoolOptions, PoolStats, _struct_to_dict, call, library, library_path, raise_last
from .errors import (AgreementError, BackendError, DoubleFree, Error, ForeignPointer, InvalidArgument,
                     InvalidPointer, InvalidState, OutOfMemory, RegistrationError, SizeTooLarge, Unsupported)
from .report import format_bytes, memory_summary

__all__ = [
    "Pool", "Communicator", "SimGroup", "features", "version", "last_error", "library_path", "memory_summary",
    "format_bytes", "errors", "Error", "InvalidArgument", "SizeTooLarge", "OutOfMemory", "DoubleFree",
    "ForeignPointer", "InvalidPointer", "BackendError", "Unsupported", "InvalidState", "RegistrationError",
    "AgreementError", "SOURCES", "REGISTRATIONS",
]

SOURCES = {"auto": 0, "sim": 1, "cuda": 2, "vmm": 3, "vmm_host_numa": 4, "nccl": 5}
REGISTRATIONS = {None: -1, "default": -1, "local": 0, "symmetric": 1, "auto": 2}
_SOURCE_NAMES = {v: k for k, v in SOURCES.items()}
_KIND_NAMES = {0: "local", 1: "symmetric", 2: "auto"}
COLLECTIVES = {None: 0, "any": 0, "all_gather": 1, "reduce_scatter": 2, "all_reduce": 3}


def _collective(collective) -> int:
    if collective not in COLLECTIVES:
        raise InvalidArgument(f"collective {collective!r} is not one of 'all_gather', 'reduce_scatter', 'all_reduce' or None")
    return COLLECTIVES[collective]


def version() -> str:
    """Version of the loaded libncclpool, e.g. '0.1.0'."""
    return library().ncclpool_version_string().decode()


def last_error() -> str:
    """Message of this thread's last failed ncclpool call ('' if none)."""
    return (library().ncclpool_last_error() or b"").decode(errors="replace")


def features() -> dict:
    """What ncclpool can use here: CUDA devices, NCCL library/version, symmetric-window support, and
    the CTA count of NCCL's symmetric kernels (``symmetric_ctas``, 0 = NCCL's choice; fixed at the
    process's first symmetric attach: ``symmetric_ctas_decided``; ``symmetric_ctas_source`` says why).
    ``nccl_other_copies``: how many other NCCL libraries are loaded in this process besides
    ``nccl_library`` (normally 0; the first is ``nccl_other_library``, version ``nccl_other_version``):
    looked for at each call. ``symmetric_kernels_enabled``: windows carry NCCL's symmetric flag, so its
    symmetric kernels run on them; off by default on NCCL 2.28.0-2.30.6 on Hopper and newer
    (``symmetric_kernels_hazard``: those kernels can read their input before the kernel before them on
    the stream wrote it); ``symmetric_kernels_why`` says why, ``NCCLPOOL_SYMMETRIC_KERNELS=on|off|auto``
    decides (docs/python.md, "NCCL versions")."""
    f = Features()
    f.struct_size = ctypes.sizeof(Features)
    call("ncclpool_get_features", byref(f))
    out = _struct_to_dict(f)
    del out["struct_size"]
    for key in ("built_with_cuda", "cuda_available", "nccl_available", "nccl_windows", "nccl_reused_loaded", "symmetric_ctas_decided",
                "symmetric_kernels_decided", "symmetric_kernels_enabled", "symmetric_kernels_hazard"):
        out[key] = bool(out[key])
    out["nccl_library"] = f.nccl_library.decode(errors="replace")
    out["why_not"] = f.why_not.decode(errors="replace")
    out["symmetric_ctas_source"] = f.symmetric_ctas_source.decode(errors="replace")
    out["nccl_other_library"] = f.nccl_other_library.decode(errors="replace")
    out["symmetric_kernels_why"] = f.symmetric_kernels_why.decode(errors="replace")
    out["library"] = library_path()
    return out


def _kind(kind) -> int:
    if kind not in REGISTRATIONS:
        raise InvalidArgument(f"registration kind {kind!r} is not one of 'local', 'symmetric', 'auto' or None (the pool's default)")
    return REGISTRATIONS[kind]


CHECK_LEVELS = {None: -1, "off": 0, "layout": 1, "collectives": 2, 0: 0, 1: 1, 2: 2}
_CHECK_NAMES = {0: "off", 1: "layout", 2: "collectives"}
_SIZE_MAX = 2**64 - 1


def _size(value, what: str) -> c_size_t:
    """A size_t from a Python int, refusing what ctypes would wrap silently (2**64 + 1024 -> 1024)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} must be an int, not {type(value).__name__}")
    if value < 0 or value > _SIZE_MAX:
        raise (SizeTooLarge if value > _SIZE_MAX else InvalidArgument)(
            f"{what} = {value} is outside 0 .. 2**64 - 1")
    return c_size_t(value)


def _check_level(check) -> int:
    if check not in CHECK_LEVELS:
        raise InvalidArgument(f"check {check!r} is not one of None (NCCLPOOL_CHECK), 'off', 'layout', 'collectives', 0, 1, 2")
    return CHECK_LEVELS[check]


def _stream(stream) -> c_void_p:
    """Accepts an int handle, None (default stream) or anything with ``cuda_stream`` (torch.cuda.Stream).
    Anything else, and a handle outside 0 .. 2**64 - 1 (which ctypes would wrap), is InvalidArgument."""
    if stream is None:
        return c_void_p(0)
    handle = getattr(stream, "cuda_stream", stream)
    if isinstance(handle, bool) or not isinstance(handle, int):
        raise InvalidArgument(f"stream {stream!r} is not a stream: give an int handle (cudaStream_t), None (the default stream) "
                              "or an object with a cuda_stream attribute (torch.cuda.Stream)")
    if handle < 0 or handle > _SIZE_MAX:
        raise InvalidArgument(f"stream handle {handle} is outside 0 .. 2**64 - 1 (a cudaStream_t; 0: the default stream)")
    return c_void_p(handle)


def _bytes_from_env(variable: str) -> int:
    """$variable: bytes (an integer from 0 to 2**64 - 1; unset, empty or 0: the pool's default).
    Anything else is InvalidArgument (`ncclpool info` reports it too)."""
    value = os.environ.get(variable, "")
    if value == "":
        return 0
    if not (value.isascii() and value.isdigit()) or int(value) > _SIZE_MAX:
        raise InvalidArgument(f"{variable}={value!r} is not a number of bytes (an integer from 0 to 2**64 - 1; "
                              "0 or unset: the pool's default)")
    return int(value)


def _growth_chunk_from_env() -> int:
    """$NCCLPOOL_GROWTH_CHUNK (see _bytes_from_env)."""
    return _bytes_from_env("NCCLPOOL_GROWTH_CHUNK")


def _min_segment_from_env() -> int:
    """$NCCLPOOL_MIN_SEGMENT (see _bytes_from_env)."""
    return _bytes_from_env("NCCLPOOL_MIN_SEGMENT")


class Pool:
    """A pool of memory on one device, optionally registered with NCCL communicators.

    Args:
        device: CUDA device ordinal (the simulated device id with ``source='sim'``).
        source: 'auto' (vmm with a GPU, else sim), 'sim', 'cuda', 'vmm', 'vmm_host_numa', 'nccl'.
        registration: default kind for :meth:`attach_nccl`: 'local', 'symmetric' or 'auto'. A symmetric pool
            is deterministic and grows in 1 GiB chunks unless told otherwise. An 'auto' pool is made of
            parts registered none / local / symmetric and serves each request from the part its size
            class routes to: the profile measured for the first attached communicator's machine
            (``ncclpool tune``), else built-in routes (docs/pool.md, "Auto pools"); :meth:`routes`.
        growth_chunk: within a segment budget (64 plus one per growth_chunk of reserve) every segment
            is its request's own size (at least ``min_segment``); past it chunks that start at
            1/16 of this and grow with the pool up to it (0: 2 MiB, or 1 GiB for symmetric pools;
            auto pools: 1 GiB for their symmetric part, 2 MiB for the others, and ``growth_chunk``
            then reads 0) (docs/pool.md).
        min_segment: the smallest segment growth makes (0: growth_chunk / 128). Larger means fewer
            segments, so fewer windows, for more reserve: 1 GiB puts 64 torch segments of 32 MiB in
            2 windows per group instead of 64 (docs/benchmarks/growth.md). Auto pools: their
            symmetric part only.
        alignment: block alignment (0: 512 bytes, torch's block size).
        max_reserved: cap on reserved bytes (0: none).
        deterministic: None (auto), True or False.
        name: used in every message and report about the pool. Symmetric pools are matched across
            ranks by name and attach order: give a pool the same name on every rank.
        sim_capacity: simulated device memory for 'sim' (0: 64 GiB).
        check: check mode (docs/registry.md): None ($NCCLPOOL_CHECK), 'off', 'layout', 'collectives'.
    """

    def __init__(self, device: int = 0, source: str = "auto", registration: str = "local", *, growth_chunk: int = 0,
                 alignment: int = 0, max_reserved: int = 0, deterministic: bool | None = None,
                 name: str = "ncclpool", sim_capacity: int = 0, check=None, min_segment: int = 0):
        if source not in SOURCES:
            raise InvalidArgument(f"source {source!r} is not one of {sorted(SOURCES)}")
        if registration not in ("local", "symmetric", "auto"):
            raise InvalidArgument(f"registration {registration!r} is not 'local', 'symmetric' or 'auto'")
        lib = library()
        options = PoolOptions()
        lib.ncclpool_pool_options_init(byref(options))
        options.name = name.encode()
        options.device = device
        options.source = SOURCES[source]
        options.default_registration = REGISTRATIONS[registration]
        options.growth_chunk = _size(growth_chunk, "growth_chunk")
        options.alignment = _size(alignment, "alignment")
        options.max_reserved = _size(max_reserved, "max_reserved")
        options.deterministic = -1 if deterministic is None else int(bool(deterministic))
        options.sim_capacity = _size(sim_capacity, "sim_capacity")
        options.check = _check_level(check)
        options.min_segment = _size(min_segment, "min_segment")
        handle = c_void_p()
        call("ncclpool_pool_create", byref(options), byref(handle))
        self._handle = handle
        self._comms: list[Communicator] = []
        resolved = PoolOptions()
        call("ncclpool_pool_get_options", handle, byref(resolved))
        self.name = name
        self.device = resolved.device
        self.source = _SOURCE_NAMES[resolved.source]
        self.registration = _KIND_NAMES[resolved.default_registration]
        self.growth_chunk = resolved.growth_chunk
        self.min_segment = resolved.min_segment  # 0: growth_chunk / 128
        self.alignment = resolved.alignment
        self.deterministic = bool(resolved.deterministic)
        self.check_level = _CHECK_NAMES[resolved.check]
        self.source_description = lib.ncclpool_pool_source_description(handle).decode()

    # -- lifetime --
    @property
    def handle(self) -> c_void_p:
        if self._handle is None:
            raise InvalidState(f"pool '{self.name}' is closed")
        return self._handle

    def close(self) -> None:
        """Destroys the pool. Refused (InvalidState) while blocks are live, a scope of the pool is open,
        or a symmetric communicator is attached."""
        if self._handle is not None:
            call("ncclpool_pool_destroy", self._handle)
            self._handle = None
            for comm in self._comms:
                comm._handle = None
            self._comms.clear()

    @property
    def closed(self) -> bool:
        return self._handle is None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        state = "closed" if self.closed else self.source_description
        return f"<ncclpool.Pool '{self.name}' device {self.device}: {state}>"

    # -- memory --
    def alloc(self, size: int, stream=None, collective: str | None = None) -> int:
        """Allocates `size` bytes ordered on `stream`; returns the address. `collective`
        ('all_gather', 'reduce_scatter', 'all_reduce'): what the buffer is for, which an auto pool routes by."""
        ptr = c_void_p()
        if collective is None:
            call("ncclpool_alloc", self.handle, _size(size, "size"), _stream(stream), byref(ptr))
        else:
            call("ncclpool_alloc_for", self.handle, _size(size, "size"), _stream(stream), _collective(collective), byref(ptr))
        return ptr.value

    def free(self, ptr: int, stream=None) -> None:
        """Frees a block. `stream`: where it was last used; None = the stream it was allocated on."""
        if stream is None:
            call("ncclpool_free_on_alloc_stream", self.handle, c_void_p(ptr))
        else:
            call("ncclpool_free", self.handle, c_void_p(ptr), _stream(stream))

    def publish_frees(self, stream=0) -> None:
        """Makes the blocks freed on `stream` so far reusable by other streams now (records an event
        on it). The pool does this by itself at later frees; call it after a stream's last free,
        before the stream is destroyed (docs/pool.md, "Deferred publication")."""
        call("ncclpool_publish_frees", self.handle, _stream(stream))

    def reserve(self, size: int) -> None:
        """Grows the pool now so that at least `size` bytes are reserved."""
        call("ncclpool_reserve", self.handle, _size(size, "size"))

    def trim(self) -> int:
        """Releases empty segments (collective over symmetric communicators); returns bytes released."""
        released = c_size_t()
        call("ncclpool_trim", self.handle, byref(released))
        return released.value

    def check(self) -> None:
        """Checks every invariant of the pool and its registrations (raises InvariantViolation)."""
        call("ncclpool_check", self.handle)

    # -- communicators --
    def attach_nccl(self, nccl_comm: int, kind: str | None = None) -> "Communicator":
        """Attaches a caller-owned ncclComm_t (an int address). Symmetric attach is collective."""
        out = c_void_p()
        call("ncclpool_attach_nccl", self.handle, c_void_p(nccl_comm), _kind(kind), byref(out))
        return self._adopt(out, f"nccl comm {nccl_comm:#x}")

    def attach_sim(self, group: "SimGroup", rank: int, kind: str | None = None) -> "Communicator":
        """Attaches rank `rank` of a simulated group."""
        out = c_void_p()
        call("ncclpool_attach_sim", self.handle, group.handle, rank, _kind(kind), byref(out))
        return self._adopt(out, f"sim group '{group.name}' rank {rank}")

    def _adopt(self, handle: c_void_p, label: str) -> "Communicator":
        comm = Communicator(self, handle, label)
        self._comms.append(comm)
        return comm

    @property
    def communicators(self) -> list["Communicator"]:
        return list(self._comms)

    def commit(self) -> None:
        """An agreement point: registers pending windows after agreement across ranks. Collective over
        every symmetric communicator, on every rank, pending or not."""
        call("ncclpool_commit", self.handle)

    def poll(self) -> None:
        """Raises AgreementError for an earlier agreement point found to have differed (never waits;
        reported once: otherwise this rank votes no at its next agreement point, where every rank fails)."""
        call("ncclpool_poll", self.handle)

    @property
    def pending(self) -> int:
        out = c_size_t()
        call("ncclpool_pending", self.handle, byref(out))
        return out.value

    @contextlib.contextmanager
    def scope(self, commit: bool = True, collective: str | None = None):
        """Routes this thread's torch pluggable-allocator requests to this pool. Its exit is a scope end
        (unless ``commit=False``): the first 16 of the pool, then every 16th, commit pending windows
        (collective, the same schedule on every rank; every one in check mode; skipped under CUDA
        graph capture). ``commit()`` commits at once. ``collective``: the allocations are buffers of
        that collective (an auto pool routes them by its profile)."""
        self._scope_begin(collective)
        try:
            yield self
        except BaseException:
            self._scope_finish(commit, failed=True)  # the same scope end as on every rank, voting no
            raise
        self._scope_finish(commit)

    # scope() in two calls, for ncclpool.torch's contexts (a use of one costs microseconds).
    def _scope_begin(self, collective: str | None = None) -> None:
        if collective is None:
            call("ncclpool_scope_begin", self.handle)
        else:
            call("ncclpool_scope_begin_for", self.handle, _collective(collective))

    def _scope_finish(self, commit: bool, failed: bool = False) -> None:
        """commit: a scope end (committing at the scheduled ones); else the scope is only left. failed: an
        error is on its way out of the scope on this rank. The scope end still counts (every rank must
        keep the same schedule) and, at a scheduled one, this rank votes no, so every rank fails there
        together instead of one rank's agreement pairing with another's next collective."""
        if not commit:
            call("ncclpool_scope_leave", self.handle)
        else:
            call("ncclpool_scope_end_after_error" if failed else "ncclpool_scope_end", self.handle)

    def _commit_after_error(self) -> None:
        """commit() on an error path of this rank: joins the agreement voting no (never raises its error)."""
        call("ncclpool_commit_after_error", self.handle)

    # -- statistics --
    def stats(self) -> dict:
        s = PoolStats()
        call("ncclpool_pool_stats", self.handle, byref(s))
        return _struct_to_dict(s)

    def stats_json(self) -> dict:
        """Pool counters plus one entry per attached communicator."""
        needed = c_size_t()
        status = 0
        for _ in range(3):  # the JSON can grow between the size query and the copy (a new attach)
            call("ncclpool_pool_stats_json", self.handle, None, c_size_t(0), byref(needed))
            buf = ctypes.create_string_buffer(needed.value + 1024)
            status = library().ncclpool_pool_stats_json(self.handle, buf, c_size_t(len(buf)), None)
            if status == 0:
                return json.loads(buf.value.decode())
        raise_last(status)

    def routes(self) -> dict | None:
        """An auto pool's routes (None for other pools): ``description`` ('symmetric at every size'),
        ``source`` (built in or which profile, and why a profile was not used), ``classes`` (min_bytes,
        placement), ``fixed`` (by the first allocation, reserve or attach), and each part's counters."""
        return self.stats_json().get("routes")

    def memory_summary(self) -> str:
        return memory_summary(self)


class Communicator:
    """A communicator attached to a pool. Detach (collective for symmetric) or forget to remove it."""

    def __init__(self, pool: Pool, handle: c_void_p, label: str):
        self.pool = pool
        self._handle = handle
        self.label = label

    @property
    def handle(self) -> c_void_p:
        if self._handle is None:
            raise InvalidState(f"{self.label} is no longer attached to pool '{self.pool.name}'")
        return self._handle

    @property
    def attached(self) -> bool:
        return self._handle is not None

    def _drop(self):
        self._handle = None
        if self in self.pool._comms:
            self.pool._comms.remove(self)

    def detach(self) -> None:
        """Deregisters everything of this communicator (collective for symmetric windows). A refused
        deregistration (RegistrationError) detaches it regardless: the handle is dropped then too."""
        try:
            call("ncclpool_detach", self.handle)
        except errors.RegistrationError:
            self._drop()
            raise
        self._drop()

    def forget(self) -> None:
        """Drops the registrations without calling NCCL: for a destroyed or aborted communicator."""
        call("ncclpool_forget", self.handle)
        self._drop()

    def stats(self) -> dict:
        s = CommStats()
        call("ncclpool_comm_stats", self.handle, byref(s))
        out = _struct_to_dict(s)
        out["kind"] = _KIND_NAMES.get(out["kind"], str(out["kind"]))
        return out

    def verify_buffers(self, *ptrs: int) -> None:
        """Collective: proves that the buffers of one collective sit at the same offset of the same
        symmetric window on every rank (or in none); AgreementError names ranks and offsets."""
        array = (c_void_p * max(1, len(ptrs)))(*ptrs)
        call("ncclpool_verify_buffers", self.handle, array, c_size_t(len(ptrs)))

    def sim_user_collective(self, argument: int = 0) -> None:
        """Simulator only: stands in for an application collective on this communicator."""
        call("ncclpool_sim_user_collective", self.handle, c_uint64(argument))

    def handle_of(self, ptr: int) -> int | None:
        """The window (or local registration handle) covering ptr, None if there is none."""
        out = c_void_p()
        call("ncclpool_comm_handle_of", self.handle, c_void_p(ptr), byref(out))
        return out.value

    def __repr__(self):
        return f"<ncclpool.Communicator {self.label} on pool '{self.pool.name}'{'' if self.attached else ' (detached)'}>"


class SimGroup:
    """Simulated communicator: `size` ranks that are threads of this process (collectives block until
    every rank made its call, or fail after `timeout_ms`). matching='strict' fails mismatched calls on
    every rank; 'nccl' pairs calls by position unchecked, as NCCL does."""

    MATCHING = {"strict": 0, "nccl": 1}

    def __init__(self, name: str, size: int, timeout_ms: int = 5000, matching: str = "strict"):
        if matching not in self.MATCHING:
            raise InvalidArgument(f"matching {matching!r} is not 'strict' or 'nccl'")
        handle = c_void_p()
        call("ncclpool_sim_group_create_matching", name.encode(), size, timeout_ms, self.MATCHING[matching], byref(handle))
        self._handle = handle
        self.name = name
        self.size = size

    @property
    def handle(self) -> c_void_p:
        if self._handle is None:
            raise InvalidState(f"sim group '{self.name}' is closed")
        return self._handle

    def close(self) -> None:
        if self._handle is not None:
            call("ncclpool_sim_group_destroy", self._handle)
            self._handle = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def live_registrations(self) -> int:
        out = c_uint64()
        call("ncclpool_sim_group_live_registrations", self.handle, byref(out))
        return out.value

    OPS = {"register_local": 0, "deregister_local": 1, "register_window": 2, "deregister_window": 3}

    def inject_failure(self, op: str, rank: int = -1, nth: int = 1) -> None:
        """Makes the nth call of `op` on `rank` (-1: every rank) fail."""
        if op not in self.OPS:
            raise InvalidArgument(f"op {op!r} is not one of {sorted(self.OPS)}")
        call("ncclpool_sim_group_inject_failure", self.handle, self.OPS[op], rank, nth)

    def set_symmetric_kernels(self, rank: int, setting: int) -> None:
        """What `rank`'s (-1: every rank's) communicators report as their symmetric kernel setting (the
        CTA count; -1: nothing), compared across ranks at a symmetric attach."""
        call("ncclpool_sim_group_set_symmetric_kernels", self.handle, rank, setting)


def sim_set_capturing(pool: Pool, capturing: bool) -> None:
    """Simulator only: models a CUDA graph capture on the pool's device."""
    call("ncclpool_sim_set_capturing", pool.handle, int(capturing))


def sim_inject_oom(pool: Pool, count: int = 1) -> None:
    """Simulator only: the next `count` segment allocations fail with out of memory."""
    call("ncclpool_sim_inject_oom", pool.handle, count)
