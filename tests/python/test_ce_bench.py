"""The copy-engine parts of the training benchmarks that need no GPU: bench/ce_common.py (the ZERO
CTA options, torch's symmetric pool lookup, the teardown watchdog, NCCL's path lines) and
bench/fsdp2_bench.py's presets, run environments, run logs and loss comparison."""
import importlib
import io
import os
import sys
import threading
import types

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(os.path.join(ROOT, "bench"))
    for name in ("ce_common", "fsdp2_bench"):
        sys.modules.pop(name, None)
    return types.SimpleNamespace(ce=importlib.import_module("ce_common"), fsdp2=importlib.import_module("fsdp2_bench"))


def fake_dist(with_constant=True, with_cta_policy=True):
    config = types.SimpleNamespace(cta_policy=0) if with_cta_policy else types.SimpleNamespace(blocking=1)
    pg_nccl = types.SimpleNamespace(Options=lambda: types.SimpleNamespace(config=config))
    if with_constant:
        pg_nccl.NCCL_CTA_POLICY_ZERO = 7  # not nccl.h's 2: shows that torch's own constant is used
    made = []
    dist = types.SimpleNamespace(ProcessGroupNCCL=pg_nccl, new_group=lambda ranks, pg_options: made.append((ranks, pg_options)) or "group")
    return dist, made


def test_zero_cta_options_use_torchs_constant_or_ncclh_value(bench):
    options, why = bench.ce.zero_cta_options(fake_dist()[0])
    assert (options.config.cta_policy, why) == (7, "")
    options, _ = bench.ce.zero_cta_options(fake_dist(with_constant=False)[0])
    assert options.config.cta_policy == 2


def test_zero_cta_options_say_why_not(bench):
    options, why = bench.ce.zero_cta_options(fake_dist(with_cta_policy=False)[0])
    assert options is None and "cta_policy" in why
    options, why = bench.ce.zero_cta_options(types.SimpleNamespace())
    assert options is None and "ProcessGroupNCCL" in why


def test_zero_cta_group_is_made_with_the_options_or_not_at_all(bench):
    dist, made = fake_dist()
    assert bench.ce.zero_cta_group(dist, range(2)) == ("group", "")
    assert made[0][0] == [0, 1] and made[0][1].config.cta_policy == 7
    dist, made = fake_dist(with_cta_policy=False)
    group, why = bench.ce.zero_cta_group(dist, range(2))
    assert group is None and why and made == []


def test_torch_symmetric_pool_prefers_get_mem_pool(bench):
    backends = []
    torch = types.SimpleNamespace(cuda=types.SimpleNamespace(MemPool=lambda allocator: ("MemPool", allocator)))
    both = types.SimpleNamespace(set_backend=backends.append, get_mem_pool=lambda d: ("pool", d), get_mempool_allocator=lambda d: "alloc")
    assert bench.ce.torch_symmetric_pool(torch, both, "cuda:0") == (("pool", "cuda:0"), "symm_mem.get_mem_pool")
    older = types.SimpleNamespace(set_backend=backends.append, get_mempool_allocator=lambda d: "alloc")
    pool, route = bench.ce.torch_symmetric_pool(torch, older, "cuda:0")
    assert pool == ("MemPool", "alloc") and "get_mempool_allocator" in route
    assert backends == ["NCCL", "NCCL"]
    with pytest.raises(RuntimeError, match="no symmetric-memory pool"):
        bench.ce.torch_symmetric_pool(torch, types.SimpleNamespace(set_backend=backends.append), "cuda:0")


def test_torch_fsdp_ce_setters_lists_what_the_class_has(bench):
    class Newer:
        def set_copy_engine_all_gather(self, enable): ...

    assert bench.ce.torch_fsdp_ce_setters(Newer) == ["set_copy_engine_all_gather"]
    assert bench.ce.torch_fsdp_ce_setters(object) == []


def test_teardown_that_returns_prints_ok(bench):
    out, exits = io.StringIO(), []
    dist = types.SimpleNamespace(destroy_process_group=lambda: None)
    assert bench.ce.destroy_with_watchdog(dist, 5, exit=exits.append, out=out)
    assert out.getvalue().startswith("TEARDOWN ok") and exits == []
    assert bench.ce.teardown_state(out.getvalue().splitlines()) == "ok"


