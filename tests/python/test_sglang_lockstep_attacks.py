"""ncclpool.sglang when one rank alone fails where a review of the rebuilt module (issue 44) found it
could split from the others: a forward stream that cannot be entered in the preallocation, the
stream fence before a collective step failing (at a scheduled scope end, with the exception kept
alive, at a group's first use), a failure inside a captured context, a debug check of a buffer
outside the pool. Ranks are threads over the simulator in strict matching; every rank ends in an
error or none does, and the application's next collective pairs."""
import contextlib
import threading
import types
import sys

import pytest

import ncclpool
from ncclpool import errors

from test_sglang import MiB, FakeOutOfMemory, FakeTensor, capture, sg  # noqa: F401
from ranks import current, run_ranks
from test_sglang_lockstep import per_rank, App  # noqa: F401
from lockstep_judge import arm_stream_fence, check


def outcome_after(sim, r, fn, arg):
    """fn on rank r; then the application's collective on sim; (fn's error, app's error)."""
    err = None
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        err = f"{type(e).__name__}: {e}"
    app = None
    try:
        App(sim, r).collective(arg)
    except errors.Error as e:
        app = str(e)
    return err, app


def test_prealloc_forward_stream_failing_on_one_rank(sg, monkeypatch):
    """The forward stream's context raises on rank 0 (first use of the TP group is the preallocation)."""
    monkeypatch.setenv("SGLANG_SYMM_MEM_PREALLOC_GB_SIZE", "1")
    mods = sg.make(2)
    sim, tp = sg.group("tp", 2, matching="strict")
    monkeypatch.setattr(sg.parallel_state, "get_tp_group", lambda: tp[current.rank])
    torch = sys.modules["torch"]

    @contextlib.contextmanager
    def stream(s):
        if current.rank == 0:
            raise RuntimeError("CUDA error: invalid resource handle (stream of another device)")
        yield
    monkeypatch.setattr(torch, "get_device_module", lambda device=None: types.SimpleNamespace(stream=stream))

    def rank(r):
        current.rank = r
        m = mods[r]
        return outcome_after(sim, r, lambda: m.prealloc_symmetric_memory_pool(
            is_draft_worker=False, enable_symm_mem=True, device="cuda", forward_stream=None), 9)

    check(*run_ranks(2, rank))


def test_stream_fence_failing_on_one_rank_at_a_scheduled_scope_end(sg, monkeypatch):
    """torch.cuda.current_stream().synchronize() raises on rank 0 (an asynchronous CUDA error surfacing there)
    right before the scope end's agreement."""
    mods = sg.make(2)
    sim, tp = sg.group("tp", 2, matching="strict")
    armed = arm_stream_fence(sg, monkeypatch)

    def rank(r):
        current.rank = r
        m, t = mods[r], sg.torch
        with m.use_symmetric_memory(tp[r]):
            pass
        def use():
            if r == 0:
                armed["on"] = True
            with m.use_symmetric_memory(tp[r]):  # a scheduled scope end with a new window
                t.empty((8 * MiB,))
        return outcome_after(sim, r, use, 6)

    check(*run_ranks(2, rank))


@pytest.mark.parametrize("fault", ["exception", "oom"])
def test_failure_inside_a_captured_context_on_one_rank(sg, fault):
    mods = sg.make(2)
    sim, tp = sg.group("tp", 2, matching="strict")

    def rank(r):
        m, t = mods[r], sg.torch
        with m.use_symmetric_memory(tp[r]):
            pass
        def use():
            with capture(t, m):
                if r == 0 and fault == "oom":
                    ncclpool.sim_inject_oom(m._pool, 1)
                with m.use_symmetric_memory(tp[r]):
                    t.empty((8 * MiB,))
                    if r == 0 and fault == "exception":
                        raise KeyError("kernel failed during capture on rank 0")
        try:
            use()
        except Exception as e:  # noqa: BLE001 - the program goes on, as the fuzzer's
            first = f"{type(e).__name__}: {e}"
        else:
            first = None
        def nxt():
            with m.use_symmetric_memory(tp[r]):  # the next use: commit after the capture
                pass
        err, app = outcome_after(sim, r, nxt, 8)
        return (first or err), app

    check(*run_ranks(2, rank))


def test_debug_check_with_a_buffer_outside_the_pool_on_one_rank(sg, monkeypatch):
    monkeypatch.setenv("SGLANG_DEBUG_SYMM_MEM", "1")
    mods = sg.make(2)
    sim, tp = sg.group("tp", 2, matching="strict")

    def rank(r):
        m, t = mods[r], sg.torch
        with m.use_symmetric_memory(tp[r]):
            seg = t.empty((8 * MiB,))
        ptr = seg.ptr if r == 1 else (1 << 50)
        return outcome_after(sim, r, lambda: m.debug_check_symmetric_mempool(tp[r], {"input": FakeTensor(ptr, MiB)}, "all_reduce"), 4)

    check(*run_ranks(2, rank))


def test_fence_failing_at_a_scheduled_scope_end_with_the_exception_kept(sg, monkeypatch):
    """As S2, but the application keeps the exception (a log record, a re-raise later): the scope the
    fence left open ends only when its generator is collected."""
    mods = sg.make(2)
    sim, tp = sg.group("tp", 2, matching="strict")
    armed = arm_stream_fence(sg, monkeypatch)
    kept = []

    def rank(r):
        current.rank = r
        m, t = mods[r], sg.torch
        with m.use_symmetric_memory(tp[r]):
            pass
        err = None
        try:
            if r == 0:
                armed["on"] = True
            with m.use_symmetric_memory(tp[r]):
                t.empty((8 * MiB,))
        except Exception as e:  # noqa: BLE001
            kept.append(e)
            err = f"{type(e).__name__}: {e}"
        app = None
        try:
            App(sim, r).collective(6)
        except errors.Error as e:
            app = str(e)
        return err, app

    check(*run_ranks(2, rank))


def test_fence_failing_at_a_groups_first_use(sg, monkeypatch):
    """The fence before the attach raises on rank 0: its attach is skipped."""
    mods = sg.make(2)
    sim, tp = sg.group("tp", 2, matching="strict")
    armed = arm_stream_fence(sg, monkeypatch)

    def rank(r):
        current.rank = r
        m = mods[r]
        if r == 0:
            armed["on"] = True
        def use():
            with m.use_symmetric_memory(tp[r]):
                pass
        return outcome_after(sim, r, use, 2)

    check(*run_ranks(2, rank))
