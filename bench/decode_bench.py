"""Decode-style all-reduce in a CUDA graph: plain torch memory vs ncclpool symmetric and auto pools (issue 12).

    torchrun --nproc-per-node 2 bench/decode_bench.py [--sizes 16K,64K,256K,1M,4M,16M] [--rounds 5]
                                                      [--per-graph 32] [--replays 20] [--json FILE]

Per size, one bf16 buffer per mode, all-reduced in place `--per-graph` times inside one captured CUDA
graph (what a tensor-parallel decode step does), the graph replayed `--replays` times and timed with
CUDA events; the time per all-reduce is reported. Modes, interleaved in every round:
  plain       the buffer from torch's caching allocator (no registration)
  symmetric   the buffer allocated inside ncclpool.torch.graph(..., reserve=) from a symmetric pool:
              its window exists during the capture, so the captured all-reduces use it
  auto        the same from an auto pool (create_nccl_mem_pool(kind="auto"): the buffer's size class
              registered as this machine's profile or the built-in routes say)
  captured    the same without reserve, in a fresh pool: the capture makes the segment, the window
              comes after it, so the graph runs the plain path (what reserve= fixes); a
              PerformanceWarning is expected
Rank 0 prints a table (median over rounds, min-max) and the ratio of each mode to plain, and writes
every sample as JSON with --json. NVLink multicast stays off. The symmetric kernels' CTA count is
the process's: ncclpool's default unless NCCL_SYM_CTAS or NCCLPOOL_SYM_CTAS says otherwise (see
python.md, "The symmetric kernels' CTA count").

    python3 bench/decode_bench.py --sym-ctas nccl,ncclpool,16 [--nproc 2] [--rounds 3] [--json FILE] ...

runs the above once per round and CTA count (NCCL reads it once per process), the counts interleaved
in every round, and prints plain against symmetric at each count and the best of them. A count is
``nccl`` (NCCL's own choice: NCCLPOOL_SYM_CTAS=nccl; ``default`` is the same), ``ncclpool``
(ncclpool's default: neither variable set) or a number (NCCL_SYM_CTAS).

    python3 bench/decode_bench.py --guard guard,fence,fence-memset,on [--nproc 2] [--rounds 3] [--json FILE] ...

does the same per setting of NCCLPOOL_SYMMETRIC_KERNELS (python.md "NCCL versions"): ``auto``, ``on``,
``off``, ``guard`` (the same as ``off``: windows without the symmetric flag, what a process that did
not declare the fence gets on NCCL 2.28.0-2.30.6; the symmetric pool's windows then run NCCL's ring
kernels, the auto pool registers locally), ``fence`` / ``fence-node`` (the default kind: an empty
graph node in a capture, the kernel eagerly), ``fence-kernel`` and ``fence-memset`` (the kernels on,
each collective of the torch layer fenced with that kind: NCCLPOOL_SYMMETRIC_FENCE). The
torch layer declares the fence, so ``auto`` is ``fence`` (node) on those versions. Per setting the
symmetric and the auto pool, median (min-max) over rounds, and plain over each; each run's decision.
In a captured graph NCCL < 2.29 orders the collective itself unless NCCL_GRAPH_MIXING_SUPPORT=0, and
the fence is then not launched: run once more with NCCL_GRAPH_MIXING_SUPPORT=0 in the environment to
measure it there.
"""
import argparse
import faulthandler
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import warnings

os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ncclpool  # noqa: E402
import ncclpool.torch as nccl_allocator  # noqa: E402
from graph_timing import time_graph  # noqa: E402  (this folder)