def test_teardown_that_hangs_ends_the_process(bench):
    out, exited = io.StringIO(), threading.Event()
    codes = []

    def exit(code):  # the real one (os._exit) never returns; this one lets the hung destroy go
        codes.append(code)
        exited.set()

    dist = types.SimpleNamespace(destroy_process_group=lambda: exited.wait(10))
    assert not bench.ce.destroy_with_watchdog(dist, 0.05, exit=exit, out=out)
    assert codes == [bench.ce.TEARDOWN_HUNG_RC]
    assert "TEARDOWN hung" in out.getvalue() and "TEARDOWN ok" not in out.getvalue()
    lines = ["TEARDOWN ok 0.10 s"] + out.getvalue().splitlines()  # one rank finished, one hung
    assert bench.ce.teardown_state(lines) == "hung"
    assert bench.ce.teardown_state(["BENCH {}"]) == "unknown"


NCCL_LOG = """\
host:1:2 [0] NCCL INFO AllGather [Copy Engine]: 33554432 Bytes -> cudaMemcpy
host:1:2 [0] NCCL INFO AllGather [Copy Engine]: 33554432 Bytes -> cudaMemcpy
host:1:2 [0] NCCL INFO ReduceScatter [Symmetric]: 67108864 Bytes -> Kernel ReduceScatter_LL nchannels 32 nthreads 512 nWorks 1
host:1:2 [0] NCCL INFO AllGather: 4096 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..1}
host:1:2 [0] NCCL INFO AllReduce: 4 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}
host:1:2 [0] NCCL TRACE 4 Bytes -> Algo 1 proto 0 time 5.0
host:1:2 [0] NCCL INFO Init CE, rank 0 baseUCSymReadyPtr 0x1
"""


def test_nccl_paths_are_counted_per_collective(bench, tmp_path):
    counts = bench.ce.count_nccl_paths(NCCL_LOG.splitlines())
    assert counts["AllGather"] == {"copy_engine": 2, "symmetric": 0, "kernel": 1, "small": 0}
    assert counts["ReduceScatter"] == {"copy_engine": 0, "symmetric": 1, "kernel": 0, "small": 0}
    assert counts["AllReduce"] == {"copy_engine": 0, "symmetric": 0, "kernel": 0, "small": 1}  # 4 bytes: not the workload's
    assert counts["Init CE"] == 1 and len(counts) == 4
    assert bench.ce.format_paths(counts) == "copy engine 2, symmetric 0, kernel 1; Init CE 1"
    assert bench.ce.format_paths({}) == "none logged"
    assert "INIT" in bench.ce.NCCL_LOG_ENV["NCCL_DEBUG_SUBSYS"].split(",")
    (tmp_path / "run.nccl.host.1.log").write_text(NCCL_LOG)
    (tmp_path / "run.nccl.host.2.log").write_text(NCCL_LOG.splitlines()[0] + "\n")
    assert bench.ce.count_nccl_path_files(str(tmp_path / "run.nccl.*.log"))["AllGather"]["copy_engine"] == 3


def test_small_collectives_are_counted_apart(bench):
    # What the first 2-GPU run logged for ncclpool-ce: only ncclpool's agreement all-gathers (128 and
    # 520 bytes) had TUNING lines, and they were counted as the workload's "kernel" all-gathers.
    log = ["h:1:2 [0] NCCL INFO AllGather: 128 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}"] * 32 + \
          ["h:1:2 [0] NCCL INFO AllGather: 520 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}"]
    counts = bench.ce.count_nccl_paths(log)
    assert bench.ce.format_paths(counts) == "none logged (33 of <= 1024 B)"
    log.append("h:1:2 [0] NCCL INFO AllGather [Symmetric]: 134246400 Bytes -> Kernel AllGather_ST nchannels 32 nthreads 512 nWorks 1")
    assert bench.ce.format_paths(bench.ce.count_nccl_paths(log)) == "copy engine 0, symmetric 1, kernel 0 (+33 of <= 1024 B)"


