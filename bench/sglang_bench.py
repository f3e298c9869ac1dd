"""SGLang's symmetric-memory allocator, unmodified, beside ncclpool.sglang (issue 31).

    scripts/sglang-inputs.sh                          # once, where PyPI is reachable: SGLang's three files
    python3 bench/sglang_bench.py [--nproc 2] [--json FILE] [--sizes 16K,64K,256K,1M,4M] [--layers 32]
                                  [--rounds 5] [--replays 20] [--configs ...] [--case-timeout 60] [--no-cases]
    python3 bench/sglang_bench.py --smoke [--json FILE]        # one GPU: imports, JIT build, null paths

The driver starts, through torchrun (one process per GPU):

* perf, once per configuration (``--configs``: environment settings separated by ';', default the
  symmetric kernels on with ncclpool's CTA count, on with NCCL's count, and the guard's default): a
  tensor-parallel decode step captured in a CUDA graph per size and mode: ``--layers`` times, the
  layer's output allocated as SGLang allocates it (inside ``use_symmetric_memory(tp_group)``) and
  all-reduced in place through SGLang's PyNcclCommunicator. Modes: ``plain`` (torch's allocator),
  ``sglang`` (SGLang's pynccl_allocator from the wheel, JIT build included), ``ncclpool``
  (ncclpool.sglang); set up in the order plain, ncclpool, sglang (NCCL's symmetric CTA count is
  process-wide: both allocators run with the one ncclpool decides), timed interleaved in every round
  (order rotated). Per mode: results (every rank), step latency (median and spread over rounds),
  device memory (free memory before and after its setup; the pool's own count), setup time (pool
  creation, SGLang's JIT build in it, warm-up and capture).
* the failure cases of bench/sglang_cases.py on both allocators: growth at run time on one rank
  (SGLang #36943) and buffers at other offsets in a capture (SGLang #33037), with and without
  SGLANG_DEBUG_SYMM_MEM=1; on ncclpool.sglang alone, out of memory on one rank and another kind on one
  rank (issue 44 items 1 and 4: an error on every rank, the next all-reduce right); on both, a
  producer kernel that triggers its dependents early before the all-reduce, eagerly and in a graph,
  with NCCL's graph mixing on and off (issue 46; ncclpool.sglang with its default,
  NCCLPOOL_SYMMETRIC_KERNELS=auto, whatever the caller set: its all-reduces must be right on every
  rank, a 'pdl:' line says so and the exit status counts it; SGLang's allocator is the positive control).

Each rank of a run writes its part; the driver prints each run's table or outcomes as it ends and
rewrites --json after every run (a stopped driver leaves what finished).
NVLink multicast stays off. NCCL versions and the guard's decision are in the output.
"""
import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sglang_common as common  # noqa: E402
from graph_timing import time_graph  # noqa: E402  (this folder)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "gpu", "torch"))
import pdl_verdict  # noqa: E402  (tests/gpu/torch: the PDL checks' verdicts, tested on the CPU)

MODES = ("plain", "ncclpool", "sglang")  # setup order (see the docstring)
DEFAULT_CONFIGS = ("NCCLPOOL_SYMMETRIC_KERNELS=on;NCCLPOOL_SYMMETRIC_KERNELS=on,NCCLPOOL_SYM_CTAS=nccl;"
                   "NCCLPOOL_SYMMETRIC_KERNELS=auto")
CASES = (("growth", "sglang", False), ("growth", "ncclpool", False), ("offsets", "sglang", False),
         ("offsets", "sglang", True), ("offsets", "ncclpool", False), ("offsets", "ncclpool", True),
         ("oom", "ncclpool", False), ("kind", "ncclpool", False),  # oom, kind: issue 44 items 1 and 4
         ("pdl", "sglang", False), ("pdl", "ncclpool", False), ("pdl-nomix", "sglang", False),
         ("pdl-nomix", "ncclpool", False))  # pdl: issue 46 (an early trigger before the all-reduce)


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


# ---- the perf worker (one process per GPU) ----

