"""GPU check of the PDL hazard through torch (docs/python.md, "NCCL versions"): a kernel that lets its
dependents start at once and writes its output after a delay (tests/gpu/pdl_producer.ptx, launched on
torch's current stream), then ``dist.all_reduce`` of that output (synchronous: torch >= 2.8 runs it on
the current stream), ``--launches`` times, eagerly and as replays of one captured CUDA graph, for:

  plain       torch's caching allocator (NCCL's ring kernels: never affected)
  ncclpool    a tensor from ncclpool.torch.create_nccl_mem_pool(symmetric=True), all-reduced as a user
              does (dist.all_reduce): windows carry NCCL's symmetric flag unless the process decided the
              guard or off (NCCLPOOL_SYMMETRIC_KERNELS); where it decided ``fence`` (the default on NCCL
              2.28.0-2.30.6: ncclpool.torch.init() declares the fence, so ``auto`` resolves to it) the
              torch layer's wrapped dist.all_reduce puts ncclpool's fence (NCCLPOOL_SYMMETRIC_FENCE:
              node, kernel or memset) before it
  ncclpool-unfenced  (only where the decision is ``fence``) the same tensor through torch's own
              dist.all_reduce, bypassing the wrapper: the unfenced positive control beside the fenced row
  torch-symm  torch's own symmetric memory (torch.distributed._symmetric_memory, NCCL backend), if
              this torch has it, through torch's own dist.all_reduce: the baseline, with no guard or
              fence of ncclpool's

    torchrun --nproc-per-node 2 tests/gpu/torch/check_pdl_hazard.py [--launches 200] [--delay-us 300] [--json FILE]

Rank 0 prints a line per mode and 'RESULT ok' when plain memory, guarded ncclpool windows and fenced
ncclpool windows were never wrong and never raised ('RESULT FAILED' otherwise, exit 1; pdl_verdict.py).
Wrong results with the symmetric kernels on and unfenced (ncclpool with NCCLPOOL_SYMMETRIC_KERNELS=on,
ncclpool-unfenced, torch-symm) on NCCL 2.28.0-2.30.6 are the hazard itself: the positive control. In
graphs NCCL < 2.29 orders the collective itself unless NCCL_GRAPH_MIXING_SUPPORT=0, and the fence
then adds nothing (``fences`` in the JSON counts those launched). With one GPU NCCL runs no symmetric
kernel (the check then proves the program runs).
"""
import argparse
import json
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "python"))
import ncclpool  # noqa: E402
import ncclpool.torch as nccl_allocator  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdl_verdict  # noqa: E402
from pdl_producer import Producer, count_wrong  # noqa: E402


def torch_symmetric_tensor(numel, group):
    """A tensor of torch's own NCCL symmetric memory, or None and why."""
    try:
        import torch.distributed._symmetric_memory as symm_mem
        if hasattr(symm_mem, "set_backend"):
            symm_mem.set_backend("NCCL")
        t = symm_mem.empty(numel, dtype=torch.float32, device="cuda")
        symm_mem.rendezvous(t, group.group_name)
        return t, ""
    except Exception as e:  # noqa: BLE001 - reported as unavailable
        return None, f"{type(e).__name__}: {str(e)[:200]}"


def torch_all_reduce():
    """torch's own dist.all_reduce, under the torch layer's wrapper if there is one (checks.py)."""
    return getattr(dist.all_reduce, "__wrapped__", dist.all_reduce)


