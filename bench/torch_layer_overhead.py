"""The Python part of a ncclpool.torch context use, without torch or a GPU.

    NCCLPOOL_LIBRARY=build/default/src/libncclpool.so python3 bench/torch_layer_overhead.py [--uses N] [--profile]

ncclpool.torch over a stand-in for torch (use_mem_pool does nothing, groups are 1-rank simulator
communicators): what MultiGroupMemPoolAllocator's enter + exit cost in Python and the C ABI, for
G = 1, 2, 3 symmetric groups, with the pool past its first 16 scope ends (steady state). torch's
own use_mem_pool and the allocation are not in it: bench/torch_bench.py on GPUs measures the whole.
Median of 5 runs of --uses uses each; --profile prints cProfile's top entries for G = 2.
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))


def stand_in_torch():
    """The tests' stand-in for torch (tests/python/torch_stand_in.py) in sys.modules."""
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
    import torch_stand_in
    modules = torch_stand_in.make_modules()
    sys.modules.update(modules)
    return modules["torch.distributed"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--uses", type=int, default=20000)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    dist = stand_in_torch()
    import ncclpool
    ncclpool.features = lambda: {"nccl_available": True, "nccl_version": 0, "why_not": ""}
    import ncclpool.torch as layer

    print(f"ncclpool.torch context use, stand-in torch, {args.uses} uses x 5 runs (us per use: median, min-max)")
    for g in (1, 2, 3):
        mempool = layer.create_nccl_mem_pool(symmetric=True, source="sim", name=f"overhead-{g}")
        pool = layer.ncclpool_pool(mempool)
        sims = [ncclpool.SimGroup(f"g{i}", 1) for i in range(g)]
        groups = [dist.ProcessGroup() for _ in range(g)]
        pool.attach_nccl = lambda ptr, kind, pool=pool, sims=sims: pool.attach_sim(sims[ptr - 1], 0, kind)
        layer.binding._comm_ptr = lambda group, device, groups=groups: 1 + groups.index(group)

        def use():
            with layer.MultiGroupMemPoolAllocator(mempool, groups):
                pass

        for _ in range(100):
            use()
        runs = []
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(args.uses):
                use()
            runs.append((time.perf_counter() - t) / args.uses * 1e6)
        print(f"  G={g}: {statistics.median(runs):6.2f} ({min(runs):.2f}-{max(runs):.2f})")
        if args.profile and g == 2:
            import cProfile
            import pstats
            profile = cProfile.Profile()
            profile.runcall(lambda: [use() for _ in range(args.uses)])
            pstats.Stats(profile).sort_stats("tottime").print_stats(12)
        for c in list(pool.communicators):
            c.forget()


if __name__ == "__main__":
    main()