def test_configurations_and_flags_beside_them(bench):
    shape = bench.fsdp2.model_shape
    assert shape("comm-heavy", {}) == dict(layers=8, dim=8192, batch=1, seq=512)
    assert shape("compute-bound", {"layers": None, "dim": 1024}) == dict(layers=12, dim=1024, batch=4, seq=1024)
    with pytest.raises(ValueError, match="unknown configuration"):
        shape("huge", {})
    with pytest.raises(ValueError, match="--seq must be at least 1"):
        shape("comm-heavy", {"seq": 0})


def test_ncclpool_ce_runs_with_symmetric_kernels_on_unless_its_spec_says(bench):
    env = bench.fsdp2.run_environment
    mode, _, extra, _ = bench.fsdp2.parse_spec("ncclpool-ce")
    assert env({"NCCLPOOL_SYMMETRIC_KERNELS": "off"}, mode, extra)["NCCLPOOL_SYMMETRIC_KERNELS"] == "on"
    mode, _, extra, _ = bench.fsdp2.parse_spec("ncclpool-ce+NCCLPOOL_SYMMETRIC_KERNELS=auto")
    assert env({}, mode, extra)["NCCLPOOL_SYMMETRIC_KERNELS"] == "auto"
    assert "NCCLPOOL_SYMMETRIC_KERNELS" not in env({}, "torch-ce", {})


def write_log(tmp_path, text):
    path = tmp_path / "run.log"
    path.write_text(text)
    return str(path)


def test_a_run_that_hangs_in_teardown_keeps_its_row_and_fails(bench, tmp_path):
    read = bench.fsdp2.read_run
    row, failed = read(write_log(tmp_path, 'BENCH {"mode": "torch-ce", "losses": [1.0]}\nTEARDOWN ok 0.1 s\nTEARDOWN ok 0.2 s\n'), 0, "torch-ce", 1)
    assert (row["teardown"], row["spec"], row["round"], failed) == ("ok", "torch-ce", 1, False)
    row, failed = read(write_log(tmp_path, 'BENCH {"mode": "torch-ce", "losses": [1.0]}\nTEARDOWN hung: x\n'), 75, "torch-ce", 2)
    assert row["teardown"] == "hung" and failed
    assert read(write_log(tmp_path, "Traceback ...\n"), 1, "plain", 1) == (None, True)


def rows(spec, losses, rounds=1, **extra):
    return [dict(spec=spec, round=r, losses=list(losses), world=2, layers=2, dim=8, tokens=4, steps=len(losses), config="compute-bound",
                 steady_step_ms=10.0, first_step_ms=20.0, setup_ms=30.0, device_used_gib=1.0, peak_reserved_gib=1.0, teardown="ok", **extra)
            for r in range(1, rounds + 1)]


def by_spec(*groups):
    out = {}
    for g in groups:
        out.setdefault(g[0]["spec"], []).extend(g)
    return out


def test_losses_are_compared_bitwise_with_plains(bench):
    states, failures, flags = bench.fsdp2.compare_losses(by_spec(
        rows("plain", [2.0, 1.0]), rows("torch-ce", [2.0, 1.0]), rows("ncclpool-symmetric", [2.0, 1.5]), rows("ncclpool-ce", [2.0, 1.5])))
    assert states["plain"] == "plain" and states["torch-ce"] == "equal"
    assert states["ncclpool-symmetric"].startswith("differs (max rel 5.0e-01")
    # ncclpool-ce equals its counterpart (only the transport changed) but not plain: flagged, not failed
    assert failures == [] and flags == ["ncclpool-ce: losses differ bitwise from plain's (differs (max rel 5.0e-01))"]


def test_a_copy_engine_mode_that_differs_from_its_counterpart_fails(bench):
    _, failures, flags = bench.fsdp2.compare_losses(by_spec(rows("plain", [2.0, 1.0]), rows("torch-ce", [2.0, 1.0000001])))
    assert len(failures) == 1 and failures[0].startswith("torch-ce: losses differ from plain's")
    assert len(flags) == 1
    _, failures, _ = bench.fsdp2.compare_losses(by_spec(
        rows("ncclpool-symmetric", [2.0, 1.0]), rows("ncclpool-ce", [2.0, 1.1]), rows("plain", [2.0, 1.0])))
    assert [f.split(":")[0] for f in failures] == ["ncclpool-ce"]