MODES = ("plain", "symmetric", "auto", "captured")


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def capture(mode, size, per_graph, group, pools):
    """Returns (graph, buffer) with `per_graph` in-place all-reduces of a `size`-byte bf16 buffer."""
    graph = torch.cuda.CUDAGraph()
    count = size // 2
    if mode == "plain":
        buf = torch.zeros(count, dtype=torch.bfloat16, device="cuda")
        with torch.cuda.graph(graph):
            for _ in range(per_graph):
                dist.all_reduce(buf, group=group)
        return graph, buf
    pool = nccl_allocator.create_nccl_mem_pool(kind="auto" if mode == "auto" else "symmetric", name=f"decode-{mode}-{size}")
    pools.append(pool)
    reserve = 2 * size + (64 << 20) if mode in ("symmetric", "auto") else 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nccl_allocator.PerformanceWarning)  # expected for "captured"
        with nccl_allocator.graph(graph, pool, groups=[group], reserve=reserve):
            # empty, not zeros: a fill made here would be captured and rerun before every replay's
            # all-reduces, and the correctness check below would read back the fill.
            buf = torch.empty(count, dtype=torch.bfloat16, device="cuda")
            for _ in range(per_graph):
                dist.all_reduce(buf, group=group)
    buf.zero_()  # the timing runs on zeros, which stay zeros
    return graph, buf


# --guard's values: NCCLPOOL_SYMMETRIC_KERNELS and NCCLPOOL_SYMMETRIC_FENCE (None: as the environment has it).
GUARD_SETTINGS = {"auto": ("auto", None), "on": ("on", None), "off": ("off", None), "guard": ("off", None),
                  "fence": ("fence", "node"), "fence-kernel": ("fence", "kernel"), "fence-memset": ("fence", "memset"),
                  "fence-node": ("fence", "node")}


def variant_env(kind, value):
    """The environment of one driver run: the CTA count (--sym-ctas) or the guard setting (--guard)."""
    env = {k: v for k, v in os.environ.items() if k not in ("NCCL_SYM_CTAS", "NCCLPOOL_SYM_CTAS")}
    if kind == "guard":  # NCCLPOOL_SYMMETRIC_KERNELS and the fence's kind (python.md, "NCCL versions")
        kernels, fence = GUARD_SETTINGS[value]
        env["NCCLPOOL_SYMMETRIC_KERNELS"] = kernels
        if fence is not None:
            env["NCCLPOOL_SYMMETRIC_FENCE"] = fence
        env.update({k: os.environ[k] for k in ("NCCL_SYM_CTAS", "NCCLPOOL_SYM_CTAS") if k in os.environ})
    elif value in ("nccl", "default"):
        env["NCCLPOOL_SYM_CTAS"] = "nccl"
    elif value != "ncclpool":
        env["NCCL_SYM_CTAS"] = value
    return env


