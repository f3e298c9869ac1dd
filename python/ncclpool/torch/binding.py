"""ncclpool.torch's binding of torch to ncclpool: the pluggable allocator's set-up (init, which installs
state.py's destroy_process_group hook), torch MemPools made over ncclpool pools (create_nccl_mem_pool,
release_mem_pool, ncclpool_pool), registration of process groups with a pool (register /
deregister), and the pool's stats and memory_summary with copy_engine.py's decisions for it. The
table mapping MemPools to pools, their attachments and the lock are state.py's.
"""
from __future__ import annotations

import sys
import threading
import warnings

import torch
import torch.distributed as dist

import ncclpool as _np
from ncclpool import errors
from ncclpool._capi import library, library_path

from . import state
from .checks import check_collectives, fence_collectives
from .copy_engine import pool_stats, summary_lines

_allocator = None  # torch.cuda.memory.CUDAPluggableAllocator over ncclpool_torch_alloc/free
_pools_created = 0     # names pools in creation order (the same on every rank)
_ctas_lock = threading.Lock()  # guards _ctas_declared and the declaration itself
_ctas_declared = False  # prefer_nccl_ctas_for_training ran in this process (its warning comes once)


def init() -> None:
    """Loads ncclpool and makes the torch pluggable allocator. Idempotent.

    Raises ncclpool.Unsupported when torch has NCCL and another NCCL library is loaded in the process
    besides the one ncclpool uses (a communicator must be used with the library that made it). The
    one library torch and ncclpool share may be newer than the NCCL torch was built with (a
    libnccl.so.2 swapped under nvidia/nccl/lib/ to get a fix): that is allowed; ``ncclpool.features()``
    says which is loaded (``nccl_version``, ``nccl_library``), ``torch.cuda.nccl.version()`` what torch
    was built with.

    Declares the symmetric fence (ncclpool.prefer_symmetric_fence): on NCCL 2.28.0-2.30.6 the
    symmetric kernels then stay on, and torch.distributed's collectives on groups attached with windows
    are wrapped to follow ncclpool.symmetric_fence on the current stream (docs/python.md, "NCCL
    versions")."""
    global _allocator
    with state.lock:
        if _allocator is not None:
            return
        if not torch.cuda.is_available():
            raise errors.Unsupported("ncclpool.torch needs CUDA: torch.cuda.is_available() is False")
        _declare_fence()
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
        state.install_destroy_hook()
        if features.get("symmetric_kernels_decision") == "fence":  # checks.py: the collectives of groups with windows
            fence_collectives(True)


def _declare_fence() -> None:
    """This layer fences the torch.distributed collectives of groups with windows (checks.py), so the
    process declares it before any attach: where NCCL's symmetric kernels can read their input early,
    ``auto`` keeps them on, fenced. A process that decided the guard already keeps it (safe, slower):
    said once, as a warning."""
    try:
        _np.prefer_symmetric_fence()
    except errors.InvalidState as e:
        _warn(f"ncclpool.torch.init(): {e}")


def _warn(text: str) -> None:
    """A RuntimeWarning that never raises: under `python -W error` (or a filter turning warnings into
    errors) warnings.warn raises, and a rank leaving here would miss the collectives the other ranks
    make next; the text then goes to stderr instead."""
    try:
        warnings.warn(text, RuntimeWarning, stacklevel=4)
    except Exception:  # noqa: BLE001 - a warning filter set to "error" (any exception it raises)
        print(f"ncclpool: warning: {text}", file=sys.stderr, flush=True)


