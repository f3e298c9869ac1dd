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

from ranks import lock_per_rank, run_ranks
from lockstep_judge import check, finish
from test_sglang_lockstep import App

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
    lock_per_rank(monkeypatch, layer)
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
        return finish(layer.ncclpool_pool(mp), sim, r, 3, err)

    try:
        results, failures = run_ranks(2, rank)
    finally:
        for r in range(2):
            for c in list(layer.ncclpool_pool(mempools[r]).communicators):
                c.forget()
    check(results, failures)


# ---- the cross-rank fault fuzzer over ncclpool.torch ----
# As test_sglang_lockstep.py's, through the torch layer's contexts over its stand-in: 4 ranks, tp {0,1}
# {2,3} and dp {0,2} {1,3}, one pool per rank registered with both of its groups; random programs of
# context uses (one group, both), commits, captures (graph()) and the application's collectives; one
# fault on one rank. Oracle: the application's collectives pair, no timeout, no rank raises alone.

import os  # noqa: E402
import random  # noqa: E402

TORCH_FAULTS = ("oom", "exception", "register_window", "kind", "check", "capture")
TORCH_FUZZ_SEEDS = int(os.environ.get("NCCLPOOL_PY_FUZZ_SEEDS", "30"))


def torch_program(seed):
    rng = random.Random(seed)
    fault = TORCH_FAULTS[seed % len(TORCH_FAULTS)]
    ops = []
    for _ in range(rng.randint(5, 10)):
        roll, kinds = rng.random(), rng.choice((("tp",), ("dp",), ("tp", "dp")))
        if roll < 0.5:
            ops.append(("ctx", kinds, [rng.choice((0, 2 * MiB, 8 * MiB)) for _ in range(rng.randint(0, 2))]))
        elif roll < 0.65:
            ops.append(("commit", kinds, None))
        elif roll < 0.85:
            ops.append(("user", kinds[:1], None))
        else:
            ops.append(("graph", kinds[:1], 2 * MiB))
    at = rng.randrange(len(ops))
    if fault in ("oom", "exception") and ops[at][0] != "ctx":
        ops[at] = ("ctx", ops[at][1], [8 * MiB])
    if fault == "capture" and ops[at][0] != "graph":
        ops[at] = ("graph", ops[at][1][:1], 2 * MiB)
    return {"seed": seed, "fault": fault, "rank": rng.randrange(4), "at": at, "ops": ops}


