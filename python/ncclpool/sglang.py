"""SGLang drop-in: ``sglang.srt.distributed.device_communicators.pynccl_allocator`` (sglang 0.5.23)
over one ncclpool pool shared by every group. Switching (docs/sglang.md)::

    NCCLPOOL_SGLANG=1 python -m sglang.launch_server ... --enable-symm-mem   # or, in Python:
    import ncclpool.sglang; ncclpool.sglang.install()

Same names, arguments and call sites as SGLang's module; what differs:

* No JIT build: the pool is an ncclpool pool behind a ``torch.cuda.MemPool`` (ncclpool.torch),
  made at first use, of kind ``auto`` unless ``NCCLPOOL_SGLANG_KIND`` says ``symmetric`` or
  ``local`` (the NCCL-version guard, ``NCCLPOOL_SYMMETRIC_KERNELS``, applies).
* Lockstep (docs/sglang.md, "Misconfigured ranks"): no rank decides alone whether it joins a
  collective step. The settings that change the steps (kind, SGLang's debug mode, the preallocation)
  are read once and are the pool's agreed settings, compared at every group's first use (an attach
  agreement, local kind included); a failure on one rank is its "no" at the agreement point it was
  heading for (``Pool.vote_no``, a commit after an error): every rank fails there together.
* Windows only at agreement points: a group is attached at its first use outside graph capture; a
  context exit is a scope end of the pool, whose scheduled ones (``Pool.scope_end_agrees``) register
  new windows; so do the first use after a capture, the preallocation and a symmetric buffer. Those
  are fenced (the stream before, the device after: SGLang's communicators do not order ncclpool's
  launches after its graphs), so a pool that grew on one rank only ends in ``AgreementError`` on
  every rank at the same context exit instead of a hang inside ``ncclCommWindowRegister``.
* ``SGLANG_DEBUG_SYMM_MEM=1``: the pool checks its layout at every scope end, and each buffer SGLang
  checks before a collective is proven to sit at the same offset of the same window on every rank
  (buffers checked during a capture: at the group's first use after it, or at the preallocation).
* Out of memory raises (``torch.OutOfMemoryError`` with ncclpool's reason as a note).
"""
from __future__ import annotations

import logging
import sys
import threading
import warnings
import weakref
from contextlib import nullcontext

import torch

import ncclpool
import ncclpool.torch as _layer
from ncclpool import InvalidArgument, InvalidState, Unsupported
from ncclpool import _environment, _sglang_fence, _sglang_hook
from ncclpool import _sglang_support as _support

__all__ = [
    "is_symmetric_memory_enabled", "set_graph_pool_id", "get_nccl_mem_pool", "SymmetricMemoryContext",
    "use_symmetric_memory", "disable_symmetric_memory_context", "restore_symmetric_memory_context",
    "is_tensor_in_symmetric_mempool", "debug_check_symmetric_mempool", "prealloc_symmetric_memory_pool",
    "allocate_symmetric_buffer", "describe_registration_in_progress", "install", "uninstall", "POOL_NAME",
]
SGLANG_NAMES = tuple(__all__[:12])  # the names sglang 0.5.23's module offers its callers
POOL_NAME = "sglang"  # pools are matched across ranks by name

after_2_8_0 = _support.torch_release() >= (2, 8)
logger = logging.getLogger(_sglang_hook.TARGET)  # SGLang's logging setup covers its module's name

_mem_pool = None          # the torch.cuda.MemPool every group shares
_pool = None              # the ncclpool.Pool behind it
_graph_pool_id = None
_cur_device = None
_active_symmetric_memory_context = None
_creation_lock = threading.Lock()
_commit_after_capture = False  # a context left during a capture: its segments' windows wait for the next use
_debug_seen_traces: set = set()
_segments = _support.SegmentIndex()  # the pool's segments, for is_tensor_in_symmetric_mempool
_settings = None          # _support.Settings: what the ranks agree on, read once when the pool is made


_Attachment = _support.Attachment
_attachments: dict = {}  # ncclComm_t address -> _Attachment
_unattached_in_capture: set = set()  # groups first used during a capture (warned once)