def prefer_nccl_ctas_for_training(who: str) -> None:
    """The training helpers (fsdp.py's, megatron.py's install()) overlap every all-gather and
    reduce-scatter with compute, so the process declares it once, before their first attach
    (ncclpool.prefer_nccl_symmetric_ctas): ncclpool's measured default CTA count yields to NCCL's own.
    A process that decided that default already keeps it (a slower step, never a hang): said once, as
    a warning; nothing raised here may keep this rank out of the collectives every rank makes next."""
    global _ctas_declared
    problem = None
    with _ctas_lock:  # held across the declaration: no second caller goes on (and attaches) before it took effect
        if _ctas_declared:
            return
        try:
            _np.prefer_nccl_symmetric_ctas()
        except Exception as e:  # noqa: BLE001 - InvalidState (decided already) above all: a preference, never a failure
            problem = e
        _ctas_declared = True
    if problem is not None:
        _warn(f"{who}: {problem}")


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
                         min_segment: int | None = None, agreed_settings: str | None = None):
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
    torch segments share: fewer windows for more reserve (docs/benchmarks/growth.md has the trade-off
    per trace).
    kind='local' | 'symmetric' | 'auto' names the kind instead (do not give both).
    check: check mode (None: $NCCLPOOL_CHECK; 'layout'; 'collectives' also verifies the buffers of
    every torch.distributed collective on a group with windows: see docs/registry.md). Pools are
    matched across ranks by name: the default names count pools in creation order, the same on every
    rank of a program that creates them in the same order. ``agreed_settings``: text naming the
    caller's settings that change what it does collectively (ncclpool.Pool's agreed_settings): every
    attach of the pool, the local kind included, is then an agreement that compares them across ranks.
    By default the pool's kind (``ncclpool.torch registration=...``): a group's first registration is
    then always an agreement, so a rank whose pool was made local while another's is symmetric or auto
    fails every rank there, instead of registering alone while the others wait in an agreement."""
    init()
    device = _device_index(device)
    if growth_chunk is None:
        growth_chunk = _np._growth_chunk_from_env()
    if min_segment is None:
        min_segment = _np._min_segment_from_env()
    registration = _registration_of(symmetric, kind)
    global _pools_created
    with state.lock:
        # torch's caching allocator asks for coarse segments and caches them itself: the pool grows
        # by their own sizes within its segment budget, so it holds about what torch holds (docs/pool.md).
        pool = _np.Pool(device, source, registration, growth_chunk=growth_chunk, min_segment=min_segment,
                        name=name or f"torch-pool-{_pools_created}", check=check,
                        agreed_settings=agreed_settings or f"ncclpool.torch registration={registration}")
        _pools_created += 1
        if pool.check_level == "collectives":
            check_collectives(True)
        mempool = torch.cuda.MemPool(_allocator.allocator())
        state.bindings[mempool.id] = state.Binding(pool, mempool)
        library().ncclpool_torch_bind(pool.handle)
    return mempool


def ncclpool_pool(mempool) -> _np.Pool:
    """The ncclpool pool behind a MemPool made by create_nccl_mem_pool."""
    binding = state.bindings.get(getattr(mempool, "id", None))
    if binding is None:
        raise errors.InvalidArgument(f"{mempool!r} was not made by ncclpool.torch.create_nccl_mem_pool")
    return binding.pool


def binding_of(mempool) -> state.Binding:
    """The Binding (pool and attachments) of a MemPool made by create_nccl_mem_pool; InvalidArgument
    for any other."""
    ncclpool_pool(mempool)
    return state.bindings[mempool.id]


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
    if not hasattr(backend, "_comm_ptr"):  # before any collective: every rank so configured refuses alike
        raise errors.Unsupported(
            f"process group {group}: its backend {type(backend).__name__} gives no communicator address (_comm_ptr), "
            "which ncclpool.torch needs: torch 2.14's opt-in nccl2 (TORCH_DIST_USE_NCCL2=1) has none. Run with "
            "TORCH_DIST_USE_NCCL2=0 (torch's classic ProcessGroupNCCL), or torch 2.15, whose nccl2 has it")
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


def kind_for(binding, symmetric) -> str:
    """symmetric=None follows what the pool was made for (create_nccl_mem_pool's `symmetric` or `kind`)."""
    if symmetric is None:
        return binding.pool.registration
    return "symmetric" if symmetric else "local"


def attachment_of(binding, group):
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
    binding = binding_of(pool)
    kind = kind_for(binding, symmetric)
    group = group if group is not None else dist.group.WORLD
    existing = attachment_of(binding, group)
    ptr = existing.comm_ptr if existing is not None else _comm_ptr(group, binding.pool.device)
    with state.lock:
        existing = binding.attachments.get(ptr)
        if existing is not None:
            if existing.kind != kind:
                raise errors.InvalidState(f"group {group} is registered with pool '{binding.pool.name}' as {existing.kind}, "
                                          f"not {kind}: deregister_mem_pool first")
            return
        comm = binding.pool.attach_nccl(ptr, kind)
        binding.attachments[ptr] = state.Attachment(group, ptr, kind, comm)


def deregister_mem_pool(pool, group) -> None:
    """Removes every registration of the pool with the group (collective for symmetric windows)."""
    binding = binding_of(pool)
    group = group if group is not None else dist.group.WORLD
    with state.lock:
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


def stats(pool) -> dict:
    """Pool counters and one entry per registered group (see ncclpool.Pool.stats_json), and
    ``copy_engine``: whether the pool's all-gathers run on a copy-engine group (``used``), ``why``,
    and the decision for each shard group fsdp.enable asked about (``groups``)."""
    out = binding_of(pool).pool.stats_json()
    out["copy_engine"] = pool_stats(pool.id)
    return out


def memory_summary(pool=None) -> str:
    """Text report of one pool made by create_nccl_mem_pool, or of all of them (with a line per
    copy-engine decision fsdp.enable made for a pool)."""
    chosen = list(state.bindings.values()) if pool is None else [binding_of(pool)]
    lines_of = {id(b.pool): summary_lines(b.mempool.id) for b in chosen}
    return _np.memory_summary([b.pool for b in chosen], extra_lines=lambda p: lines_of.get(id(p), []))


def release_mem_pool(pool) -> None:
    """Destroys the ncclpool pool behind a MemPool after torch released its segments (drop the tensors,
    then ``del`` the MemPool and call torch.cuda.empty_cache()). Detach symmetric groups first."""
    binding = binding_of(pool)
    with state.lock:
        library().ncclpool_torch_unbind(binding.pool.handle)
        try:
            for ptr, a in list(binding.attachments.items()):
                if not a.comm.attached:  # forgotten (or detached) through the Communicator itself
                    del binding.attachments[ptr]
                elif not a.windows:
                    a.comm.detach()
                    del binding.attachments[ptr]  # the table says what is still attached, even if a later step fails
            binding.pool.close()
        except errors.Error:
            library().ncclpool_torch_bind(binding.pool.handle)
            raise
        del state.bindings[pool.id]