def run_torch_program(layer, monkeypatch, program):
    g = rig(layer, monkeypatch, {"tp0": 2, "tp1": 2, "dp0": 2, "dp1": 2})
    where = {"tp": {0: ("tp0", 0), 1: ("tp0", 1), 2: ("tp1", 0), 3: ("tp1", 1)},
             "dp": {0: ("dp0", 0), 1: ("dp1", 0), 2: ("dp0", 1), 3: ("dp1", 1)}}
    fault, faulty, at = program["fault"], program["rank"], program["at"]
    mempools = {}
    for r in range(4):  # the pools, in the same order on every rank (their names are matched)
        kind = "local" if fault == "kind" and r == faulty else "symmetric"
        check = "layout" if fault == "check" and r == faulty else "off"
        mempools[r] = layer.create_nccl_mem_pool(kind=kind, source="sim", name="shared", growth_chunk=8 * MiB, check=check)
    who = threading.local()
    failing_capture = threading.local()

    @contextlib.contextmanager
    def capture(cuda_graph, pool=None, **kwargs):
        if getattr(failing_capture, "on", False):
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
        npool = layer.ncclpool_pool(mempools[who.r])
        ncclpool.sim_set_capturing(npool, True)
        try:
            yield
        finally:
            ncclpool.sim_set_capturing(npool, False)
    monkeypatch.setattr(sys.modules["torch"].cuda, "graph", capture, raising=False)
    lib = ncclpool.library()

    def rank(r):
        who.r = r
        mp = mempools[r]
        npool = layer.ncclpool_pool(mp)
        errors_seen, app_errors, kept = [], [], []

        def handle(kind):
            name, position = where[kind][r]
            return g[name][1][position]

        def allocate(size):
            ptr = lib.ncclpool_torch_alloc(size, 0, None)
            if not ptr:
                raise MemoryError(f"CUDA out of memory (stand-in): {ncclpool.last_error()}")
            kept.append(ptr)

        for i, (op, kinds, arg) in enumerate(program["ops"]):
            mine = r == faulty and i == at
            if mine and fault == "oom":
                ncclpool.sim_inject_oom(npool, 1)
            if mine and fault == "register_window":
                name, position = where[kinds[0]][r]
                g[name][0].inject_failure("register_window", rank=position, nth=1)
            failing_capture.on = mine and fault == "capture"
            try:
                if op == "ctx":
                    with layer.MultiGroupMemPoolAllocator(mp, [handle(k) for k in kinds]):
                        for size in arg:
                            if size:
                                allocate(size)
                        if mine and fault == "exception":
                            raise KeyError(f"a kernel failed on rank {r}")
                elif op == "commit":
                    npool.commit()
                elif op == "graph":
                    with layer.graph(object(), mp, groups=[handle(kinds[0])]):
                        allocate(arg)
                elif op == "user":
                    name, position = where[kinds[0]][r]
                    try:
                        App(g[name][0], position).collective(1000 + i)
                    except errors.Error as e:
                        app_errors.append((i, str(e)[:300]))
            except Exception as e:  # noqa: BLE001 - the oracle's input
                errors_seen.append((i, op, type(e).__name__, str(e)[:300]))
            finally:
                failing_capture.on = False
        try:
            npool.commit()
        except Exception as e:  # noqa: BLE001
            errors_seen.append(("end", "commit", type(e).__name__, str(e)[:300]))
        for kind in ("tp", "dp"):
            name, position = where[kind][r]
            try:
                App(g[name][0], position).collective(99)
            except errors.Error as e:
                app_errors.append(("end", str(e)[:300]))
        try:
            npool.poll()
        except Exception as e:  # noqa: BLE001
            errors_seen.append(("end", "poll", type(e).__name__, str(e)[:300]))
        return {"errors": errors_seen, "app_errors": app_errors, "scope_ends": npool.stats_json()["scope_ends"]}

    try:
        results, failures = run_ranks(4, rank)
    finally:
        for r in range(4):
            for c in list(layer.ncclpool_pool(mempools[r]).communicators):
                c.forget()
    assert failures == [None] * 4, (program, failures)
    problems = []
    raised = [bool(res["errors"]) for res in results]
    for r, res in enumerate(results):
        problems += [f"rank {r}: the application's collective at {w} failed: {m}" for w, m in res["app_errors"]]
        problems += [f"rank {r}: {op} at {w} timed out: {m}" for w, op, _, m in res["errors"] if "did not complete within" in m]
        partners = {q for kind in ("tp", "dp") for q in range(4) if q != r and where[kind][q][0] == where[kind][r][0]}
        if raised[r] and not any(raised[q] for q in partners):
            problems.append(f"rank {r} raised alone")
    if len({res["scope_ends"] for res in results}) > 1:
        problems.append(f"the ranks counted different scope ends: {[res['scope_ends'] for res in results]}")
    return problems, results, raised[faulty]


def test_torch_layer_fuzzer(torch_layer, monkeypatch):
    """TORCH_FUZZ_SEEDS programs (NCCLPOOL_PY_FUZZ_SEEDS; replay one: NCCLPOOL_PY_FUZZ_SEED=s); every
    fault kind must fire (the faulty rank raised) in some program."""
    only = os.environ.get("NCCLPOOL_PY_FUZZ_SEED")
    fired = {f: 0 for f in TORCH_FAULTS}
    for seed in ([int(only)] if only else range(TORCH_FUZZ_SEEDS)):
        program = torch_program(seed)
        problems, results, fault_fired = run_torch_program(torch_layer, monkeypatch, program)
        assert not problems, (f"seed {seed} (replay: NCCLPOOL_PY_FUZZ_SEED={seed}): {program}\n" + "\n".join(problems)
                              + "\n" + "\n".join(f"rank {r}: {res['errors']}" for r, res in enumerate(results)))
        fired[program["fault"]] += int(fault_fired)
    print("torch layer fuzzer: programs per fault kind where the faulty rank raised:", fired)
    if not only:
        assert all(fired.values()), f"a fault kind never fired in {TORCH_FUZZ_SEEDS} seeds: {fired}"
