"""ncclpool.torch against the patterns it replaces (run on every rank by torchrun, 2-4 GPUs):

    torchrun --nproc-per-node 4 bench/torch_bench.py [--segments 64] [--segment-mib 32] [--uses 500]

1. first registration of S x M MiB tensors with 2 groups, symmetric, --first-rounds times in rotated
   order: ncclpool's default growth (a segment per torch segment) and min_segment 1 GiB against
   torch's own ProcessGroupNCCL.register_mem_pool(pool, symm=True) (its ncclMemAlloc pool: allocation
   and registration, and registration alone as before) and a plain MemPool (allocation only, the
   control): time, windows per group and device memory (cudaMemGetInfo before and after);
2. one context use with no new segment, S segments, G = 2 and 3 groups, symmetric: ncclpool vs the
   Megatron pattern (deregister the pool from every group, register it again) and a plain MemPool's
   torch.cuda.use_mem_pool (the control: torch's own share of a use);
3. all-gather with a 32 MiB output (4 ranks: 8 MiB in) from plain caching-allocator memory, from
   torch's symmetric-registered pool and from an ncclpool symmetric pool (CUDA-event timing).
Rank 0 prints a table and one JSON line per figure ('BENCH {...}').
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import ncclpool.torch as nccl_allocator  # noqa: E402

MiB = 1 << 20
rank = 0
results = []


def report(name, value, unit, **extra):
    if rank == 0:
        results.append(dict(name=name, value=value, unit=unit, **extra))
        print("BENCH " + json.dumps(results[-1]), flush=True)


def sync():
    torch.cuda.synchronize()
    dist.barrier()


def backend_of(group):
    return group._get_backend(torch.device("cuda", torch.cuda.current_device()))


FIRST_MODES = ("ncclpool default", "ncclpool min_segment 1 GiB", "torch register_mem_pool", "plain MemPool")


def first_registration(mode, rnd, groups, segments, nbytes):
    """Allocates `segments` tensors of `nbytes` the way `mode` says and registers them with `groups`
    (symmetric): ({ms, windows_per_group, device_mib[, register_ms]}, (pool, tensors))."""
    sync()
    free_before = torch.cuda.mem_get_info()[0]
    extra = {}
    t0 = time.perf_counter()
    if mode.startswith("ncclpool"):
        pool = nccl_allocator.create_nccl_mem_pool(symmetric=True, name=f"first-{rnd}-{mode.replace(' ', '-')}",
                                                   min_segment=(1 << 30) if "min_segment" in mode else 0)
        with nccl_allocator.MultiGroupMemPoolAllocator(pool, groups):
            tensors = [torch.empty(nbytes, dtype=torch.uint8, device="cuda") for _ in range(segments)]
    else:
        torch_nccl = mode.startswith("torch")
        pool = torch.cuda.MemPool(backend_of(dist.group.WORLD).mem_allocator) if torch_nccl else torch.cuda.MemPool()
        with torch.cuda.use_mem_pool(pool):
            tensors = [torch.empty(nbytes, dtype=torch.uint8, device="cuda") for _ in range(segments)]
        if torch_nccl:
            sync()
            t_register = time.perf_counter()
            for g in groups:
                backend_of(g).register_mem_pool(pool, symm=True)
            sync()
            extra["register_ms"] = (time.perf_counter() - t_register) * 1e3
    sync()
    ms = (time.perf_counter() - t0) * 1e3
    if mode.startswith("ncclpool"):
        windows = [c["registered_segments"] for c in nccl_allocator.stats(pool)["communicators"]]
    elif mode.startswith("torch"):  # register_mem_pool makes a window per segment of the pool
        segments_held = len(pool.snapshot()) if hasattr(pool, "snapshot") else None
        windows = [segments_held] * len(groups)
    else:
        windows = [0] * len(groups)
    device_mib = (free_before - torch.cuda.mem_get_info()[0]) / MiB
    return dict(ms=ms, windows_per_group=windows, device_mib=device_mib, **extra), (pool, tensors)


def use_once(context):
    """One use of a pool: a 1 MiB tensor made and dropped inside `context()`."""
    with context():
        x = torch.empty(MiB, dtype=torch.uint8, device="cuda")
        del x


def per_use_us(context, uses, warmup=20):
    """Microseconds per use_once(context), back to back, after `warmup` uses (not timed)."""
    for _ in range(warmup):
        use_once(context)
    sync()
    t0 = time.perf_counter()
    for _ in range(uses):
        use_once(context)
    return (time.perf_counter() - t0) / uses * 1e6


def time_allgather(out, inp, group, iters=200, warmup=20):
    for _ in range(warmup):
        dist.all_gather_into_tensor(out, inp, group=group)
    sync()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        dist.all_gather_into_tensor(out, inp, group=group)
    end.record()
    torch.cuda.synchronize()
    t = torch.tensor([start.elapsed_time(end) / iters * 1e3], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank decides
    return t.item()


def main():
    global rank
    ap = argparse.ArgumentParser()
    ap.add_argument("--segments", type=int, default=64)
    ap.add_argument("--segment-mib", type=int, default=32)
    ap.add_argument("--uses", type=int, default=500)
    ap.add_argument("--megatron-uses", type=int, default=3)
    ap.add_argument("--first-rounds", type=int, default=3)
    args = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=torch.device("cuda", device))
    nccl_allocator.init()
    g_world = dist.group.WORLD
    g_second = dist.new_group(list(range(world)))  # same ranks, its own communicator (like dp vs edp)
    g_third = dist.new_group(list(range(world)))
    S, nbytes = args.segments, args.segment_mib * MiB
    for g in (g_world, g_second, g_third):  # communicators exist before anything is timed
        dist.all_reduce(torch.zeros(1, device="cuda"), group=g)
    sync()

    # 1. First registration, 2 groups, symmetric: every approach once per round, rotated order.
    kept = {}  # (mode, round) -> (pool, tensors): alive to the end, as a program's buffers would be
    for rnd in range(args.first_rounds):
        order = FIRST_MODES[rnd % len(FIRST_MODES):] + FIRST_MODES[:rnd % len(FIRST_MODES)]
        for mode in order:
            figures, kept[mode, rnd] = first_registration(mode, rnd, [g_world, g_second], S, nbytes)
            report(f"first registration, {mode}", figures.pop("ms"), "ms", round=rnd + 1, segments=S,
                   segment_mib=args.segment_mib, groups=2, **figures)
    pool, tensors = kept["ncclpool default", 0]
    tpool, ttensors = kept["torch register_mem_pool", 0]

    # 2. Per use, nothing new: ncclpool (G = 2, 3) vs the Megatron pattern (G = 2), and the control: the
    #    same use of a plain MemPool (torch.cuda.use_mem_pool, no registration), what torch itself costs.
    plain_pool = kept["plain MemPool", 0][0]
    report("per use, plain use_mem_pool (control)", per_use_us(lambda: torch.cuda.use_mem_pool(plain_pool), args.uses), "us", segments=S)
    for groups in ([g_world, g_second], [g_world, g_second, g_third]):
        # The warm-up attaches the third group once and warms caches.
        context = lambda: nccl_allocator.MultiGroupMemPoolAllocator(pool, groups)  # noqa: E731
        report(f"per use, ncclpool, G={len(groups)}", per_use_us(context, args.uses), "us", segments=S, groups=len(groups))
        # Host cost: bursts of 4 uses with the device caught up in between (not timed). Back to back,
        # uses are paced by the device (one agreement all-gather per symmetric group and use).
        host, timed = 0.0, 0
        for _ in range(max(1, args.uses // 40)):
            sync()
            t0 = time.perf_counter()
            for _ in range(4):
                use_once(context)
            host += time.perf_counter() - t0
            timed += 4
        report(f"per use (host), ncclpool, G={len(groups)}", host / timed * 1e6, "us", segments=S, groups=len(groups))
    sync()
    t0 = time.perf_counter()
    for _ in range(args.megatron_uses):
        for g in (g_world, g_second):  # Megatron's nccl_mem: deregister on entry ...
            backend_of(g).deregister_mem_pool(tpool)
        with torch.cuda.use_mem_pool(tpool):
            x = torch.empty(MiB, dtype=torch.uint8, device="cuda")
            del x
        for g in (g_world, g_second):  # ... and register the whole pool again on exit
            backend_of(g).register_mem_pool(tpool, symm=True)
    sync()
    per_use_megatron_ms = (time.perf_counter() - t0) / args.megatron_uses * 1e3
    report("per use, Megatron pattern, G=2", per_use_megatron_ms, "ms", segments=S, groups=2)

    # 3. All-gather, 32 MiB out.
    n_in = 32 * MiB // world
    plain_in = torch.ones(n_in, dtype=torch.uint8, device="cuda")
    plain_out = torch.empty(n_in * world, dtype=torch.uint8, device="cuda")
    report("all-gather 32 MiB out, plain memory", time_allgather(plain_out, plain_in, g_world), "us")
    t_in, t_out = ttensors[0][:n_in], ttensors[1][:n_in * world]
    report("all-gather 32 MiB out, torch symmetric pool", time_allgather(t_out, t_in, g_world), "us")
    n_in_t, n_out_t = tensors[0][:n_in], tensors[1][:n_in * world]
    report("all-gather 32 MiB out, ncclpool symmetric pool", time_allgather(n_out_t, n_in_t, g_world), "us")

    if rank == 0:
        by = {r["name"]: r["value"] for r in results}
        print(f"\nncclpool.torch benchmark, {world} GPUs, S={S} x {args.segment_mib} MiB, symmetric")
        print(f"  first registration, 2 groups, {args.first_rounds} rounds (ms: median, min-max; windows per group; device MiB):")
        for mode in FIRST_MODES:
            rows = [r for r in results if r["name"] == f"first registration, {mode}"]
            ms = sorted(r["value"] for r in rows)
            line = (f"    {mode:28s} {statistics.median(ms):8.1f} ({ms[0]:.1f}-{ms[-1]:.1f})  windows {rows[0]['windows_per_group']}"
                    f"  {statistics.median(r['device_mib'] for r in rows):8.0f} MiB")
            if "register_ms" in rows[0]:
                line += f"  (registration alone {statistics.median(r['register_ms'] for r in rows):.1f} ms)"
            print(line)
        mega_us = by["per use, Megatron pattern, G=2"] * 1e3
        print(f"  per use, G=2: ncclpool {by['per use, ncclpool, G=2']:.1f} us vs Megatron pattern "
              f"{by['per use, Megatron pattern, G=2']:.0f} ms = {mega_us / by['per use, ncclpool, G=2']:,.0f}x; "
              f"G=3: ncclpool {by['per use, ncclpool, G=3']:.1f} us (back to back; host cost in bursts: "
              f"G=2 {by['per use (host), ncclpool, G=2']:.1f} us, G=3 {by['per use (host), ncclpool, G=3']:.1f} us; "
              f"plain use_mem_pool {by['per use, plain use_mem_pool (control)']:.1f} us)")
        print(f"  all-gather 32 MiB out: plain {by['all-gather 32 MiB out, plain memory']:.1f} us, torch symmetric "
              f"{by['all-gather 32 MiB out, torch symmetric pool']:.1f} us, ncclpool symmetric "
              f"{by['all-gather 32 MiB out, ncclpool symmetric pool']:.1f} us")
    del tensors, ttensors, t_in, t_out, n_in_t, n_out_t
    for (mode, _), (p, _) in kept.items():
        if mode.startswith("torch"):
            for g in (g_world, g_second):
                backend_of(g).deregister_mem_pool(p)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
