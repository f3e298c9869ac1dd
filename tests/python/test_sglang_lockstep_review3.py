"""ncclpool.sglang when one rank alone fails where a third review (issue 44) looked: a window
registration refused at a second group's attach (then a debug check, growth, a captured check), the
buffer's window lookup raising after its commit, the first rank's debug warning raising. Ranks are
threads over the simulator in strict matching."""
import sys
import threading
import types

import pytest

import ncclpool
from ncclpool import errors

from test_sglang import MiB, FakeOutOfMemory, FakeTensor, capture, sg  # noqa: F401
from ranks import current, run_ranks
from test_sglang_lockstep import per_rank, App  # noqa: F401
from lockstep_judge import check, finish


@pytest.mark.parametrize("then", ["debug", "uses", "capture_debug"])
def test_register_window_failing_at_a_second_groups_attach(sg, monkeypatch, then):
    """Segments exist (from tp); kv's first use attaches them as windows: rank 0's registration fails."""
    if then != "uses":
        monkeypatch.setenv("SGLANG_DEBUG_SYMM_MEM", "1")
    mods = sg.make(2)
    sim, tp = sg.group("tp", 2, matching="strict")
    sim2, kv = sg.group("kv", 2, matching="strict")

    def rank(r):
        current.rank = r
        m, t = mods[r], sg.torch
        err = None
        seg = None
        try:
            with m.use_symmetric_memory(tp[r]):
                seg = t.empty((8 * MiB,))
        except Exception as e:  # noqa: BLE001
            err = err or f"tp: {type(e).__name__}: {e}"[:300]
        if r == 0:
            sim2.inject_failure("register_window", rank=0, nth=1)
        for i in range(3):
            try:
                with m.use_symmetric_memory(kv[r]):
                    pass
            except Exception as e:  # noqa: BLE001
                err = err or f"kv use {i}: {type(e).__name__}: {e}"[:300]
        try:
            if then == "debug":
                m.debug_check_symmetric_mempool(kv[r], {"input": FakeTensor(seg.ptr, MiB)}, "all_reduce")
            elif then == "capture_debug":
                with capture(t, m):
                    m.debug_check_symmetric_mempool(kv[r], {"input": FakeTensor(seg.ptr, MiB)}, "all_reduce")
                with m.use_symmetric_memory(kv[r]):
                    pass
            else:
                for i in range(20):
                    with m.use_symmetric_memory(kv[r]):
                        t.empty((8 * MiB,))
        except Exception as e:  # noqa: BLE001
            err = err or f"then: {type(e).__name__}: {e}"[:300]
        return finish(m._pool, [sim, sim2], r, 5, err, commit=True) + (len(m._attachments),)

    results, failures = run_ranks(2, rank)
    check(results, failures)


def test_window_of_raising_on_one_rank(sg, monkeypatch):
    mods = sg.make(2)
    sim, kv = sg.group("kv", 2, matching="strict")
    original = ncclpool.Communicator.window_of

    def window_of(self, ptr):
        if current.rank == 0:
            raise errors.InvalidState("window_of failed here")
        return original(self, ptr)
    monkeypatch.setattr(ncclpool.Communicator, "window_of", window_of)

    def rank(r):
        current.rank = r
        m = mods[r]
        err = None
        try:
            m.allocate_symmetric_buffer(kv[r].pynccl_comm, MiB)
        except Exception as e:  # noqa: BLE001
            err = f"{type(e).__name__}: {e}"[:300]
        return finish(m._pool, [sim], r, 5, err, commit=True)

    check(*run_ranks(2, rank))


def test_debug_warning_path_raising_on_first_rank(sg, monkeypatch):
    """The first rank's warning about tensors outside the pool fails (torch's snapshot)."""
    monkeypatch.setenv("SGLANG_DEBUG_SYMM_MEM", "1")
    mods = sg.make(2)
    sim, tp = sg.group("tp", 2, matching="strict")

    def rank(r):
        current.rank = r
        m, t = mods[r], sg.torch
        err = None
        try:
            with m.use_symmetric_memory(tp[r]):
                seg = t.empty((8 * MiB,))
            if r == 0:
                monkeypatch.setattr(m._segments, "holds", lambda *a: (_ for _ in ()).throw(RuntimeError("snapshot failed")))
            m.debug_check_symmetric_mempool(tp[r], {"input": FakeTensor(seg.ptr, MiB)}, "all_reduce")
        except Exception as e:  # noqa: BLE001
            err = f"{type(e).__name__}: {e}"[:300]
        return finish(m._pool, [sim], r, 5, err, commit=True)

    check(*run_ranks(2, rank))


def test_window_of_raising_on_one_rank_then_placements(sg, monkeypatch):
    mods = sg.make(2)
    sim, kv = sg.group("kv", 2, matching="strict")
    original = ncclpool.Communicator.window_of
    armed = {"on": True}

    def window_of(self, ptr):
        if current.rank == 0 and armed["on"]:
            armed["on"] = False
            raise errors.InvalidState("window_of failed here")
        return original(self, ptr)
    monkeypatch.setattr(ncclpool.Communicator, "window_of", window_of)
    kept = {}

    def rank(r):
        current.rank = r
        m = mods[r]
        err = None
        try:
            kept[(r, 1)] = m.allocate_symmetric_buffer(kv[r].pynccl_comm, MiB)
        except Exception as e:  # noqa: BLE001
            err = f"{type(e).__name__}: {e}"[:300]
        import gc
        gc.collect()
        try:  # the next buffer's commit: where a failed one left placements apart, every rank hears of it
            kept[(r, 2)], _ = m.allocate_symmetric_buffer(kv[r].pynccl_comm, MiB)
        except Exception as e:  # noqa: BLE001
            err = err or f"second: {type(e).__name__}: {e}"[:300]
        return finish(m._pool, [sim], r, 5, err, commit=True)

    results, failures = run_ranks(2, rank)
    check(results, failures)
