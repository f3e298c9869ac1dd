"""The symmetric fence before SGLang's PyNccl collectives on ncclpool.sglang's windows (docs/python.md,
"NCCL versions"): NCCL 2.28.0-2.30.6 launch their symmetric kernels with PDL but without the wait for
the kernel before them, and SGLang enqueues PyNccl's collectives on the stream of the kernel that
produced their input (a PDL-enabled kernel of flashinfer or sgl-kernel triggers its dependents early).

:func:`install` (ncclpool.sglang's install() and its pool's creation call it) declares the fence
(ncclpool.prefer_symmetric_fence: the symmetric kernels stay on, fenced, where the process decides
``fence``) and wraps PyNcclCommunicator's collectives once SGLang's pynccl module is imported: before a
collective whose tensor sits in a symmetric window of that communicator (the pool's attachment says),
ncclpool.symmetric_fence on the collective's stream, which launches nothing unless the decision is
``fence`` (and, in a CUDA graph capture, nothing where NCCL orders the collective itself). A disabled
PyNccl (it calls no NCCL) and tensors outside the windows go through untouched. A fence that fails never
keeps this rank out of the collective (ncclpool._fence_or_wait): the stream's synchronize() stands in
for it, else the collective is entered and the error raised after it, the pool voting no.
"""
from __future__ import annotations

import functools
import sys
import threading
import warnings

import torch

import ncclpool
from ncclpool import InvalidState

PYNCCL = "sglang.srt.distributed.device_communicators.pynccl"
# PyNcclCommunicator's collectives (those a class of that name has are wrapped; sglang 0.5.23's
# GroupCoordinator reaches all_reduce and outplace_all_reduce with symmetric memory on).
METHODS = ("all_reduce", "outplace_all_reduce", "all_gather", "all_gatherv", "reduce_scatter", "reduce_scatterv", "broadcast", "reduce")

_lock = threading.Lock()
# ncclpool.sglang's tables of attachments (ncclComm_t address -> its Attachment, whose comm is the
# ncclpool.Communicator): one per module that installed (a process has one; tests load several).
_tables: list = []
_declared = False
wrapped: dict = {}  # (class, method name) -> the original function


def install(attachments: dict) -> list:
    """Declares the fence (once per process) and wraps PyNcclCommunicator's collectives if SGLang's pynccl
    module is imported (again at the pool's creation, when it is); returns the methods wrapped now.
    `attachments`: ncclpool.sglang's table of its groups' attachments (read at each collective)."""
    global _declared
    with _lock:
        if not any(t is attachments for t in _tables):
            _tables.append(attachments)
        if not _declared:
            _declared = True
            try:
                ncclpool.prefer_symmetric_fence()
            except InvalidState as e:  # the process decided the guard already: safe, slower; said once
                warnings.warn(f"ncclpool.sglang: {e}", RuntimeWarning, stacklevel=3)
        cls = getattr(sys.modules.get(PYNCCL), "PyNcclCommunicator", None)
        return _wrap(cls) if isinstance(cls, type) else []


def uninstall() -> None:
    """Puts the original methods back (ncclpool.sglang.uninstall)."""
    with _lock:
        for (cls, name), original in list(wrapped.items()):
            setattr(cls, name, original)
        wrapped.clear()


def _wrap(cls) -> list:
    done = []
    for name in METHODS:
        original = cls.__dict__.get(name)
        if not callable(original) or getattr(original, "_ncclpool_fenced", False):
            continue
        setattr(cls, name, _fenced(original))
        wrapped[(cls, name)] = original
        done.append(f"{cls.__module__}.{cls.__name__}.{name}")
    return done


def _fenced(original):
    @functools.wraps(original)
    def collective(self, *args, **kwargs):
        if _tables and not getattr(self, "disabled", False):
            comm = getattr(self, "comm", None)
            key = getattr(comm, "value", comm)
            attachment = next((a for a in (t.get(key) for t in _tables) if a is not None), None)
            if attachment is not None:
                fence_error = None
                try:
                    tensor = _window_tensor(attachment, args, kwargs)
                    if tensor is not None:
                        stream = _stream_of(args, kwargs, tensor)
                        pool = getattr(attachment.comm, "pool", None)
                        fence_error = ncclpool._fence_or_wait(stream, lambda: _wait_for(stream), () if pool is None else (pool,))
                except Exception as e:  # noqa: BLE001 - never decides whether this rank enters the collective
                    fence_error = e
                if fence_error is not None:  # entered on every rank all the same, then raised here
                    original(self, *args, **kwargs)
                    raise fence_error
        return original(self, *args, **kwargs)

    collective._ncclpool_fenced = True
    return collective


def _window_tensor(attachment, args, kwargs):
    """The first CUDA tensor of the call that sits in a symmetric window of the attachment's
    communicator (NCCL runs its symmetric kernels only there), or None."""
    for value in (*args, *kwargs.values()):
        for t in (value if isinstance(value, (list, tuple)) else (value,)):
            if isinstance(t, torch.Tensor) and t.is_cuda and attachment.comm.attached and attachment.comm.window_of(t.data_ptr()):
                return t
    return None


def _wait_for(stream) -> None:
    """What stands in for a fence that failed: the host waits for the stream (not in a CUDA graph
    capture, where it cannot)."""
    if torch.cuda.is_current_stream_capturing():
        raise RuntimeError("in a CUDA graph capture")
    stream.synchronize()


def _stream_of(args, kwargs, tensor):
    """The stream PyNccl enqueues on: the one passed (``stream=``), else the tensor's device's current one."""
    stream = kwargs.get("stream")
    if stream is None:
        stream = next((a for a in args if hasattr(a, "cuda_stream")), None)
    return stream if stream is not None else torch.cuda.current_stream(tensor.device)
