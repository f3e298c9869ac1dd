"""ncclpool.torch's check mode 'collectives': every torch.distributed collective on a group with windows
is preceded by verify_buffers over that group, on every rank, so that buffers at different offsets of
the symmetric windows (which symmetric kernels would exchange silently wrong) end in an error.
check_collectives() patches the collectives in and out."""
from __future__ import annotations

import torch
import torch.distributed as dist

from . import state

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
    with state.lock:
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
