"""PyTorch layer: a drop-in for Megatron-Core's ``megatron.core.nccl_allocator``, backed by ncclpool.

Switching is one import line::

    import ncclpool.torch as nccl_allocator      # was: import megatron.core.nccl_allocator as ...
    nccl_allocator.init()
    pool = nccl_allocator.create_nccl_mem_pool()
    with nccl_allocator.nccl_mem(pool, group=dp_group):
        buf = torch.empty(n, device="cuda")

Same names and meaning as Megatron's, different cost: a group is registered once (its first use),
segments are registered when they appear, symmetric windows at scope exit after the ranks agree,
and nothing is re-registered on later uses. torch's segments (2 MiB, 20 MiB, ...) are carved out of
ncclpool's large chunks (1 GiB for symmetric pools), so a pool needs one window per chunk and group;
a torch segment of at least 64 MiB (and 1/64 of the pool) gets an ncclpool segment of its own.

Every torch MemPool made by :func:`create_nccl_mem_pool` maps to one :class:`ncclpool.Pool`
(:func:`ncclpool_pool`). Allocations are attributed to it by the scope the context managers open in
the calling thread (graph capture included); outside any scope, to the single pool of the device.
"""
from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

import ncclpool as _np
from ncclpool import errors
from ncclpool._capi import library, library_path

__all__ = [
    "init", "create_nccl_mem_pool", "register_mem_pool", "deregister_mem_pool", "forget_group", "nccl_mem",
    "MultiGroupMemPoolAllocator", "MemPoolAllocatorWithoutRegistration", "use_mem_pool", "ncclpool_pool",
    "stats", "memory_summary", "release_mem_pool", "graph", "check_collectives", "PerformanceWarning",
]

_lock = threading.RLock()
_allocator = None  # torch.cuda.memory.CUDAPluggableAllocator over ncclpool_torch_alloc/free
_original_destroy_process_group = None


@dataclass
class _Attachment:
    group: object
    comm_ptr: int
    kind: str
    comm: _np.Communicator
    windows: bool = False  # some of the pool's memory is a window with it (its detach is collective)


@dataclass
class _Binding:
    pool: _np.Pool
    mempool: object
    attachments: dict = field(default_factory=dict)  # comm_ptr -> _Attachment


_bindings: dict = {}  # torch MemPool id -> _Binding

# Megatron-Core's allocator registers at every context exit, and Megatron enters nccl_mem only to
# allocate a new buffer (mostly in the first steps), then never again: at the pool's scheduled scope
# ends alone, the last buffers' windows would wait for a use that never comes. ncclpool.torch.megatron
# .install() sets this: every context exit then commits (one agreement per group, ~10 us, against the
# milliseconds Megatron-Core's allocator spends re-registering there).
_commit_at_every_exit = False
_pools_created = 0     # names pools in creation order (the same on every rank)


def init() -> None:
    """Loads ncclpool and makes the torch pluggable allocator. Idempotent.

    Raises ncclpool.Unsupported when torch has NCCL and another NCCL library is loaded in the process
    besides the one ncclpool uses (a communicator must be used with the library that made it). The
    one library torch and ncclpool share may be newer than the NCCL torch was built with (a
    libnccl.so.2 swapped under nvidia/nccl/lib/ to get a fix): that is allowed; ``ncclpool.features()``
    says which is loaded (``nccl_version``, ``nccl_library``), ``torch.cuda.nccl.version()`` what torch
    was built with."""
    global _allocator
    with _lock:
        if _allocator is not None:
            return
        if not torch.cuda.is_available():
            raise errors.Unsupported("ncclpool.torch needs CUDA: torch.cuda.is_available() is False")
        features = _np.features()
        if not features["nccl_available"]:
            raise errors.Unsupported(f"ncclpool.torch: NCCL unavailable: {features['why_not']}")
        # One NCCL per process, judged on the libraries actually mapped (the C++ loader lists every
        # loaded object that defines ncclGetVersion, by load address: one file, one copy), not on
        # torch.cuda.nccl.version(), which is the version torch was built with. With a single copy
        # loaded, torch's symbols and ncclpool's resolve to it whatever its version.
        others = features.get("nccl_other_copies", 0)
        if others and _torch_nccl_version():
            more = f" and {others - 1} more" if others > 1 else ""
            raise errors.Unsupported(
                f"two NCCL libraries are loaded in this process: ncclpool uses NCCL {features['nccl_version']} from "
                f"{features['nccl_library']}, and NCCL {features['nccl_other_version']} from "
                f"{features['nccl_other_library']}{more} is loaded too; torch's communicators may come from either "
                f"(one NCCL per process). To run torch on another NCCL, replace the libnccl.so.2 that torch loads "
                f"(nvidia/nccl/lib/ in its environment) instead of loading a second one with LD_PRELOAD (docs/python.md)")
        _allocator = torch.cuda.memory.CUDAPluggableAllocator(library_path(), "ncclpool_torch_alloc", "ncclpool_torch_free")
        _install_destroy_hook()