def run_mode(tensor, producer, rank, world, launches, delay_ns, graph, all_reduce):
    expected = world * (world + 1) / 2
    stream = torch.cuda.current_stream()

    def step():
        tensor.zero_()
        producer.launch(tensor, float(rank + 1), delay_ns, torch.cuda.current_stream())
        all_reduce(tensor)

    if not graph:
        return count_wrong(tensor, expected, launches, step)
    g = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(stream)
    with torch.cuda.stream(side):
        step()  # warm-up outside the capture (NCCL's first use of the buffer)
    stream.wait_stream(side)
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        step()
    return count_wrong(tensor, expected, launches, g.replay)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--launches", type=int, default=200)
    parser.add_argument("--delay-us", type=int, default=300)
    parser.add_argument("--kib", type=int, default=1024)
    parser.add_argument("--producer-ctas", type=int, default=4)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=torch.device("cuda", device))
    nccl_allocator.init()
    producer = Producer(args.producer_ctas)
    numel = args.kib * 1024 // 4
    group = dist.group.WORLD

    tensors = {"plain": (torch.empty(numel, device="cuda"), "", dist.all_reduce)}
    pool = nccl_allocator.create_nccl_mem_pool(symmetric=True)
    with nccl_allocator.nccl_mem(pool, group=group):
        tensors["ncclpool"] = (torch.empty(numel, device="cuda"), "", dist.all_reduce)
    f = ncclpool.features()
    fenced = f["symmetric_kernels_decision"] == "fence"
    if fenced:
        tensors["ncclpool-unfenced"] = (tensors["ncclpool"][0], "", torch_all_reduce())
    tensors["torch-symm"] = (*torch_symmetric_tensor(numel, group), torch_all_reduce())
    guard = {k: f[k] for k in ("symmetric_kernels_decided", "symmetric_kernels_enabled", "symmetric_kernels_hazard", "symmetric_kernels_why",
                               "symmetric_kernels_decision", "symmetric_fence_kind")}

    rows = []
    for mode, (tensor, why, all_reduce) in tensors.items():
        for graph in (False, True):
            if tensor is None:
                rows.append({"mode": mode, "graph": graph, "unavailable": why})
                continue
            try:
                before = ncclpool.features()["symmetric_fences_launched"]
                wrong, example = run_mode(tensor, producer, rank, world, args.launches, args.delay_us * 1000, graph, all_reduce)
                fences = ncclpool.features()["symmetric_fences_launched"] - before
                rows.append({"mode": mode, "graph": graph, "wrong": wrong, "example": example, "fences": fences})
            except Exception as e:  # noqa: BLE001 - reported per mode
                rows.append({"mode": mode, "graph": graph, "error": f"{type(e).__name__}: {str(e)[:300]}"})
    # Every rank's counts, summed on rank 0: wrong launches, and the ranks where a mode raised.
    counts = torch.tensor([[r.get("wrong", 0), int("error" in r)] for r in rows], device="cuda", dtype=torch.int64)
    dist.all_reduce(counts)
    symmetric_flag = guard["symmetric_kernels_enabled"]
    broken = pdl_verdict.judge(rows, [c[0] for c in counts.tolist()], [c[1] for c in counts.tolist()], args.launches, world, symmetric_flag,
                               fenced=fenced)
    promise_broken = bool(broken)
    if rank == 0:
        print(f"NCCL {f['nccl_version']}, {world} rank(s); symmetric kernels: {guard['symmetric_kernels_why']}; "
              f"fence kind {guard['symmetric_fence_kind']}", flush=True)
        for r in rows:
            what = r.get("unavailable") or r.get("error") or (f"raised on {r['error_ranks']} other rank(s)" if r.get("error_ranks")
                                                              else f"wrong {r['wrong_all_ranks']} of {r['launches_all_ranks']}")
            fences = f" (rank 0: {r['fences']} fence(s) launched)" if r.get("fences") else ""
            print(f"  {r['mode']:<17} {'graph' if r['graph'] else 'eager':<6} {what}{fences}", flush=True)
        if args.json:
            with open(args.json, "w") as out:
                json.dump({"world": world, "nccl_version": f["nccl_version"], "torch": torch.__version__, "guard": guard,
                       "graph_mixing_support": os.environ.get("NCCL_GRAPH_MIXING_SUPPORT"),
                           "launches": args.launches, "delay_us": args.delay_us, "bytes": numel * 4, "rows": rows}, out, indent=1)
        print("RESULT FAILED: plain memory or a guarded ncclpool window gave a wrong result or raised: " + "; ".join(broken)
              if promise_broken else "RESULT ok", flush=True)
    del tensors
    dist.destroy_process_group()
    sys.exit(1 if promise_broken else 0)


if __name__ == "__main__":
    main()
