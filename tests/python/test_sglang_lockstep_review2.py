"""ncclpool.sglang when one rank alone fails where a second review (issue 44) found it could split from
the others: a device fence failing after a step (the attach kept, the failure that rank's "no" at the
next agreement point), captured debug checks cut short, a bad buffer size, a buffer failing after its
commit or in its finalizer, pool settings (NCCLPOOL_GROWTH_CHUNK, NCCLPOOL_CHECK) unreadable on one
rank. Ranks are threads over the simulator in strict matching."""
import contextlib
import sys
import threading
import types

import pytest

import ncclpool
from ncclpool import errors

from test_sglang import MiB, FakeOutOfMemory, FakeTensor, capture, sg  # noqa: F401
from ranks import current, run_ranks
from test_sglang_lockstep import per_rank, App  # noqa: F401
from lockstep_judge import arm_device_fence, arm_stream_fence, check, finish


def test_device_fence_after_the_attach_fails_on_one_rank(sg, monkeypatch):
    """The attach agreed on both ranks; rank 0's fence after it raises: its module never records the
    attachment, so its next use attaches again, alone."""
    mods = sg.make(2)
    sim, tp = sg.group("tp", 2, matching="strict")
    armed = arm_device_fence(sg, monkeypatch)

    def rank(r):
        current.rank = r
        m, t = mods[r], sg.torch
        err = None
        if r == 0:
            armed["on"] = True
        for i in range(3):
            try:
                with m.use_symmetric_memory(tp[r]):
                    t.empty((8 * MiB,))
            except Exception as e:  # noqa: BLE001
                err = err or f"use {i}: {type(e).__name__}: {e}"[:300]
        return finish(m._pool, sim, r, 5, err)

    check(*run_ranks(2, rank))


def test_device_fence_after_a_scope_end_fails_on_one_rank(sg, monkeypatch):
    """A scheduled scope end agrees on both ranks; rank 0's device fence after it raises. Rank 0 raises
    alone; does anybody else ever hear?"""
    mods = sg.make(2)
    sim, tp = sg.group("tp", 2, matching="strict")
    armed = arm_device_fence(sg, monkeypatch)

    def rank(r):
        current.rank = r
        m, t = mods[r], sg.torch
        with m.use_symmetric_memory(tp[r]):
            pass
        err = None
        if r == 0:
            armed["on"] = True
        try:
            with m.use_symmetric_memory(tp[r]):  # scheduled scope end, a new window
                t.empty((8 * MiB,))
        except Exception as e:  # noqa: BLE001
            err = f"{type(e).__name__}: {e}"[:300]
        # and the next agreement point: a commit on every rank
        try:
            m._pool.commit()
        except Exception as e:  # noqa: BLE001
            err = err or f"commit: {type(e).__name__}: {e}"[:300]
        return finish(m._pool, sim, r, 6, err)

    check(*run_ranks(2, rank))


def test_allocate_symmetric_buffer_bad_size_on_one_rank(sg):
    mods = sg.make(2)
    sim, kv = sg.group("kv", 2, matching="strict")

    def rank(r):
        current.rank = r
        m = mods[r]
        kept = m.allocate_symmetric_buffer(kv[r].pynccl_comm, MiB)  # noqa: F841
        err = None
        try:
            m.allocate_symmetric_buffer(kv[r].pynccl_comm, 0 if r == 0 else 64 * MiB)
        except Exception as e:  # noqa: BLE001
            err = f"{type(e).__name__}: {e}"[:300]
        return finish(m._pool, sim, r, 7, err)

    check(*run_ranks(2, rank))


def test_allocate_symmetric_buffer_zero_fails_on_one_rank(sg, monkeypatch):
    """buf.zero_() (a torch call after the commit) raises on rank 0 only."""
    mods = sg.make(2)
    sim, kv = sg.group("kv", 2, matching="strict")
    monkeypatch.setattr(FakeTensor, "zero_", lambda self: (_ for _ in ()).throw(RuntimeError("CUDA error: memset failed")) if current.rank == 0 and self._owner is not None else self)

    def rank(r):
        current.rank = r
        m = mods[r]
        err = None
        try:
            m.allocate_symmetric_buffer(kv[r].pynccl_comm, MiB)
        except Exception as e:  # noqa: BLE001
            err = f"{type(e).__name__}: {e}"[:300]
        try:
            m._pool.commit()
        except Exception as e:  # noqa: BLE001
            err = err or f"commit: {type(e).__name__}: {e}"[:300]
        return finish(m._pool, sim, r, 7, err)

    check(*run_ranks(2, rank))