def drive_variants(args, kind, values):
    """One torchrun per (round, value), values interleaved in every round; a table over them. kind
    "ctas": the symmetric kernels' CTA count; "guard": NCCLPOOL_SYMMETRIC_KERNELS (what the guard's
    default costs: windows without the symmetric flag, auto pools on local registration)."""
    samples, failures, decisions = [], [], {}
    what = "NCCL_SYM_CTAS" if kind == "ctas" else "NCCLPOOL_SYMMETRIC_KERNELS"
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(args.rounds):
            for value in values:
                out = os.path.join(tmp, f"{rnd}-{value}.json")
                cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(args.nproc), os.path.abspath(__file__),
                       "--sizes", args.sizes, "--rounds", "1", "--per-graph", str(args.per_graph), "--replays", str(args.replays),
                       "--json", out]
                print(f"decode_bench: round {rnd + 1}/{args.rounds}, {what}={value}", file=sys.stderr, flush=True)
                try:
                    run = subprocess.run(cmd, env=variant_env(kind, value), capture_output=True, text=True, timeout=600)
                except subprocess.TimeoutExpired:
                    failures.append(f"round {rnd + 1} {what}={value}: no result within 600 s")
                    continue
                if run.returncode != 0 or not os.path.exists(out):
                    failures.append(f"round {rnd + 1} {what}={value}: rc={run.returncode}")
                    print(run.stdout[-3000:] + run.stderr[-3000:], file=sys.stderr)
                    continue
                with open(out) as f:
                    run_json = json.load(f)
                for sample in run_json["samples"]:
                    samples.append(dict(sample, round=rnd, **{kind: value}))
                decisions.setdefault(value, set()).add(run_json.get("symmetric_kernels", "?"))
    sizes = sorted({s["size"] for s in samples})
    def times(mode, size, value=None):  # us of one mode and size, over every value when None
        return [s["us"] for s in samples if s["mode"] == mode and s["size"] == size and (value is None or s[kind] == value)]

    def med(mode, size, value=None):
        return statistics.median(times(mode, size, value) or [math.nan])

    def spread(mode, size, value):
        us = times(mode, size, value) or [math.nan]
        return f"{min(us):.2f}-{max(us):.2f}"
    print(f"decode all-reduce in a CUDA graph, {args.nproc} GPUs, {what} in {values}, "
          f"{args.rounds} rounds interleaved (us per all-reduce, medians; plain over every run)")
    if kind == "ctas":
        print(f"{'size':>8} {'plain':>9} " + " ".join(f"{'symm ' + c:>12}" for c in values) + f" {'best':>20} {'plain/best':>11}")
        for size in sizes:
            symm = {c: med("symmetric", size, c) for c in values}
            best = min(values, key=lambda c: symm[c])
            plain = med("plain", size)
            print(f"{size >> 10:>6}Ki {plain:9.2f} " + " ".join(f"{symm[c]:12.2f}" for c in values) +
                  f" {symm[best]:9.2f} ({best:>8}) {plain / symm[best]:10.2f}x")
    else:  # per setting: the symmetric and the auto pool, median (min-max), and plain over them
        cols = [(m, v) for v in values for m in ("symmetric", "auto")]
        print(f"{'size':>8} {'plain':>9} " + " ".join(f"{m[:4] + ' ' + v:>22}" for m, v in cols) + "  "
              + " ".join(f"{'plain/' + m[:4] + ' ' + v:>16}" for m, v in cols))
        for size in sizes:
            plain = med("plain", size)
            print(f"{size >> 10:>6}Ki {plain:9.2f} " + " ".join(f"{med(m, size, v):8.2f} ({spread(m, size, v):>11})" for m, v in cols)
                  + "  " + " ".join(f"{plain / med(m, size, v):15.2f}x" for m, v in cols))
    if kind == "guard":
        print("decisions: " + "; ".join(f"{v}: {', '.join(sorted(decisions.get(v, {'no run'})))}" for v in values)
              + f"; NCCL_GRAPH_MIXING_SUPPORT={os.environ.get('NCCL_GRAPH_MIXING_SUPPORT', '(unset)')}")
    if failures:
        print("FAILED runs: " + "; ".join(failures))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(nproc=args.nproc, per_graph=args.per_graph, replays=args.replays, variant=kind, values=values,
                           samples=samples, decisions={v: sorted(d) for v, d in decisions.items()},
                           graph_mixing_support=os.environ.get("NCCL_GRAPH_MIXING_SUPPORT")), f, indent=1)
    sys.exit(1 if failures else 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="16K,64K,256K,1M,4M,16M")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--per-graph", type=int, default=32)
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--json", default="")
    ap.add_argument("--sym-ctas", default="", help="driver: CTA counts to compare, e.g. nccl,ncclpool,16 (nccl: NCCL's own; ncclpool: ncclpool's default)")
    ap.add_argument("--guard", default="", help="driver: NCCLPOOL_SYMMETRIC_KERNELS settings to compare, e.g. guard,fence,fence-memset,on "
                                                "(auto, on, off, guard = off, fence = fence-node, fence-kernel, fence-memset)")
    ap.add_argument("--nproc", type=int, default=2, help="driver: processes (GPUs) per run")
    args = ap.parse_args()
    if args.sym_ctas and args.guard:
        ap.error("--sym-ctas and --guard are two drivers: give one")
    if args.sym_ctas:
        return drive_variants(args, "ctas", args.sym_ctas.split(","))
    if args.guard:
        bad = [v for v in args.guard.split(",") if v not in GUARD_SETTINGS]
        if bad:
            ap.error(f"--guard takes {', '.join(GUARD_SETTINGS)}, not {bad}")
        return drive_variants(args, "guard", args.guard.split(","))
    rank = int(os.environ["RANK"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    world = dist.group.WORLD
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    # Warm NCCL on a side stream before any capture (torch's rule for collectives in graphs).
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        dist.all_reduce(torch.ones(1024, device="cuda"), group=world)
    torch.cuda.synchronize()

    pools, graphs = [], {}
    for size in sizes:
        for mode in MODES:
            graphs[(mode, size)] = capture(mode, size, args.per_graph, world, pools)
    samples = []
    for rnd in range(args.rounds):
        for size in sizes:
            for mode in MODES:
                graph, _ = graphs[(mode, size)]
                samples.append(dict(round=rnd, size=size, mode=mode, us=time_graph(graph, args.replays, per_replay=args.per_graph)))
    # Results: from `start` on every rank, per_graph in-place sums give start * n^per_graph (start is
    # chosen so that both stay well inside bf16's range; exact when n is a power of two). The timing
    # runs on zeros, which stay zeros.
    n = dist.get_world_size()
    start = 2.0 ** -round(args.per_graph * math.log2(n) / 2)
    expect = start * float(n) ** args.per_graph
    for graph, buf in graphs.values():
        buf.fill_(start)
        graph.replay()
    torch.cuda.synchronize()
    wrong = [f"{m} {s >> 10} KiB" for (m, s), (_, buf) in graphs.items()
             if not torch.allclose(buf.float(), torch.full_like(buf, expect, dtype=torch.float32), rtol=0.05)]
    if rank == 0:
        print(f"decode all-reduce in a CUDA graph, {n} GPUs, bf16 in place, {args.per_graph} per graph, "
              f"{args.replays} replays, {args.rounds} rounds interleaved (us per all-reduce: median, min-max)")
        print(f"{'size':>8}  " + "  ".join(f"{m:>24}" for m in MODES) + "  " + "  ".join(f"{m + '/plain':>16}" for m in MODES[1:]))
        for size in sizes:
            med = {}
            cells = []
            for mode in MODES:
                us = [s["us"] for s in samples if s["mode"] == mode and s["size"] == size]
                med[mode] = statistics.median(us)
                cells.append(f"{med[mode]:8.2f} ({min(us):.2f}-{max(us):.2f})")
            ratios = [f"{med['plain'] / med[m]:15.2f}x" for m in MODES[1:]]
            print(f"{size >> 10:>6}Ki  " + "  ".join(f"{c:>24}" for c in cells) + "  " + "  ".join(ratios))
        print("ratio = plain time / mode time (above 1: faster than plain)")
        if wrong:
            print(f"WRONG RESULT (expected {expect:g} everywhere): " + ", ".join(wrong))
        if args.json:
            features = ncclpool.features()  # the process's decision (made at its first symmetric attach)
            with open(args.json, "w") as f:
                json.dump(dict(world=n, per_graph=args.per_graph, replays=args.replays, samples=samples,
                               symmetric_kernels=features["symmetric_kernels_decision"]
                               + (f" ({features['symmetric_fence_kind']})" if features["symmetric_kernels_decision"] == "fence" else ""),
                               fences_launched=features["symmetric_fences_launched"]), f, indent=1)
    # Graphs first: NCCL's communicator destroy waits for every graph that captured one of its
    # collectives to be destroyed (pytorch/pytorch#115388), so destroy_process_group would hang.
    graphs.clear()
    graph = buf = None  # the loops' last graph too
    gc.collect()
    torch.cuda.synchronize()
    for pool in pools:  # windows deregistered collectively, in the same order on every rank
        nccl_allocator.deregister_mem_pool(pool, world)
    faulthandler.dump_traceback_later(120, exit=True)  # a teardown that hangs says where
    dist.destroy_process_group()
    faulthandler.cancel_dump_traceback_later()
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main()