def build_step(torch, api, group, size, layers, rank, world):
    """Returns (graph, input, output): a decode step of `layers` (output allocated in the allocator's
    context, then all-reduced in place), run once eagerly (warm-up: windows appear) and captured, both on
    one side stream as SGLang's graph runner does (common.graph_capture)."""
    x_in = torch.empty(size // 2, dtype=torch.bfloat16, device="cuda")
    scale = 1.0 / world  # each layer: y = x / n, then the sum over ranks: the value stays (exact in bf16)

    def step():
        h = x_in
        for _ in range(layers):
            with (api.use_symmetric_memory(group) if api else contextlib.nullcontext()):
                y = h * scale
            common.all_reduce(group, y)
            h = y
        return h

    x_in.fill_(rank + 1)
    graph = torch.cuda.CUDAGraph()
    pool = torch.cuda.graph_pool_handle()
    if api:
        api.set_graph_pool_id(pool)
    with common.graph_capture() as stream:  # SGLang's pattern: warm-up and capture on one side stream
        step()
        torch.cuda.synchronize()
        with torch.cuda.graph(graph, pool=pool, stream=stream):
            out = step()
    torch.cuda.synchronize()
    return graph, x_in, out


def pool_bytes(api):
    if api is None or getattr(api, "_mem_pool", None) is None:
        return 0
    if hasattr(api, "_pool"):  # ncclpool.sglang
        return api._pool.stats()["reserved_bytes"]
    return sum(s["total_size"] for s in api._mem_pool.snapshot())


def perf_worker(args):
    import torch
    rank, world, local = common.init_distributed()
    toolchain = common.jit_toolchain()
    if args.cold_jit and rank == 0:
        import shutil
        shutil.rmtree(common.JIT_DIR, ignore_errors=True)  # SGLang's first use then builds, as on a fresh host
    torch.distributed.barrier()
    group = common.make_tp_group(rank, world, local)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    graphs, setup, apis = {}, {}, {}
    for mode in MODES:
        torch.cuda.synchronize()
        free_before = torch.cuda.mem_get_info()[0]
        t0 = common.now()
        try:  # a mode that cannot be set up (SGLang's JIT build without a compiler, say) is reported, not fatal
            api = apis[mode] = common.load_allocator(mode)
            if api:
                api.get_nccl_mem_pool()  # SGLang's: the JIT build (and a barrier)
            t1 = common.now()
            for size in sizes:
                graphs[(mode, size)] = build_step(torch, api, group, size, args.layers, rank, world)
        except Exception as e:  # noqa: BLE001 (the same on every rank: the setup is the same)
            setup[mode] = dict(error=f"{type(e).__name__}: {str(e)[-600:]}")
            graphs = {k: v for k, v in graphs.items() if k[0] != mode}
            continue
        t2 = common.now()
        setup[mode] = dict(pool_s=t1 - t0, capture_s=t2 - t1, total_s=t2 - t0,
                           device_bytes=free_before - torch.cuda.mem_get_info()[0], pool_bytes=pool_bytes(api))
    samples = []
    ready = [m for m in MODES if "error" not in setup[m]]
    for rnd in range(args.rounds):
        order = ready[rnd % len(ready):] + ready[:rnd % len(ready)]
        for size in sizes:
            for mode in order:
                samples.append(dict(round=rnd, size=size, mode=mode, us=time_graph(graphs[(mode, size)][0], args.replays)))
    expect = (world + 1) / 2  # the mean of 1..world, after the first layer and every one after it
    wrong = []
    for (mode, size), (graph, x_in, out) in graphs.items():
        x_in.fill_(rank + 1)
        graph.replay()
        torch.cuda.synchronize()
        if not bool((out.float() == expect).all()):
            wrong.append(dict(mode=mode, size=size, got=sorted(set(out.float().unique().tolist()))[:4], expect=expect))
    npool = getattr(apis.get("ncclpool"), "_pool", None)
    result = dict(rank=rank, world=world, layers=args.layers, replays=args.replays, config=args.config, setup=setup,
                  samples=samples, wrong=wrong, toolchain=toolchain, versions=common.versions(),
                  ncclpool_stats=npool and dict(npool.stats(), communicators=npool.stats_json()["communicators"], routes=npool.routes()))
    common.write_rank_result(args.json_dir, f"perf-{args.config_index}", rank, result)
    graphs.clear()  # graphs before communicators (NCCL waits for graphs that captured its collectives)
    torch.cuda.synchronize()
    torch.distributed.barrier()


# ---- the smoke test (one GPU) ----

def smoke(args):
    """World size 1: the stand-ins and SGLang's three files import, SGLang's allocator JIT-builds and
    allocates, PyNccl disables itself, and ncclpool.sglang's null-context paths do nothing collective."""
    import torch
    steps = {}

    def step(name, fn):
        t0 = common.now()
        try:
            value = fn()
            steps[name] = dict(ok=True, seconds=round(common.now() - t0, 3), detail=value)
        except BaseException as e:  # noqa: BLE001 (reported, and the smoke test fails)
            steps[name] = dict(ok=False, seconds=round(common.now() - t0, 3), detail=f"{type(e).__name__}: {e}")
        print(f"SMOKE {name}: {'ok' if steps[name]['ok'] else 'FAILED'} ({steps[name]['seconds']} s) {steps[name]['detail']}", flush=True)

    common.prepare_paths()
    rank, world, local = common.init_distributed()
    state = {}
    step("toolchain", common.jit_toolchain)
    step("imports", lambda: [m.__name__ for m in (__import__("sglang.srt.environ", fromlist=["x"]),
                                                  __import__("sglang.srt.distributed.device_communicators.pynccl", fromlist=["x"]),
                                                  common.load_allocator("sglang"), common.load_allocator("ncclpool"))])
    def group_of_one():
        import torch.distributed as dist
        from sglang.srt.distributed.device_communicators.pynccl import PyNcclCommunicator
        pynccl = PyNcclCommunicator(group=dist.group.WORLD, device=local)  # world size 1: no communicator
        assert pynccl.disabled and not pynccl.available and not hasattr(pynccl, "comm"), vars(pynccl)
        state["group"] = common.make_tp_group(rank, world, local)
        return f"PyNccl disabled={pynccl.disabled} available={pynccl.available}; {state['group']!r}"

    step("SGLang's PyNccl and a TP group of one", group_of_one)
    sglang_api, ours = common.load_allocator("sglang"), common.load_allocator("ncclpool")

    def jit():
        if args.cold_jit:
            import shutil
            shutil.rmtree(common.JIT_DIR, ignore_errors=True)
        pool = sglang_api.get_nccl_mem_pool()
        with torch.cuda.use_mem_pool(pool):
            t = torch.ones(1 << 20, device="cuda")  # ncclMemAlloc through the JIT-built plugin
        return f"{common.JIT_DIR}: {sorted(os.listdir(common.JIT_DIR))}; a tensor in its pool sums to {int(t.sum().item())}"

    step("SGLang's JIT build and an allocation in its pool", jit)

    def null_paths():
        group = state["group"]
        checks = [isinstance(ours.use_symmetric_memory(group), contextlib.nullcontext),  # world size 1
                  ours.describe_registration_in_progress() is None,
                  ours.is_tensor_in_symmetric_mempool(torch.ones(4, device="cuda")) is False,
                  ours.disable_symmetric_memory_context() is None]
        ours.debug_check_symmetric_mempool(group, {"input": torch.ones(4, device="cuda")}, "all_reduce")
        ours.prealloc_symmetric_memory_pool(is_draft_worker=False, enable_symm_mem=True, device="cuda",
                                            forward_stream=torch.cuda.current_stream())
        checks.append(ours._mem_pool is None)  # nothing above made a pool
        pool = ours.get_nccl_mem_pool()
        with torch.cuda.use_mem_pool(pool):
            t = torch.ones(1 << 20, device="cuda")
        checks.append(ours.is_tensor_in_symmetric_mempool(t))
        assert all(checks), checks
        return f"ncclpool pool: {ours._pool!r}, kind {ours._pool.registration}"

    step("ncclpool.sglang null-context paths and its pool", null_paths)

    def install():
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            replaced = ours.install()
        import sglang.srt.distributed.device_communicators.pynccl_allocator as resolved
        try:
            assert resolved is ours, resolved
        finally:
            ours.uninstall()
        return replaced

    step("install() resolves SGLang's import to ncclpool.sglang", install)
    result = dict(steps=steps, versions=common.versions(), ok=all(s["ok"] for s in steps.values()))
    print(f"SMOKE RESULT: {'ok' if result['ok'] else 'FAILED'}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1, default=str)
    return 0 if result["ok"] else 1


# ---- the driver ----

def torchrun(nproc, script, argv, env, timeout):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), script] + argv
    try:
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        return run.returncode, run.stdout[-4000:] + run.stderr[-4000:]
    except subprocess.TimeoutExpired as e:
        return 124, f"no result within {timeout} s: {(e.stdout or b'')[-2000:]!r}"


