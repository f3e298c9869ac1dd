"""ncclpool.torch when one rank alone fails in a context's entry (issue 44's audit of the torch layer):
a group's attach failing before the others of a MultiGroupMemPoolAllocator, a graph capture that
cannot begin. Ranks are threads over the simulator in strict matching: every collective step of the
use is still taken on every rank, the application's next collective pairs, and a rank that did not
wait hears of the failure at its next poll."""
import contextlib
import itertools
import sys
import threading

import ncclpool
from ncclpool import errors

from test_sglang_lockstep import run_ranks, App

MiB = 1 << 20


def rig(layer, monkeypatch, groups):
    """groups: {name: size}; returns {name: (SimGroup, [stand-in ProcessGroup per position])}."""
    sims, out, ptrs = {}, {}, itertools.count(0x9000)
    for name, size in groups.items():
        sim = ncclpool.SimGroup(name, size, timeout_ms=1500, matching="strict")
        handles = [layer.dist.ProcessGroup(ranks=list(range(size)), rank=p, desc=name) for p in range(size)]
        for p, h in enumerate(handles):
            h._ptr = next(ptrs)
            sims[h._ptr] = (sim, p)
        out[name] = (sim, handles)
    monkeypatch.setattr(ncclpool.Pool, "attach_nccl", lambda self, ptr, kind=None: self.attach_sim(*sims[ptr], kind))
    monkeypatch.setattr(layer.binding, "_comm_ptr", lambda g, device: g._ptr)
    # ranks are threads of one process here: the layer's process lock would serialize their collective
    # attaches (one real process per rank has its own), so each rank thread gets its own lock
    tls = threading.local()

    class PerThreadLock:
        def _l(self):
            if not hasattr(tls, "lock"):
                tls.lock = threading.RLock()
            return tls.lock

        def __enter__(self):
            return self._l().__enter__()

        def __exit__(self, *a):
            return self._l().__exit__(*a)
    monkeypatch.setattr(layer.binding, "_lock", PerThreadLock())
    return out


def test_multi_group_context_first_group_attach_failing(torch_layer, monkeypatch):
    """tp {0,1} {2,3}, dp {0,2} {1,3}; MultiGroupMemPoolAllocator(pool, [tp, dp]) at first use; the tp0
    attach fails (a window registration refused on rank 0: every rank of tp0 fails there). Ranks 0 and 1
    raise before their dp attach; ranks 2 and 3 wait in theirs."""
    layer = torch_layer
    g = rig(layer, monkeypatch, {"tp0": 2, "tp1": 2, "dp0": 2, "dp1": 2})
    tp = {0: ("tp0", 0), 1: ("tp0", 1), 2: ("tp1", 0), 3: ("tp1", 1)}
    dp = {0: ("dp0", 0), 1: ("dp1", 0), 2: ("dp0", 1), 3: ("dp1", 1)}
    lock = threading.Lock()
    mempools = {}
    with lock:
        for r in range(4):
            mempools[r] = layer.create_nccl_mem_pool(symmetric=True, source="sim", name="shared", growth_chunk=8 * MiB)
    g["tp0"][0].inject_failure("register_window", rank=0, nth=1)

    def rank(r):
        mp = mempools[r]
        pool = layer.ncclpool_pool(mp)
        kept = pool.alloc(MiB)  # noqa: F841 - a segment exists before the attach
        tp_sim, tp_pos = g[tp[r][0]][0], tp[r][1]
        dp_sim, dp_pos = g[dp[r][0]][0], dp[r][1]
        err = None
        try:
            with layer.MultiGroupMemPoolAllocator(mp, [g[tp[r][0]][1][tp_pos], g[dp[r][0]][1][dp_pos]]):
                pass
        except Exception as e:  # noqa: BLE001
            err = f"{type(e).__name__}: {e}"[:200]
        apps = []
        for sim, pos, arg in ((tp_sim, tp_pos, 1), (dp_sim, dp_pos, 2)):
            try:
                App(sim, pos).collective(arg)
            except errors.Error as e:
                apps.append(str(e)[:300])
        return err, apps

    try:
        results, failures = run_ranks(4, rank)
    finally:
        for r in range(4):
            for c in list(layer.ncclpool_pool(mempools[r]).communicators):
                c.forget()
    assert failures == [None] * 4, failures
    assert all(not apps for _, apps in results), results


def test_graph_capture_failing_to_begin_on_one_rank(torch_layer, monkeypatch):
    """torch.cuda.graph's __enter__ raises on rank 0 (capture could not begin): graph.__exit__ never
    runs there, so its commit after the capture is made on rank 1 only."""
    layer = torch_layer
    g = rig(layer, monkeypatch, {"tp": 2})
    sim, handles = g["tp"]
    mempools = {r: layer.create_nccl_mem_pool(symmetric=True, source="sim", name="shared", growth_chunk=8 * MiB)
                for r in range(2)}
    who = threading.local()

    @contextlib.contextmanager
    def capture(cuda_graph, pool=None, **kwargs):
        if who.r == 0:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
        mp = next(m for m in mempools.values() if m.id == pool)
        ncclpool.sim_set_capturing(layer.ncclpool_pool(mp), True)
        try:
            yield
        finally:
            ncclpool.sim_set_capturing(layer.ncclpool_pool(mp), False)
    monkeypatch.setattr(sys.modules["torch"].cuda, "graph", capture, raising=False)

    def rank(r):
        who.r = r
        mp = mempools[r]
        err = None
        try:
            with layer.graph(object(), mp, groups=[handles[r]]):
                pass
        except Exception as e:  # noqa: BLE001
            err = f"{type(e).__name__}: {e}"[:200]
        app = None
        try:
            App(sim, r).collective(3)
        except errors.Error as e:
            app = str(e)[:300]
        try:  # a rank that had nothing to register did not wait: it hears of the "no" now
            layer.ncclpool_pool(mp).poll()
        except errors.Error as e:
            err = err or f"{type(e).__name__}: {e}"[:200]
        return err, app

    try:
        results, failures = run_ranks(2, rank)
    finally:
        for r in range(2):
            for c in list(layer.ncclpool_pool(mempools[r]).communicators):
                c.forget()
    assert failures == [None] * 2, failures
    assert all(app is None for _, app in results), results
    assert all(err for err, _ in results) or not any(err for err, _ in results), results
