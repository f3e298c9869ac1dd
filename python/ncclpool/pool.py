"""Pool: a memory pool on one device (or the simulator) over the C ABI: allocation, reserve, trim,
scopes and agreement points, communicators attached to it, statistics."""
from __future__ import annotations

import contextlib
import ctypes
import json
from ctypes import byref, c_int, c_size_t, c_void_p
from typing import TYPE_CHECKING

from ._arguments import (_CHECK_NAMES, _KIND_NAMES, _SOURCE_NAMES, REGISTRATIONS, SOURCES, _address, _check_level, _collective, _int,
                         _kind, _size, _stream, _text)
from ._capi import PoolOptions, call, library, raise_last, read_stats
from .communicator import Communicator
from .errors import InvalidArgument, InvalidState
from .report import memory_summary

if TYPE_CHECKING:
    from .sim import SimGroup


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
        agreed_settings: text every rank must have alike (a kind, buffer checks, debug modes...). Set,
            every attach of the pool is collective, a local one included: an attach agreement compares
            the kind and a digest of the text, and ranks whose kind or settings differ all raise
            AgreementError there (docs/registry.md, "Lockstep"). None or '': a local attach is local.

    Attributes (as the library resolved them): ``name``, ``device``, ``source``, ``registration``,
    ``growth_chunk``, ``min_segment``, ``alignment``, ``deterministic``, ``check_level``,
    ``agreed_settings``, ``source_description`` (e.g. 'sim device 0 (host memory)').

    Raises:
        InvalidArgument: an unknown source, registration or check mode; a size that is negative, not an
            int or >= 2**64; a device that is no int >= 0; a name that is no str.
        Unsupported: the source is not available here (no GPU for 'cuda'/'vmm', no CUDA in the build).
        BackendError: the CUDA driver failed.
        ncclpool.errors.LibraryNotFound: libncclpool could not be loaded.
    """

    def __init__(self, device: int = 0, source: str = "auto", registration: str = "local", *, growth_chunk: int = 0,
                 alignment: int = 0, max_reserved: int = 0, deterministic: bool | None = None,
                 name: str = "ncclpool", sim_capacity: int = 0, check=None, min_segment: int = 0,
                 agreed_settings: str | None = None):
        if source not in SOURCES:
            raise InvalidArgument(f"source {source!r} is not one of {sorted(SOURCES)}")
        if registration not in _KIND_NAMES.values():
            raise InvalidArgument(f"registration {registration!r} is not 'local', 'symmetric' or 'auto'")
        lib = library()
        options = PoolOptions()
        lib.ncclpool_pool_options_init(byref(options))
        options.name = _text(name, "name")
        options.device = _int(device, "device", 0)
        options.source = SOURCES[source]
        options.default_registration = REGISTRATIONS[registration]
        options.growth_chunk = _size(growth_chunk, "growth_chunk")
        options.alignment = _size(alignment, "alignment")
        options.max_reserved = _size(max_reserved, "max_reserved")
        options.deterministic = -1 if deterministic is None else int(bool(deterministic))
        options.sim_capacity = _size(sim_capacity, "sim_capacity")
        options.check = _check_level(check)
        options.min_segment = _size(min_segment, "min_segment")
        options.agreed_settings = agreed_settings.encode() if agreed_settings else None
        handle = c_void_p()
        call("ncclpool_pool_create", byref(options), byref(handle))
        self._handle = handle
        self._comms: list[Communicator] = []
        resolved = PoolOptions()
        resolved.struct_size = ctypes.sizeof(resolved)
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
        self.agreed_settings = resolved.agreed_settings.decode() if resolved.agreed_settings else None
        self.source_description = lib.ncclpool_pool_source_description(handle).decode()

    # -- lifetime --
    @property
    def handle(self) -> c_void_p:
        """The C ABI's ``ncclpool_pool_t`` handle (for ctypes calls of your own). Raises InvalidState
        once the pool is closed."""
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
        """Whether :meth:`close` destroyed the pool."""
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
        ('all_gather', 'reduce_scatter', 'all_reduce'): what the buffer is for, which an auto pool routes by.

        Args:
            size: bytes (an int, 0 <= size < 2**64).
            stream: a CUDA stream (a torch stream, or its int handle; None or 0: the legacy default stream;
                the simulator takes any int as an id).
            collective: None, or the collective the buffer serves.

        Returns:
            int: the block's device address (aligned to the pool's ``alignment``).

        Raises:
            InvalidArgument: a bad size, stream or collective. SizeTooLarge: more than the device or
            ``max_reserved``. OutOfMemory: nothing left even after releasing empty segments.
            InvalidState: the pool is closed. BackendError: the driver failed.
        """
        ptr = c_void_p()
        if collective is None:
            call("ncclpool_alloc", self.handle, _size(size, "size"), _stream(stream), byref(ptr))
        else:
            call("ncclpool_alloc_for", self.handle, _size(size, "size"), _stream(stream), _collective(collective), byref(ptr))
        return ptr.value

    def free(self, ptr: int, stream=None) -> None:
        """Frees a block. `stream`: where it was last used; None = the stream it was allocated on.
        `ptr` must be an address alloc returned: None, 0 or anything but an int is InvalidArgument.

        Raises:
            InvalidArgument: ptr is not a non-zero int. DoubleFree: the block is free already.
            ForeignPointer: not memory of this pool. InvalidPointer: inside the pool, not a live block's start.
        """
        address = _address(ptr, "free: ptr")
        if stream is None:
            call("ncclpool_free_on_alloc_stream", self.handle, address)
        else:
            call("ncclpool_free", self.handle, address, _stream(stream))

    def publish_frees(self, stream=0) -> None:
        """Makes the blocks freed on `stream` so far reusable by other streams now (records an event
        on it). The pool does this by itself at later frees; call it after a stream's last free,
        before the stream is destroyed (docs/pool.md, "Deferred publication")."""
        call("ncclpool_publish_frees", self.handle, _stream(stream))

    def reserve(self, size: int) -> None:
        """Grows the pool now so that at least `size` bytes are reserved (nothing when it has them).

        Raises:
            InvalidArgument: a bad size. SizeTooLarge / OutOfMemory: the device or ``max_reserved`` has
            no room. InvalidState: the pool is closed.
        """
        call("ncclpool_reserve", self.handle, _size(size, "size"))

    def trim(self) -> int:
        """Releases empty segments (collective over symmetric communicators with windows: every rank
        calls it at the same point); returns the bytes released.

        Raises:
            AgreementError: the ranks' trims differ, or a rank voted no (a window is released on every
                rank or on none). InvalidState: the pool is closed.
        """
        released = c_size_t()
        call("ncclpool_trim", self.handle, byref(released))
        return released.value

    def check(self) -> None:
        """Checks every invariant of the pool and its registrations. Raises InvariantViolation (a bug
        of ncclpool's: please report it with the message)."""
        call("ncclpool_check", self.handle)

    # -- communicators --
    def attach_nccl(self, nccl_comm: int, kind: str | None = None) -> "Communicator":
        """Attaches a caller-owned ncclComm_t (an int address). Symmetric attach is collective.
        InvalidArgument on a simulator pool and for an address that is 0, negative, past 2**64 - 1 or not
        aligned to 8 bytes; any other int that is not a live ncclComm_t of the process's NCCL is undefined
        behaviour (a communicator pointer cannot be validated).

        Args:
            nccl_comm: the ``ncclComm_t`` as an int (torch: ``backend._comm_ptr()``).
            kind: 'local', 'symmetric', 'auto' or None (the pool's ``registration``).

        Returns:
            Communicator: the attachment (the pool owns it: detach or forget it before the communicator goes).

        Raises:
            InvalidArgument: see above, or an unknown kind. Unsupported: no NCCL, or windows asked of an
            NCCL without them. AgreementError: a collective attach whose ranks differ (kind, settings,
            order, symmetric-kernel decision), on every rank. RegistrationError: NCCL refused a
            registration (nothing stays registered).
        """
        address = _address(nccl_comm, "nccl_comm")
        out = c_void_p()
        call("ncclpool_attach_nccl", self.handle, address, _kind(kind), byref(out))
        return self._adopt(out, f"nccl comm {nccl_comm:#x}")

    def attach_sim(self, group: "SimGroup", rank: int, kind: str | None = None) -> "Communicator":
        """Attaches rank `rank` of a simulated group (each rank from its own thread; a symmetric attach
        is collective over the group, as with NCCL).

        Returns:
            Communicator: the attachment.

        Raises:
            InvalidArgument: group is no SimGroup, rank no int in 0..size-1, an unknown kind.
            AgreementError: the ranks' attaches differ (or one never came within the group's timeout).
        """
        from .sim import SimGroup

        if not isinstance(group, SimGroup):
            raise InvalidArgument(f"attach_sim: group must be a SimGroup, not {type(group).__name__}")
        rank = _int(rank, "attach_sim: rank")
        out = c_void_p()
        call("ncclpool_attach_sim", self.handle, group.handle, rank, _kind(kind), byref(out))
        return self._adopt(out, f"sim group '{group.name}' rank {rank}")

    def _adopt(self, handle: c_void_p, label: str) -> "Communicator":
        comm = Communicator(self, handle, label)
        self._comms.append(comm)
        return comm

    @property
    def communicators(self) -> list["Communicator"]:
        """The communicators attached to the pool (a copy of the list), in attach order."""
        return list(self._comms)

    def commit(self) -> None:
        """An agreement point: registers pending windows after agreement across ranks. Collective over
        every symmetric communicator, on every rank, pending or not.

        Raises:
            AgreementError: the ranks' pending windows differ, or a rank voted no (its error named), on
                every rank; nothing is registered then.
            RegistrationError: NCCL refused a window (rolled back: nothing half-registered).
        """
        call("ncclpool_commit", self.handle)

    def poll(self) -> None:
        """Raises AgreementError for an earlier agreement point found to have differed (never waits;
        reported once: otherwise this rank votes no at its next agreement point, where every rank fails)."""
        call("ncclpool_poll", self.handle)

    @property
    def pending(self) -> int:
        """How many registrations (segment x communicator) wait for the next agreement point."""
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
            if failed:  # no scope end here, but the failure is still this rank's "no" at the next agreement point
                self.vote_no("a scope left without a scope end ended with an error on this rank")
            call("ncclpool_scope_leave", self.handle)
        else:
            call("ncclpool_scope_end_after_error" if failed else "ncclpool_scope_end", self.handle)

    def scope_end_agrees(self) -> bool:
        """Whether this pool's next scope end is an agreement point (collective): scheduled by the
        registry and a communicator with windows attached. Layers ask it to prepare for the step
        (ncclpool.sglang drains the stream first) instead of keeping a copy of the schedule."""
        out = c_int()
        call("ncclpool_scope_end_agrees", self.handle, byref(out))
        return bool(out.value)

    def vote_no(self, why: str) -> None:
        """Records a failure found on this rank alone as this rank's "no" at the pool's next collective
        step (a collective attach, a commit or scheduled scope end with windows, a symmetric detach, a
        trim with windows, an auto pool's routes agreement). That step takes it: this rank still joins,
        nothing is registered or released anywhere, the other ranks raise AgreementError ("voted no")
        and this rank InvalidState naming `why`. The first failure is kept until a step takes it.
        Never collective, never waits."""
        call("ncclpool_vote_no", self.handle, str(why).encode())

    def _commit_after_error(self) -> None:
        """commit() on an error path of this rank: joins the agreement voting no (never raises its error)."""
        call("ncclpool_commit_after_error", self.handle)

    # -- statistics --
    def stats(self) -> dict:
        """The pool's counters (the C ABI's ``ncclpool_pool_stats_t`` as a dict: ``allocated_bytes``,
        ``reserved_bytes``, ``peak_*``, ``segment_count``, ``oom_count``, ``largest_fresh_block``, ...;
        ``ncclpool._capi.stats_struct("pool").docs`` says what each field means)."""
        return read_stats("pool", self.handle)

    def stats_json(self) -> dict:
        """Pool counters plus one entry per attached communicator: the C ABI's
        ``ncclpool_pool_stats_json`` parsed. Keys include ``name``, ``device``, ``source``, ``stats``,
        ``breakdown`` (where the reserved bytes are), ``communicators`` (name, kind, registered
        segments and bytes, registration time, pending, errors), ``routes`` (auto pools),
        ``scope_ends``, ``symmetric_kernels`` and ``symmetric_ctas``."""
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
        """A text report of this pool (:func:`ncclpool.memory_summary`): what it holds and why, its
        routes, scope schedule, symmetric-kernel decision and one row per communicator."""
        return memory_summary(self)
