"""ncclpool.sglang (SGLang's pynccl_allocator over one ncclpool pool) on the simulator: simulated
ranks are threads, each with its own copy of the module (its globals are one process's state), over
a stand-in for torch (tests/python/torch_stand_in.py, extended below with what the module calls:
per-thread pool routing, graph capture, a caching allocator that asks the routed pool for one
segment per tensor) and bench/sglang_standins (SGLang's modules). No GPU, torch or SGLang needed."""
import contextlib
import ctypes
import gc
import importlib.util
import itertools
import logging
import os
import sys
import threading
import time
import types

import pytest

import ncclpool
from ncclpool import errors

from ranks import run_ranks

MiB = 1 << 20
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULE = os.path.join(ROOT, "python", "ncclpool", "sglang.py")
STANDINS = os.path.join(ROOT, "bench", "sglang_standins")
SGLANG_FILE = os.path.join(ROOT, ".whl", "sglang", "sglang", "srt", "distributed", "device_communicators", "pynccl_allocator.py")


class FakeTorch:
    """The torch calls of ncclpool.sglang, recorded per thread (rank)."""

    def __init__(self):
        self.tls = threading.local()
        self.mempools = {}           # MemPool id -> FakeMemPool
        self.ids = itertools.count(1000)
        self.plain = itertools.count(1 << 50, 1 << 20)  # addresses of torch's own allocator: in no pool

    def state(self):
        t = self.tls
        if not hasattr(t, "stack"):
            t.stack, t.calls, t.capturing, t.fences = [], [], False, []
        return t

    # the fences around the pool's collective steps: the current stream drained, then the device; a
    # test may give the device's wait something to wait for (an agreement's kernel ends only when
    # every rank launched its part)
    device_wait = None

    def stream_synchronize(self):
        self.state().fences.append("stream")

    def device_synchronize(self, device=None):
        self.state().fences.append("device")
        if self.device_wait is not None:
            self.device_wait()

    # torch._C: which pool this thread's allocations go to
    def begin(self, device, pool_id):
        self.state().stack.append(pool_id)
        self.state().calls.append(("begin", pool_id))

    def end(self, device, pool_id):
        s = self.state()
        if pool_id not in s.stack:
            raise RuntimeError(f"endAllocatePool: not currently recording to mempool_id {pool_id}")
        del s.stack[len(s.stack) - 1 - s.stack[::-1].index(pool_id)]
        s.calls.append(("end", pool_id))

    def release(self, device, pool_id):
        self.state().calls.append(("release", pool_id))

    def empty(self, shape, dtype="uint8", device=None):
        nbytes = (shape[0] if isinstance(shape, tuple) else shape) * (2 if dtype == "bfloat16" else 1)
        s = self.state()
        pool = self.mempools.get(s.stack[-1]) if s.stack else None
        if pool is None:
            return FakeTensor(next(self.plain), nbytes, dtype)
        ptr = ncclpool.library().ncclpool_torch_alloc(nbytes, 0, None)
        if not ptr:
            raise FakeOutOfMemory(f"CUDA out of memory: pluggable allocator returned NULL for {nbytes} bytes")
        pool.segments.append({"address": ptr, "total_size": nbytes, "blocks": [{"address": ptr, "size": nbytes}]})
        return FakeTensor(ptr, nbytes, dtype)


class FakeOutOfMemory(RuntimeError):
    pass


class FakeMemPool:
    def __init__(self, ids, allocator=None):
        self.id = (next(ids), 0)
        self.segments = []

    def snapshot(self):
        return list(self.segments)


class FakeTensor:
    def __init__(self, ptr, nbytes, dtype="uint8", owner=None):
        self.ptr, self.nbytes, self.dtype, self.shape, self._owner = ptr, nbytes, dtype, (nbytes,), owner
        self.zeroed = False

    def data_ptr(self):
        return self.ptr

    def untyped_storage(self):
        return types.SimpleNamespace(data_ptr=lambda: self.ptr)

    def zero_(self):
        self.zeroed = True
        return self


class Device:
    def __init__(self, kind, index=None):
        self.type, self.index = kind, index

    def __repr__(self):
        return f"{self.type}:{self.index}"