is_symmetric_memory_enabled = _support.symmetric_memory_enabled


def set_graph_pool_id(graph_pool_id):
    global _graph_pool_id
    _graph_pool_id = graph_pool_id


def get_nccl_mem_pool():
    """The torch.cuda.MemPool every group shares, over the ncclpool pool 'sglang' (made at first use,
    on the current device, with this rank's settings as its agreed settings)."""
    global _mem_pool, _pool, _cur_device, _settings
    if _mem_pool is None:
        if not after_2_8_0:
            raise Unsupported(f"--enable-symm-mem through ncclpool needs torch >= 2.8, not {torch.__version__}")
        with _creation_lock:
            if _mem_pool is None:
                settings = _support.read_settings()
                # Debug mode: the pool compares live blocks at every scope end (NCCLPOOL_CHECK may ask for more).
                check = "layout" if settings.debug and _environment.check_mode() in ("", "off", "0") else None
                try:
                    mempool = _layer.create_nccl_mem_pool(kind=settings.kind, name=POOL_NAME, check=check,
                                                          agreed_settings=settings.agreed)
                except InvalidArgument as e:  # a pool setting this rank cannot read (NCCLPOOL_GROWTH_CHUNK,
                    mempool = _layer.create_nccl_mem_pool(  # NCCLPOOL_CHECK): a pool all the same, to vote no with
                        kind=settings.kind, name=POOL_NAME, check="off", growth_chunk=0, min_segment=0,
                        agreed_settings=settings.agreed + " (pool settings unreadable on this rank)")
                    settings = _support.Settings(settings.kind, settings.debug, settings.prealloc_gib,
                                                 "; ".join(p for p in (settings.problem, str(e)) if p))
                _pool = _layer.ncclpool_pool(mempool)
                if settings.problem:  # every rank fails at this pool's first attach, this one saying why
                    _pool.vote_no(f"ncclpool.sglang: {settings.problem}")
                _cur_device = torch.cuda.current_device()
                _settings = settings
                _mem_pool = mempool
                _sglang_fence.install(_attachments)  # SGLang's PyNccl collectives on the windows, fenced (issue 46)
    return _mem_pool


def describe_registration_in_progress():
    """What collective step of the pool runs now (for SGLang's watchdog), or None. A rank waiting for
    the others inside one raises AgreementError after NCCLPOOL_AGREEMENT_TIMEOUT_S."""
    step = _steps.current
    if step is None:
        return None
    comm_ptr, label, what = step
    return f"comm={comm_ptr} group={label} ({what}, ncclpool pool '{POOL_NAME}')"


_steps = _support.CollectiveSteps(lambda: _pool)  # this module's collective steps, fenced (its docstring)
_step, _collective = _steps.step, _steps.collective


def _attachment(comm_ptr: int, label: str, what: str) -> _Attachment:
    """The pool's attachment of a communicator, made at its first use (collective over its group, the
    local kind included: the attach agreement compares every rank's settings and kind)."""
    attachment = _attachments.get(comm_ptr)
    if attachment is None:
        comm = _collective(comm_ptr, label, f"attach at {what}", _pool.attach_nccl, comm_ptr, None, poll=False)
        attachment = _attachments[comm_ptr] = _Attachment(comm, label, [])  # kept before anything else can raise
        _unattached_in_capture.discard(comm_ptr)
        _step(comm_ptr, label, f"attach at {what} (its outcome)", _pool.poll)
    return attachment


def _settle(comm_ptr: int, label: str, what: str) -> _Attachment:
    """Outside capture, at a point every rank of the group reaches alike: attach the group, register
    the windows of segments a capture made, verify the buffers checked during a capture (debug). The
    commit after a capture is made whatever the attach did here (voting no after a failed one): the
    attach agrees over this group only, the commit over every group of the pool, whose other ranks
    may have attached theirs."""
    global _commit_after_capture
    try:
        attachment = _attachment(comm_ptr, label, what)
    except BaseException:
        if _commit_after_capture:
            _commit_after_capture = False
            _collective(comm_ptr, label, f"commit after a capture, at {what}, after an error on this rank",
                        _pool._commit_after_error, poll=False)
        raise
    if _commit_after_capture:
        _commit_after_capture = False
        _collective(comm_ptr, label, f"commit after a capture, at {what}", _pool.commit)
    _verify_captured(attachment, comm_ptr)
    return attachment


