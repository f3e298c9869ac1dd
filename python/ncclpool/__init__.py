"""ncclpool: one GPU memory pool whose segments are registered with NCCL for every communicator.

Pure Python over the C ABI (ctypes). The pieces:

* :class:`Pool` - a pool on one device (or the simulator): allocate/free, reserve, trim, statistics,
  :meth:`Pool.scope` (routes this thread's PyTorch allocations to the pool, commits windows at its
  scheduled exits) (ncclpool/pool.py).
* :class:`Communicator` - a communicator attached to a pool (``Pool.attach_nccl`` / ``attach_sim``)
  (ncclpool/communicator.py).
* :class:`SimGroup` - simulated ranks (threads of this process) for tests without GPUs (ncclpool/sim.py).
* :func:`features` - what this machine supports (CUDA, NCCL version, symmetric windows);
  :func:`copy_engine_vote` - this rank's vote for copy-engine all-gather; :func:`version`,
  :func:`last_error`; :func:`prefer_symmetric_fence` and :func:`symmetric_fence` - the fence before
  collectives on windows where NCCL's symmetric kernels can read their input early;
  :func:`prefer_nccl_symmetric_ctas` - NCCL's own CTA count for a process whose symmetric collectives
  overlap compute (training) (here).
* :mod:`ncclpool.torch` - the PyTorch layer (Megatron-Core ``nccl_allocator`` compatible API).

Argument conversion shared by them is in ncclpool/_arguments.py, the C ABI's declarations in
ncclpool/_capi.py.
"""
from __future__ import annotations

import ctypes
from ctypes import byref

from . import errors
from ._arguments import (_CHECK_NAMES, _KIND_NAMES, _SIZE_MAX, _SOURCE_NAMES, CHECK_LEVELS, COLLECTIVES, REGISTRATIONS,
                         SOURCES, _check_level, _collective, _growth_chunk_from_env, _kind, _min_segment_from_env, _size,
                         _stream)
from ._capi import Features, PoolOptions, call, features_dict, library, library_path, raise_last, read_stats
from .communicator import Communicator
from .errors import (AgreementError, BackendError, DoubleFree, Error, ForeignPointer, InvalidArgument,
                     InvalidPointer, InvalidState, OutOfMemory, RegistrationError, SizeTooLarge, Unsupported)
from .pool import Pool
from .report import format_bytes, memory_summary
from .sim import SimGroup, sim_inject_oom, sim_set_capturing

__all__ = [
    "Pool", "Communicator", "SimGroup", "features", "copy_engine_vote", "node_id", "version", "last_error", "library_path", "memory_summary",
    "prefer_symmetric_fence", "symmetric_fence", "prefer_nccl_symmetric_ctas",
    "format_bytes", "errors", "Error", "InvalidArgument", "SizeTooLarge", "OutOfMemory", "DoubleFree",
    "ForeignPointer", "InvalidPointer", "BackendError", "Unsupported", "InvalidState", "RegistrationError",
    "AgreementError", "SOURCES", "REGISTRATIONS",
]


def version() -> str:
    """Version of the loaded libncclpool ('major.minor.patch': project() in CMakeLists.txt, the one
    place it is written; the wheel's metadata carries the same)."""
    return library().ncclpool_version_string().decode()


def last_error() -> str:
    """Message of this thread's last failed ncclpool call ('' if none)."""
    return (library().ncclpool_last_error() or b"").decode(errors="replace")


def features() -> dict:
    """What ncclpool can use here: CUDA devices, NCCL library/version, symmetric-window support, and
    the CTA count of NCCL's symmetric kernels (``symmetric_ctas``, 0 = NCCL's choice; fixed at the
    process's first symmetric attach: ``symmetric_ctas_decided``; ``symmetric_ctas_source`` says why;
    ``symmetric_ctas_nccl_preferred``: the process called :func:`prefer_nccl_symmetric_ctas` and it was
    recorded (a refused call leaves it False), as the FSDP2 helper and ``ncclpool.torch.megatron.install()`` do).
    ``nccl_other_copies``: how many other NCCL libraries are loaded in this process besides
    ``nccl_library`` (normally 0; the first is ``nccl_other_library``, version ``nccl_other_version``):
    looked for at each call. ``symmetric_kernels_enabled``: windows carry NCCL's symmetric flag, so its
    symmetric kernels run on them; on NCCL 2.28.0-2.30.6 on Hopper and newer
    (``symmetric_kernels_hazard``: those kernels can read their input before the kernel before them on
    the stream wrote it) on by default only where the process declared the fence (ncclpool.torch and
    ncclpool.sglang do), else off (the guard); ``symmetric_kernels_why`` says why, ``NCCLPOOL_SYMMETRIC_KERNELS=auto|on|off|fence``
    decides (docs/python.md, "NCCL versions"). ``symmetric_kernels_decision``: ``on``, ``fence`` (the
    kernels on, every collective on windows that ncclpool launches or wraps fenced: ``auto`` in a process
    that declared it, ``symmetric_fence_declared``, as ncclpool.torch does), ``guard`` (off because of
    the hazard) or ``off``; ``symmetric_fence_kind``: ``kernel``, ``memset`` or ``node`` (NCCLPOOL_SYMMETRIC_FENCE);
    ``symmetric_fence_calls``, ``symmetric_fences_launched``, ``symmetric_fences_skipped_in_capture``:
    :func:`symmetric_fence`'s counters in this process."""
    f = Features()
    f.struct_size = ctypes.sizeof(Features)
    call("ncclpool_get_features", byref(f))
    out = features_dict(f)
    out["library"] = library_path()
    return out


