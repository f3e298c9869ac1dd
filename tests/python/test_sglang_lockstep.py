"""Lockstep in ncclpool.sglang (issue 44): one rank alone differs (out of memory, a setting, another
device, a refused registration, an exception) and every rank ends in an error at the same agreement
point, with the application's next collective still pairing. Ranks are threads over the simulator in
strict matching: a call of one rank that meets another kind of call on another rank fails both, so a
stray agreement of ncclpool's shows up as a failed application collective.

Each test of items 1-5 fails with its fix reverted (docs/sglang.md, "Misconfigured ranks"); the
fuzzer at the end drives random programs with one-rank faults over partly overlapping groups."""
import importlib
import os
import random
import sys
import threading

import pytest

import ncclpool
from ncclpool import errors

from ranks import current, run_ranks
from test_sglang import MiB, FakeOutOfMemory, FakeTensor, capture, sg  # noqa: F401 (sg: the fixture)



@pytest.fixture
def per_rank(sg, monkeypatch):
    """per_rank(name, {rank: value}): what one setting reads on some ranks only (the environment is
    the process's, shared by the rank threads). Names: kind (NCCLPOOL_SGLANG_KIND), debug
    (SGLANG_DEBUG_SYMM_MEM), prealloc (SGLANG_SYMM_MEM_PREALLOC_GB_SIZE), device (torch's current one)."""
    from ncclpool import _environment
    support = importlib.import_module("ncclpool._sglang_support")  # the copy the sg fixture's modules import
    torch = sys.modules["torch"]
    overrides = {}
    originals = {"kind": _environment.sglang_kind, "debug": support.debug_enabled, "prealloc": support.prealloc_gib,
                 "device": torch.cuda.current_device}

    def reader(name):
        def read():
            values = overrides.get(name, {})
            r = getattr(current, "rank", None)
            if r in values:
                value = values[r]
                if isinstance(value, BaseException):
                    raise value
                return value
            return originals[name]()
        return read

    monkeypatch.setattr(_environment, "sglang_kind", reader("kind"))
    monkeypatch.setattr(support, "debug_enabled", reader("debug"))
    monkeypatch.setattr(support, "prealloc_gib", reader("prealloc"))
    monkeypatch.setattr(torch.cuda, "current_device", reader("device"))

    def set_(name, values):
        overrides[name] = dict(values)
    return set_


class App:
    """The application's own use of a group's communicator (SGLang's all-reduce): a plain pool attached
    locally to the same simulated communicator, whose user collectives must pair on every rank (strict
    matching fails them where another rank's call in that position is one of ncclpool's)."""

    def __init__(self, sim, rank):
        self.pool = ncclpool.Pool(source="sim", registration="local", name=f"app-{rank}")
        self.comm = self.pool.attach_sim(sim, rank)

    def collective(self, argument):
        self.comm.sim_user_collective(argument)


# ---- items 1-5 of issue 44 ----

def test_item1_out_of_memory_on_one_rank_in_allocate_symmetric_buffer(sg):
    mods = sg.make(2)
    sim, kv = sg.group("kv", 2, matching="strict")

    def rank(r):
        m = mods[r]
        kept = m.allocate_symmetric_buffer(kv[r].pynccl_comm, MiB)  # attached, one window  # noqa: F841
        if r == 0:
            ncclpool.sim_inject_oom(m._pool, 1)
        try:
            m.allocate_symmetric_buffer(kv[r].pynccl_comm, 128 * MiB)  # grows the pool: OOM on rank 0
        except (errors.Error, FakeOutOfMemory) as e:
            App(sim, r).collective(7)
            return type(e).__name__, str(e), m._pool.stats()["active_allocations"], kept[1]
        return None

    results, failures = run_ranks(2, rank)
    assert failures == [None, None], failures
    assert results[0][0] == "OutOfMemory", results
    assert results[1][0] == "AgreementError" and "voted no" in results[1][1], results
    assert [res[2:] for res in results] == [(1, True)] * 2, "only the first buffer lives, in its window"


