"""GPU check: ranks that would launch NCCL's symmetric kernels with different CTA counts must fail at
the symmetric attach on every rank, not hang in their first symmetric collective (docs/registry.md,
"Failures, rank by rank"). Run on 2 GPUs by torchrun:

    torchrun --nproc-per-node 2 tests/gpu/torch/check_sym_ctas_mismatch.py

Rank 0 asks for 16 CTAs (NCCLPOOL_SYM_CTAS=16), the others leave ncclpool's default (32 on H100/H200,
NCCL's own choice elsewhere). Every rank must raise ncclpool.AgreementError naming both counts at its
first symmetric registration, and the process group must still work afterwards (no stray collective).
Prints 'RESULT ok' or 'RESULT FAILED: ...' on rank 0 and exits non-zero on failure.
"""
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "python"))
import ncclpool  # noqa: E402
import ncclpool.torch as nccl_allocator  # noqa: E402


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = int(os.environ.get("LOCAL_RANK", rank))
    os.environ.pop("NCCL_SYM_CTAS", None)
    if rank == 0:
        os.environ["NCCLPOOL_SYM_CTAS"] = "16"  # read at the first symmetric attach (putenv)
    else:
        os.environ.pop("NCCLPOOL_SYM_CTAS", None)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=torch.device("cuda", device))
    nccl_allocator.init()
    problems = []
    pool = nccl_allocator.create_nccl_mem_pool(symmetric=True)
    try:
        with nccl_allocator.nccl_mem(pool, group=dist.group.WORLD):
            torch.empty(1 << 20, device="cuda")
        problems.append(f"rank {rank}: no error (the ranks would launch different CTA counts)")
    except ncclpool.AgreementError as e:
        text = str(e)
        if "symmetric kernels' CTAs 16" not in text or "different CTA counts" not in text:
            problems.append(f"rank {rank}: AgreementError without both counts: {text[:300]}")
    except Exception as e:  # noqa: BLE001 - any other failure is a failed check
        problems.append(f"rank {rank}: {type(e).__name__}: {str(e)[:300]}")
    # Nothing collective is left behind: the group's next collective pairs and is right.
    x = torch.ones(4, device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    if x[0].item() != world:
        problems.append(f"rank {rank}: all_reduce after the error gave {x[0].item()}, expected {world}")
    flag = torch.tensor([0 if problems else 1], device="cuda")
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    for p in problems:
        print(p, flush=True)
    if rank == 0:
        print("RESULT ok" if flag.item() == 1 else "RESULT FAILED: see the lines above", flush=True)
    dist.destroy_process_group()
    sys.exit(0 if flag.item() == 1 else 1)


if __name__ == "__main__":
    main()
