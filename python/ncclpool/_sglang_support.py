"""Stateless helpers of :mod:`ncclpool.sglang`: SGLang's configuration as SGLang reads it, the
communicator address of its PyNcclCommunicator, the tensor wrapper of a symmetric buffer, and the
debug warning about tensors outside the pool (SGLang's wording and deduplication)."""
from __future__ import annotations

import os
import traceback
import warnings

import torch

from ncclpool import InvalidArgument

KINDS = ("auto", "symmetric", "local")


def torch_release() -> tuple:
    """(2, 11, 0) for torch 2.11.0+cu130."""
    parts = []
    for piece in str(getattr(torch, "__version__", "0")).split("+")[0].split("."):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


def _env_bool(name: str, default: bool) -> bool:
    """SGLang's EnvBool, for a process without SGLang's modules."""
    value = os.environ.get(name)
    if value is None:
        return default
    if value.lower() in ("true", "1", "yes", "y"):
        return True
    if value.lower() in ("false", "0", "no", "n"):
        return False
    warnings.warn(f'Invalid value for {name}: "{value}" is not a valid boolean value, using default "{default}"')
    return default


def debug_enabled() -> bool:
    """SGLANG_DEBUG_SYMM_MEM through SGLang's envs (which tests and SGLang may override)."""
    try:
        from sglang.srt.environ import envs
    except ImportError:
        return _env_bool("SGLANG_DEBUG_SYMM_MEM", False)
    return bool(envs.SGLANG_DEBUG_SYMM_MEM.get())


def prealloc_gib() -> int:
    """SGLANG_SYMM_MEM_PREALLOC_GB_SIZE (GiB; -1 by default)."""
    try:
        from sglang.srt.environ import envs
    except ImportError:
        value = os.environ.get("SGLANG_SYMM_MEM_PREALLOC_GB_SIZE", "-1")
        try:
            return int(value)
        except ValueError:
            raise InvalidArgument(f"SGLANG_SYMM_MEM_PREALLOC_GB_SIZE={value!r} is not an integer number of GiB") from None
    return int(envs.SGLANG_SYMM_MEM_PREALLOC_GB_SIZE.get())


def symmetric_memory_enabled() -> bool:
    """SGLang's --enable-symm-mem, as published in its runtime context (False before, or without SGLang)."""
    try:
        from sglang.srt.runtime_context import get_exec
    except ImportError:
        return False
    try:
        return get_exec().comm.enable_symm_mem
    except ValueError:
        return False


def kind_from_env() -> str:
    """NCCLPOOL_SGLANG_KIND: the pool's registration kind (unset or empty: auto)."""
    kind = os.environ.get("NCCLPOOL_SGLANG_KIND", "") or "auto"
    if kind not in KINDS:
        raise InvalidArgument(f"NCCLPOOL_SGLANG_KIND={kind!r} is not one of {', '.join(KINDS)} (unset: auto)")
    return kind


def comm_pointer(communicator, label: str) -> int:
    """The ncclComm_t address of SGLang's PyNcclCommunicator (its ``comm``: a ctypes c_void_p)."""
    comm = getattr(communicator, "comm", None)
    value = getattr(comm, "value", comm)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidArgument(f"group '{label}': its PyNcclCommunicator has no NCCL communicator (comm={comm!r}); "
                              "symmetric memory needs pynccl with NCCL available and world size > 1")
    return value


class BufferOwner:
    """Hands one block of the pool to torch.as_tensor; torch keeps it alive while any view lives."""

    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3}


def placement_of(routes: dict | None, nbytes: int) -> str | None:
    """Where an auto pool puts a request of `nbytes` (its size classes: the last one from at most nbytes)."""
    classes = (routes or {}).get("classes", [])
    picks = [c["placement"] for c in classes if c["min_bytes"] <= nbytes]
    return picks[-1] if picks else None


def warn_outside_pool(logger, seen: set, tensors: dict, op_name: str, in_pool) -> None:
    """Names the tensors of a collective that are not in the pool, once per stack (SGLang's debug output)."""
    bad = [(name, t) for name, t in tensors.items() if not in_pool(t)]
    if not bad:
        return
    traces = traceback.format_stack()
    if any("_flashinfer_autotune" in trace for trace in traces):
        return  # autotuning runs collectives on scratch tensors on purpose
    stack = "".join(traces[:-2])
    key = f"{op_name}:{','.join(n for n, _ in bad)}:{stack}"
    if key in seen:
        return
    seen.add(key)
    details = "\n".join(f"  - '{n}' (data_ptr=0x{t.untyped_storage().data_ptr():x}, shape={list(t.shape)}, dtype={t.dtype})"
                        for n, t in bad)
    logger.warning("[SymmMem Debug] %s: %d tensor(s) are NOT in the NCCL symmetric memory pool:\n%s\nStack trace:\n%s",
                   op_name, len(bad), details, stack)