def test_item2_out_of_memory_on_one_rank_in_prealloc_after_the_first_scope_ends(sg, monkeypatch):
    monkeypatch.setenv("SGLANG_SYMM_MEM_PREALLOC_GB_SIZE", "1")
    mods = sg.make(2)
    sim, tp = sg.group("tp", 2, matching="strict")
    rank_of_thread = threading.local()
    monkeypatch.setattr(sg.parallel_state, "get_tp_group", lambda: tp[rank_of_thread.r])

    def rank(r):
        m = mods[r]
        rank_of_thread.r = r
        for _ in range(20):  # past the first 16: the preallocation's scope end is not scheduled
            with m.use_symmetric_memory(tp[r]):
                pass
        if r == 0:
            ncclpool.sim_inject_oom(m._pool, 1)
        try:
            m.prealloc_symmetric_memory_pool(is_draft_worker=False, enable_symm_mem=True, device="cuda", forward_stream=None)
        except (errors.Error, FakeOutOfMemory) as e:
            App(sim, r).collective(9)
            return type(e).__name__, str(e)
        return None

    results, failures = run_ranks(2, rank)
    assert failures == [None, None], failures
    assert results[0] is not None and results[0][0] in ("FakeOutOfMemory", "OutOfMemory"), results
    assert results[1] is not None and results[1][0] == "AgreementError" and "voted no" in results[1][1], results


def test_item3_debug_mode_on_one_rank_only(sg, per_rank, monkeypatch):
    monkeypatch.setenv("NCCLPOOL_CHECK", "layout")  # on both ranks: only SGLang's debug switch differs
    per_rank("debug", {0: True, 1: False})
    mods = sg.make(2)
    sim, tp = sg.group("tp", 2, matching="strict")

    def rank(r):
        m, t = mods[r], sg.torch
        try:
            with m.use_symmetric_memory(tp[r]):
                seg = t.empty((8 * MiB,))
            m.debug_check_symmetric_mempool(tp[r], {"input": FakeTensor(seg.ptr, MiB)}, "all_reduce")
        except errors.Error as e:
            App(sim, r).collective(3)
            return type(e).__name__, str(e)
        return None

    results, failures = run_ranks(2, rank)
    assert failures == [None, None], failures
    assert all(res is not None and res[0] == "AgreementError" for res in results), results
    assert "debug=1" in results[0][1] and "debug=0" in results[1][1], "each rank names its own settings"


@pytest.mark.parametrize("other", ["symmetric", "auto"])
def test_item4_local_kind_on_one_rank(sg, per_rank, other):
    per_rank("kind", {0: "local", 1: other})
    mods = sg.make(2)
    sim, tp = sg.group("tp", 2, matching="strict")

    def rank(r):
        m, t = mods[r], sg.torch
        try:
            with m.use_symmetric_memory(tp[r]):
                t.empty((8 * MiB,))
        except errors.Error as e:
            App(sim, r).collective(4)
            return type(e).__name__, str(e)
        return None

    results, failures = run_ranks(2, rank)
    assert failures == [None, None], failures
    assert all(res is not None and res[0] == "AgreementError" for res in results), results
    assert all(len(m._pool.communicators) == 0 for m in mods), "nothing attached anywhere"


def test_item4_an_unreadable_kind_on_one_rank_is_its_no_at_the_first_attach(sg, per_rank):
    per_rank("kind", {0: errors.InvalidArgument("NCCLPOOL_SGLANG_KIND='windows' is not one of auto, symmetric, local")})
    mods = sg.make(2)
    sim, tp = sg.group("tp", 2, matching="strict")

    def rank(r):
        try:
            with mods[r].use_symmetric_memory(tp[r]):
                pass
        except errors.Error as e:
            return type(e).__name__, str(e)
        return None

    results, failures = run_ranks(2, rank)
    assert failures == [None, None], failures
    assert all(res is not None for res in results), results
    assert "NCCLPOOL_SGLANG_KIND='windows'" in results[0][1]


def test_item5_another_current_device_on_one_rank_at_a_groups_first_use(sg, per_rank):
    per_rank("device", {0: 1})  # rank 0's current device is cuda:1 when it first uses the group
    mods = sg.make(2)
    sim, tp = sg.group("tp", 2, matching="strict")

    def rank(r):
        m = mods[r]
        if r == 0:
            per_rank("device", {})
            m.get_nccl_mem_pool()  # the pool is made on cuda:0 ...
            per_rank("device", {0: 1})  # ... and the group first used on cuda:1
        try:
            with m.use_symmetric_memory(tp[r]):
                pass
        except errors.Error as e:
            App(sim, r).collective(5)
            return type(e).__name__, str(e)
        return None

    results, failures = run_ranks(2, rank)
    assert failures == [None, None], failures
    assert results[0] is not None and "current device is cuda:1" in results[0][1], results
    assert results[1] is not None and results[1][0] == "AgreementError", results