@pytest.fixture
def sg(torch_layer, monkeypatch):
    """Returns a namespace: make(ranks, ...) -> per-rank modules, group(...) -> coordinators, torch
    (the fake), sim comms behind pointers, the stand-in SGLang modules."""
    fake = FakeTorch()
    torch = sys.modules["torch"]
    monkeypatch.setattr(torch, "__version__", "2.11.0+cu130", raising=False)
    monkeypatch.setattr(torch, "_C", types.SimpleNamespace(
        _cuda_beginAllocateCurrentThreadToPool=fake.begin, _cuda_endAllocateToPool=fake.end,
        _cuda_releasePool=fake.release), raising=False)
    monkeypatch.setattr(torch, "device", Device)
    for name, value in {"uint8": "uint8", "bfloat16": "bfloat16", "empty": fake.empty, "OutOfMemoryError": FakeOutOfMemory,
                        "as_tensor": lambda owner: FakeTensor(owner.__cuda_array_interface__["data"][0],
                                                              owner.__cuda_array_interface__["shape"][0], owner=owner),
                        "get_device_module": lambda device=None: types.SimpleNamespace(stream=lambda s: contextlib.nullcontext()),
                        }.items():
        monkeypatch.setattr(torch, name, value, raising=False)
    cuda = torch.cuda
    monkeypatch.setattr(cuda, "MemPool", lambda allocator=None: _new_mempool(fake))
    monkeypatch.setattr(cuda, "is_current_stream_capturing", lambda: fake.state().capturing)
    for name, value in {"synchronize": fake.device_synchronize, "device": lambda d: contextlib.nullcontext(),
                        "current_stream": lambda device=None: types.SimpleNamespace(cuda_stream=0, synchronize=fake.stream_synchronize)
                        }.items():
        monkeypatch.setattr(cuda, name, value, raising=False)
    monkeypatch.syspath_prepend(STANDINS)
    for name in [n for n in sys.modules if n == "sglang" or n.startswith("sglang.") or n.startswith("ncclpool.sglang")]:
        monkeypatch.delitem(sys.modules, name)
    for name in ("sglang", "_sglang_support", "_sglang_fence"):  # imported again over this test's torch
        monkeypatch.delitem(sys.modules, f"ncclpool.{name}", raising=False)
        monkeypatch.delattr(ncclpool, name, raising=False)
    monkeypatch.setenv("NCCLPOOL_SGLANG_KIND", "symmetric")
    monkeypatch.setenv("NCCLPOOL_GROWTH_CHUNK", str(64 * MiB))
    for var in ("SGLANG_DEBUG_SYMM_MEM", "SGLANG_SYMM_MEM_PREALLOC_GB_SIZE", "NCCLPOOL_CHECK", "NCCLPOOL_SGLANG"):
        monkeypatch.delenv(var, raising=False)
    sims = {}  # fake ncclComm_t address -> (SimGroup, rank)
    monkeypatch.setattr(ncclpool.Pool, "attach_nccl", lambda self, ptr, kind=None: self.attach_sim(*sims[ptr], kind))
    import sglang.srt.runtime_context as runtime
    import sglang.srt.distributed.parallel_state as parallel_state
    runtime.publish_exec(enable_symm_mem=True)
    pointers = itertools.count(0x7000)
    modules = []

    def make(ranks):
        out = []
        for r in range(ranks):
            spec = importlib.util.spec_from_file_location(f"ncclpool_sglang_rank{r}_{len(modules)}", MODULE)
            module = importlib.util.module_from_spec(spec)
            monkeypatch.setitem(sys.modules, spec.name, module)
            spec.loader.exec_module(module)
            out.append(module)
        modules.extend(out)
        return out

    def group(name, size, timeout_ms=3000, matching="nccl"):
        """A SimGroup and, per rank, a stand-in GroupCoordinator with a PyNccl stand-in over it."""
        sim = ncclpool.SimGroup(name, size, timeout_ms=timeout_ms, matching=matching)
        coordinators = []
        for r in range(size):
            ptr = next(pointers)
            sims[ptr] = (sim, r)
            pynccl = types.SimpleNamespace(comm=ctypes.c_void_p(ptr), device=Device("cuda", 0))
            coordinators.append(parallel_state.GroupCoordinator(unique_name=name, rank_in_group=r, world_size=size,
                                                                 pynccl_comm=pynccl))
        return sim, coordinators

    ns = types.SimpleNamespace(make=make, group=group, torch=fake, runtime=runtime, parallel_state=parallel_state)
    yield ns
    for module in modules:  # windows deregistered without NCCL (the groups die with the test)
        if module._pool is not None:
            for c in list(module._pool.communicators):
                c.forget()
    runtime.clear_exec()


def _new_mempool(fake):
    pool = FakeMemPool(fake.ids)
    fake.mempools[pool.id] = pool
    return pool


@contextlib.contextmanager
def capture(fake, module, graph_pool=("graph", 1)):
    """What torch.cuda.graph does around a capture on this thread: the graph pool routes its
    allocations, the stream captures (and so does the simulated device of the rank's pool)."""
    module.set_graph_pool_id(graph_pool)
    s = fake.state()
    fake.begin(0, graph_pool)
    s.capturing = True
    ncclpool.sim_set_capturing(module._pool, True)
    try:
        yield
    finally:
        ncclpool.sim_set_capturing(module._pool, False)
        s.capturing = False
        fake.end(0, graph_pool)


def windows(module, ptr):
    """Per attached group: whether ptr is registered with it (a window in a symmetric pool)."""
    return [bool(c.handle_of(ptr)) for c in module._pool.communicators]


# ---- the interface ----

def test_every_name_of_sglangs_module_is_here(sg):
    (m,) = sg.make(1)
    names = ("is_symmetric_memory_enabled", "set_graph_pool_id", "get_nccl_mem_pool", "SymmetricMemoryContext",
             "use_symmetric_memory", "disable_symmetric_memory_context", "restore_symmetric_memory_context",
             "is_tensor_in_symmetric_mempool", "debug_check_symmetric_mempool", "prealloc_symmetric_memory_pool",
             "allocate_symmetric_buffer", "describe_registration_in_progress")
    assert m.SGLANG_NAMES == names and all(callable(getattr(m, n)) for n in names)


