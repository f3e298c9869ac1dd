"""One memory pool serving two process groups, with PyTorch, on any number of GPUs (1 included).

    torchrun --nproc-per-node 2 examples/torch_two_groups.py [--mib 8] [--steps 3]

Every rank makes one pool (a torch.cuda.MemPool backed by ncclpool), and two process groups use its
memory: the world (say, data parallel) and pairs of neighbouring ranks (say, tensor parallel). Each
step allocates tensors from the pool, all-reduces one on each group and checks the sums. Step 1
registers the pool's new segments with both groups; later steps reuse torch's cached blocks and
register nothing. Rank 0 prints the pool's memory_summary() at the end.

Needs PyTorch with CUDA and ncclpool: pip install . at the repository root, or a build of this
checkout (scripts/run.sh), whose python/ and build/default the example finds by itself.
"""
import argparse
import os
import sys

MiB = 1 << 20


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=8, help="MiB per tensor (default 8)")
    ap.add_argument("--steps", type=int, default=3, help="steps, at least 2 (default 3)")
    args = ap.parse_args()
    if args.mib < 1 or args.steps < 2:
        ap.error("--mib must be at least 1 and --steps at least 2")
    if "RANK" not in os.environ:
        sys.exit("run it under torchrun: torchrun --nproc-per-node NGPUS examples/torch_two_groups.py")
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        sys.exit("torch_two_groups.py needs PyTorch with CUDA")
    try:
        import ncclpool  # noqa: F401
    except ImportError:  # run from a checkout without installing: the package is in ../python
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import ncclpool.torch as nccl_allocator  # the same API as Megatron-Core's nccl_allocator

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local_rank)
    # device_id= makes torch create each group's NCCL communicator up front (ncclpool registers
    # memory with communicators, so it needs them).
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))

    # The two groups. new_group is collective: every rank creates every group, in the same order.
    world = dist.group.WORLD
    for first in range(0, world_size, 2):
        ranks = list(range(first, min(first + 2, world_size)))
        group = dist.new_group(ranks)
        if rank in ranks:
            pair, pair_ranks = group, ranks

    nccl_allocator.init()  # makes torch's pluggable allocator; checks that torch and ncclpool share one NCCL
    pool = nccl_allocator.create_nccl_mem_pool()  # an auto pool: each size registered the fastest way here
    npool = nccl_allocator.ncclpool_pool(pool)  # the ncclpool.Pool behind it: statistics, communicators

    n = args.mib * MiB // 4  # float32 elements
    for step in range(1, args.steps + 1):
        # Tensors made inside the context come from the pool. The first use registers each group with
        # the pool; new segments are registered with both groups (windows after the ranks agree, at
        # the context's exit). Every rank must enter and leave it at the same points of the program.
        with nccl_allocator.MultiGroupMemPoolAllocator(pool, [world, pair]):
            x = torch.full((n,), float(rank + 1), device="cuda")
            y = torch.ones(n, device="cuda")
        dist.all_reduce(x, group=world)  # sums 1 + 2 + ... + world_size
        dist.all_reduce(y, group=pair)  # sums one 1 per rank of the pair
        torch.cuda.synchronize()
        if not (torch.all(x == world_size * (world_size + 1) / 2) and torch.all(y == len(pair_ranks))):
            sys.exit(f"rank {rank}: wrong all-reduce result at step {step}")
        registrations = sum(c.stats()["registrations"] for c in npool.communicators)
        if rank == 0:
            print(f"step {step}: all-reduce on the world and on ranks {pair_ranks}: right; "
                  f"{npool.stats()['segment_count']} segment(s), {registrations} registration(s) so far", flush=True)
        if step == 1:
            after_first_step = registrations
        del x, y  # back to torch's cache for this pool: the next step reuses the blocks
    if registrations != after_first_step:
        sys.exit(f"rank {rank}: later steps registered again ({after_first_step} -> {registrations})")

    if rank == 0:
        print(nccl_allocator.memory_summary(pool))
        print(f"done: {world_size} rank(s), two groups, one pool; steps after the first registered nothing")
    dist.destroy_process_group()  # after init(), this first drops the groups' registrations


if __name__ == "__main__":
    main()