class SymmetricMemoryContext:
    """Allocations inside come from the shared pool; at exit the pool's scope ends (a scheduled scope
    end registers new windows with every attached group, after the ranks agree). Under graph capture
    the graph's memory pool is paused inside, as in SGLang."""

    def __init__(self, group_coordinator):
        self.group_coordinator = group_coordinator
        label = getattr(group_coordinator, "unique_name", repr(group_coordinator))
        pynccl = getattr(group_coordinator, "pynccl_comm", None)
        if pynccl is None:
            raise InvalidArgument(f"Symmetric memory requires pynccl to be enabled in group '{label}'")
        self._pool_id = get_nccl_mem_pool().id
        self._device_index = torch.cuda.current_device()
        self.is_graph_capture = torch.cuda.is_current_stream_capturing()
        self._comm_ptr = _support.comm_pointer(pynccl, label)
        self._label = label
        self._scope = None      # the ncclpool scope while entered
        self._routing = False   # torch routes this thread's allocations to the pool
        self._suspended = False
        self._failures = 0

    def __enter__(self):
        global _active_symmetric_memory_context, _commit_after_capture
        if self._scope is not None:
            raise InvalidState(f"this SymmetricMemoryContext of group '{self._label}' is entered already")
        if self.is_graph_capture:
            if _graph_pool_id is None:  # the program's, the same on every rank: refused before anything counts
                raise InvalidState("graph_pool_id is not set under graph capture: call set_graph_pool_id(pool) before capturing")
            _commit_after_capture = True  # the next use outside capture commits, on every rank, whatever fails here
        # Another device on this rank is its "no" at the steps every rank of the group makes here (the
        # attach at a first use, this use's scope end), never a reason to leave them.
        problem = None
        if self._device_index != _pool.device:
            problem = InvalidState(f"group '{self._label}': the current device is cuda:{self._device_index}, the symmetric pool "
                                   f"'{POOL_NAME}' is on cuda:{_pool.device} (one pool per process, made on its first use)")
            _pool.vote_no(str(problem))
        # Every use ends one scope of the pool on every rank, whatever failed before it here (an
        # attach refused, a commit that disagreed): the scope end agrees over every group of the pool,
        # and the ranks of the other groups reach it.
        paused = False
        try:
            if self.is_graph_capture:
                if self._comm_ptr not in _attachments and self._comm_ptr not in _unattached_in_capture:
                    _unattached_in_capture.add(self._comm_ptr)
                    warnings.warn(f"ncclpool.sglang: group '{self._label}' is first used during CUDA graph capture; it is "
                                  "attached (collectively) at its first use after the capture, so the collectives captured "
                                  "on its buffers run without registration", _layer.PerformanceWarning, stacklevel=2)
                _pause_graph_pool()
                paused = True
            else:
                _settle(self._comm_ptr, self._label, "context entry")
        except BaseException as e:
            problem = problem or e
        self._failures = ncclpool.library().ncclpool_torch_failures()
        scope = _pool.scope()
        try:
            scope.__enter__()
        except BaseException:
            if paused:
                _resume_graph_pool()
            raise
        try:
            if problem is not None:
                raise problem
            self._route(True)
        except BaseException as e:
            self._end_scope(scope, e)  # the scope end counts on every path, voting no here
            if paused:
                _resume_graph_pool()
            raise
        self._scope = scope
        _active_symmetric_memory_context = self
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        global _active_symmetric_memory_context, _commit_after_capture
        scope, self._scope = self._scope, None
        if scope is None:
            raise InvalidState(f"this SymmetricMemoryContext of group '{self._label}' is not entered")
        suspended, self._suspended = self._suspended, False  # left while disabled: the graph pool runs already
        try:
            try:
                if self._routing:
                    self._route(False)
            except BaseException as e:
                self._end_scope(scope, e)  # the scope end counts, voting no
                raise
            self._end_scope(scope, exc_val)
        finally:
            if self.is_graph_capture:
                _commit_after_capture = True
                if not suspended:
                    _resume_graph_pool()
            _active_symmetric_memory_context = None
        if exc_val is not None and ncclpool.library().ncclpool_torch_failures() > self._failures and hasattr(exc_val, "add_note"):
            exc_val.add_note(f"ncclpool: {ncclpool.last_error()}")
        return False

    def _end_scope(self, scope, error) -> None:
        """The pool's scope end: the same collective steps on every rank; an error on this rank is
        its "no" at the next agreement point (this scope end where it is one: docs/registry.md,
        "Lockstep"). The pool says whether this one agrees (its schedule, windows attached): those
        are fenced (_collective)."""
        args = (None, None, None) if error is None else (type(error), error, error.__traceback__)
        what = "scope end" if error is None else "scope end after an error"
        if not self.is_graph_capture and _pool.scope_end_agrees():
            _collective(self._comm_ptr, self._label, what, scope.__exit__, *args, poll=error is None)
        else:
            _step(self._comm_ptr, self._label, what, scope.__exit__, *args)

    def _route(self, on: bool) -> None:
        if on:
            torch._C._cuda_beginAllocateCurrentThreadToPool(self._device_index, self._pool_id)
        else:
            torch._C._cuda_endAllocateToPool(self._device_index, self._pool_id)
            torch._C._cuda_releasePool(self._device_index, self._pool_id)
        self._routing = on

    # disable_symmetric_memory_context() / restore_...(): SGLang calls them around code that runs on
    # one rank only (DeepGEMM's warm-up). Only torch's routing pauses: the pool's scope stays open, so
    # no scope end is counted there (every rank keeps one schedule of agreement points).
    def _suspend(self) -> None:
        global _active_symmetric_memory_context
        self._route(False)
        self._suspended = True
        if self.is_graph_capture:
            _resume_graph_pool()
        _active_symmetric_memory_context = None

    def _resume(self) -> None:
        global _active_symmetric_memory_context
        if not self._suspended or self._scope is None:
            raise InvalidState(f"restore_symmetric_memory_context: the context of group '{self._label}' was not disabled "
                               "by disable_symmetric_memory_context() (or has exited since)")
        if self.is_graph_capture:
            _pause_graph_pool()
        self._route(True)
        self._suspended = False
        _active_symmetric_memory_context = self