@pytest.mark.skipif(not os.path.exists(SGLANG_FILE), reason="SGLang's module is an input: scripts/sglang-inputs.sh")
def test_signatures_match_sglangs_own_module(sg):
    """Read from the file the wheel ships (parsed, not imported): every public function and class of
    SGLang's module, with the same parameters, keyword-only markers and defaults."""
    import ast
    import inspect
    (m,) = sg.make(1)
    tree = ast.parse(open(SGLANG_FILE).read())
    theirs = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            theirs[node.name] = node.args
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            init = next(n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
            theirs[node.name] = init.args
    assert set(theirs) == set(m.SGLANG_NAMES)
    for name, args in theirs.items():
        ours = inspect.signature(getattr(m, name))
        positional = [a.arg for a in args.posonlyargs + args.args if a.arg != "self"]
        keyword = [a.arg for a in args.kwonlyargs]
        kinds = {p.name: p.kind for p in ours.parameters.values()}
        assert [p for p in kinds if kinds[p] != inspect.Parameter.KEYWORD_ONLY] == positional, name
        assert [p for p in kinds if kinds[p] == inspect.Parameter.KEYWORD_ONLY] == keyword, name
        defaults = [ast.literal_eval(d) for d in args.defaults]
        assert [p.default for p in ours.parameters.values() if p.default is not inspect.Parameter.empty][-len(defaults):] == defaults \
            if defaults else all(p.default is inspect.Parameter.empty for p in ours.parameters.values()), name


def test_null_contexts_and_idle_functions(sg):
    (m,) = sg.make(1)
    _, (tp,) = sg.group("solo", 1)
    assert isinstance(m.use_symmetric_memory(tp), contextlib.nullcontext), "world size 1"
    _, (r0, _) = sg.group("tp", 2)
    assert isinstance(m.use_symmetric_memory(r0, disabled=True), contextlib.nullcontext)
    sg.runtime.clear_exec()
    assert m.is_symmetric_memory_enabled() is False, "get_exec() raises ValueError until SGLang publishes"
    assert isinstance(m.use_symmetric_memory(r0), contextlib.nullcontext)
    sg.runtime.publish_exec(enable_symm_mem=False)
    assert isinstance(m.use_symmetric_memory(r0), contextlib.nullcontext)
    assert m.describe_registration_in_progress() is None
    assert m.is_tensor_in_symmetric_mempool(FakeTensor(1 << 40, 16)) is False, "no pool yet"
    assert m.disable_symmetric_memory_context() is None and m.restore_symmetric_memory_context(None) is None
    m.debug_check_symmetric_mempool(r0, {"input": FakeTensor(1, 2)}, "all_reduce")  # debug off: nothing
    for draft, enabled in ((True, True), (False, False)):
        m.prealloc_symmetric_memory_pool(is_draft_worker=draft, enable_symm_mem=enabled, device="cuda", forward_stream=None)
    sg.runtime.publish_exec(enable_symm_mem=True)
    sg.parallel_state.set_tp_group(tp)  # a TP group of one rank: nothing collective, no pool
    m.prealloc_symmetric_memory_pool(is_draft_worker=False, enable_symm_mem=True, device="cuda", forward_stream=None)
    assert m._mem_pool is None, "nothing made a pool: no JIT build, no pool, no NCCL call"


# ---- contexts, groups, windows ----

def test_one_pool_for_every_group_windows_at_agreement_points(sg):
    mods = sg.make(2)
    _, tp = sg.group("tp", 2)
    _, ep = sg.group("ep", 2)

    def rank(r):
        m, t = mods[r], sg.torch
        with m.use_symmetric_memory(tp[r]) as ctx:
            assert m._active_symmetric_memory_context is ctx
            a = t.empty((8 * MiB,))
        assert m._active_symmetric_memory_context is None
        pool_id = m.get_nccl_mem_pool().id
        assert t.state().calls == [("begin", pool_id), ("end", pool_id), ("release", pool_id)]
        assert windows(m, a.ptr) == [True], "the first scope ends are agreement points: the window is there at exit"
        with m.use_symmetric_memory(ep[r]):  # the second group joins the same pool: a's segment gets its window too
            b = t.empty((8 * MiB,))
        assert m.get_nccl_mem_pool() is m._mem_pool and len(m._pool.communicators) == 2
        assert windows(m, a.ptr) == [True, True] and windows(m, b.ptr) == [True, True]
        assert m.is_tensor_in_symmetric_mempool(a) and not m.is_tensor_in_symmetric_mempool(FakeTensor(1 << 50, 4))
        m._pool.check()
        return m._pool.pending

    results, failures = run_ranks(2, rank)
    assert failures == [None, None], failures
    assert results == [0, 0]


def test_windows_wait_for_the_pools_scheduled_scope_ends(sg):
    mods = sg.make(2)
    _, tp = sg.group("tp", 2)

    def rank(r):
        m = mods[r]
        for _ in range(17):  # scope ends 0..16: each an agreement point (the first 16, then every 16th)
            with m.use_symmetric_memory(tp[r]):
                pass
        with m.use_symmetric_memory(tp[r]):  # scope end 17: not scheduled, the same on every rank
            late = sg.torch.empty((8 * MiB,))
        pending_after_17 = m._pool.pending
        for _ in range(15):  # ... up to scope end 32, which is scheduled
            with m.use_symmetric_memory(tp[r]):
                pass
        assert m._pool.stats_json()["scope_ends"] == 33, "the registry counts (the module keeps no copy)"
        fences = sg.torch.state().fences
        # attach, then scope ends 0..16 and 32: each fenced by the stream before and the device after
        assert fences == ["stream", "device"] * (1 + 17 + 1), fences
        return pending_after_17, m._pool.pending, windows(m, late.ptr)

    results, failures = run_ranks(2, rank)
    assert failures == [None, None], failures
    assert results == [(1, 0, [True])] * 2


def test_capture_pauses_the_graph_pool_and_windows_follow_the_capture(sg):
    mods = sg.make(2)
    _, tp = sg.group("tp", 2)
    graph = ("graph", 7)

    def rank(r):
        m, t = mods[r], sg.torch
        with m.use_symmetric_memory(tp[r]):  # warm-up outside capture attaches the group
            pass
        pool_id = m.get_nccl_mem_pool().id
        t.state().calls.clear()
        with capture(t, m, graph):
            ctx = m.use_symmetric_memory(tp[r])
            assert ctx.is_graph_capture  # read when made, as SGLang does
            with ctx:
                inside = t.empty((8 * MiB,))
                assert t.state().stack == [pool_id], "the graph pool is paused inside"
            assert t.state().stack == [graph]
            outside = t.empty((MiB,))  # back in the graph's pool
        calls = list(t.state().calls)
        assert windows(m, inside.ptr) == [False], "nothing is registered during a capture"
        assert not m.is_tensor_in_symmetric_mempool(outside)
        with m.use_symmetric_memory(tp[r]):  # the first use after a capture commits (every rank)
            pass
        return calls, windows(m, inside.ptr), m._pool.pending

    results, failures = run_ranks(2, rank)
    assert failures == [None, None], failures
    for calls, after, pending in results:
        pool = [c for c in calls if c[1] != graph][0][1]
        assert calls == [("begin", graph), ("end", graph), ("begin", pool), ("end", pool), ("release", pool),
                         ("begin", graph), ("end", graph)]
        assert after == [True] and pending == 0


def test_capture_needs_the_graph_pool_id_and_a_group_first_used_in_capture_attaches_after(sg):
    mods = sg.make(2)
    _, tp = sg.group("tp", 2)

    def rank(r):
        m, t = mods[r], sg.torch
        m.get_nccl_mem_pool()
        t.state().capturing = True
        with pytest.raises(errors.InvalidState, match="graph_pool_id is not set"):
            m.use_symmetric_memory(tp[r]).__enter__()
        t.state().capturing = False
        with capture(t, m):
            with m.use_symmetric_memory(tp[r]):
                buf = t.empty((8 * MiB,))
            assert not m._pool.communicators, "no attach (collective) during a capture"
        with m.use_symmetric_memory(tp[r]):
            pass
        return windows(m, buf.ptr)

    with pytest.warns(UserWarning, match="first used during CUDA graph capture"):  # warnings of every thread
        results, failures = run_ranks(2, rank)
    assert failures == [None, None], failures
    assert results == [[True], [True]]


def test_disable_and_restore_on_one_rank_keep_the_schedule(sg):
    """SGLang disables the context around DeepGEMM's warm-up, which runs on the first rank only: no
    scope end, nothing collective there, and the ranks still agree afterwards."""
    mods = sg.make(2)
    _, tp = sg.group("tp", 2)

    def rank(r):
        m, t = mods[r], sg.torch
        with m.use_symmetric_memory(tp[r]) as ctx:
            ends = m._pool.stats_json()["scope_ends"]
            if r == 0:
                saved = m.disable_symmetric_memory_context()
                assert saved is ctx and m._active_symmetric_memory_context is None
                scratch = t.empty((32 * MiB,))  # torch's own allocator, not the pool
                assert not m.is_tensor_in_symmetric_mempool(scratch)
                m.restore_symmetric_memory_context(saved)
                assert m._active_symmetric_memory_context is ctx
                with pytest.raises(errors.InvalidState, match="was not disabled"):
                    m.restore_symmetric_memory_context(saved)
                with pytest.raises(errors.InvalidArgument, match="is not what"):
                    m.restore_symmetric_memory_context(object())
            buf = t.empty((8 * MiB,))
            assert m._pool.stats_json()["scope_ends"] == ends
        with m.use_symmetric_memory(tp[r]):
            pass
        return windows(m, buf.ptr), m._pool.stats_json()["scope_ends"]

    results, failures = run_ranks(2, rank)
    assert failures == [None, None], failures
    assert results[0] == results[1] == ([True], 2)


def test_disable_under_capture_gives_the_graph_pool_back(sg):
    mods = sg.make(2)
    _, tp = sg.group("tp", 2)
    t, graph = sg.torch, ("graph", 3)

    def rank(r):
        m = mods[r]
        with m.use_symmetric_memory(tp[r]):
            pass
        with capture(t, m, graph):
            with m.use_symmetric_memory(tp[r]):
                saved = m.disable_symmetric_memory_context()
                assert t.state().stack == [graph]
                m.restore_symmetric_memory_context(saved)
                assert t.state().stack == [m._mem_pool.id]
                again = m.disable_symmetric_memory_context()  # left while disabled: the graph pool is not resumed twice
            assert t.state().stack == [graph] and again is saved

    _, failures = run_ranks(2, rank)
    assert failures == [None, None], failures


# ---- failures: growth at run time, one rank's error, out of memory ----

def test_growth_at_run_time_on_every_rank_is_an_agreed_commit(sg):
    mods = sg.make(2)
    _, tp = sg.group("tp", 2)

    def rank(r):
        m, t = mods[r], sg.torch
        with m.use_symmetric_memory(tp[r]):
            t.empty((8 * MiB,))
        with capture(t, m):
            with m.use_symmetric_memory(tp[r]):
                t.empty((8 * MiB,))
        with m.use_symmetric_memory(tp[r]):  # run time, after the capture: a bigger batch
            grown = t.empty((40 * MiB,))
        return windows(m, grown.ptr), m._pool.pending

    results, failures = run_ranks(2, rank)
    assert failures == [None, None], failures
    assert results == [([True], 0)] * 2


def test_growth_at_run_time_on_one_rank_ends_in_an_error_on_every_rank(sg):
    """SGLang #36943: the rank whose pool grew calls ncclCommWindowRegister alone and every rank hangs.
    Here the grown rank fails at its scope end, the other at its next agreement point, and the
    application's collectives between them still pair (the simulator checks every call's order)."""
    mods = sg.make(2)
    _, tp = sg.group("tp", 2, matching="strict")

    def agreement_kernel_done():  # the other rank reached the same scope end (its part is launched there)
        mine = next(m for m in mods if threading.current_thread().name == f"rank{mods.index(m)}")
        deadline = time.monotonic() + 5
        def ends(m):
            return m._pool.stats_json()["scope_ends"]
        while any(ends(m) < ends(mine) for m in mods) and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.05)  # ... and into the C call that launches it

    sg.torch.device_wait = agreement_kernel_done

    def rank(r):
        threading.current_thread().name = f"rank{r}"
        m, t = mods[r], sg.torch
        with m.use_symmetric_memory(tp[r]):
            t.empty((8 * MiB,))
        with capture(t, m):
            with m.use_symmetric_memory(tp[r]):
                t.empty((8 * MiB,))
        errors_seen = []
        for use in range(4):
            try:
                with m.use_symmetric_memory(tp[r]):
                    if r == 0 and use == 0:
                        t.empty((40 * MiB,))  # rank 0's batch needs more memory
            except errors.AgreementError as e:
                errors_seen.append((use, str(e)))
            m._pool.communicators[0].sim_user_collective(use)  # SGLang's all-reduce after the context
        return errors_seen

    results, failures = run_ranks(2, rank)
    assert failures == [None, None], failures
    assert [use for use, _ in results[0]] == [use for use, _ in results[1]] == [0, 1, 2, 3], results
    assert "ranks disagree" in results[0][0][1] and "rank 0: pool 'sglang' (attachment #0), commit #3: 1 segment(s)" in results[0][0][1]
    assert "found after the fact" in results[1][0][1], "rank 1 did not wait, and hears of it after the fence, at the same use"
    assert all(m._pool.pending == (1 if r == 0 else 0) for r, m in enumerate(mods)), "nothing was registered"