def test_summary_reports_unavailable_modes_and_fails_on_a_transport_mismatch(bench, capsys):
    unavailable = [dict(spec="torch-ce", round=1, mode="torch-ce", world=2, unavailable="no cta_policy here")]
    assert bench.fsdp2.summarize(rows("plain", [2.0, 1.0]) + unavailable)
    out = capsys.readouterr().out
    assert "torch-ce: not available: no cta_policy here" in out and "copy-engine modes bitwise equal to plain: -" in out
    assert not bench.fsdp2.summarize(rows("plain", [2.0, 1.0]) + rows("torch-ce", [2.0, 1.5], all_gather_route="torch: x"))
    out = capsys.readouterr().out
    assert "FAILED torch-ce" in out and "FLAG torch-ce" in out and "equal to plain: no" in out and "all-gather: torch: x" in out
    assert bench.fsdp2.summarize(rows("plain", [2.0, 1.0], rounds=2) + rows("torch-ce", [2.0, 1.0], rounds=2))
    assert "copy-engine modes bitwise equal to plain: yes" in capsys.readouterr().out
    assert bench.fsdp2.summarize(unavailable)  # nothing ran: reported, not failed


def test_torch_ce_all_gather_uses_the_symmetric_pool_and_the_zero_group(bench, monkeypatch):
    calls, current_pool = [], []

    class UsePool:
        def __init__(self, pool):
            self.pool = pool

        def __enter__(self):
            current_pool.append(self.pool)

        def __exit__(self, *exc):
            current_pool.pop()

    torch = types.SimpleNamespace(
        cuda=types.SimpleNamespace(use_mem_pool=UsePool),
        ones=lambda n, device: ("ones", n),
        empty=lambda *size, dtype, device: ("tensor", size, dtype, current_pool[-1] if current_pool else None))
    dist = types.SimpleNamespace(
        all_reduce=lambda t, group: calls.append(("all_reduce", group.group_name)),
        all_gather_into_tensor=lambda out, inp, group, async_op: calls.append(("all_gather", out, inp, group.group_name, async_op)) or "work")
    symm_mem = types.ModuleType("torch.distributed._symmetric_memory")
    symm_mem.set_backend = lambda name: calls.append(("backend", name))
    symm_mem.get_mem_pool = lambda device: "symmetric pool"
    symm_mem.rendezvous = lambda tensor, group: calls.append(("rendezvous", tensor, group))
    fsdp_api = types.ModuleType("torch.distributed.fsdp._fully_shard._fsdp_api")
    fsdp_api.AllGather = type("AllGather", (), {})
    for name in ("torch", "torch.distributed", "torch.distributed.fsdp", "torch.distributed.fsdp._fully_shard"):
        monkeypatch.setitem(sys.modules, name, sys.modules.get(name) or types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "torch.distributed._symmetric_memory", symm_mem)
    monkeypatch.setitem(sys.modules, "torch.distributed.fsdp._fully_shard._fsdp_api", fsdp_api)

    def group(name, rank):
        return types.SimpleNamespace(group_name=name, size=lambda: 2, rank=lambda: rank)

    zero = group("zero", 1)
    comm, route = bench.ce.torch_ce_all_gather(torch, dist, zero, "cuda:1")
    assert calls == [("backend", "NCCL"), ("all_reduce", "zero")] and "symm_mem.get_mem_pool" in route
    out = comm.allocate((8,), dtype="bf16", device="cuda:1")
    assert out == ("tensor", (8,), "bf16", "symmetric pool") and current_pool == []
    assert comm(out, "shard", group("shard", 1), async_op=True) == "work"
    assert calls[2:] == [("rendezvous", out, "zero"), ("all_gather", out, "shard", "zero", True)]
    other = bench.ce.torch_ce_all_gather(torch, dist, zero, "cuda:1")[0]
    with pytest.raises(RuntimeError, match="differ"):
        other(out, "shard", group("shard", 0))  # FSDP's rank 0 is the zero group's rank 1: wrong slots