def _torch_nccl_version() -> int:
    """The NCCL version torch was built with (0: torch without NCCL). Not the loaded library's."""
    try:
        v = torch.cuda.nccl.version()
    except Exception:
        return 0
    if isinstance(v, tuple):
        major, minor, patch = (list(v) + [0, 0, 0])[:3]
        return major * 10000 + minor * 100 + patch
    return int(v)


def create_nccl_mem_pool(symmetric: bool | None = None, *, kind: str | None = None, device=None,
                         growth_chunk: int | None = None, source: str = "auto", name: str | None = None, check=None,
                         min_segment: int | None = None):
    """A torch.cuda.MemPool whose segments come from a new ncclpool pool.

    Neither ``symmetric`` nor ``kind`` (the default): an auto pool. Each torch segment goes to the part
    of the pool registered as this machine's profile (``ncclpool tune``) says is fastest for the
    tensors it serves (none, local or symmetric), else as the built-in routes say (windows at every
    size, the fastest kind everywhere on H200: docs/pool.md, "Auto pools"); every helper below
    registers each part its way, and a helper given ``symmetric=True``/``False`` registers every part
    that way (what Megatron's callers do). symmetric=True: a symmetric pool (deterministic placement,
    1 GiB chunks, or ``growth_chunk`` / $NCCLPOOL_GROWTH_CHUNK bytes); False: local registration only.
    The pool grows by each torch segment's own size (at least 8 MiB): about what torch holds, and at
    most a window per torch segment and group, as torch's own register_mem_pool. ``min_segment`` /
    $NCCLPOOL_MIN_SEGMENT bytes (0: the default) makes every segment at least that size, which later
    torch segments share: fewer windows for more reserve (1 GiB: 2 windows per group instead of 64 for
    64 x 32 MiB; docs/benchmarks/growth.md has the trade-off per trace).
    kind='local' | 'symmetric' | 'auto' names the kind instead (do not give both).
    check: check mode (None: $NCCLPOOL_CHECK; 'layout'; 'collectives' also verifies the buffers of
    every torch.distributed collective on a group with windows: see docs/registry.md). Pools are
    matched across ranks by name: the default names count pools in creation order, the same on every
    rank of a program that creates them in the same order."""
    init()
    device = _device_index(device)
    if growth_chunk is None:
        growth_chunk = _np._growth_chunk_from_env()
    if min_segment is None:
        min_segment = _np._min_segment_from_env()
    registration = _registration_of(symmetric, kind)
    global _pools_created
    with _lock:
        # torch's caching allocator asks for coarse segments and caches them itself: the pool grows
        # by their own sizes within its segment budget, so it holds about what torch holds (docs/pool.md).
        pool = _np.Pool(device, source, registration, growth_chunk=growth_chunk, min_segment=min_segment,
                        name=name or f"torch-pool-{_pools_created}", check=check)
        _pools_created += 1
        if pool.check_level == "collectives":
            check_collectives(True)
        mempool = torch.cuda.MemPool(_allocator.allocator())
        _bindings[mempool.id] = _Binding(pool, mempool)
        library().ncclpool_torch_bind(pool.handle)
    return mempool


def ncclpool_pool(mempool) -> _np.Pool:
    """The ncclpool pool behind a MemPool made by create_nccl_mem_pool."""
    binding = _bindings.get(getattr(mempool, "id", None))
    if binding is None:
        raise errors.InvalidArgument(f"{mempool!r} was not made by ncclpool.torch.create_nccl_mem_pool")
    return binding.pool


def _binding(mempool) -> _Binding:
    ncclpool_pool(mempool)
    return _bindings[mempool.id]


