"""A second, independent measurement of plain collectives for `ncclpool bench coll` to be checked
against, since nccl-tests is not on the GPU host: torch.distributed over the same NCCL, on tensors
from torch's own allocator (plain cudaMalloc memory, like nccl-tests -R 0), with nccl-tests'
conventions (float sum, size = gathered output / scattered input / buffer, warm-up 5, 20 launches,
host time / launches averaged over ranks, out-of-place, busbw factors of doc/PERFORMANCE.md); the
median of --repeats such rounds is kept so that a Python hiccup does not become the reference.
Eager Python adds launch overhead: below ~1 MiB this is a loose reference.

  torchrun --nproc-per-node N bench/coll_reference_torch.py --out ref.json [--min 1K --max 1G]

--pool none,auto (none|local|symmetric|auto, a comma list; default none): the same collectives on
buffers of each: plain memory (none) or an ncclpool pool of that kind (ncclpool.torch
create_nccl_mem_pool, registered with the world group, the auto pool routing by each collective),
every round measuring each in turn, rotated. One process per rank, so it runs where `ncclpool bench
coll` (every rank a thread of one process) cannot: under scripts/as-nodes.sh, every rank a node of
its own (docs/scaling.md, "As across nodes"). The JSON keeps `rows` for plain memory (bench-report.py
compare reads it) and adds `pools` (rows per pool), `routes` (each pool's routes or kind) and
`comparison` (each pool's busbw over plain memory's); rank 0 prints the table and a 'pools:' line.
"""
import argparse
import json
import os
import statistics
import sys
import time

POOLS = ("none", "local", "symmetric", "auto")
OPS = ("all_gather", "reduce_scatter", "all_reduce")


def parse_bytes(text):
    units = {"K": 10, "M": 20, "G": 30}
    t = text.upper().rstrip("B").rstrip("I")
    return int(t[:-1]) << units[t[-1]] if t[-1] in units else int(t)


def parse_pools(text):
    """'none,auto' -> ['none', 'auto']: known names, each once, at least one."""
    pools = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in pools if p not in POOLS]
    if not pools or unknown or len(set(pools)) != len(pools):
        raise ValueError(f"--pool {text!r}: give a comma list of distinct names from {', '.join(POOLS)}")
    return pools


def rotated(items, shift):
    """items rotated left by `shift`: round r measures item r first, so no pool always goes first."""
    k = shift % len(items)
    return list(items[k:]) + list(items[:k])


def sizes(lo, hi, factor):
    if factor < 2:
        raise ValueError(f"--factor {factor}: must be >= 2")
    if lo < 1 or hi < lo:
        raise ValueError(f"--min {lo} / --max {hi}: need 1 <= min <= max bytes")
    out, size = [], lo
    while size <= hi:
        out.append(size)
        size *= factor
    return out


