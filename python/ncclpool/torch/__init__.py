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

The layer's parts, each importing only those before it: ncclpool/torch/state.py (the lock, the table
of MemPools and their groups, forget_group and the destroy hook), checks.py (check mode
'collectives'), copy_engine.py (copy_engine_group: the zero-SM all-gather's group, agreed by every
rank), binding.py (allocator set-up, pools, registration of groups), contexts.py (the context
managers and graph()); versions.py (process_group_implementation: classic ProcessGroupNCCL or nccl2)
stands alone; megatron.py and fsdp.py plug the layer into Megatron and FSDP2.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

import ncclpool as _np
from ncclpool import _environment, errors
from ncclpool._capi import library, library_path

from .binding import (create_nccl_mem_pool, deregister_mem_pool, init, memory_summary, ncclpool_pool, register_mem_pool,
                      release_mem_pool, stats)
from .checks import check_collectives
from .contexts import (MemPoolAllocatorWithoutRegistration, MultiGroupMemPoolAllocator, PerformanceWarning, graph, nccl_mem,
                       use_mem_pool)
from .copy_engine import CopyEngineDecision, copy_engine_group
from .state import forget_group
from .versions import process_group_implementation

# What changes at run time is read and set on the module that owns it, not here (a name here is a copy
# that would not follow): state.bindings (the MemPool table), binding._allocator, binding._pools_created,
# contexts._commit_at_every_exit (megatron.install() sets it), and binding._comm_ptr where a test or
# bench replaces it. Only the public names below are the layer's API (Megatron's nccl_allocator's).

__all__ = [
    "init", "create_nccl_mem_pool", "register_mem_pool", "deregister_mem_pool", "forget_group", "nccl_mem",
    "MultiGroupMemPoolAllocator", "MemPoolAllocatorWithoutRegistration", "use_mem_pool", "ncclpool_pool",
    "stats", "memory_summary", "release_mem_pool", "graph", "check_collectives", "PerformanceWarning",
    "copy_engine_group", "CopyEngineDecision", "process_group_implementation",
]

# NCCLPOOL_TORCH=off, read once per process, here (ncclpool/_environment.py): the names above fall back
# to torch's own path, for bisecting (off.py says what each does then), and one warning says so.
if _environment.torch_layer() == "off":
    import warnings as _warnings

    from . import off as _off

    globals().update(_off.FALLBACKS)
    _warnings.warn(_off.MESSAGE, RuntimeWarning, stacklevel=2)
