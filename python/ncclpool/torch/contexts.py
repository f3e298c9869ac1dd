"""ncclpool.torch's context managers: scope-like contexts that register their groups (first use only),
route the thread's allocations to a pool's MemPool and end one of the pool's scopes at exit (nccl_mem,
MultiGroupMemPoolAllocator, MemPoolAllocatorWithoutRegistration, use_mem_pool), and graph(), a CUDA
graph capture into a pool with commits before and after it."""
from __future__ import annotations

import warnings

import torch
import torch.distributed as dist

import ncclpool as _np
from ncclpool._capi import library

from .binding import attachment_of, binding_of, kind_for, register_mem_pool

# Megatron-Core's allocator registers at every context exit, and Megatron enters nccl_mem only to
# allocate a new buffer (mostly in the first steps), then never again: at the pool's scheduled scope
# ends alone, the last buffers' windows would wait for a use that never comes. ncclpool.torch.megatron
# .install() sets this: every context exit then commits (one agreement per group, far cheaper than
# Megatron-Core's allocator's re-registration there: docs/benchmarks/scope.md and torch.md).
_commit_at_every_exit = False


class _PoolContext:
    """Registers groups (first use only), then enters the pool's scope (ncclpool.Pool.scope) and a torch
    context that routes allocations to the MemPool (torch.cuda.use_mem_pool unless a subclass says
    otherwise). At exit the pool's scope ends (ncclpool.Pool.scope): at its scheduled scope ends (the
    first 16, then every 16th) pending windows are committed (collective, skipped under graph capture),
    unless commit is False or an exception is on its way out."""

    def __init__(self, pool, groups, symmetric: bool | None, enabled: bool = True, device=None, commit: bool = True,
                 register: bool = True, collective: str | None = None):
        self.pool = pool
        self.collective = collective  # what the allocations are for (an auto pool routes by it)
        self.groups = groups
        self.symmetric = symmetric
        self.enabled = enabled
        self.device = device
        self.commit = commit
        self.register = register
        self._open = None  # (ncclpool pool, torch context) while entered
        self._failures = 0

    def _torch_context(self):
        return torch.cuda.use_mem_pool(self.pool, device=self.device)

    def _before_scope(self, npool, problem) -> None:
        """Runs after the groups are registered, before the scope and the torch context open; `problem`:
        what failed on this rank so far (its collective steps here are still taken, voting no)."""

    def _after_failed_enter(self, npool) -> None:
        """The collective steps every rank takes at this context's exit that __exit__ takes no more
        (graph: the commit after the capture), after __enter__ failed on this rank."""

    # Every use of a context comes through __enter__ and __exit__: plain calls, no ExitStack or
    # generator, and registered groups found by identity (attachment_of). Whatever fails on this rank
    # in __enter__, it still takes every collective step the other ranks take in this use (each
    # group's attach, the scope end, graph's commits), voting no, then raises.
    def __enter__(self):
        if not self.enabled:
            return self
        binding = binding_of(self.pool)
        problem = None
        if self.register:
            kind = kind_for(binding, self.symmetric)
            for group in self.groups:  # every group, whatever an earlier one did: each attach is a step of its own
                try:
                    attachment = attachment_of(binding, group)
                    if attachment is None or attachment.kind != kind:  # register_mem_pool attaches, or says why not
                        register_mem_pool(self.pool, group, self.symmetric)
                except BaseException as e:
                    problem = problem or e
        npool = binding.pool
        try:
            self._before_scope(npool, problem)
        except BaseException as e:
            problem = problem or e
        self._failures = library().ncclpool_torch_failures()
        npool._scope_begin(self.collective)
        try:
            if problem is not None:
                raise problem
            context = self._torch_context()
            context.__enter__()
        except BaseException:
            self._finish(npool, failed=True)  # the scope does not outlive a torch context that failed to enter
            self._after_failed_enter(npool)
            raise
        self._open = (npool, context)
        return self

    def _finish(self, npool, failed: bool) -> None:
        """The scope's end: the same collective steps on every rank, whatever happened on this one (an
        error here is this rank's "no" in them: docs/registry.md, "Lockstep")."""
        every = _commit_at_every_exit and self.commit
        npool._scope_finish(commit=self.commit and not every, failed=failed)
        if every:
            if failed:
                npool._commit_after_error()
            else:
                npool.commit()

    def __exit__(self, exc_type, exc, tb):
        if not self.enabled:
            return False
        (npool, context), self._open = self._open, None
        try:
            context.__exit__(exc_type, exc, tb)
        except BaseException:
            self._finish(npool, failed=True)
            raise
        self._finish(npool, failed=exc is not None)
        if exc is not None and library().ncclpool_torch_failures() > self._failures and hasattr(exc, "add_note"):
            exc.add_note(f"ncclpool: {_np.last_error()}")
        return False


def _groups(group):
    return [group if group is not None else dist.group.WORLD]


class nccl_mem(_PoolContext):  # noqa: N801 (Megatron's name)
    """Allocations inside come from `pool`, registered with `group` (default: the world group)."""

    def __init__(self, pool, enabled: bool = True, device=None, group=None, symmetric: bool | None = None):
        super().__init__(pool, _groups(group), symmetric, enabled, device)