def _pause_graph_pool() -> None:  # graph_pool_id is set: a context under capture refuses to enter otherwise
    torch._C._cuda_endAllocateToPool(_cur_device, _graph_pool_id)


def _resume_graph_pool() -> None:
    torch._C._cuda_beginAllocateCurrentThreadToPool(_cur_device, _graph_pool_id)


def use_symmetric_memory(group_coordinator, disabled: bool = False):
    disabled = not is_symmetric_memory_enabled() or disabled or group_coordinator.world_size == 1
    return SymmetricMemoryContext(group_coordinator) if not disabled else nullcontext()


def disable_symmetric_memory_context():
    """Pauses the active context's routing (no scope end, nothing collective); returns it, or None."""
    saved_context = _active_symmetric_memory_context
    if saved_context is None:
        return None
    saved_context._suspend()
    return saved_context


def restore_symmetric_memory_context(saved_context):
    if saved_context is None:
        return
    if not isinstance(saved_context, SymmetricMemoryContext):
        raise InvalidArgument(f"restore_symmetric_memory_context: {saved_context!r} is not what "
                              "disable_symmetric_memory_context() returned")
    saved_context._resume()


# ---- debug mode (SGLANG_DEBUG_SYMM_MEM=1) ----

def is_tensor_in_symmetric_mempool(tensor) -> bool:
    """Whether the tensor's storage was allocated from the shared pool (its segments, looked up in
    O(log segments); torch's snapshot is read again only after the pool's segments changed)."""
    return _mem_pool is not None and _segments.holds(_pool, _mem_pool, tensor.untyped_storage().data_ptr())