def prefer_symmetric_fence() -> None:
    """Declares that this process's collectives on windows follow :func:`symmetric_fence` (the layers of
    ncclpool that launch or wrap collectives do: ncclpool.torch.init() and ncclpool.sglang call this):
    where NCCL's symmetric kernels can read their input early (NCCL 2.28.0-2.30.6), ``auto`` then keeps
    them on, fenced, instead of turning them off (the guard). Call it before the first symmetric attach;
    idempotent. Raises InvalidState, naming the decision, when the process decided the guard already."""
    call("ncclpool_prefer_symmetric_fence")


def prefer_nccl_symmetric_ctas() -> None:
    """Declares that this process's symmetric collectives overlap compute (training: FSDP2's and
    Megatron-FSDP's all-gathers and reduce-scatters run beside the forward and backward): ncclpool's
    measured default CTA count for NCCL's symmetric kernels (32 on compute capability 9.x, measured on
    decode all-reduces, where nothing overlaps the collective) then yields to NCCL's own choice, since
    more CTAs take SMs the overlapping compute needs. ``NCCL_SYM_CTAS``, ``NCCLPOOL_SYM_CTAS`` and a
    profile's count still win (docs/python.md, "The symmetric kernels' CTA count"). The FSDP2 helper
    (ncclpool.torch.fsdp) and ncclpool.torch.megatron.install() call this; decode paths do not. Call it
    before the first symmetric attach, on every rank (the count is compared at the attach agreement);
    idempotent. Raises InvalidState, naming the decision, when the process decided ncclpool's measured
    default already; after any other decision it only records the declaration (``features()
    ["symmetric_ctas_nccl_preferred"]``)."""
    call("ncclpool_prefer_nccl_symmetric_ctas")


def symmetric_fence(stream=None) -> bool:
    """Right before a collective on windows that this process enqueues itself on ``stream`` (a
    torch.cuda.Stream, an int cudaStream_t, None: the legacy default stream): where the process decided
    ``fence`` (see :func:`features`), launches one fence on it so that the collective starts only after
    the work before it ended; in a CUDA graph capture a node, except where NCCL orders the capture itself
    (NCCL < 2.29 with graph mixing on). Returns whether a fence was launched. Cheap when nothing is
    needed; BackendError with the CUDA error text when the launch fails."""
    launched = ctypes.c_int(0)
    call("ncclpool_symmetric_fence", _stream(stream), byref(launched))
    return bool(launched.value)


def _fence_or_wait(stream, wait, pools=()):
    """The step before a collective on windows that a wrapper of ncclpool (ncclpool.torch's
    torch.distributed collectives, ncclpool.sglang's PyNccl ones) makes on every rank: the fence must
    never decide whether this rank enters the collective (a rank that raised here while the others
    entered it would leave them waiting forever). :func:`symmetric_fence` on `stream`; where it
    raises, `wait()` (the stream's synchronize(): the host waits for the work before the collective,
    a fence of its own; it raises in a capture, where it cannot) stands in, with a warning. Returns
    None, or the error to raise once the collective was entered (neither worked); then each pool of
    `pools` (the wrapped group's) votes no, so that its next collective step fails on every rank."""
    try:
        symmetric_fence(stream)
        return None
    except Exception as fence_error:  # noqa: BLE001 - any failure: the collective is entered regardless
        if wait is not None:
            try:
                wait()
            except Exception:  # noqa: BLE001 - the fence's error is the one reported (a capture included)
                pass
            else:
                import warnings
                warnings.warn(f"ncclpool: the symmetric fence failed ({fence_error}); the stream was synchronized "
                              f"instead before the collective", RuntimeWarning, stacklevel=3)
                return None
        for pool in pools:
            try:
                pool.vote_no(f"the symmetric fence before a collective failed on this rank: {fence_error}")
            except Exception:  # noqa: BLE001 - a closed pool has no next step
                pass
        return fence_error


def copy_engine_vote(requested: bool | None, ranks: int, device: int = 0) -> tuple[bool, str]:
    """This rank's vote for running all-gather on a communicator made with NCCL's CTA policy ZERO
    (copy-engine collectives on windows, no SMs): ``(use, why)``. ``requested``: None = auto (yes where
    this machine's ``ncclpool tune`` profile for ``ranks`` ranks measured it faster), True, False.
    ``NCCLPOOL_COPY_ENGINE=off`` wins over a request; NCCL < 2.28 and symmetric kernels off on GPU
    ``device`` (the NCCL-version guard, see :func:`features`) vote no. Local: ranks must combine their
    votes before creating a group (``ncclpool.torch.copy_engine_group`` does)."""
    if requested is not None and not isinstance(requested, bool):
        raise InvalidArgument(f"copy_engine_vote: requested must be None, True or False, not {requested!r}")
    use = ctypes.c_int(0)
    why = ctypes.create_string_buffer(1024)
    code = -1 if requested is None else int(requested)
    call("ncclpool_copy_engine_vote", code, int(device), int(ranks), byref(use), why, len(why))
    return bool(use.value), why.value.decode(errors="replace")


def node_id() -> int:
    """The node this process runs on, as NCCL tells nodes apart (``NCCL_HOSTID`` when set, else the
    host name and boot id; ncclpool's own 64-bit hash, only compared for equality): processes with
    different values are different nodes to NCCL, which runs symmetric kernels and copy engines
    within one node only. Read once per process."""
    node = ctypes.c_uint64(0)
    call("ncclpool_node_id", byref(node))
    return node.value