def compare_pools(by_pool, base="none", min_bytes=1 << 20):
    """{pool: [(op, bytes, busbw ratio over `base`)]} for every other pool at sizes >= min_bytes, and a
    one-line summary: each pool's median and lowest ratio (and where)."""
    ref = {(r["op"], r["bytes"]): r["busbw"] for r in by_pool.get(base, [])}
    table, parts = {}, []
    for pool, rows in by_pool.items():
        if pool == base:
            continue
        ratios = [(r["op"], r["bytes"], r["busbw"] / ref[(r["op"], r["bytes"])]) for r in rows
                  if r["bytes"] >= min_bytes and ref.get((r["op"], r["bytes"]), 0) > 0]
        table[pool] = ratios
        if ratios:
            low = min(ratios, key=lambda x: x[2])
            parts.append(f"{pool}/{base} busbw at >= {min_bytes >> 20} MiB: median {statistics.median(x[2] for x in ratios):.3f}, "
                         f"lowest {low[2]:.3f} ({low[0]} {low[1] >> 20} MiB), {len(ratios)} points")
        else:
            parts.append(f"{pool}/{base}: no common size >= {min_bytes >> 20} MiB")
    return table, "; ".join(parts)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--min", default="1K")
    p.add_argument("--max", default="1G")
    p.add_argument("--factor", type=int, default=2, help="each size is the previous one times this")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3, help="timed rounds per size; the median is kept")
    p.add_argument("--pool", default="none", help=f"comma list of {', '.join(POOLS)}: plain memory or ncclpool pools")
    a = p.parse_args()
    try:
        pools = parse_pools(a.pool)
        all_sizes = sizes(parse_bytes(a.min), parse_bytes(a.max), a.factor)
    except ValueError as e:
        p.error(str(e))

    import torch
    import torch.distributed as dist

    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
    world = dist.group.WORLD
    mempools, routes = {}, {}
    if pools != ["none"]:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
        import ncclpool.torch as nccl_allocator
        for name in pools:
            if name != "none":
                mempools[name] = nccl_allocator.create_nccl_mem_pool(kind=name, name=f"coll-reference-{name}")

    def buffers(pool, op, count):
        """(src, dst) of `op` for `count` elements per rank, from plain memory or the pool (its groups'
        registrations made, pending windows committed: every rank allocates alike)."""
        shapes = {"all_gather": (count, count * n), "reduce_scatter": (count * n, count), "all_reduce": (count, None)}[op]
        if pool == "none":
            return tuple(None if s is None else torch.ones(s, device="cuda") for s in shapes)
        with nccl_allocator.MultiGroupMemPoolAllocator(mempools[pool], [world], collective=op):
            out = tuple(None if s is None else torch.ones(s, device="cuda") for s in shapes)
        nccl_allocator.ncclpool_pool(mempools[pool]).commit()
        return out

    def launcher(op, src, dst):
        if op == "all_gather":
            return lambda: dist.all_gather_into_tensor(dst, src)
        if op == "reduce_scatter":
            return lambda: dist.reduce_scatter_tensor(dst, src)
        return lambda: dist.all_reduce(src)

    def timed_round(launch):
        torch.cuda.synchronize()
        dist.barrier()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(a.iters):
            launch()
        torch.cuda.synchronize()
        secs = torch.tensor([(time.perf_counter() - t) / a.iters], device="cuda", dtype=torch.float64)
        dist.all_reduce(secs)
        return secs.item() / n

    by_pool = {name: [] for name in pools}
    for size in all_sizes:
        for op in OPS:
            count = size // 4 if op == "all_reduce" else size // 4 // n
            if count == 0:
                continue
            total = count * 4 * (1 if op == "all_reduce" else n)
            launches = {}
            for pool in pools:
                launches[pool] = launcher(op, *buffers(pool, op, count))
                for _ in range(a.warmup):
                    launches[pool]()
            rounds = {pool: [] for pool in pools}
            for repeat in range(a.repeats):  # the median round: Python hiccups do not make the reference
                for pool in rotated(pools, repeat):
                    rounds[pool].append(timed_round(launches[pool]))
            factor = 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n
            for pool in pools:
                secs = sorted(rounds[pool])[len(rounds[pool]) // 2]
                by_pool[pool].append({"op": op, "bytes": total, "us": secs * 1e6, "busbw": total / secs / 1e9 * factor})
            del launches
    for name, pool in mempools.items():
        r = nccl_allocator.ncclpool_pool(pool).routes()
        routes[name] = r["description"] + " (" + r["source"] + ")" if r else name + " registration at every size"
    if rank == 0:
        out = {"ranks": n, "nccl": ".".join(map(str, torch.cuda.nccl.version())), "torch": torch.__version__,
               "rows": by_pool.get("none", by_pool[pools[0]])}
        if pools[0] != "none" and "none" not in pools:
            out["kind"] = pools[0]
        if pools != ["none"]:
            table, line = compare_pools(by_pool)
            out.update({"pools": by_pool, "routes": routes, "comparison": {k: [list(x) for x in v] for k, v in table.items()},
                        "environment": {k: os.environ.get(k) for k in ("NCCL_HOSTID", "NCCLPOOL_AS_NODE", "NCCLPOOL_SYMMETRIC_KERNELS")}})
            print(f"{'op':15s} {'bytes':>11s} " + " ".join(f"{name + ' us':>13s}" for name in pools))
            for i, row in enumerate(by_pool[pools[0]]):
                print(f"{row['op']:15s} {row['bytes']:>11d} " + " ".join(f"{by_pool[name][i]['us']:>13.1f}" for name in pools))
            for name, text in routes.items():
                print(f"routes {name}: {text}")
            print(f"pools: {line}" if "none" in pools else "pools: no 'none' (plain memory) to compare with")
        with open(a.out, "w") as f:
            json.dump(out, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