def test_item5_another_current_device_on_one_rank_after_the_first_use(sg, per_rank):
    mods = sg.make(2)
    sim, tp = sg.group("tp", 2, matching="strict")

    def rank(r):
        m, t = mods[r], sg.torch
        with m.use_symmetric_memory(tp[r]):
            pass
        if r == 0:
            per_rank("device", {0: 1})
        try:
            with m.use_symmetric_memory(tp[r]):  # scope end 1: scheduled, an agreement
                t.empty((8 * MiB,))
        except errors.Error as e:
            App(sim, r).collective(6)
            return type(e).__name__, str(e), m._pool.stats_json()["scope_ends"]
        return None

    results, failures = run_ranks(2, rank)
    assert failures == [None, None], failures
    assert "current device is cuda:1" in results[0][1] and results[1][0] == "AgreementError", results
    assert results[0][2] == results[1][2] == 2, "both counted the scope end: one schedule"


# ---- the cross-rank fault fuzzer of the Python layers ----
# 4 ranks; every rank runs the same program, each op on its own group of a kind: tp {0,1} {2,3} and dp
# {0,2} {1,3} (partly overlapping: every rank is in two groups, every group shares a rank with two
# others). One fault on one rank per program. Oracle: the application's collectives always pair (none
# of ncclpool's calls is ever left to meet one), no rank waits for a step another skipped (no timeout),
# and no rank raises alone (a rank that raised shares a group with another that raised).

FAULTS = ("oom", "exception", "kind", "debug", "prealloc", "device", "register_window")
FUZZ_SEEDS = int(os.environ.get("NCCLPOOL_PY_FUZZ_SEEDS", "42"))
_SIZES = (0, 2 * MiB, 8 * MiB, 24 * MiB)


def make_program(seed):
    rng = random.Random(seed)
    fault = FAULTS[seed % len(FAULTS)]
    ops = []
    for _ in range(rng.randint(6, 11)):
        roll = rng.random()
        kind = rng.choice(("tp", "dp"))
        if roll < 0.45:
            ops.append(("ctx", kind, [rng.choice(_SIZES) for _ in range(rng.randint(0, 2))]))
        elif roll < 0.6:
            ops.append(("buf", kind, rng.choice(_SIZES[1:])))
        elif roll < 0.8:
            ops.append(("user", kind, None))
        elif roll < 0.9:
            ops.append(("capture", kind, [rng.choice(_SIZES[1:])]))
        else:
            ops.append(("debug", kind, None))
    if rng.random() < 0.5:  # past the pool's first 16 scope ends: most later ones are not agreement points
        ops.insert(0, ("warm", "tp", 17))
    if rng.random() < 0.4 or fault in ("prealloc", "oom", "exception"):
        ops.insert(rng.randint(1, len(ops)), ("prealloc", "tp", None))
    at = rng.randrange(len(ops))
    if fault in ("oom", "exception") and rng.random() < 0.5:  # half of them where the preallocation is, or a capture
        at = next((i for i, op in enumerate(ops) if op[0] in ("prealloc", "capture")), at)
    if fault in ("oom", "exception") and ops[at][0] not in ("ctx", "buf", "capture", "prealloc"):
        kind = ops[at][1]  # an op that can meet it: a context (made to allocate), a buffer, a capture, the preallocation
        ops[at] = ("ctx", kind, [8 * MiB, 24 * MiB]) if fault == "exception" or rng.random() < 0.5 else ("buf", kind, 24 * MiB)
    elif fault in ("oom", "exception") and ops[at][0] == "ctx" and not any(ops[at][2]):
        ops[at] = ("ctx", ops[at][1], [24 * MiB])
    return {"seed": seed, "fault": fault, "rank": rng.randrange(4), "at": at, "ops": ops}