def _verify_captured(attachment: _Attachment, comm_ptr: int) -> None:
    _support.verify_captured(_collective, attachment, comm_ptr)


def debug_check_symmetric_mempool(group_coordinator, tensors: dict, op_name: str) -> None:
    """SGLANG_DEBUG_SYMM_MEM=1: on every rank, the tensors of a collective must sit at the same place of
    the same window (else AgreementError on every rank; during a capture the check runs at the group's
    first use after it, or at the preallocation); on the first rank, a warning names tensors outside
    the pool (once per stack)."""
    debug = _settings.debug if _settings is not None else _support.debug_enabled()  # the pool's: agreed at attach
    if not debug or not is_symmetric_memory_enabled():
        return
    if not isinstance(tensors, dict):
        raise InvalidArgument(f"debug_check_symmetric_mempool: tensors must be a dict of name -> tensor, not {type(tensors).__name__}")
    pynccl = getattr(group_coordinator, "pynccl_comm", None)
    if pynccl is not None and group_coordinator.world_size > 1 and _pool is not None:
        comm_ptr = _support.comm_pointer(pynccl, group_coordinator.unique_name)
        attachment = _attachments.get(comm_ptr)
        if attachment is not None:  # a group never used in a context has no window to be wrong in
            problem = None
            try:
                ptrs = [t.data_ptr() for t in tensors.values()]
            except BaseException as e:  # no buffers to bring: the check still runs, and differs
                ptrs, problem = [], e
            if torch.cuda.is_current_stream_capturing():
                attachment.captured_checks.append((op_name, ptrs))
            else:
                try:
                    _verify_captured(attachment, comm_ptr)
                except BaseException as e:
                    problem = problem or e
                try:
                    _support.verify_buffers(_collective, attachment, comm_ptr, op_name, ptrs, "")
                except BaseException as e:
                    problem = problem or e
            if problem is not None:
                raise problem
    if group_coordinator.is_first_rank:  # a warning on one rank: it never raises (the collective comes next)
        try:
            _support.warn_outside_pool(logger, _debug_seen_traces, tensors, op_name, is_tensor_in_symmetric_mempool)
        except Exception:  # noqa: BLE001
            logger.exception("ncclpool.sglang: the debug check's warning about tensors outside the pool failed")


# ---- preallocation and standalone symmetric buffers ----

def prealloc_symmetric_memory_pool(*, is_draft_worker: bool, enable_symm_mem: bool, device: str, forward_stream):
    """SGLANG_SYMM_MEM_PREALLOC_GB_SIZE GiB through the TP group's context on `forward_stream` (torch
    keeps the segment for later tensors), then an agreement point that registers its windows at once.
    SGLang calls this on every rank after its graphs are captured: in debug mode the buffers checked
    during the captures are verified here too. With symmetric memory on, the context and the commit are
    made on every rank whatever its setting says (0 GiB where it is <= 0): which steps a rank takes
    never depends on a setting the ranks have not agreed on yet (the context's attach compares them)."""
    if is_draft_worker or not enable_symm_mem:
        return
    problem = None  # a captured check that failed: every rank still reaches the steps below, voting no
    for comm_ptr, attachment in list(_attachments.items()):
        try:
            _verify_captured(attachment, comm_ptr)
        except BaseException as e:
            problem = problem or e
    from sglang.srt.distributed.parallel_state import get_tp_group

    context = use_symmetric_memory(get_tp_group())
    if not isinstance(context, SymmetricMemoryContext):  # off, or one rank: nothing collective
        if problem is not None:
            raise problem
        return
    gib = _settings.prealloc_gib  # this rank's: the context's attach compares it with the group's
    if problem is not None:
        _pool.vote_no(str(problem))
    try:
        stream = None
        try:  # a stream that cannot be entered is this rank's "no" inside the context, never a skipped one
            stream = torch.get_device_module(device).stream(forward_stream)
            stream.__enter__()
        except BaseException as e:
            stream, problem = None, problem or e
        try:
            with context:
                if problem is not None:
                    raise problem
                if gib > 0:
                    logger.info(f"Pre-allocating symmetric memory pool with {gib} GiB (ncclpool pool '{POOL_NAME}')")
                    torch.empty((gib << 30,), dtype=torch.uint8, device=device)
        finally:
            if stream is not None:
                stream.__exit__(None, None, None)
    except BaseException:  # the commit every rank makes next, voting no
        _collective(context._comm_ptr, context._label, "commit after the preallocation, after an error on this rank",
                    _pool._commit_after_error, poll=False)
        raise
    _collective(context._comm_ptr, context._label, "commit after the preallocation", _pool.commit)