def test_debug_check_data_ptr_raises_on_one_rank(sg, monkeypatch):
    monkeypatch.setenv("SGLANG_DEBUG_SYMM_MEM", "1")
    mods = sg.make(2)
    sim, tp = sg.group("tp", 2, matching="strict")

    class Bad(FakeTensor):
        def data_ptr(self):
            raise RuntimeError("Cannot access data pointer of Tensor that doesn't have storage")

    def rank(r):
        current.rank = r
        m, t = mods[r], sg.torch
        with m.use_symmetric_memory(tp[r]):
            seg = t.empty((8 * MiB,))
        cls = Bad if r == 0 else FakeTensor
        err = None
        try:
            m.debug_check_symmetric_mempool(tp[r], {"input": cls(seg.ptr, MiB)}, "all_reduce")
        except Exception as e:  # noqa: BLE001
            err = f"{type(e).__name__}: {e}"[:300]
        return finish(m._pool, sim, r, 4, err)

    check(*run_ranks(2, rank))


def test_debug_check_captured_checks_fence_fails_on_one_rank(sg, monkeypatch):
    """Debug mode, two checks captured; at the next use the stream fence before the first captured
    check's verify raises on rank 0: does rank 0 still make the second verify?"""
    monkeypatch.setenv("SGLANG_DEBUG_SYMM_MEM", "1")
    mods = sg.make(2)
    sim, tp = sg.group("tp", 2, matching="strict")
    armed = arm_stream_fence(sg, monkeypatch)

    def rank(r):
        current.rank = r
        m, t = mods[r], sg.torch
        with m.use_symmetric_memory(tp[r]):
            seg = t.empty((8 * MiB,))
        with capture(t, m):
            m.debug_check_symmetric_mempool(tp[r], {"input": FakeTensor(seg.ptr, MiB)}, "all_reduce")
            m.debug_check_symmetric_mempool(tp[r], {"input": FakeTensor(seg.ptr, MiB)}, "all_gather")
        err = None
        # next use outside capture: commit after capture (none here: no context in capture) then verify captured
        if r == 0:
            armed["on"] = True
        try:
            m.debug_check_symmetric_mempool(tp[r], {"input": FakeTensor(seg.ptr, MiB)}, "all_reduce")
        except Exception as e:  # noqa: BLE001
            err = f"{type(e).__name__}: {e}"[:300]
        try:  # the failed fence is rank 0's "no" at the pool's next agreement point (a buffer check takes none)
            m._pool.commit()
        except Exception as e:  # noqa: BLE001
            err = err or f"{type(e).__name__}: {e}"[:300]
        return finish(m._pool, sim, r, 4, err)

    check(*run_ranks(2, rank))


def test_debug_captured_then_device_fence_after_commit_fails(sg, monkeypatch):
    """Debug mode; a context and a check captured; at the next use, _settle commits after the capture
    then verifies the captured checks. Rank 0's device fence after that commit raises."""
    monkeypatch.setenv("SGLANG_DEBUG_SYMM_MEM", "1")
    mods = sg.make(2)
    sim, tp = sg.group("tp", 2, matching="strict")
    armed = arm_device_fence(sg, monkeypatch)

    def rank(r):
        current.rank = r
        m, t = mods[r], sg.torch
        with m.use_symmetric_memory(tp[r]):
            seg = t.empty((8 * MiB,))
        with capture(t, m):
            with m.use_symmetric_memory(tp[r]):
                t.empty((2 * MiB,))
            m.debug_check_symmetric_mempool(tp[r], {"input": FakeTensor(seg.ptr, MiB)}, "all_reduce")
        err = None
        if r == 0:
            armed["on"] = True
        try:
            with m.use_symmetric_memory(tp[r]):
                pass
        except Exception as e:  # noqa: BLE001
            err = f"{type(e).__name__}: {e}"[:300]
        return finish(m._pool, sim, r, 4, err)

    check(*run_ranks(2, rank))


def test_buffer_finalizer_failing_on_one_rank(sg, monkeypatch):
    """Buffer A dies on both ranks; rank 0's finalizer's torch.cuda.synchronize raises (logged): A's
    block stays taken there. Buffer B (same size) then sits elsewhere on rank 0 only, silently."""
    mods = sg.make(2)
    sim, kv = sg.group("kv", 2, matching="strict")
    armed = arm_device_fence(sg, monkeypatch)
    import gc

    def rank(r):
        current.rank = r
        m = mods[r]
        a, _ = m.allocate_symmetric_buffer(kv[r].pynccl_comm, MiB)
        base = a.ptr
        if r == 0:
            armed["on"] = True
        del a
        gc.collect()
        err = None
        try:
            b, in_window = m.allocate_symmetric_buffer(kv[r].pynccl_comm, MiB)
            offset = b.ptr - base
        except Exception as e:  # noqa: BLE001
            err, offset = f"{type(e).__name__}: {e}"[:300], None
        err, app = finish(m._pool, sim, r, 7, err)
        return err, app, offset

    results, failures = run_ranks(2, rank)
    # Buffer B sits elsewhere on rank 0 (A's block stayed taken there), but never silently: the failed
    # release is rank 0's "no" at B's commit, which fails on every rank.
    check([(e, a) for e, a, _ in results], failures)
    assert all(e is not None for e, _, _ in results), results


