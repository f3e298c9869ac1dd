"""Stateless helpers of :mod:`ncclpool.sglang`: SGLang's configuration as SGLang reads it, the
communicator address of its PyNcclCommunicator, the tensor wrapper of a symmetric buffer, and the
debug warning about tensors outside the pool (SGLang's wording and deduplication)."""
from __future__ import annotations

import bisect
import traceback
from dataclasses import dataclass

import torch

from ncclpool import AgreementError, InvalidArgument, _environment

def torch_release() -> tuple:
    """(2, 11, 0) for torch 2.11.0+cu130."""
    parts = []
    for piece in str(getattr(torch, "__version__", "0")).split("+")[0].split("."):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


def debug_enabled() -> bool:
    """SGLANG_DEBUG_SYMM_MEM through SGLang's envs (which tests and SGLang may override)."""
    try:
        from sglang.srt.environ import envs
    except ImportError:
        return _environment.sglang_bool("SGLANG_DEBUG_SYMM_MEM", False)
    return bool(envs.SGLANG_DEBUG_SYMM_MEM.get())


def prealloc_gib() -> int:
    """SGLANG_SYMM_MEM_PREALLOC_GB_SIZE (GiB; -1 by default)."""
    try:
        from sglang.srt.environ import envs
    except ImportError:
        return _environment.sglang_int("SGLANG_SYMM_MEM_PREALLOC_GB_SIZE", -1)
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


@dataclass(frozen=True)
class Settings:
    """What changes this module's collective steps, read once (when the pool is made) and carried in
    the pool's agreed settings: every attach compares them across the group's ranks, so a rank whose
    environment differs fails every rank at the group's first use instead of joining other steps."""

    kind: str          # NCCLPOOL_SGLANG_KIND: the pool's registration kind
    debug: bool        # SGLANG_DEBUG_SYMM_MEM: buffer checks (collective) and the layout check mode
    prealloc_gib: int  # SGLANG_SYMM_MEM_PREALLOC_GB_SIZE: the preallocation (a context and a commit)
    problem: str       # a setting this rank could not read: its "no" at the first attach ('' if none)

    @property
    def agreed(self) -> str:
        return (f"ncclpool.sglang kind={self.kind} debug={int(self.debug)} prealloc_gib={self.prealloc_gib}"
                + (" (unreadable settings on this rank)" if self.problem else ""))


@dataclass
class Attachment:
    """ncclpool.sglang's attachment of a group's communicator to its pool (made at the group's first use)."""

    comm: object  # the ncclpool.Communicator
    label: str
    captured_checks: list  # (op_name, buffer pointers) checked during a capture, verified after it


def read_settings() -> Settings:
    """This rank's settings; a value it cannot read becomes its "no" at the pool's first attach (never
    a raise before the collective attach the other ranks are heading for)."""
    problems = []

    def read(what, default):
        try:
            return what()
        except Exception as e:  # noqa: BLE001 - kept as this rank's vote
            problems.append(str(e))
            return default
    kind = read(_environment.sglang_kind, "auto")
    debug = bool(read(debug_enabled, False))
    gib = read(prealloc_gib, -1)
    return Settings(kind, debug, gib, "; ".join(problems))


class SegmentIndex:
    """The segments of a MemPool, sorted, read again from torch's snapshot only after the pool's
    allocation counters moved: a lookup is O(log segments)."""

    def __init__(self):
        self._key, self._bases, self._ends = (), [], []

    def holds(self, pool, mempool, ptr: int) -> bool:
        stats = pool.stats()
        key = (stats["allocation_count"], stats["deallocation_count"])
        if self._key != key:
            segments = sorted((s["address"], s["address"] + s["total_size"]) for s in mempool.snapshot())
            self._key, self._bases, self._ends = key, [b for b, _ in segments], [e for _, e in segments]
        i = bisect.bisect_right(self._bases, ptr) - 1
        return i >= 0 and ptr < self._ends[i]