def allocate_symmetric_buffer(comm, nbytes: int):
    """A zeroed uint8 tensor of `nbytes` from the shared pool, registered with `comm` (SGLang's
    PyNcclCommunicator; attached at its first use, collectively), and whether it is in a symmetric
    window of `comm` (on every NCCL version: ncclpool refuses what is no real window). Every rank must
    request the same sizes in the same order. An agreement point: ranks whose requests grew the pool
    differently get AgreementError. The memory returns to the pool when the last view dies."""
    bad_size = None  # this rank's "no" at the steps below, which every rank takes
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0:
        bad_size = InvalidArgument(f"allocate_symmetric_buffer: nbytes must be a positive int, not {nbytes!r}")
    device = getattr(comm, "device", None)
    if not isinstance(device, torch.device):
        raise InvalidArgument(f"allocate_symmetric_buffer: {comm!r} is not a PyNcclCommunicator (no torch.device `device`)")
    label = f"PyNcclCommunicator on {device}"
    comm_ptr = _support.comm_pointer(comm, label)
    with torch.cuda.device(device):
        get_nccl_mem_pool()
        problem = bad_size
        if problem is not None:
            _pool.vote_no(str(problem))
        if problem is None and device.index is not None and device.index != _pool.device:
            problem = InvalidState(f"allocate_symmetric_buffer: {label}, the symmetric pool '{POOL_NAME}' is on cuda:{_pool.device}")
            _pool.vote_no(str(problem))  # this rank's "no" at the attach or the commit below
        try:
            attachment = _settle(comm_ptr, label, "allocate_symmetric_buffer")
            if problem is not None:
                raise problem
            ptr = _pool.alloc(nbytes, stream=torch.cuda.current_stream(device))  # OutOfMemory raises
        except BaseException:  # the commit every rank makes next, voting no
            _collective(comm_ptr, label, "commit of a symmetric buffer, after an error on this rank",
                        _pool._commit_after_error, poll=False)
            raise
        try:
            _collective(comm_ptr, label, "commit of a symmetric buffer", _pool.commit)
        except BaseException:  # failed on every rank: every rank gives its block back
            _pool.free(ptr)
            raise
        release = None
        try:
            owner = _support.BufferOwner(ptr, nbytes)
            release = weakref.finalize(owner, _support.release_buffer, logger, _pool, ptr, device)
            release.atexit = False  # at process exit the pool goes with the process
            buf = torch.as_tensor(owner)
            buf.zero_()
            in_window = bool(attachment.comm.window_of(ptr))
        except BaseException as e:  # this rank alone gives its block back: its placement now differs
            _pool.vote_no(f"a symmetric buffer failed on this rank after its commit: {type(e).__name__}: {e}")
            _pool.free(ptr) if release is None else release()
            raise
    return buf, in_window


# ---- switching SGLang over ----

def install() -> list:
    """Makes ``import sglang.srt.distributed.device_communicators.pynccl_allocator`` give this module,
    here and (through ncclpool-sglang.pth and NCCLPOOL_SGLANG=1) in the processes this one starts;
    rebinds modules that imported SGLang's already. Returns (and warns with) what it replaced."""
    return _sglang_hook.install(sys.modules[__name__], SGLANG_NAMES) + _sglang_fence.install(_attachments)


def uninstall() -> None:
    """Reverts install()."""
    _sglang_hook.uninstall()
    _sglang_fence.uninstall()