def _device_index(device) -> int:
    if device is None:
        return torch.cuda.current_device()
    if isinstance(device, int):
        return device
    return torch.device(device).index if torch.device(device).index is not None else torch.cuda.current_device()


def _comm_ptr(group, device: int) -> int:
    """The ncclComm_t of a process group on `device`, forcing the communicator into being if needed."""
    if group is None:
        group = dist.group.WORLD
    backend = group._get_backend(torch.device("cuda", device))
    ptr = backend._comm_ptr()
    if not ptr:
        # Lazily initialized group: one tiny collective creates the communicator on every rank.
        dist.all_reduce(torch.zeros(1, device=f"cuda:{device}"), group=group)
        torch.cuda.synchronize(device)
        ptr = backend._comm_ptr()
    if not ptr:
        raise errors.InvalidState(f"process group {group} has no NCCL communicator on cuda:{device}; create it with "
                                  f"init_process_group(..., device_id=torch.device('cuda', {device}))")
    return int(ptr)


def _registration_of(symmetric, kind) -> str:
    if kind is None:
        return "auto" if symmetric is None else "symmetric" if symmetric else "local"
    if kind not in ("local", "symmetric", "auto"):
        raise errors.InvalidArgument(f"kind {kind!r} is not 'local', 'symmetric' or 'auto'")
    if symmetric is not None:
        raise errors.InvalidArgument(f"symmetric={symmetric} and kind={kind!r}: give one of them")
    return kind


def _kind_for(binding, symmetric) -> str:
    """symmetric=None follows what the pool was made for (create_nccl_mem_pool's `symmetric` or `kind`)."""
    if symmetric is None:
        return binding.pool.registration
    return "symmetric" if symmetric else "local"



def _attachment_of(binding, group):
    """The attachment of `group` (a process group, not None) to the binding's pool, found by
    identity, without a torch call: every context use asks."""
    for a in tuple(binding.attachments.values()):
        if a.group is group:
            return a
    return None


def register_mem_pool(pool, group, symmetric: bool | None = None) -> None:
    """Registers every segment of the pool with the group's communicator, now and as segments appear.

    Collective over the group (symmetric). A group already registered with the same kind is a no-op;
    with the other kind it is an error (deregister first)."""
    binding = _binding(pool)
    kind = _kind_for(binding, symmetric)
    group = group if group is not None else dist.group.WORLD
    existing = _attachment_of(binding, group)
    ptr = existing.comm_ptr if existing is not None else _comm_ptr(group, binding.pool.device)
    with _lock:
        existing = binding.attachments.get(ptr)
        if existing is not None:
            if existing.kind != kind:
                raise errors.InvalidState(f"group {group} is registered with pool '{binding.pool.name}' as {existing.kind}, "
                                          f"not {kind}: deregister_mem_pool first")
            return
        comm = binding.pool.attach_nccl(ptr, kind)
        # An auto pool's routes are fixed by now: whether they hold windows (for any collective) is known for good.
        routes = binding.pool.routes() if kind == "auto" else None
        windows = kind == "symmetric" or (routes is not None and (
            any(c["placement"] == "symmetric" for c in routes["classes"]) or
            any("symmetric" in d for d in routes["by_collective"].values())))
        binding.attachments[ptr] = _Attachment(group, ptr, kind, comm, windows)


def deregister_mem_pool(pool, group) -> None:
    """Removes every registration of the pool with the group (collective for symmetric windows)."""
    binding = _binding(pool)
    group = group if group is not None else dist.group.WORLD
    with _lock:
        for ptr, a in list(binding.attachments.items()):
            if a.group is group:
                try:
                    a.comm.detach()
                except errors.RegistrationError:  # detached regardless: the entry goes as on every rank
                    del binding.attachments[ptr]
                    raise
                del binding.attachments[ptr]
                return
    raise errors.InvalidArgument(f"group {group} is not registered with pool '{binding.pool.name}'")


def forget_group(group=None) -> int:
    """Drops every registration with `group` (None: every group) without calling NCCL. For a
    communicator that was destroyed or aborted. destroy_process_group() does this by itself after
    init(). Returns how many attachments were dropped."""
    dropped = 0
    with _lock:
        for binding in _bindings.values():
            for ptr, a in list(binding.attachments.items()):
                if group is None or a.group is group:
                    a.comm.forget()
                    del binding.attachments[ptr]
                    dropped += 1
    return dropped


