"""FSDP2 (torch's fully_shard) with its communication buffers in an ncclpool pool, on 1 GPU or more.

    torchrun --nproc-per-node 2 examples/fsdp2.py [--steps 5]

FSDP2 all-gathers the parameters and reduce-scatters the gradients of each sharded module through
buffers it asks for. ncclpool.torch.fsdp.enable() makes those buffers come from a pool registered with
the shard group, so the collectives run on registered memory (zero-copy, or NCCL's symmetric kernels
on windows). A tiny model trains a few steps; rank 0 prints the losses and the pool's summary.

Needs PyTorch with CUDA and ncclpool: pip install . at the repository root, or a build of this
checkout (scripts/run.sh), whose python/ and build/default the example finds by itself.
"""
import argparse
import math
import os
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=5, help="training steps (default 5)")
    ap.add_argument("--dim", type=int, default=512, help="model width (default 512)")
    args = ap.parse_args()
    if args.steps < 1 or args.dim < 1:
        ap.error("--steps and --dim must be at least 1")
    if "RANK" not in os.environ:
        sys.exit("run it under torchrun: torchrun --nproc-per-node NGPUS examples/fsdp2.py")
    try:
        import torch
        import torch.distributed as dist
        from torch.distributed.fsdp import fully_shard
    except ImportError as e:
        sys.exit(f"fsdp2.py needs PyTorch with CUDA and FSDP2 (torch >= 2.6): {e}")
    try:
        import ncclpool  # noqa: F401
    except ImportError:  # run from a checkout without installing: the package is in ../python
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import ncclpool.torch as nccl_allocator
    from ncclpool.torch import fsdp as ncclpool_fsdp

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))

    # A tiny model: three MLP blocks. The same seed on every rank gives the same initial parameters.
    torch.manual_seed(0)
    d = args.dim
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))
                                  for _ in range(3)]).cuda()
    for block in model:
        fully_shard(block)  # each block is a unit of all-gather / reduce-scatter
    fully_shard(model)

    # The pool, then the helper: every FSDP module's all-gather and reduce-scatter buffers come from
    # it, registered with the module's shard group (here the world). Returns how many modules it set.
    pool = nccl_allocator.create_nccl_mem_pool()
    modules = ncclpool_fsdp.enable(model, pool)

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.Generator(device="cuda").manual_seed(1234 + rank)  # each rank its own batches
    for step in range(1, args.steps + 1):
        x = torch.randn(64, d, device="cuda", generator=data)
        loss = (model(x) - x).pow(2).mean()  # learn the identity
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        mean = mean.item() / world_size
        if not math.isfinite(mean):
            sys.exit(f"rank {rank}: loss {mean} at step {step}")
        if rank == 0:
            print(f"step {step}: loss {mean:.5f}", flush=True)

    # torch's segments for the buffers came from the pool: FSDP used the helper's buffers.
    if nccl_allocator.ncclpool_pool(pool).stats()["allocation_count"] == 0:
        sys.exit(f"rank {rank}: FSDP took no buffer from the pool")
    if rank == 0:
        print(nccl_allocator.memory_summary(pool))
        print(f"done: {world_size} rank(s), FSDP2 on {modules} modules with buffers from the pool")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