def run_program(sg, per_rank, monkeypatch, program):
    mods = sg.make(4)
    groups = {}
    for kind, members in (("tp", ((0, 1), (2, 3))), ("dp", ((0, 2), (1, 3)))):
        for index, ranks in enumerate(members):
            sim, coordinators = sg.group(f"{kind}{index}", 2, timeout_ms=1500, matching="strict")
            for position, r in enumerate(ranks):
                groups[(kind, r)] = (sim, position, coordinators[position])
    fault, faulty, at = program["fault"], program["rank"], program["at"]
    if fault in ("kind", "debug", "prealloc"):
        per_rank(fault, {faulty: {"kind": "local", "debug": True, "prealloc": 1}[fault]})
    # Only SGLang's debug switch differs (the check mode it would bring is asked on every rank), and a
    # preallocation allocates (so a fault can land inside it) unless its size is the fault.
    for name, value in (("NCCLPOOL_CHECK", "layout" if fault == "debug" else None),
                        ("SGLANG_SYMM_MEM_PREALLOC_GB_SIZE", "1" if fault != "prealloc" else None)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    torch = sys.modules["torch"]
    plain_empty = torch.empty
    boom = threading.local()  # the exception fault inside the preallocation: torch.empty raises there

    def empty(*args, **kwargs):
        if getattr(boom, "on", False):
            raise KeyError(f"a kernel failed on rank {faulty}")
        return plain_empty(*args, **kwargs)
    monkeypatch.setattr(torch, "empty", empty)
    monkeypatch.setattr(sg.parallel_state, "get_tp_group", lambda: groups[("tp", threading.current_thread().rank)][2])
    coverage = {}

    def rank(r):
        threading.current_thread().rank = r
        m, t = mods[r], sg.torch
        apps = {}
        outcome = {"errors": [], "app_errors": []}
        last = {}

        def app(kind):
            if kind not in apps:
                sim, position, _ = groups[(kind, r)]
                apps[kind] = App(sim, position)
            return apps[kind]

        def step(i, op, kind, arg):
            coordinator = groups[(kind, r)][2]
            raise_inside = fault == "exception" and r == faulty and i == at
            if op == "ctx":
                with m.use_symmetric_memory(coordinator):
                    for size in arg:
                        if size:
                            last[kind] = t.empty((size,))
                    if raise_inside:
                        raise KeyError(f"a kernel failed on rank {r}")
            elif op == "buf":
                m.allocate_symmetric_buffer(coordinator.pynccl_comm, arg)
            elif op == "capture":
                m.get_nccl_mem_pool()
                with capture(t, m):
                    with m.use_symmetric_memory(coordinator):
                        t.empty((arg[0],))
                        if raise_inside:
                            raise KeyError(f"a kernel failed on rank {r} during the capture")
            elif op == "warm":  # arg uses on every rank, whatever one of them raised (each is one use, as an op)
                first = None
                for _ in range(arg):
                    try:
                        with m.use_symmetric_memory(coordinator):
                            pass
                    except Exception as e:  # noqa: BLE001 - the op's error, after all of its uses
                        first = first or e
                if first is not None:
                    raise first
            elif op == "debug" and kind in last:
                m.debug_check_symmetric_mempool(coordinator, {"input": last[kind]}, "all_reduce")
            elif op == "prealloc":
                boom.on = raise_inside
                try:
                    m.prealloc_symmetric_memory_pool(is_draft_worker=False, enable_symm_mem=True, device="cuda", forward_stream=None)
                finally:
                    boom.on = False

        for i, (op, kind, arg) in enumerate(program["ops"]):
            if r == faulty and i == at:
                if fault == "oom" and m._pool is not None:
                    ncclpool.sim_inject_oom(m._pool, 1)
                elif fault == "oom":
                    m.get_nccl_mem_pool()
                    ncclpool.sim_inject_oom(m._pool, 1)
                elif fault == "device":
                    m.get_nccl_mem_pool()
                    per_rank("device", {r: 1})
                elif fault == "register_window":
                    sim, position, _ = groups[(kind, r)]
                    sim.inject_failure("register_window", rank=position, nth=1)
            try:
                if op == "user":
                    try:
                        app(kind).collective(1000 + i)
                    except errors.Error as e:
                        outcome["app_errors"].append((i, str(e)))
                else:
                    step(i, op, kind, arg)
            except Exception as e:  # noqa: BLE001 - every rank's errors are the oracle's input
                outcome["errors"].append((i, op, type(e).__name__, str(e)))
            finally:
                if fault == "device" and r == faulty and i == at:
                    per_rank("device", {})
        # The end: the agreement point every rank reaches (a commit of the pool), then the application
        # on each of its groups, then what the last agreements found.
        try:
            if m._pool is not None:
                m._pool.commit()
        except Exception as e:  # noqa: BLE001
            outcome["errors"].append(("end", "commit", type(e).__name__, str(e)))
        for kind in ("tp", "dp"):
            try:
                app(kind).collective(99)
            except errors.Error as e:
                outcome["app_errors"].append(("end", str(e)))
        # Every agreement has completed now (each rank's application collective came after its last
        # one): what a rank that did not wait has to hear of, poll() reports (docs/registry.md).
        try:
            if m._pool is not None:
                m._pool.poll()
        except Exception as e:  # noqa: BLE001
            outcome["errors"].append(("end", "poll", type(e).__name__, str(e)))
        outcome["scope_ends"] = m._pool.stats_json()["scope_ends"] if m._pool is not None else 0
        return outcome

    try:
        results, failures = run_ranks(4, rank)
    finally:
        for m in mods:  # windows go without NCCL calls: the groups die with the program
            if m._pool is not None:
                for c in list(m._pool.communicators):
                    c.forget()
    assert failures == [None] * 4, (program, failures)
    raised = [bool(res["errors"]) for res in results]
    coverage[fault] = raised[faulty]
    problems = []
    # The program is the same on every rank (each op's uses made whatever raised): the pool's schedule
    # of agreement points, a function of its scope ends, is the same on every rank only then.
    if len({res["scope_ends"] for res in results}) != 1:
        problems.append(f"the ranks' programs differ: scope ends per rank {[res['scope_ends'] for res in results]}")
    for r, res in enumerate(results):
        for where, message in res["app_errors"]:
            problems.append(f"rank {r}: the application's collective at {where} failed: {message}")
        for where, op, name, message in res["errors"]:
            if "did not complete within" in message:
                problems.append(f"rank {r}: {op} at {where} timed out (a rank skipped the step): {message}")
    # No rank fails alone: a rank that raised shares a group with a rank that raised too (the one
    # rule: a failure on one rank is its "no" in a step its group's ranks take together).
    for r in range(4):
        partners = {q for kind in ("tp", "dp") for q in range(4) if q != r and groups[(kind, q)][0] is groups[(kind, r)][0]}
        if raised[r] and not any(raised[q] for q in partners):
            problems.append(f"rank {r} raised alone: none of the ranks it shares a group with ({sorted(partners)}) did")
    return problems, results, coverage


def test_fuzzer_a_failed_group_makes_every_use_of_a_repeated_op(sg, per_rank, monkeypatch):
    """Seed 53's minimal case: rank 3's preallocation setting differs, so every attach of tp1 {2,3}
    fails on both of its ranks. A repeated op (17 context uses on tp, past the first 16 scope ends)
    makes all of its uses there too: had ranks 2 and 3 stopped at the first error, their pools would
    count 16 scope ends fewer than those of ranks 0 and 1, whose scheduled scope ends then differ from
    theirs while dp {0,2} and {1,3} are attached (rank 2 joined an agreement of dp0 at a context exit
    of tp where rank 0 did not, and rank 0's next user collective of dp0 met it)."""
    program = {"seed": None, "fault": "prealloc", "rank": 3, "at": 0,
               "ops": [("warm", "tp", 17), ("buf", "dp", 2 * MiB), ("buf", "dp", 2 * MiB), ("ctx", "tp", []), ("user", "dp", None)]}
    try:
        problems, results, _ = run_program(sg, per_rank, monkeypatch, program)
    finally:
        per_rank("prealloc", {})
    assert not problems, "\n".join(problems) + "\n" + "\n".join(f"rank {r}: {res['errors']}" for r, res in enumerate(results))
    assert [res["scope_ends"] for res in results] == [18] * 4
    warm = [[e for e in res["errors"] if e[0] == 0] for res in results]
    assert [bool(w) for w in warm] == [False, False, True, True], warm
    assert all(w[0][2] == "AgreementError" and "prealloc_gib" in w[0][3] for w in warm[2:]), warm


def test_python_layers_fuzzer(sg, per_rank, monkeypatch):
    """FUZZ_SEEDS programs (NCCLPOOL_PY_FUZZ_SEEDS; replay one: NCCLPOOL_PY_FUZZ_SEED=s); every fault kind
    must fire (the faulty rank raised) in some program, or the seeds test nothing."""
    only = os.environ.get("NCCLPOOL_PY_FUZZ_SEED")
    seeds = [int(only)] if only else range(FUZZ_SEEDS)
    fired = {f: 0 for f in FAULTS}
    for seed in seeds:
        program = make_program(seed)
        problems, results, coverage = run_program(sg, per_rank, monkeypatch, program)
        assert not problems, (f"seed {seed} (replay: NCCLPOOL_PY_FUZZ_SEED={seed}): {program}\n" + "\n".join(problems)
                              + "\n" + "\n".join(f"rank {r}: {res['errors']}" for r, res in enumerate(results)))
        fired[program["fault"]] += int(coverage[program["fault"]])
        per_rank("kind", {}), per_rank("debug", {}), per_rank("prealloc", {}), per_rank("device", {})
    print("python lockstep fuzzer: programs per fault kind where the faulty rank raised:", fired)
    if not only:
        assert all(fired.values()), f"a fault kind never fired in {FUZZ_SEEDS} seeds: {fired}"