def test_an_exception_inside_a_context_on_one_rank_fails_every_rank_at_that_scope_end(sg):
    mods = sg.make(2)
    _, tp = sg.group("tp", 2)

    def rank(r):
        m, t = mods[r], sg.torch
        with m.use_symmetric_memory(tp[r]):
            pass
        try:
            with m.use_symmetric_memory(tp[r]):
                t.empty((8 * MiB,))  # both grew: both wait for the agreement at this scope end
                if r == 0:
                    raise KeyError("a kernel failed on rank 0")
        except (KeyError, errors.AgreementError) as e:
            return type(e).__name__, str(e), m._active_symmetric_memory_context, sg.torch.state().stack
        return None

    results, failures = run_ranks(2, rank)
    assert failures == [None, None], failures
    assert results[0][0] == "KeyError"
    assert results[1][0] == "AgreementError" and "voted no" in results[1][1]
    assert all(r[2] is None and r[3] == [] for r in results), "routing and the active context are undone"


def test_out_of_memory_raises_with_ncclpools_reason(sg):
    (m,) = sg.make(1)
    _, (r0, _) = sg.group("tp", 2)
    m.get_nccl_mem_pool()
    sims = ncclpool.SimGroup("one", 1)
    group = sg.parallel_state.GroupCoordinator(unique_name="one", rank_in_group=0, world_size=2,
                                               pynccl_comm=types.SimpleNamespace(comm=ctypes.c_void_p(0x9999)))
    m._pool.attach_sim(sims, 0)  # attached by hand: the context's own attach needs rank 1
    m._attachments[0x9999] = m._Attachment(m._pool.communicators[0], "one", [])
    ncclpool.sim_inject_oom(m._pool, 1)
    with pytest.raises(FakeOutOfMemory) as caught:
        with m.use_symmetric_memory(group):
            sg.torch.empty((8 * MiB,))
    assert any(n.startswith("ncclpool: ") and "out of memory" in n.lower() for n in getattr(caught.value, "__notes__", []))