def summarize_perf(part):
    ranks = part["ranks"]
    r0 = ranks[0]
    lines = [f"config {part['config']}: NCCL {r0['versions']['nccl_loaded']}, symmetric kernels "
             f"{'on' if r0['versions']['symmetric_kernels'] else 'off'}, CTAs {r0['versions']['symmetric_ctas']}; "
             f"{r0['world']} GPUs ({r0['versions']['gpu']}), {r0['layers']} layers per step (us per step: median, min-max over rounds)"]
    sizes = sorted({s["size"] for s in r0["samples"]})
    lines.append(f"{'size':>8}  " + "  ".join(f"{m:>24}" for m in MODES) + "   sglang/ncclpool  plain/ncclpool")
    nan = float("nan")
    for size in sizes:
        med, cells = {}, []
        for mode in MODES:
            us = [s["us"] for s in r0["samples"] if s["mode"] == mode and s["size"] == size]
            med[mode] = statistics.median(us) if us else nan
            cells.append(f"{med[mode]:8.1f} ({min(us):.1f}-{max(us):.1f})" if us else "not run")
        lines.append(f"{size >> 10:>6}Ki  " + "  ".join(f"{c:>24}" for c in cells) +
                     f"   {med['sglang'] / med['ncclpool']:14.3f}x {med['plain'] / med['ncclpool']:14.3f}x")
    for mode in MODES:
        s = r0["setup"][mode]
        if "error" in s:
            lines.append(f"setup {mode:>8}: FAILED: {s['error'][-300:]}")
            continue
        lines.append(f"setup {mode:>8}: pool {s['pool_s']:.2f} s, warm-up+capture {s['capture_s']:.2f} s; device memory "
                     f"{s['device_bytes'] / 2**20:.0f} MiB (pool holds {s['pool_bytes'] / 2**20:.0f} MiB)")
    wrong = [w for r in ranks for w in r["wrong"]]
    # A mode whose setup failed on a rank measured nothing there: not "right" (gpu-check counts these lines).
    not_set_up = sorted({f"{mode} on rank {i}" for i, r in enumerate(ranks) for mode in MODES if "error" in r["setup"].get(mode, {"error": ""})})
    lines.append("results: " + (f"WRONG: {wrong}" if wrong else f"INCOMPLETE: setup failed for {', '.join(not_set_up)}" if not_set_up
                                else "right on every rank"))
    return lines