def _install_destroy_hook() -> None:
    """destroy_process_group frees the communicators: forget their registrations first."""
    global _original_destroy_process_group
    if _original_destroy_process_group is not None:
        return
    original = dist.destroy_process_group

    def destroy_process_group(group=None, *args, **kwargs):
        forget_group(group)
        return original(group, *args, **kwargs)

    destroy_process_group.__doc__ = original.__doc__
    destroy_process_group.__wrapped__ = original
    _original_destroy_process_group = original
    dist.destroy_process_group = destroy_process_group
    dist.distributed_c10d.destroy_process_group = destroy_process_group


class _PoolContext:
    """Registers groups (first use only), then enters the pool's scope (ncclpool.Pool.scope) and a torch
    context that routes allocations to the MemPool (torch.cuda.use_mem_pool unless a subclass says
    otherwise). At exit the pool's scope ends (ncclpool.Pool.scope): at its scheduled scope ends (the
    first 16, then every 16th) pending windows are committed (collective, skipped under graph capture),
    unless commit is False or an exception is on its way out."""

    def __init__(self, pool, groups, symmetric: bool | None, enabled: bool = True, device=None, commit: bool = True,
                 register: bool = True, collective: str | None = None):
        self.pool = pool
        self.collective = collective  # what the allocations are for (an auto pool routes by it)
        self.groups = groups
        self.symmetric = symmetric
        self.enabled = enabled
        self.device = device
        self.commit = commit
        self.register = register
        self._open = None  # (ncclpool pool, torch context) while entered
        self._failures = 0

    def _torch_context(self):
        return torch.cuda.use_mem_pool(self.pool, device=self.device)

    def _before_scope(self, npool) -> None:
        """Runs after the groups are registered, before the scope and the torch context open."""

    # Every use of a context comes through __enter__ and __exit__: plain calls, no ExitStack or
    # generator, and registered groups found by identity (_attachment_of).
    def __enter__(self):
        if not self.enabled:
            return self
        binding = _binding(self.pool)
        if self.register:
            kind = _kind_for(binding, self.symmetric)
            for group in self.groups:
                attachment = _attachment_of(binding, group)
                if attachment is None or attachment.kind != kind:  # register_mem_pool attaches, or says why not
                    register_mem_pool(self.pool, group, self.symmetric)
        npool = binding.pool
        self._before_scope(npool)
        self._failures = library().ncclpool_torch_failures()
        npool._scope_begin(self.collective)
        try:
            context = self._torch_context()
            context.__enter__()
        except BaseException:
            self._finish(npool, failed=True)  # the scope does not outlive a torch context that failed to enter
            raise
        self._open = (npool, context)
        return self

    def _finish(self, npool, failed: bool) -> None:
        """The scope's end: the same collective steps on every rank, whatever happened on this one (an
        error here is this rank's "no" in them: docs/registry.md, "Lockstep")."""
        every = _commit_at_every_exit and self.commit
        npool._scope_finish(commit=self.commit and not every, failed=failed)
        if every:
            if failed:
                npool._commit_after_error()
            else:
                npool.commit()

    def __exit__(self, exc_type, exc, tb):
        if not self.enabled:
            return False
        (npool, context), self._open = self._open, None
        try:
            context.__exit__(exc_type, exc, tb)
        except BaseException:
            self._finish(npool, failed=True)
            raise
        self._finish(npool, failed=exc is not None)
        if exc is not None and library().ncclpool_torch_failures() > self._failures and hasattr(exc, "add_note"):
            exc.add_note(f"ncclpool: {_np.last_error()}")
        return False


def _groups(group):
    return [group if group is not None else dist.group.WORLD]


class nccl_mem(_PoolContext):  # noqa: N801 (Megatron's name)
    """Allocations inside come from `pool`, registered with `group` (default: the world group)."""

    def __init__(self, pool, enabled: bool = True, device=None, group=None, symmetric: bool | None = None):
        super().__init__(pool, _groups(group), symmetric, enabled, device)