# ---- debug mode: buffers at other offsets ----

def test_debug_mode_stops_buffers_at_other_offsets_before_the_collective(sg, monkeypatch):
    monkeypatch.setenv("SGLANG_DEBUG_SYMM_MEM", "1")
    mods = sg.make(2)
    _, tp = sg.group("tp", 2)

    def rank(r):
        m, t = mods[r], sg.torch
        with m.use_symmetric_memory(tp[r]):
            seg = t.empty((64 * MiB,))  # one cached segment, torch splits it for the tensors below
        assert m._pool.check_level == "layout"
        same = FakeTensor(seg.ptr + 4 * MiB, MiB, "bfloat16")
        m.debug_check_symmetric_mempool(tp[r], {"input": same}, "all_reduce")  # same place: passes
        other = FakeTensor(seg.ptr + (0 if r == 0 else 4 * MiB), MiB, "bfloat16")  # SGLang #33037
        with pytest.raises(errors.AgreementError) as caught:
            m.debug_check_symmetric_mempool(tp[r], {"input": other}, "all_reduce")
        return str(caught.value)

    results, failures = run_ranks(2, rank)
    assert failures == [None, None], failures
    for msg in results:
        assert msg.startswith("all_reduce on group 'tp'") and "offset 0" in msg and "offset 4194304" in msg


