"""FSDP2 with ncclpool: all-gather and reduce-scatter buffers from a registered pool.

    import ncclpool.torch as nccl_allocator
    from ncclpool.torch import fsdp as ncclpool_fsdp
    model = fully_shard(model, mesh=mesh)
    pool = nccl_allocator.create_nccl_mem_pool()
    ncclpool_fsdp.enable(model, pool)      # every FSDPModule in the tree

FSDP asks the custom communication object for its buffers (``allocate``) and then runs the collective
(``__call__``); both go through the pool, so the collective runs on registered memory (symmetric
kernels for symmetric pools). New segments are registered at the end of the allocation, after the
ranks agree; later steps reuse cached blocks and register nothing.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

try:  # public in newer releases, private in torch 2.11
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather, ReduceScatter
except ImportError as e:  # pragma: no cover - depends on the torch build
    raise ImportError(f"ncclpool.torch.fsdp needs FSDP2 (torch.distributed.fsdp.fully_shard): {e}") from e

from . import MultiGroupMemPoolAllocator, ncclpool_pool

__all__ = ["PoolAllGather", "PoolReduceScatter", "enable"]


class _PoolComm:
    collective = None  # the buffers' collective: an auto pool routes their segments by its profile

    def __init__(self, pool, groups, symmetric: bool | None = None):
        ncclpool_pool(pool)  # fail early on a foreign MemPool
        self.pool = pool
        self.groups = list(groups)
        self.symmetric = symmetric

    def allocate(self, size, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        with MultiGroupMemPoolAllocator(self.pool, self.groups, self.symmetric, collective=self.collective):
            return torch.empty(*size, dtype=dtype, device=device)


class PoolAllGather(_PoolComm, AllGather):
    """FSDP2 all-gather whose output buffer lives in an ncclpool pool."""

    collective = "all_gather"

    def __call__(self, output_tensor, input_tensor, group, async_op: bool = False):
        return dist.all_gather_into_tensor(output_tensor, input_tensor, group=group, async_op=async_op)


class PoolReduceScatter(_PoolComm, ReduceScatter):
    """FSDP2 reduce-scatter whose buffers live in an ncclpool pool."""

    collective = "reduce_scatter"

    def __call__(self, output_tensor, input_tensor, group, op, async_op: bool = False):
        return dist.reduce_scatter_tensor(output_tensor, input_tensor, op=op, group=group, async_op=async_op)


def enable(module: torch.nn.Module, pool, groups=None, *, symmetric: bool | None = None, reduce_scatter: bool = True) -> int:
    """Plugs pool-backed all-gather (and reduce-scatter) into every FSDPModule under `module`.
    symmetric: None registers the groups the way the pool was made for (create_nccl_mem_pool).

    groups: the process groups the buffers are used with (default: each module's FSDP shard group).
    Returns the number of FSDP modules configured."""
    count = 0
    for m in module.modules():
        if not isinstance(m, FSDPModule):
            continue
        gs = groups if groups is not None else [_shard_group(m)]
        m.set_custom_all_gather(PoolAllGather(pool, gs, symmetric))
        if reduce_scatter:
            m.set_custom_reduce_scatter(PoolReduceScatter(pool, gs, symmetric))
        count += 1
    if count == 0:
        raise ValueError("ncclpool.torch.fsdp.enable: no FSDPModule in the module tree (call fully_shard first)")
    return count


def _shard_group(module) -> dist.ProcessGroup:
    """The module's FSDP shard group (FSDP2 internals; the world group if they are not there)."""
    try:
        param_group = module._get_fsdp_state()._fsdp_param_group
        return param_group.mesh_info.shard_process_group if param_group is not None else dist.group.WORLD
    except AttributeError:
        return dist.group.WORLD
