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

``copy_engine=True`` / None (auto): where every rank of a shard group agrees (copy_engine.py), the
all-gathers run on that group's copy-engine group (NCCL's CTA policy ZERO: copy engines, no SMs), their
buffers windows of it; reduce-scatters stay on the shard group.

Every all-gather and reduce-scatter here overlaps compute, so the helper declares it
(ncclpool.prefer_nccl_symmetric_ctas) when it is made, before its first attach: NCCL's own CTA count
for the symmetric kernels instead of ncclpool's measured default (docs/python.md, "The symmetric
kernels' CTA count").
"""
from __future__ import annotations

import torch
import torch.distributed as dist

try:  # public in newer releases, private in torch 2.11
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather, ReduceScatter
except ImportError as e:  # pragma: no cover - depends on the torch build
    raise ImportError(f"ncclpool.torch.fsdp needs FSDP2 (torch.distributed.fsdp.fully_shard): {e}") from e

from ncclpool import errors

from . import MultiGroupMemPoolAllocator, ncclpool_pool
from . import copy_engine as _copy_engine
from .binding import binding_of as _binding, kind_for as _kind_for, prefer_nccl_ctas_for_training as _prefer_nccl_ctas

__all__ = ["PoolAllGather", "PoolReduceScatter", "enable"]


class _PoolComm:
    collective = None  # the buffers' collective: an auto pool routes their segments by its profile

    def __init__(self, pool, groups, symmetric: bool | None = None):
        _prefer_nccl_ctas(f"ncclpool.torch.fsdp.{type(self).__name__}")  # before this helper attaches anything
        ncclpool_pool(pool)  # fail early on a foreign MemPool
        self.pool = pool
        self.groups = list(groups)
        self.symmetric = symmetric

    def allocate(self, size, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        with MultiGroupMemPoolAllocator(self.pool, self.groups, self.symmetric, collective=self.collective):
            return torch.empty(*size, dtype=dtype, device=device)


class PoolAllGather(_PoolComm, AllGather):
    """FSDP2 all-gather whose output buffer lives in an ncclpool pool. With ``copy_engine_group`` (the
    copy-engine group of ``shard_group``: copy_engine.copy_engine_group) the all-gather FSDP asks for on
    the shard group runs on that group instead (copy engines, no SMs), off the default stream."""

    collective = "all_gather"

    def __init__(self, pool, groups, symmetric: bool | None = None, *, copy_engine_group=None, shard_group=None):
        super().__init__(pool, groups, symmetric)
        if (copy_engine_group is None) != (shard_group is None):
            raise errors.InvalidArgument("PoolAllGather: copy_engine_group and shard_group go together")
        self.copy_engine_group = copy_engine_group
        self.shard_group = shard_group

    def __call__(self, output_tensor, input_tensor, group, async_op: bool = False):
        if self.copy_engine_group is None:
            return dist.all_gather_into_tensor(output_tensor, input_tensor, group=group, async_op=async_op)
        if group is not self.shard_group:
            raise errors.InvalidArgument(f"PoolAllGather made for the copy-engine group of {self.shard_group} was asked "
                                         f"to all-gather on {group}: it would gather other ranks")
        return _copy_engine.all_gather_into_tensor(output_tensor, input_tensor, self.copy_engine_group, async_op)


class PoolReduceScatter(_PoolComm, ReduceScatter):
    """FSDP2 reduce-scatter whose buffers live in an ncclpool pool."""

    collective = "reduce_scatter"

    def __call__(self, output_tensor, input_tensor, group, op, async_op: bool = False):
        return dist.reduce_scatter_tensor(output_tensor, input_tensor, op=op, group=group, async_op=async_op)


def enable(module: torch.nn.Module, pool, groups=None, *, symmetric: bool | None = None, reduce_scatter: bool = True,
           copy_engine: bool | None = None) -> int:
    """Plugs pool-backed all-gather (and reduce-scatter) into every FSDPModule under `module`.
    symmetric: None registers the groups the way the pool was made for (create_nccl_mem_pool).

    groups: the process groups the buffers are used with (default: each module's FSDP shard group).
    copy_engine: True, None (auto) or False: whether each shard group's all-gathers run on its
    copy-engine group (copy_engine_group: a vote over the shard group the first time, so call enable on
    every rank; True raises on every rank if one cannot; a module without parameters of its own asks
    nothing: FSDP2 gathers nothing for it). The all-gather buffers are then registered with that
    group instead of the shard group. Copy engines need windows: copy_engine=True with a pool (or
    `symmetric`) that registers locally is an error, auto stays off there (voting as False). Every
    decision is in stats(pool)['copy_engine'] and memory_summary(pool).
    Declares ncclpool.prefer_nccl_symmetric_ctas first (this module's docstring says why).
    Returns the number of FSDP modules configured."""
    _prefer_nccl_ctas("ncclpool.torch.fsdp.enable()")  # before the votes and the buffers' first attach
    if copy_engine not in (None, True, False):
        raise errors.InvalidArgument(f"copy_engine must be True, False or None (auto), not {copy_engine!r}")
    windowless = _kind_for(_binding(pool), symmetric) == "local"
    problem = None  # raised after the votes, which every rank takes (a local pool votes as copy_engine=False)
    if copy_engine is True and windowless:
        problem = errors.InvalidArgument("ncclpool.torch.fsdp.enable(copy_engine=True): copy engines need windows, and this "
                                         "pool registers locally: use create_nccl_mem_pool(symmetric=True), or symmetric=True")
    modules = [(m, _shard_group(m)) for m in module.modules() if isinstance(m, FSDPModule)]
    if not modules:
        raise ValueError("ncclpool.torch.fsdp.enable: no FSDPModule in the module tree (call fully_shard first)")
    zeros = {}  # id(shard group) -> its copy-engine group or None: every vote before any module changes
    for _, shard in modules:  # every group's vote, whatever an earlier one raised: each is a step of its own
        if shard is not None and id(shard) not in zeros:
            try:
                zeros[id(shard)] = _copy_engine_for(pool, shard, copy_engine, windowless)
            except BaseException as e:
                zeros[id(shard)], problem = None, problem or e
    if problem is not None:
        raise problem
    for m, shard in modules:
        zero = zeros.get(id(shard)) if shard is not None else None
        gs = groups if groups is not None else [shard if shard is not None else dist.group.WORLD]
        if zero is None:
            m.set_custom_all_gather(PoolAllGather(pool, gs, symmetric))
        else:
            others = [g for g in gs if g is not shard]
            m.set_custom_all_gather(PoolAllGather(pool, [zero, *others], symmetric, copy_engine_group=zero, shard_group=shard))
        if reduce_scatter:
            m.set_custom_reduce_scatter(PoolReduceScatter(pool, gs, symmetric))
    return len(modules)


def _copy_engine_for(pool, shard, copy_engine, windowless):
    """The copy-engine group for `shard`'s all-gathers (None: off), recorded for the pool's stats."""
    if windowless and copy_engine is not False:
        # Still a vote (as copy_engine=False): a rank whose pool registers locally while another's has
        # windows then fails every rank of the group here, instead of missing from their vote.
        _copy_engine._decide(shard, False)
        decision = _copy_engine.CopyEngineDecision(copy_engine, None, "off: the pool registers locally (no windows), "
                                                   "which copy engines need", dist.get_world_size(shard))
    else:
        decision = _copy_engine._decide(shard, copy_engine)
    _copy_engine._record_for_pool(pool, shard, decision)
    return decision.group


def _shard_group(module):
    """The module's FSDP shard group; None for a module without parameters of its own (FSDP2 runs
    no all-gather for it: no copy-engine vote either); the world group if FSDP2's internals are not
    there. A module with several parameter groups (torch 2.12+: per-parameter meshes, a
    shard_placement_fn returning ShardPlacementResult) is refused here, before any vote: FSDP2's
    set_custom_all_gather refuses it too (ValueError), and its ``_fsdp_param_group`` property raises
    AssertionError there (read on the real 2.12.1 to 2.15.0: docs/benchmarks/data/*-torch-matrix-cpu)."""
    try:
        state = module._get_fsdp_state()
    except AttributeError:
        return dist.group.WORLD
    param_groups = getattr(state, "_fsdp_param_groups", None)  # torch 2.12+: the list; 2.11: absent
    if param_groups is None:
        try:
            param_group = state._fsdp_param_group
        except AttributeError:
            return dist.group.WORLD
        except AssertionError as e:  # the property of a torch with several groups but no list we know
            raise _several_groups(module, str(e)) from e
        param_groups = [param_group] if param_group is not None else []
    if len(param_groups) > 1:
        raise _several_groups(module, f"{len(param_groups)} parameter groups")
    if not param_groups:
        return None
    try:
        return param_groups[0].mesh_info.shard_process_group
    except AttributeError:
        return dist.group.WORLD


def _several_groups(module, what) -> errors.Unsupported:
    return errors.Unsupported(
        f"ncclpool.torch.fsdp.enable: FSDP module {type(module).__name__} has several parameter groups ({what}; "
        "per-parameter meshes from a shard_placement_fn returning ShardPlacementResult): FSDP2 takes no custom "
        "all-gather or reduce-scatter for such a module (set_custom_all_gather raises). Shard it with one mesh, or "
        "call enable() on the parts of the model without it")