def test_debug_mode_checks_captured_buffers_after_the_capture(sg, monkeypatch):
    monkeypatch.setenv("SGLANG_DEBUG_SYMM_MEM", "1")
    mods = sg.make(2)
    _, tp = sg.group("tp", 2)
    monkeypatch.setattr(sg.parallel_state, "get_tp_group", lambda: tp[int(threading.current_thread().name[-1])])

    def rank(r):
        threading.current_thread().name = f"rank{r}"
        m, t = mods[r], sg.torch
        with m.use_symmetric_memory(tp[r]):
            seg = t.empty((64 * MiB,))
        with capture(t, m):
            y = FakeTensor(seg.ptr + r * MiB, MiB, "bfloat16")  # the capture's buffer, one MiB further on rank 1
            m.debug_check_symmetric_mempool(tp[r], {"input": y}, "all_reduce")  # recorded: no collective in capture
            m.debug_check_symmetric_mempool(tp[r], {"input": FakeTensor(seg.ptr, MiB)}, "all_gather")
        assert [op for op, _ in m._attachments[next(iter(m._attachments))].captured_checks] == ["all_reduce", "all_gather"]
        with pytest.raises(errors.AgreementError) as caught:  # SGLang's finalize: every rank, after its captures
            m.prealloc_symmetric_memory_pool(is_draft_worker=False, enable_symm_mem=True, device="cuda", forward_stream=None)
        return str(caught.value)

    results, failures = run_ranks(2, rank)
    assert failures == [None, None], failures
    for msg in results:
        assert "all_reduce on group 'tp' (captured in a CUDA graph, check 1 of 2)" in msg


def test_debug_mode_names_tensors_outside_the_pool_on_the_first_rank(sg, monkeypatch, caplog):
    monkeypatch.setenv("SGLANG_DEBUG_SYMM_MEM", "1")
    mods = sg.make(2)
    _, tp = sg.group("tp", 2)
    caplog.set_level(logging.WARNING)

    def rank(r):
        m, t = mods[r], sg.torch
        with m.use_symmetric_memory(tp[r]):
            pass
        outside = t.empty((MiB,))  # torch's own allocator
        for _ in range(2):  # the same stack warns once
            m.debug_check_symmetric_mempool(tp[r], {"input": outside}, "all_reduce")

    _, failures = run_ranks(2, rank)
    assert failures == [None, None], failures
    hits = [rec for rec in caplog.records if "NOT in the NCCL symmetric memory pool" in rec.getMessage()]
    assert len(hits) == 1 and "'input'" in hits[0].getMessage()


# ---- preallocation, symmetric buffers ----

def test_prealloc_makes_the_windows_at_once(sg, monkeypatch):
    monkeypatch.setenv("SGLANG_SYMM_MEM_PREALLOC_GB_SIZE", "1")
    mods = sg.make(2)
    _, tp = sg.group("tp", 2)
    rank_of_thread = threading.local()  # one stand-in parallel_state for both ranks: the TP group per thread
    monkeypatch.setattr(sg.parallel_state, "get_tp_group", lambda: tp[rank_of_thread.r])

    def rank(r):
        m = mods[r]
        rank_of_thread.r = r
        for _ in range(20):  # past the pool's first 16 scope ends: only the explicit commit registers at once
            with m.use_symmetric_memory(tp[r]):
                pass
        m.prealloc_symmetric_memory_pool(is_draft_worker=False, enable_symm_mem=True, device="cuda", forward_stream=None)
        seg = m._mem_pool.snapshot()[-1]
        return seg["total_size"], windows(m, seg["address"]), m._pool.pending

    results, failures = run_ranks(2, rank)
    assert failures == [None, None], failures
    assert results == [(1 << 30, [True], 0)] * 2


@pytest.mark.parametrize("kind, expect_window", [("symmetric", True), ("local", False)])
def test_allocate_symmetric_buffer(sg, monkeypatch, kind, expect_window):
    monkeypatch.setenv("NCCLPOOL_SGLANG_KIND", kind)
    mods = sg.make(2)
    _, tp = sg.group("kv", 2)

    def rank(r):
        m = mods[r]
        buf, has_window = m.allocate_symmetric_buffer(tp[r].pynccl_comm, 3 * MiB)
        assert buf.zeroed and buf.nbytes == 3 * MiB
        live = m._pool.stats()["active_allocations"]
        del buf
        gc.collect()
        return has_window, live, m._pool.stats()["active_allocations"]

    results, failures = run_ranks(2, rank)
    assert failures == [None, None], failures
    assert results == [(expect_window, 1, 0)] * 2


def test_allocate_symmetric_buffer_of_other_sizes_fails_every_rank(sg):
    mods = sg.make(2)
    _, kv = sg.group("kv", 2)

    def rank(r):
        return mods[r].allocate_symmetric_buffer(kv[r].pynccl_comm, (8 if r == 0 else 16) * MiB)

    _, failures = run_ranks(2, rank)
    assert all(isinstance(f, errors.AgreementError) for f in failures), failures
    assert all(m._pool.stats()["active_allocations"] == 0 for m in mods), "the failed buffer went back to the pool"