class MultiGroupMemPoolAllocator(_PoolContext):
    """One pool registered with several groups (FSDP + EP, hybrid sharding). ``collective``
    ('all_gather', 'reduce_scatter', 'all_reduce'): the allocations are that collective's buffers, which
    an auto pool routes by that collective's profile (torch may reuse their blocks for other tensors later)."""

    def __init__(self, pool, groups, symmetric: bool | None = None, *, collective: str | None = None):
        super().__init__(pool, list(groups), symmetric, collective=collective)


class MemPoolAllocatorWithoutRegistration(_PoolContext):
    """Allocations from `pool` without registering any group and without a collective at exit
    (segments of groups registered earlier are still registered: locally at once, windows at the next
    commit, e.g. a later nccl_mem exit that is a scheduled scope end)."""

    def __init__(self, pool):
        super().__init__(pool, [], None, commit=False, register=False)


def use_mem_pool(pool, device=None):
    """Like torch.cuda.use_mem_pool, attributing new segments to the ncclpool pool; its exit is a scope
    end of the pool (pending windows committed at the scheduled ones, collective)."""
    return _PoolContext(pool, [], None, device=device, register=False)


class graph(_PoolContext):  # noqa: N801 (mirrors torch.cuda.graph)
    """``torch.cuda.graph(cuda_graph, pool=pool.id, ...)`` with the capture's allocations attributed
    to the ncclpool pool, and `groups` registered first. torch forbids capturing into a pool that
    ``use_mem_pool`` is routing to, so capture with this instead of inside ``nccl_mem``.

    Nothing can be registered during a capture: a segment the capture makes gets its window only
    after it, and the collectives captured on it run without the window (NCCL's non-symmetric
    kernels) for the graph's lifetime. ``reserve=BYTES`` grows the pool before the capture, unless a
    fresh block of that size (no stream owns it: a capturing stream cannot wait on others) is already
    there; pending windows are committed before every capture (collective, like the capture
    itself), so the capture's tensors land in registered memory, and after it. When the capture still
    made segments, a ``PerformanceWarning`` says so, and the communicators' stats count them
    (``segments_created_in_capture``).

        with ncclpool.torch.graph(g, pool, groups=[dp_group], reserve=256 << 20):
            out = model(static_in)
    """

    def __init__(self, cuda_graph, pool, groups=(), symmetric: bool | None = None, *, reserve: int = 0, **kwargs):
        # The scope ends without its scheduled commit: graph() commits before and after the capture.
        super().__init__(pool, list(groups), symmetric, commit=False)
        if reserve < 0:
            raise ValueError(f"ncclpool.torch.graph: reserve must be >= 0 bytes, not {reserve}")
        self.reserve = reserve
        self._in_capture_before = 0
        self._capture = torch.cuda.graph(cuda_graph, pool=pool.id, **kwargs)

    def _torch_context(self):
        return self._capture

    @staticmethod
    def _created_in_capture(npool) -> int:
        return sum(c.stats()["segments_created_in_capture"] for c in npool.communicators)

    def _before_scope(self, npool, problem) -> None:
        if problem is not None:  # the commit before the capture, as on every rank, voting no
            npool._commit_after_error()
            raise problem
        try:
            if self.reserve:
                s = npool.stats()
                if s["largest_fresh_block"] < self.reserve:  # what a capturing stream can take without a wait
                    npool.reserve(s["reserved_bytes"] + self.reserve)
        except BaseException:
            npool._commit_after_error()  # a reserve that failed here alone is this rank's "no"
            raise
        # Always an agreement point, reserve or not: a rank that reserved and one that did not then
        # disagree here, by name, instead of pairing one rank's agreement with another's collective.
        npool.commit()
        self._in_capture_before = self._created_in_capture(npool)

    def _after_failed_enter(self, npool) -> None:
        npool._commit_after_error()  # the commit after the capture, which __exit__ will not make
    def __exit__(self, exc_type, exc, tb):
        npool = binding_of(self.pool).pool
        try:
            result = super().__exit__(exc_type, exc, tb)
        except BaseException:
            npool._commit_after_error()  # the commit after the capture, as on every rank, voting no
            raise
        if exc is None:
            npool.commit()  # the windows of what the capture made, now rather than at a later scope end
        else:
            npool._commit_after_error()
        made = self._created_in_capture(npool) - self._in_capture_before
        if exc is None and made > 0 and npool.communicators:
            warnings.warn(
                f"ncclpool.torch.graph: the capture made {made} new segment registration(s) in pool '{npool.name}' "
                f"(summed over its {len(npool.communicators)} communicator(s)); nothing can be registered during a "
                "capture, so the collectives captured on those tensors run without it (symmetric windows: NCCL's "
                "non-symmetric kernels) for the graph's lifetime. Pass reserve=BYTES (at least what the capture "
                "allocates) to graph().",
                PerformanceWarning, stacklevel=2)
        return result


class PerformanceWarning(UserWarning):
    """Something runs correctly but slower than ncclpool could make it (see the message)."""
