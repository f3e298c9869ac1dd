"""ncclpool.torch's wrapped torch.distributed collectives, for two duties that each switch on alone:

* check mode 'collectives' (check_collectives): every collective on a group with windows is preceded
  by verify_buffers over that group, on every rank, so that buffers at different offsets of the
  symmetric windows (which symmetric kernels would exchange silently wrong) end in an error;
* the symmetric fence (fence_collectives; init() switches it on where the process's decision is
  ``fence``: NCCL 2.28.0-2.30.6, whose symmetric kernels can read their input before the kernel before
  them wrote it): every collective on a group attached with windows follows ncclpool.symmetric_fence
  on the current stream (where torch >= 2.8 enqueues a synchronous collective). A fence that fails
  never keeps this rank out of the collective (ncclpool._fence_or_wait): the stream's synchronize()
  stands in for it, else the collective is entered and the error raised after it, the pools voting no.

The same wrappers serve both; they are patched in while either duty is on and out when neither is.
torch.distributed._functional_collectives are not wrapped: their eager form runs on ProcessGroupNCCL's
own stream behind an event recorded after the work before them had ended (never a programmatic
dependency on a producer), and torch.compile calls the c10d ops directly.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

import ncclpool as _np

from . import state

_COLLECTIVES = {  # name -> positions of tensor arguments (lists of tensors are flattened)
    "all_reduce": (0,), "broadcast": (0,), "reduce": (0,), "all_gather_into_tensor": (0, 1),
    "reduce_scatter_tensor": (0, 1), "all_to_all_single": (0, 1), "all_gather": (0, 1), "reduce_scatter": (0, 1),
    "_all_gather_base": (0, 1), "_reduce_scatter_base": (0, 1),
}
_originals: dict = {}
_verify = False  # check mode 'collectives' (check_collectives)
_fence = False   # the symmetric fence (fence_collectives)


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
    """The ncclpool Communicator attached with windows for this group by a pool in check mode
    'collectives', or None. Only such pools: their check level was compared at the attach (every rank
    of the group has it), whereas check_collectives() is switched on per process, so a pool without it
    on every rank must never make this rank verify alone."""
    group = group if group is not None else dist.group.WORLD
    for binding in state.bindings.values():
        if binding.pool.check_level != "collectives":
            continue
        for a in binding.attachments.values():
            if a.group is group and a.comm.attached and a.windows:
                return a.comm
    return None


def _fenced_pools(group) -> list:
    """The pools that attached the group with a kind that makes windows (symmetric, auto): its
    collectives may run NCCL's symmetric kernels on them (empty: no fence). No C call (every
    collective asks); a group whose auto pool routed no size to windows gets a fence it did not need
    (a microsecond)."""
    group = group if group is not None else dist.group.WORLD
    pools = []
    for binding in tuple(state.bindings.values()):
        for a in tuple(binding.attachments.values()):
            if a.group is group and a.kind != "local" and a.comm.attached:
                pools.append(binding.pool)
                break
    return pools


def _wait_for(stream) -> None:
    """What stands in for a fence that failed: the host waits for the work before the collective (not
    in a CUDA graph capture, where a stream cannot be synchronized)."""
    if torch.cuda.is_current_stream_capturing():
        raise RuntimeError("in a CUDA graph capture")
    stream.synchronize()


def _wrapped(name, original, positions):
    def collective(*args, **kwargs):
        if _verify or _fence:
            group = kwargs.get("group")
            if group is None:  # positional: after the tensors and op/src in torch's signatures
                group = next((a for a in args if isinstance(a, dist.ProcessGroup)), None)
            if _verify:
                comm = _symmetric_comm_of(group)
                if comm is not None and not torch.cuda.is_current_stream_capturing():
                    comm.verify_buffers(*_tensors(args, kwargs, positions))
            if _fence:
                pools = _fenced_pools(group)
                if pools:  # never decides whether this rank enters the collective: an error waits for after it
                    stream = torch.cuda.current_stream()
                    fence_error = _np._fence_or_wait(stream, lambda: _wait_for(stream), pools)
                    if fence_error is not None:
                        original(*args, **kwargs)
                        raise fence_error
        return original(*args, **kwargs)

    collective.__wrapped__ = original
    collective.__doc__ = original.__doc__
    return collective


def _patch() -> None:
    """Patches the wrappers in while a duty is on, the originals back when none is. state.lock held."""
    wanted = _verify or _fence
    for name, positions in _COLLECTIVES.items():
        current = getattr(dist, name, None)
        if current is None:
            continue
        if wanted and name not in _originals:
            _originals[name] = current
            wrapped = _wrapped(name, current, positions)
            setattr(dist, name, wrapped)
            setattr(dist.distributed_c10d, name, wrapped)
        elif not wanted and name in _originals:
            setattr(dist, name, _originals[name])
            setattr(dist.distributed_c10d, name, _originals.pop(name))


def check_collectives(enable: bool = True) -> None:
    """Turns the per-collective buffer check on or off (check mode 'collectives' turns it on). It
    wraps the torch.distributed collectives named in _COLLECTIVES; functional collectives and DTensor
    paths are not covered. Costs one small all-gather with a host wait per collective on a group with
    windows: for first runs, not for production."""
    global _verify
    with state.lock:
        _verify = bool(enable)
        _patch()


def fence_collectives(enable: bool = True) -> None:
    """Turns the symmetric fence before the torch.distributed collectives of groups attached with
    windows on or off (init() turns it on where the process decides ``fence``). ncclpool.symmetric_fence
    launches nothing unless the decision is ``fence``, and in a CUDA graph capture only where NCCL does
    not order the collective itself."""
    global _fence
    with state.lock:
        _fence = bool(enable)
        _patch()