def test_describe_registration_in_progress_names_the_group_during_a_step(sg, monkeypatch):
    mods = sg.make(2)
    _, tp = sg.group("tp", 2)
    seen = {}
    attach = ncclpool.Pool.attach_nccl

    def spying_attach(self, ptr, kind=None):
        module = mods[0] if threading.current_thread().name == "rank0" else mods[1]
        seen.setdefault(threading.current_thread().name, module.describe_registration_in_progress())
        return attach(self, ptr, kind)

    monkeypatch.setattr(ncclpool.Pool, "attach_nccl", spying_attach)

    def rank(r):
        threading.current_thread().name = f"rank{r}"
        with mods[r].use_symmetric_memory(tp[r]):
            pass
        return mods[r].describe_registration_in_progress()

    results, failures = run_ranks(2, rank)
    assert failures == [None, None], failures
    assert results == [None, None]
    assert seen["rank0"].startswith(f"comm={tp[0].pynccl_comm.comm.value} group=tp (attach at context entry")


# ---- bad inputs ----

def test_bad_inputs_get_clear_errors(sg, monkeypatch):
    monkeypatch.setenv("SGLANG_DEBUG_SYMM_MEM", "1")  # read once, when the pool is made (an agreed setting)
    (m,) = sg.make(1)
    _, (r0, _) = sg.group("tp", 2)
    no_pynccl = sg.parallel_state.GroupCoordinator(unique_name="nopynccl", rank_in_group=0, world_size=2)
    with pytest.raises(errors.InvalidArgument, match="requires pynccl to be enabled in group 'nopynccl'"):
        m.use_symmetric_memory(no_pynccl)
    null_comm = sg.parallel_state.GroupCoordinator(unique_name="nullcomm", rank_in_group=0, world_size=2,
                                                   pynccl_comm=types.SimpleNamespace(comm=ctypes.c_void_p(None)))
    with pytest.raises(errors.InvalidArgument, match="group 'nullcomm'.*no NCCL communicator"):
        m.use_symmetric_memory(null_comm)
    ctx = m.use_symmetric_memory(r0)
    with pytest.raises(errors.InvalidState, match="is not entered"):
        ctx.__exit__(None, None, None)
    with pytest.raises(errors.InvalidArgument, match="must be a dict"):
        m.debug_check_symmetric_mempool(r0, [FakeTensor(1, 2)], "all_reduce")
    for nbytes in (0, -1, 1.5, True, None):  # this rank's "no" at the buffer's steps (test_sglang_lockstep_review2.py)
        with pytest.raises((errors.InvalidArgument, errors.InvalidState), match="nbytes must be a positive int"):
            m.allocate_symmetric_buffer(r0.pynccl_comm, nbytes)
    with pytest.raises(errors.InvalidArgument, match="is not a PyNcclCommunicator"):
        m.allocate_symmetric_buffer(object(), MiB)
    (fresh,) = sg.make(1)
    monkeypatch.setenv("NCCLPOOL_SGLANG_KIND", "windows")  # this rank's "no" at the first attach (test_sglang_lockstep.py)
    assert fresh.get_nccl_mem_pool() is not None and "NCCLPOOL_SGLANG_KIND='windows'" in fresh._settings.problem
    (fresh,) = sg.make(1)
    monkeypatch.setenv("NCCLPOOL_SGLANG_KIND", "auto")
    assert fresh.get_nccl_mem_pool() is not None and fresh._pool.registration == "auto"


def test_a_context_cannot_be_entered_twice(sg):
    mods = sg.make(2)
    _, tp = sg.group("tp", 2)

    def rank(r):
        ctx = mods[r].use_symmetric_memory(tp[r])
        with ctx:
            with pytest.raises(errors.InvalidState, match="entered already"):
                ctx.__enter__()

    _, failures = run_ranks(2, rank)
    assert failures == [None, None], failures


# ---- switching SGLang over: install() and the start-up hook ----

ORIGINAL = """ORIGINAL = True
def use_symmetric_memory(group_coordinator, disabled=False):
    return "sglang's"
def is_symmetric_memory_enabled():
    return False
"""
CALLER = """from sglang.srt.distributed.device_communicators.pynccl_allocator import use_symmetric_memory
from sglang.srt.distributed.device_communicators import pynccl_allocator as allocator_module
"""


@pytest.fixture
def sglang_tree(sg, tmp_path, monkeypatch):
    """A stand-in of SGLang's own pynccl_allocator (and a caller of it) beside the stand-ins."""
    inner = tmp_path / "tree" / "sglang" / "srt"
    (inner / "distributed" / "device_communicators").mkdir(parents=True)
    (inner / "layers").mkdir()
    (inner / "distributed" / "device_communicators" / "pynccl_allocator.py").write_text(ORIGINAL)
    (inner / "layers" / "linear.py").write_text(CALLER)
    monkeypatch.syspath_prepend(str(tmp_path / "tree"))
    monkeypatch.delenv("NCCLPOOL_SGLANG", raising=False)
    import ncclpool.sglang as layer
    yield layer
    layer.uninstall()
    for name in [n for n in sys.modules if n.startswith("sglang")]:
        del sys.modules[name]


TARGET = "sglang.srt.distributed.device_communicators.pynccl_allocator"