def driver(args):
    here = os.path.dirname(os.path.abspath(__file__))
    out = dict(perf=[], cases=[], failures=[])

    def save():  # after every run: what finished survives a driver that is stopped (a device call's limit)
        if args.json:
            with open(args.json + ".tmp", "w") as f:
                json.dump(out, f, indent=1, default=str)
            os.replace(args.json + ".tmp", args.json)

    with tempfile.TemporaryDirectory() as tmp:
        for i, config in enumerate(c for c in args.configs.split(";") if c):
            env = dict(os.environ, **dict(kv.split("=", 1) for kv in config.split(",") if kv))
            argv = ["--worker", "perf", "--json-dir", tmp, "--config", config, "--config-index", str(i), "--sizes", args.sizes,
                    "--layers", str(args.layers), "--rounds", str(args.rounds), "--replays", str(args.replays)]
            if i == 0 and not args.warm_jit:
                argv.append("--cold-jit")
            print(f"sglang_bench: perf, {config}", file=sys.stderr, flush=True)
            rc, tail = torchrun(args.nproc, os.path.join(here, "sglang_bench.py"), argv, env, 900)
            ranks = [json.load(open(os.path.join(tmp, f"perf-{i}.rank{r}.json"))) for r in range(args.nproc)
                     if os.path.exists(os.path.join(tmp, f"perf-{i}.rank{r}.json"))]
            if rc != 0 or len(ranks) != args.nproc:
                out["failures"].append(dict(run=f"perf {config}", rc=rc, tail=tail))
                print(f"FAILED perf {config} (rc={rc}): {tail[-2000:]}", flush=True)
                save()
                continue
            out["perf"].append(dict(config=config, ranks=ranks))
            print("\n".join(summarize_perf(out["perf"][-1])) + "\n", flush=True)
            save()
        chosen = set(args.cases.split(",")) if args.cases else None
        for case, allocator, debug in ([] if args.no_cases else CASES):
            if chosen is not None and case not in chosen:
                continue
            name = f"{case}-{allocator}{'-debug' if debug else ''}"
            env = dict(os.environ, SGLANG_DEBUG_SYMM_MEM="1" if debug else "0", NCCLPOOL_AGREEMENT_TIMEOUT_S="20")
            if case.startswith("pdl"):
                env["NCCLPOOL_SYMMETRIC_KERNELS"] = "auto"  # what a user gets: the promise judged below
            print(f"sglang_bench: case {name}", file=sys.stderr, flush=True)
            rc, tail = torchrun(args.nproc, os.path.join(here, "sglang_cases.py"),
                                ["--case", case, "--allocator", allocator, "--json-dir", tmp, "--name", name,
                                 "--timeout", str(args.case_timeout)], env, args.case_timeout + 300)
            ranks = [json.load(open(os.path.join(tmp, f"{name}.rank{r}.json"))) for r in range(args.nproc)
                     if os.path.exists(os.path.join(tmp, f"{name}.rank{r}.json"))]
            case = dict(name=name, rc=rc, ranks=ranks, tail=tail if len(ranks) != args.nproc else "")
            out["cases"].append(case)
            print(f"case {case['name']} (rc={case['rc']}):")
            for r in case["ranks"]:
                print(f"  rank {r['rank']}: {r['outcome']}")
            if len(case["ranks"]) != args.nproc:
                print(f"  missing ranks; output: {case['tail'][-1500:]}")
            sys.stdout.flush()
            save()
    broken = any(w for p in out["perf"] for r in p["ranks"] for w in r["wrong"]) or \
        any("error" in s for p in out["perf"] for r in p["ranks"] for s in r["setup"].values())
    pdl_broken, pdl_lines = pdl_verdict.judge_sglang(out["cases"])
    if pdl_lines:
        out["pdl_verdict"] = dict(broken=pdl_broken, lines=pdl_lines)
        save()
        print("\n".join(pdl_lines))
        print("pdl: " + ("BROKEN: " + "; ".join(pdl_broken) if pdl_broken else
                         "ncclpool.sglang right on every rank (SGLang's allocator and the unfenced rows: the control)"), flush=True)
    return 1 if out["failures"] or broken or pdl_broken else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--sizes", default="16K,64K,256K,1M,4M")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--configs", default=DEFAULT_CONFIGS)
    ap.add_argument("--case-timeout", type=int, default=30, help="seconds after which a failure case counts as a hang")
    ap.add_argument("--no-cases", action="store_true")
    ap.add_argument("--cases", default="", help="only these failure cases (comma-separated: growth,offsets,oom,kind,pdl,pdl-nomix)")
    ap.add_argument("--warm-jit", action="store_true", help="keep SGLang's JIT build cache (default: the first run builds cold)")
    ap.add_argument("--cold-jit", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--json", default="")
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)
    ap.add_argument("--json-dir", default="", help=argparse.SUPPRESS)
    ap.add_argument("--config", default="", help=argparse.SUPPRESS)
    ap.add_argument("--config-index", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.smoke:
        return smoke(args)
    common.prepare_paths()
    if args.worker == "perf":
        return perf_worker(args)
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
