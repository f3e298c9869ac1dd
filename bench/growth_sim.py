"""Windows and reserve of the torch layer's growth, without torch or a GPU (docs/benchmarks/growth.md).

    NCCLPOOL_LIBRARY=build/default/src/libncclpool.so python3 bench/growth_sim.py \
        [--segments 64] [--segment-mib 32] [--groups 2] [--min-segment-mib 0,256,1024,2048] [--window-ms 3.2] [--json]

What torch_bench.py's first registration does on GPUs, on the simulator: ncclpool.torch over the
tests' stand-in for torch, a symmetric pool from create_nccl_mem_pool(min_segment=...) used with
--groups simulator groups (MultiGroupMemPoolAllocator), and inside one use --segments calls of
ncclpool_torch_alloc(--segment-mib), the segments torch's caching allocator asks for when it makes
that many tensors of that size. Per setting (0: the default growth): the pool's segments, the
windows registered per group (the registry's own count), the reserve, and the first registration
estimated at --window-ms per window (3.2 ms: one window on 2 ranks, docs/benchmarks/scope.md),
against torch's register_mem_pool(symm=True), which registers a window per torch segment and group.
The estimate leaves out the one-time set-up of NCCL's symmetric memory that a process's first window
pays (~40 ms on 2x H200, whoever registers first: growth.md).
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
MiB = 1 << 20


def stand_in_torch():
    """The tests' stand-in for torch (tests/python/torch_stand_in.py) in sys.modules."""
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
    import torch_stand_in
    modules = torch_stand_in.make_modules()
    sys.modules.update(modules)
    return modules["torch.distributed"]


def measure(layer, ncclpool, dist, min_segment, segments, segment_bytes, groups, window_ms):
    name = f"growth-{min_segment}"
    mempool = layer.create_nccl_mem_pool(symmetric=True, source="sim", name=name, min_segment=min_segment)
    pool = layer.ncclpool_pool(mempool)
    sims = [ncclpool.SimGroup(f"{name}-g{i}", 1) for i in range(groups)]
    pgs = [dist.ProcessGroup() for _ in range(groups)]
    pool.attach_nccl = lambda ptr, kind: pool.attach_sim(sims[ptr - 1], 0, kind)
    layer.binding._comm_ptr = lambda group, device: 1 + pgs.index(group)
    lib = ncclpool.library()
    with layer.MultiGroupMemPoolAllocator(mempool, pgs):  # one use: its exit registers the new segments
        ptrs = [lib.ncclpool_torch_alloc(segment_bytes, 0, None) for _ in range(segments)]
    if not all(ptrs):
        raise SystemExit(f"ncclpool_torch_alloc failed: {ncclpool.last_error()}")
    stats = pool.stats()
    windows = [c.stats()["registrations"] for c in pool.communicators]
    row = {
        "min_segment": min_segment, "segments": segments, "segment_bytes": segment_bytes, "groups": groups,
        "pool_segments": stats["segment_count"], "windows_per_group": windows, "reserved_bytes": stats["reserved_bytes"],
        "live_bytes": stats["allocated_bytes"], "torch_windows_per_group": segments, "window_ms": window_ms,
        "first_registration_ms": sum(windows) * window_ms, "torch_first_registration_ms": segments * groups * window_ms,
    }
    for p in ptrs:
        lib.ncclpool_torch_free(p, segment_bytes, 0, None)
    for c in list(pool.communicators):
        c.forget()
    layer.release_mem_pool(mempool)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--segments", type=int, default=64)
    ap.add_argument("--segment-mib", type=int, default=32)
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--min-segment-mib", default="0,256,1024,2048", help="comma list; 0: the default growth")
    ap.add_argument("--window-ms", type=float, default=3.2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    try:
        settings = [int(m) * MiB for m in args.min_segment_mib.split(",")]
    except ValueError:
        ap.error(f"--min-segment-mib {args.min_segment_mib!r} is not a comma list of integers")
    if args.segments < 1 or args.segment_mib < 1 or args.groups < 1 or args.window_ms < 0 or min(settings) < 0:
        ap.error("--segments, --segment-mib and --groups must be >= 1, --window-ms and --min-segment-mib >= 0")
    dist = stand_in_torch()
    import ncclpool
    ncclpool.features = lambda: {"nccl_available": True, "nccl_version": 0, "why_not": ""}
    import ncclpool.torch as layer

    rows = [measure(layer, ncclpool, dist, m, args.segments, args.segment_mib * MiB, args.groups, args.window_ms) for m in settings]
    if args.json:
        for r in rows:
            print(json.dumps(r))
        return
    print(f"torch layer on the simulator: {args.segments} x {args.segment_mib} MiB torch segments in one use of "
          f"{args.groups} symmetric groups; first registration estimated at {args.window_ms} ms a window")
    print(f"{'min segment':>12} {'segments':>9} {'windows/group':>14} {'reserved':>11} {'est. ms':>9} {'torch ms':>9} {'ours/torch':>11}")
    for r in rows:
        label = "default" if r["min_segment"] == 0 else f"{r['min_segment'] // MiB} MiB"
        print(f"{label:>12} {r['pool_segments']:>9} {r['windows_per_group'][0]:>14} {r['reserved_bytes'] / MiB:>7.0f} MiB "
              f"{r['first_registration_ms']:>9.1f} {r['torch_first_registration_ms']:>9.1f} "
              f"{r['first_registration_ms'] / r['torch_first_registration_ms']:>11.3f}")


if __name__ == "__main__":
    main()