def test_install_before_sglang_is_imported(sglang_tree):
    layer = sglang_tree
    with pytest.warns(UserWarning) as caught:
        replaced = layer.install()
    messages = [str(w.message) for w in caught]
    assert any("replaced: import hook" in m for m in messages)
    assert any("ncclpool-sglang.pth is not in this interpreter's site directories" in m for m in messages), \
        "from a checkout the spawned processes would not get it: install() says so"
    assert os.environ["NCCLPOOL_SGLANG"] == "1" and any("NCCLPOOL_SGLANG=1" in r for r in replaced)
    import sglang.srt.layers.linear as linear
    import sglang.srt.distributed.device_communicators.pynccl_allocator as allocator
    assert allocator is layer and linear.use_symmetric_memory is layer.use_symmetric_memory
    assert layer.install() == [], "a second install changes nothing"
    layer.uninstall()
    assert "NCCLPOOL_SGLANG" not in os.environ
    for name in (TARGET, "sglang.srt.layers.linear"):
        del sys.modules[name]
    import sglang.srt.distributed.device_communicators.pynccl_allocator as again
    assert getattr(again, "ORIGINAL", False), "uninstall removes the hook"


def test_install_after_sglang_was_imported_rebinds_its_importers(sglang_tree):
    layer = sglang_tree
    import sglang.srt.layers.linear as linear
    original = sys.modules[TARGET]
    assert linear.use_symmetric_memory(None) == "sglang's"
    with pytest.warns(UserWarning) as caught:  # what it replaced, and that spawned processes will not get it
        replaced = layer.install()
    assert any("replaced: " in str(w.message) for w in caught)
    assert sys.modules[TARGET] is layer and sys.modules["sglang.srt.distributed.device_communicators"].pynccl_allocator is layer
    assert linear.use_symmetric_memory is layer.use_symmetric_memory and linear.allocator_module is layer
    assert "sglang.srt.layers.linear.use_symmetric_memory" in replaced and "sglang.srt.layers.linear.allocator_module" in replaced
    layer.uninstall()
    assert sys.modules[TARGET] is original and linear.use_symmetric_memory(None) == "sglang's" and linear.allocator_module is original


def test_the_startup_hook_parses_its_variable(monkeypatch, capsys):
    from ncclpool import _sglang_hook as hook
    for value, on in (("1", True), ("on", True), ("TRUE", True), ("0", False), ("", False), ("off", False)):
        monkeypatch.setenv("NCCLPOOL_SGLANG", value)
        assert hook.enabled_by_env() is on
    monkeypatch.setenv("NCCLPOOL_SGLANG", "perhaps")
    from ncclpool import _environment
    monkeypatch.setattr(_environment, "_warned_switch", False)
    assert hook.enabled_by_env() is False and "NCCLPOOL_SGLANG='perhaps'" in capsys.readouterr().err
    assert hook.enabled_by_env() is False and capsys.readouterr().err == "", "said once (site may read the .pth twice)"
    with open(os.path.join(ROOT, "python", hook.PTH)) as f:
        lines = [line for line in f if line.startswith("import ")]
    assert len(lines) == 1 and "ncclpool._sglang_hook" in lines[0], "the .pth runs the hook's startup()"


SPAWN_PARENT = """
import json, multiprocessing, sys, warnings
import torch_stand_in


def child(queue):
    import ncclpool._sglang_hook as hook
    active_at_start = hook.active()  # true only if ncclpool-sglang.pth ran at this interpreter's start
    sys.modules.update(torch_stand_in.make_modules())
    import sglang.srt.distributed.device_communicators.pynccl_allocator as allocator
    queue.put(dict(active_at_start=active_at_start, module=allocator.__name__, original=getattr(allocator, "ORIGINAL", False)))


def spawn():
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    process = ctx.Process(target=child, args=(queue,))
    process.start()
    result = queue.get(timeout=120)
    process.join(60)
    return result


if __name__ == "__main__":
    sys.modules.update(torch_stand_in.make_modules())
    import ncclpool.sglang
    before = spawn()
    warnings.simplefilter("ignore")
    ncclpool.sglang.install()
    after = spawn()
    ncclpool.sglang.uninstall()
    print(json.dumps([before, after, spawn()]))
"""


def test_install_reaches_a_spawned_child_through_the_startup_hook(sglang_tree, tmp_path):
    """SGLang starts its schedulers with multiprocessing's spawn method: fresh interpreters. In a virtual
    environment that has ncclpool-sglang.pth in its site-packages (as `pip install .` puts it), a child
    started after install() resolves SGLang's module to ncclpool.sglang; before install, and after
    uninstall(), it gets SGLang's own."""
    import json
    import subprocess
    import venv
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site_dir = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
    paths = [os.path.join(ROOT, "python"), STANDINS, str(tmp_path / "tree"), os.path.dirname(os.path.abspath(__file__))]
    with open(os.path.join(site_dir, "00-ncclpool-test-paths.pth"), "w") as f:  # before ncclpool-sglang.pth
        f.write("\n".join(paths) + "\n")
    with open(os.path.join(ROOT, "python", "ncclpool-sglang.pth")) as src, open(os.path.join(site_dir, "ncclpool-sglang.pth"), "w") as dst:
        dst.write(src.read())
    (tmp_path / "parent.py").write_text(SPAWN_PARENT)
    env = {k: v for k, v in os.environ.items() if k not in ("NCCLPOOL_SGLANG", "PYTHONPATH")}
    run = subprocess.run([str(python), str(tmp_path / "parent.py")], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    before, after, undone = json.loads(run.stdout.strip().splitlines()[-1])
    assert before == {"active_at_start": False, "module": TARGET, "original": True}
    assert after == {"active_at_start": True, "module": "ncclpool.sglang", "original": False}
    assert undone == before
