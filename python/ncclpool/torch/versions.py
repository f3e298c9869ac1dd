"""Which torch ncclpool.torch runs on and which NCCL process-group implementation it gets:
:func:`process_group_implementation`, and :func:`torch_report` (what ``ncclpool info`` prints about
torch). The support matrix (torch x NCCL x implementation, what ran where) is in docs/python.md,
"Torch versions".

torch 2.14 and 2.15 have two NCCL process groups: the classic ``ProcessGroupNCCL`` and nccl2
(``ProcessGroupNCCL2``, ported from torchcomms). ``init_process_group("nccl")`` makes nccl2 in 2.15
unless ``TORCH_DIST_USE_NCCL2=0``, and in 2.14 only with ``TORCH_DIST_USE_NCCL2=1``; torch reads the
variable once, when it registers its "nccl" backend. 2.14's nccl2 has no ``_comm_ptr``: ncclpool.torch
cannot reach its communicator and refuses it (binding._comm_ptr).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = ["process_group_implementation", "torch_report", "CLASSIC", "NCCL2"]

CLASSIC = "ProcessGroupNCCL"
NCCL2 = "ProcessGroupNCCL2"
# torch's creators of an "nccl" backend (torch/distributed/distributed_c10d.py, 2.14 and 2.15) -> the class each makes
_CREATORS = {"_create_nccl_process_group": CLASSIC, "_create_nccl2_process_group": NCCL2,
             "_create_nccl_lazy_process_group": "ProcessGroupNCCLLazy"}


def process_group_implementation(group=None) -> str | None:
    """The torch class behind a process group's CUDA backend: ``"ProcessGroupNCCL"`` (torch's classic
    one), ``"ProcessGroupNCCL2"`` (nccl2: torch 2.15's default, 2.14's with TORCH_DIST_USE_NCCL2=1), or
    another backend's class (``"ProcessGroupGloo"``, ...). ``group`` None: the default group; before
    init_process_group, the class ``init_process_group("nccl")`` would make in this process, as torch
    decides it (from 2.14 by registering its "nccl" backend, which is where torch reads
    TORCH_DIST_USE_NCCL2: set it before calling this). None: a torch without NCCL or without
    torch.distributed."""
    if not dist.is_available():
        return None
    if group is None and not dist.is_initialized():
        return default_implementation()
    group = group if group is not None else dist.group.WORLD
    return type(group._get_backend(torch.device("cuda"))).__name__


def default_implementation() -> str | None:
    """The class ``init_process_group("nccl")`` makes in this process (None: torch without NCCL)."""
    if not dist.is_available() or not dist.is_nccl_available():
        return None
    backend = dist.Backend
    plugin = getattr(backend, "_plugins", {}).get("NCCL")
    if plugin is None and hasattr(backend, "_ensure_backend_registered"):
        backend._ensure_backend_registered("nccl")  # what init_process_group does first (torch 2.14+)
        plugin = backend._plugins.get("NCCL")
    if plugin is None:
        return CLASSIC  # "nccl" built into init_process_group (torch 2.11): the classic ProcessGroupNCCL
    name = getattr(plugin.creator_fn, "__name__", repr(plugin.creator_fn))
    return _CREATORS.get(name, f"{getattr(plugin.creator_fn, '__module__', '?')}.{name}")


def has_comm_ptr(implementation: str | None) -> bool:
    """Whether torch's class of that name gives its communicator's address (what ncclpool.torch needs)."""
    cls = getattr(dist, implementation, None) if implementation else None
    return cls is not None and hasattr(cls, "_comm_ptr")


def _nccl_version() -> str:
    try:
        v = torch.cuda.nccl.version()
    except Exception:  # noqa: BLE001 - a torch without NCCL
        return ""
    return ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)


def torch_report() -> dict:
    """What ``ncclpool info`` says about torch: its version, the NCCL and CUDA it was built with, and
    the class ``init_process_group("nccl")`` makes here (before any group: default_implementation),
    with whether ncclpool.torch can use it."""
    implementation = default_implementation()
    usable = has_comm_ptr(implementation)
    if implementation is None:
        why = "torch without NCCL (or without torch.distributed): ncclpool.torch needs NCCL process groups"
    elif not usable:
        why = (f"{implementation} has no _comm_ptr (torch 2.14's opt-in nccl2): ncclpool.torch refuses it; run with "
               "TORCH_DIST_USE_NCCL2=0")
    elif implementation == NCCL2:
        why = "nccl2 (torch 2.15's default); TORCH_DIST_USE_NCCL2=0 gives the classic ProcessGroupNCCL"
    elif implementation == CLASSIC:
        why = "torch's classic ProcessGroupNCCL"
    else:
        why = "not a class ncclpool.torch was tested on (docs/python.md, \"Torch versions\")"
    return {"version": torch.__version__, "cuda": torch.version.cuda, "nccl": _nccl_version(),
            "nccl_process_group": implementation, "usable": usable, "why": why}
