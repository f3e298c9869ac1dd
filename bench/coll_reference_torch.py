"""A second, independent measurement of plain collectives for `ncclpool bench coll` to be checked
against, since nccl-tests is not on the GPU host: torch.distributed over the same NCCL, on tensors
from torch's own allocator (plain cudaMalloc memory, like nccl-tests -R 0), with nccl-tests'
conventions (float sum, size = gathered output / scattered input / buffer, warm-up 5, 20 launches,
host time / launches averaged over ranks, out-of-place, busbw factors of doc/PERFORMANCE.md); the
median of --repeats such rounds is kept so that a Python hiccup does not become the reference.
Eager Python adds launch overhead: below ~1 MiB this is a loose reference.

  torchrun --nproc-per-node N bench/coll_reference_torch.py --out ref.json [--min 1K --max 1G]
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist


def parse_bytes(text):
    units = {"K": 10, "M": 20, "G": 30}
    t = text.upper().rstrip("B").rstrip("I")
    return int(t[:-1]) << units[t[-1]] if t[-1] in units else int(t)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--min", default="1K")
    p.add_argument("--max", default="1G")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3, help="timed rounds per size; the median is kept")
    a = p.parse_args()
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
    rows = []
    size = parse_bytes(a.min)
    while size <= parse_bytes(a.max):
        for op in ("all_gather", "reduce_scatter", "all_reduce"):
            count = size // 4 if op == "all_reduce" else size // 4 // n
            if count == 0:
                continue
            total = count * 4 * (1 if op == "all_reduce" else n)
            if op == "all_gather":
                src, dst = torch.ones(count, device="cuda"), torch.empty(count * n, device="cuda")
                launch = lambda: dist.all_gather_into_tensor(dst, src)
            elif op == "reduce_scatter":
                src, dst = torch.ones(count * n, device="cuda"), torch.empty(count, device="cuda")
                launch = lambda: dist.reduce_scatter_tensor(dst, src)
            else:
                src = torch.ones(count, device="cuda")
                launch = lambda: dist.all_reduce(src)
            for _ in range(a.warmup):
                launch()
            rounds = []
            for _ in range(a.repeats):  # the median round: Python hiccups do not make the reference
                torch.cuda.synchronize()
                dist.barrier()
                torch.cuda.synchronize()
                t = time.perf_counter()
                for _ in range(a.iters):
                    launch()
                torch.cuda.synchronize()
                secs = torch.tensor([(time.perf_counter() - t) / a.iters], device="cuda", dtype=torch.float64)
                dist.all_reduce(secs)
                rounds.append(secs.item() / n)
            secs = sorted(rounds)[len(rounds) // 2]
            factor = 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n
            rows.append({"op": op, "bytes": total, "us": secs * 1e6, "busbw": total / secs / 1e9 * factor})
            del src
        size *= 2
    if rank == 0:
        with open(a.out, "w") as f:
            json.dump({"ranks": n, "nccl": ".".join(map(str, torch.cuda.nccl.version())), "torch": torch.__version__, "rows": rows}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