class MultiGroupMemPoolAllocator(_PoolContext):
    """One pool registered with several groups (FSDP + EP, hybrid sharding). ``collective``
    ('all_gather', 'reduce_scatter', 'all_reduce'): the allocations are that collective's buffers, which
    an auto pool routes by that collective's profile (torch may reuse their blocks for other tensors later)."""

    def __init__(self, pool, groups, symmetric: bool | None = None, *, collective: str | None = None):
        super().__init__(pool, list(groups), symmetric, collective=collective)


class MemPoolAllocatorWithoutRegistration(_PoolContext):
    """Allocations from `pool` without registering any group and without a collective at exit
    (segments of groups registered earlier are still registered: locally at once, windows at the next
    commit, e.g. a later nccl_mem exit that is a scheduled scope end)."""

    def __init__(self, pool):
        super().__init__(pool, [], None, commit=False, register=False)


def use_mem_pool(pool, device=None):
    """Like torch.cuda.use_mem_pool, attributing new segments to the ncclpool pool; its exit is a scope
    end of the pool (pending windows committed at the scheduled ones, collective)."""
    return _PoolContext(pool, [], None, device=device, register=False)


class graph(_PoolContext):  # noqa: N801 (mirrors torch.cuda.graph)
    """``torch.cuda.graph(cuda_graph, pool=pool.id, ...)`` with the capture's allocations attributed
    to the ncclpool pool, and `groups` registered first. torch forbids capturing into a pool that
    ``use_mem_pool`` is routing to, so capture with this instead of inside ``nccl_mem``.

    Nothing can be registered during a capture: a segment the capture makes gets its window only
    after it, and the collectives captured on it run without the window (NCCL's non-symmetric
    kernels) for the graph's lifetime. ``reserve=BYTES`` grows the pool before the capture, unless a
    fresh block of that size (no stream owns it: a capturing stream cannot wait on others) is already
    there; pending windows are committed before every capture (collective, like the capture
    itself), so the capture's tensors land in registered memory, and after it. When the capture still
    made segments, a ``PerformanceWarning`` says so, and the communicators' stats count them
    (``segments_created_in_capture``).

        with ncclpool.torch.graph(g, pool, groups=[dp_group], reserve=256 << 20):
            out = model(static_in)
    """

    def __init__(self, cuda_graph, pool, groups=(), symmetric: bool | None = None, *, reserve: int = 0, **kwargs):
        # The scope ends without its scheduled commit: graph() commits before and after the capture.
        super().__init__(pool, list(groups), symmetric, commit=False)
        if reserve < 0:
            raise ValueError(f"ncclpool.torch.graph: reserve must be >= 0 bytes, not {reserve}")
        self.reserve = reserve
        self._in_capture_before = 0
        self._capture = torch.cuda.graph(cuda_graph, pool=pool.id, **kwargs)

    def _torch_context(self):
        return self._capture

    @staticmethod
    def _created_in_capture(npool) -> int:
        return sum(c.stats()["segments_created_in_capture"] for c in npool.communicators)

    def _before_scope(self, npool) -> None:
        try:
            if self.reserve:
                s = npool.stats()
                if s["largest_fresh_block"] < self.reserve:  # what a capturing stream can take without a wait
                    npool.reserve(s["reserved_bytes"] + self.reserve)
        except BaseException:
            npool._commit_after_error()  # a reserve that failed here alone is this rank's "no"
            raise
        # Always an agreement point, reserve or not: a rank that reserved and one that did not then
        # disagree here, by name, instead of pairing one rank's agreement with another's collective.
        npool.commit()
        self._in_capture_before = self._created_in_capture(npool)

    def __exit__(self, exc_type, exc, tb):
        npool = _binding(self.pool).pool
        try:
            result = super().__exit__(exc_type, exc, tb)
        except BaseException:
            npool._commit_after_error()  # the commit after the capture, as on every rank, voting no
            raise
        if exc is None:
            npool.commit()  # the windows of what the capture made, now rather than at a later scope end
        else:
            npool._commit_after_error()
        made = self._created_in_capture(npool) - self._in_capture_before
        if exc is None and made > 0 and npool.communicators:
            warnings.warn(
                f"ncclpool.torch.graph: the capture made {made} new segment registration(s) in pool '{npool.name}' "
                f"(summed over its {len(npool.communicators)} communicator(s)); nothing can be registered during a "
                "capture, so the collectives captured on those tensors run without it (symmetric windows: NCCL's "
                "non-symmetric kernels) for the graph's lifetime. Pass reserve=BYTES (at least what the capture "
                "allocates) to graph().",
                PerformanceWarning, stacklevel=2)
        return result


