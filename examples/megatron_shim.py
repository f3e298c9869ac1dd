"""Megatron-FSDP with its NCCL user buffers in ncclpool: Megatron-Core's allocator swapped by a shim.

    torchrun --nproc-per-node 2 examples/megatron_shim.py [--steps 5]

megatron_fsdp.fully_shard(..., nccl_ub=True) keeps FSDP's communication buffers in a pool registered
with NCCL, made by megatron.core.nccl_allocator (Megatron-Core's allocator, which registers the whole
pool with the group again at every use). ncclpool.torch.megatron.install() makes that module resolve
to ncclpool.torch, whose API is the same, without editing Megatron: each segment is then registered
once per group. Call it before the model is wrapped. A tiny model trains a few steps; rank 0 prints
what the shim replaced, the losses and the pool's summary.

Needs PyTorch with CUDA, megatron-fsdp (pip install megatron-fsdp; tested with 0.6.1) and ncclpool:
pip install . at the repository root, or a build of this checkout (scripts/run.sh), whose python/ and
build/default the example finds by itself. Megatron-Core itself is optional: without it the shim
registers empty `megatron` / `megatron.core` packages.
"""
import argparse
import importlib.util
import math
import os
import sys
import warnings


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=5, help="training steps (default 5)")
    ap.add_argument("--dim", type=int, default=512, help="model width (default 512)")
    args = ap.parse_args()
    if args.steps < 1 or args.dim < 1:
        ap.error("--steps and --dim must be at least 1")
    if "RANK" not in os.environ:
        sys.exit("run it under torchrun: torchrun --nproc-per-node NGPUS examples/megatron_shim.py")
    if importlib.util.find_spec("megatron_fsdp") is None:
        sys.exit("megatron_shim.py needs megatron-fsdp (pip install megatron-fsdp, or put it on PYTHONPATH)")
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        sys.exit("megatron_shim.py needs PyTorch with CUDA")
    try:
        import ncclpool  # noqa: F401
    except ImportError:  # run from a checkout without installing: the package is in ../python
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import ncclpool.torch as nccl_allocator
    import ncclpool.torch.megatron

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    dist.init_process_group("nccl", device_id=device)

    # The swap: before megatron_fsdp makes its pool (it does so in fully_shard). install() warns with
    # what it replaced and returns the same list; here rank 0 prints it instead.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        replaced = ncclpool.torch.megatron.install()
    import megatron_fsdp
    import megatron_fsdp.param_and_grad_buffer as buffers
    if buffers.nccl_allocator is not nccl_allocator:
        sys.exit(f"megatron_fsdp uses {buffers.nccl_allocator!r}, not ncclpool.torch")
    if rank == 0:
        print("the shim replaced: " + "; ".join(replaced), flush=True)

    class Block(torch.nn.Module):  # Megatron-FSDP's unit of sharding: LayerNorm, MLP, residual
        def __init__(self, dim):
            super().__init__()
            self.norm = torch.nn.LayerNorm(dim)
            self.up = torch.nn.Linear(dim, 4 * dim)
            self.down = torch.nn.Linear(4 * dim, dim)

        def forward(self, x):
            return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))

    torch.manual_seed(0)  # the same initial parameters on every rank
    model = torch.nn.Sequential(*[Block(args.dim) for _ in range(3)]).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    # nccl_ub=True: FSDP's buffers come from megatron.core.nccl_allocator, which is now ncclpool.torch.
    model, optimizer = megatron_fsdp.fully_shard(model, optimizer, fsdp_unit_modules=[Block], device=device, nccl_ub=True)

    data = torch.Generator(device="cuda").manual_seed(1234 + rank)  # each rank its own batches
    for step in range(1, args.steps + 1):
        x = torch.randn(8, 64, args.dim, device=device, generator=data)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), x.flip(-1))
        loss.backward()
        optimizer.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        mean = mean.item() / world_size
        if not math.isfinite(mean):
            sys.exit(f"rank {rank}: loss {mean} at step {step}")
        if rank == 0:
            print(f"step {step}: loss {mean:.5f}", flush=True)

    pool = buffers.NCCL_MEMORY_POOL  # the pool Megatron-FSDP made through the shim: an ncclpool one
    if nccl_allocator.ncclpool_pool(pool).stats()["allocation_count"] == 0:
        sys.exit(f"rank {rank}: Megatron-FSDP took no buffer from the pool")
    if rank == 0:
        print(nccl_allocator.memory_summary(pool))
        print(f"done: {world_size} rank(s), Megatron-FSDP with nccl_ub=True on ncclpool.torch")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