def release_buffer(logger, pool, ptr: int, device) -> None:
    """A symmetric buffer's finalizer: back to the pool once work queued on any stream is done. A block
    that could not go back would place this rank's later buffers elsewhere than the others': its "no"
    at the pool's next agreement point."""
    try:
        torch.cuda.synchronize(device)
        pool.free(ptr)
    except Exception as e:  # noqa: BLE001 (a finalizer: report, never raise)
        logger.exception("ncclpool.sglang: could not return a symmetric buffer to the pool")
        pool.vote_no(f"a symmetric buffer could not go back to the pool on this rank: {type(e).__name__}: {e}")


class CollectiveSteps:
    """The collective steps of ncclpool.sglang's pool, one module's (a process's): `current` says which
    runs now (SGLang's watchdog asks), and `collective` fences each on the device.

    SGLang makes its communicators with graphUsageMode=1 when symmetric memory is on: NCCL then does
    not order a launch outside a graph after an outstanding graph launch of the same communicator, and
    the agreement runs on a stream of ncclpool's. So the current stream is drained before the step and
    the device after it (not after a failed step). A rank with nothing to register does not wait in the
    step; after the fence its result has arrived, and poll() raises a mismatch at the same point as on
    the rank that waited. A drain that fails is this rank's "no" in the step, which it still takes."""

    def __init__(self, pool_of):
        self._pool_of = pool_of  # the module's pool (made at first use)
        self.current = None      # (comm pointer, group name, step) while one runs

    def step(self, comm_ptr, label, what, fn, *args):
        self.current = (comm_ptr, label, what)
        try:
            return fn(*args)
        finally:
            self.current = None

    def collective(self, comm_ptr, label, what, fn, *args, poll: bool = True):
        pool = self._pool_of()
        fenced = not torch.cuda.is_current_stream_capturing()
        fence_error = None
        if fenced:
            try:
                torch.cuda.current_stream().synchronize()
            except BaseException as e:  # noqa: BLE001 - kept as this rank's vote
                fence_error = e
                pool.vote_no(f"{what}: draining the current stream failed on this rank: {type(e).__name__}: {e}")
        result = self.step(comm_ptr, label, what, fn, *args)  # an error (a mismatch, a timeout) skips the fence
        if fence_error is not None:                          # after: a step that timed out left a kernel
            raise fence_error                                # that never ends
        if fenced:
            try:
                torch.cuda.synchronize()
            except BaseException as e:  # noqa: BLE001 - the step is done on every rank: this rank's "no" at the next
                pool.vote_no(f"after {what}: the device fence failed on this rank: {type(e).__name__}: {e}")
                return result  # one, and the caller keeps what the step made (an attachment)
            if poll:
                self.step(comm_ptr, label, f"{what} (its outcome)", pool.poll)
        return result


def verify_buffers(collective, attachment, comm_ptr: int, op_name: str, ptrs, when: str) -> None:
    """Debug mode: a collective's buffers sit at the same offset of the same window on every rank
    (collective over the attachment's group, through ncclpool.sglang's fenced `collective`)."""
    try:
        collective(comm_ptr, attachment.label, f"buffer check of {op_name}", attachment.comm.verify_buffers, *ptrs)
    except AgreementError as e:
        raise AgreementError(f"{op_name} on group '{attachment.label}'{when}: {e}") from e


def verify_captured(collective, attachment, comm_ptr: int) -> None:
    """Buffers checked during a capture, now that nothing captures (collective over the group; every
    rank recorded the same checks). Every check on every rank, whatever an earlier one raised: each is
    a collective step of its own; the first error is raised after the last."""
    checks, attachment.captured_checks = attachment.captured_checks, []
    first = None
    for n, (op_name, ptrs) in enumerate(checks):
        try:
            verify_buffers(collective, attachment, comm_ptr, op_name, ptrs,
                           f" (captured in a CUDA graph, check {n + 1} of {len(checks)})")
        except BaseException as e:
            first = first or e
    if first is not None:
        raise first


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