def test_growth_chunk_unreadable_on_one_rank(sg, monkeypatch):
    """NCCLPOOL_GROWTH_CHUNK='64M' on rank 0 only (ncclpool.torch reads it when the pool is made)."""
    mods = sg.make(2)
    sim, tp = sg.group("tp", 2, matching="strict")
    plain = ncclpool._growth_chunk_from_env

    def read():
        if getattr(current, "rank", None) == 0:
            raise errors.InvalidArgument("NCCLPOOL_GROWTH_CHUNK='64M' is not a number of bytes")
        return plain()
    monkeypatch.setattr(ncclpool, "_growth_chunk_from_env", read)

    def rank(r):
        current.rank = r
        m, t = mods[r], sg.torch
        err = None
        try:
            with m.use_symmetric_memory(tp[r]):
                t.empty((8 * MiB,))
        except Exception as e:  # noqa: BLE001
            err = f"{type(e).__name__}: {e}"[:300]
        return finish(m._pool, sim, r, 5, err)

    check(*run_ranks(2, rank))


def test_check_mode_unreadable_on_one_rank(sg, monkeypatch):
    """NCCLPOOL_CHECK='bogus' on rank 0 only."""
    mods = sg.make(2)
    sim, tp = sg.group("tp", 2, matching="strict")
    import ncclpool.torch.binding as binding
    real_pool = ncclpool.Pool

    class PerRankPool(real_pool):
        def __init__(self, *a, check=None, **k):
            if check is None and getattr(current, "rank", None) == 0 and k.get("name") == "sglang":
                check = "bogus"
            super().__init__(*a, check=check, **k)
    monkeypatch.setattr(binding._np, "Pool", PerRankPool)

    def rank(r):
        current.rank = r
        m, t = mods[r], sg.torch
        err = None
        try:
            with m.use_symmetric_memory(tp[r]):
                t.empty((8 * MiB,))
        except Exception as e:  # noqa: BLE001
            err = f"{type(e).__name__}: {e}"[:300]
        return finish(m._pool, sim, r, 5, err)

    check(*run_ranks(2, rank))


@pytest.mark.parametrize("kind", ["symmetric", "auto"])
def test_register_window_failing_at_growth_on_one_rank(sg, monkeypatch, kind):
    monkeypatch.setenv("NCCLPOOL_SGLANG_KIND", kind)
    mods = sg.make(2)
    sim, tp = sg.group("tp", 2, matching="strict")
    sim.inject_failure("register_window", rank=0, nth=2)

    def rank(r):
        current.rank = r
        m, t = mods[r], sg.torch
        err = None
        for i in range(20):
            try:
                with m.use_symmetric_memory(tp[r]):
                    if i in (0, 1, 17):
                        t.empty((80 * MiB,))
            except Exception as e:  # noqa: BLE001
                err = err or f"use {i}: {type(e).__name__}: {e}"[:300]
        return finish(m._pool, sim, r, 5, err)

    results, failures = run_ranks(2, rank)
    check(results, failures)


def test_disable_on_one_rank_only(sg):
    """SGLang disables the context around one-rank code; here only rank 0 disabled it and allocated."""
    mods = sg.make(2)
    sim, tp = sg.group("tp", 2, matching="strict")

    def rank(r):
        current.rank = r
        m, t = mods[r], sg.torch
        err = None
        for i in range(20):
            try:
                with m.use_symmetric_memory(tp[r]):
                    if i == 17:
                        saved = m.disable_symmetric_memory_context() if r == 0 else None
                        t.empty((80 * MiB,))
                        m.restore_symmetric_memory_context(saved)
            except Exception as e:  # noqa: BLE001
                err = err or f"use {i}: {type(e).__name__}: {e}"[:300]
        try:
            m._pool.commit()
        except Exception as e:  # noqa: BLE001
            err = err or f"commit: {type(e).__name__}: {e}"[:300]
        return finish(m._pool, sim, r, 5, err)

    results, failures = run_ranks(2, rank)
    check(results, failures)


def test_nested_inner_context_failing_on_one_rank(sg):
    """Outer context on tp, inner one on kv (two groups of the same two ranks); the inner one raises on
    rank 0, caught inside the outer."""
    mods = sg.make(2)
    sim, tp = sg.group("tp", 2, matching="strict")
    sim2, kv = sg.group("kv", 2, matching="strict")

    def rank(r):
        current.rank = r
        m, t = mods[r], sg.torch
        err = None
        for i in range(3):
            with m.use_symmetric_memory(tp[r]):
                try:
                    with m.use_symmetric_memory(kv[r]):
                        t.empty((8 * MiB,))
                        if r == 0 and i == 1:
                            raise KeyError("kernel failed")
                except Exception as e:  # noqa: BLE001
                    err = err or f"inner {i}: {type(e).__name__}: {e}"[:300]
                saved = m.disable_symmetric_memory_context()
                m.restore_symmetric_memory_context(saved)
        err, app = finish(m._pool, sim, r, 5, err)
        err2, app2 = finish(m._pool, sim2, r, 6, err)
        return err2, app or app2

    results, failures = run_ranks(2, rank)
    check(results, failures)