class PerformanceWarning(UserWarning):
    """Something runs correctly but slower than ncclpool could make it (see the message)."""


def stats(pool) -> dict:
    """Pool counters and one entry per registered group (see ncclpool.Pool.stats_json)."""
    return _binding(pool).pool.stats_json()


def memory_summary(pool=None) -> str:
    """Text report of one pool made by create_nccl_mem_pool, or of all of them."""
    pools = [b.pool for b in _bindings.values()] if pool is None else [ncclpool_pool(pool)]
    return _np.memory_summary(pools)


def release_mem_pool(pool) -> None:
    """Destroys the ncclpool pool behind a MemPool after torch released its segments (drop the tensors,
    then ``del`` the MemPool and call torch.cuda.empty_cache()). Detach symmetric groups first."""
    binding = _binding(pool)
    with _lock:
        library().ncclpool_torch_unbind(binding.pool.handle)
        try:
            for ptr, a in list(binding.attachments.items()):
                if not a.windows:
                    a.comm.detach()
                    del binding.attachments[ptr]  # the table says what is still attached, even if a later step fails
            binding.pool.close()
        except errors.Error:
            library().ncclpool_torch_bind(binding.pool.handle)
            raise
        del _bindings[pool.id]


# ---- check mode 'collectives': every torch.distributed collective on a group with windows is
# preceded by verify_buffers over that group, on every rank, so that buffers at different offsets of
# the symmetric windows (which symmetric kernels would exchange silently wrong) end in an error.

_COLLECTIVES = {  # name -> positions of tensor arguments (lists of tensors are flattened)
    "all_reduce": (0,), "broadcast": (0,), "reduce": (0,), "all_gather_into_tensor": (0, 1),
    "reduce_scatter_tensor": (0, 1), "all_to_all_single": (0, 1), "all_gather": (0, 1), "reduce_scatter": (0, 1),
    "_all_gather_base": (0, 1), "_reduce_scatter_base": (0, 1),
}
_originals: dict = {}


def _tensors(args, kwargs, positions):
    out = []
    names = ("output", "input", "output_tensor", "input_tensor", "tensor", "output_tensor_list", "input_list",
             "tensor_list", "output_list")
    values = [args[i] for i in positions if i < len(args)] + [v for k, v in kwargs.items() if k in names]
    for v in values:
        for t in (v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(t, torch.Tensor) and t.is_cuda:
                out.append(t.data_ptr())
    return out


def _symmetric_comm_of(group):
    """The ncclpool Communicator attached with windows for this group, or None."""
    group = group if group is not None else dist.group.WORLD
    for binding in _bindings.values():
        for a in binding.attachments.values():
            if a.group is group and a.comm.attached and a.windows:
                return a.comm
    return None


def _checked(name, original, positions):
    def collective(*args, **kwargs):
        group = kwargs.get("group")
        if group is None:  # positional: after the tensors and op/src in torch's signatures
            group = next((a for a in args if isinstance(a, dist.ProcessGroup)), None)
        comm = _symmetric_comm_of(group)
        if comm is not None and not torch.cuda.is_current_stream_capturing():
            comm.verify_buffers(*_tensors(args, kwargs, positions))
        return original(*args, **kwargs)

    collective.__wrapped__ = original
    collective.__doc__ = original.__doc__
    return collective


def check_collectives(enable: bool = True) -> None:
    """Turns the per-collective buffer check on or off (check mode 'collectives' turns it on). It
    wraps the torch.distributed collectives named in _COLLECTIVES; functional collectives and DTensor
    paths are not covered. Costs one small all-gather with a host wait per collective on a group with
    windows: for first runs, not for production."""
    with _lock:
        for name, positions in _COLLECTIVES.items():
            current = getattr(dist, name, None)
            if current is None:
                continue
            if enable and name not in _originals:
                _originals[name] = current
                wrapped = _checked(name, current, positions)
                setattr(dist, name, wrapped)
                setattr(dist.distributed_c10d, name, wrapped)
            elif not enable and name in _originals:
                setattr(dist, name, _originals[name])
                setattr(dist.distributed_c10d, name, _originals.pop(name))
