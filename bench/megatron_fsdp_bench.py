"""Megatron-FSDP end to end with NCCL user buffers (``fully_shard(..., nccl_ub=True)``): Megatron-Core's
own allocator against ncclpool installed as ``megatron.core.nccl_allocator``
(``ncclpool.torch.megatron.install()``), symmetric or not, with one group or with a separate all-gather
group (``fsdp_group_ag``); ``--allocator none`` is Megatron-FSDP without user buffers. One
configuration per process (Megatron's pool is process-global); run on every rank by torchrun:

    torchrun --nproc-per-node 2 bench/megatron_fsdp_bench.py --allocator ncclpool --symmetric 1 [--ag-group [--ag-cta-policy zero]]

--ag-cta-policy zero makes the all-gather group with NCCL's ZERO CTA policy (issue 35): megatron-fsdp
0.6.1 registers every FSDP buffer with each of its groups (``ubr_groups``: fsdp_group and
fsdp_group_ag), symmetric unless --symmetric 0, and runs the parameter all-gathers on fsdp_group_ag
(async, on its own side stream), so with symmetric windows NCCL can run them on the copy engines
(`python3 bench/ce_common.py paths` on an NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING log says whether it
did); the reduce-scatters stay on fsdp_group. ncclpool's symmetric windows need NCCLPOOL_SYMMETRIC_KERNELS=on on
NCCL 2.28.0-2.30.6 (the NCCL-version guard). A torch that cannot set the policy reports it ('BENCH'
with 'unavailable') and the run succeeds.

Rank 0 prints one line 'BENCH {...}': setup time (fully_shard), first step, steady steps (median,
min, max), peak memory (torch's peak reserved, and device memory in use from before the model to the
end, as cudaMemGetInfo sees it, which includes memory outside torch's allocator), and the loss of
every step; then every rank prints 'TEARDOWN ok' or, when destroy_process_group has not returned in
--teardown-timeout s, 'TEARDOWN hung' and exits with status 75. scripts/megatron-fsdp.sh runs the
configurations interleaved and compares the losses.

--allocator megatron loads Megatron-Core's own megatron/core/nccl_allocator.py, unmodified, from
--megatron-core (a folder holding the megatron package; default $MEGATRON_CORE_PATH) under stand-in
`megatron` / `megatron.core` packages with the two helpers it imports (is_torch_min_version,
log_single_rank): megatron-fsdp 0.6.1 pairs with Megatron-Core 0.19, whose wheel is not on PyPI, and
with an older Megatron-Core installed whole it would use that version's DDP config and fail. The
allocator builds a small extension with torch.utils.cpp_extension (g++, nccl.h and libnccl from the
NCCL that torch ships). Megatron's init() sets NCCL_NVLS_ENABLE=1; this script puts it back to 0
(NVLink multicast stays off).
"""
import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
import types

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from ncclpool import torch_trace  # noqa: E402
import ce_common  # noqa: E402  (bench/, the script's folder)
from mlp_block import Block  # noqa: E402


def nccl_home():
    import nvidia.nccl

    return list(nvidia.nccl.__path__)[0]


def load_megatron_allocator(megatron_core):
    """Megatron-Core's nccl_allocator.py as megatron.core.nccl_allocator, under stand-in parents."""
    from packaging.version import Version

    for name in ("megatron", "megatron.core"):
        package = types.ModuleType(name)
        package.__path__ = []  # nothing else of Megatron-Core is importable
        sys.modules[name] = package
    utils = types.ModuleType("megatron.core.utils")

    def is_torch_min_version(version, check_equality=True):
        have = Version(torch.__version__)
        return have >= Version(version) if check_equality else have > Version(version)

    def log_single_rank(logger, *args, rank=0, **kwargs):
        if not dist.is_initialized() or dist.get_rank() == rank:
            logger.log(*args, **kwargs)

    utils.is_torch_min_version, utils.log_single_rank = is_torch_min_version, log_single_rank
    sys.modules["megatron.core.utils"] = utils
    path = os.path.join(megatron_core, "megatron", "core", "nccl_allocator.py")
    spec = importlib.util.spec_from_file_location("megatron.core.nccl_allocator", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["megatron.core.nccl_allocator"] = module
    spec.loader.exec_module(module)
    sys.modules["megatron.core"].nccl_allocator = module
    return module


def prepare_megatron_allocator(megatron_core):
    """Lets Megatron-Core's inline extension find nccl.h and libnccl, and keeps NVLS off."""
    home = nccl_home()
    link_dir = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"ncclpool-megatron-nccl-{os.getuid()}")
    os.makedirs(link_dir, exist_ok=True)
    link = os.path.join(link_dir, "libnccl.so")
    if not os.path.exists(link):
        try:
            os.symlink(os.path.join(home, "lib", "libnccl.so.2"), link)
        except FileExistsError:
            pass
    for var, value in (("CPATH", os.path.join(home, "include")), ("LIBRARY_PATH", link_dir)):
        os.environ[var] = value + (":" + os.environ[var] if os.environ.get(var) else "")
    allocator = load_megatron_allocator(megatron_core)
    original_init = allocator.init

    def init_without_nvls():
        original_init()
        os.environ["NCCL_NVLS_ENABLE"] = "0"

    allocator.init = init_without_nvls
    return allocator


def device_used():
    free, total = torch.cuda.mem_get_info()
    return total - free


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--allocator", choices=["none", "megatron", "ncclpool"], required=True)
    ap.add_argument("--symmetric", type=int, default=1)
    ap.add_argument("--ag-group", action="store_true", help="a separate all-gather group (fsdp_group_ag)")
    ap.add_argument("--ag-cta-policy", choices=["default", "zero"], default="default",
                    help="NCCL CTA policy of the all-gather group: zero = copy-engine all-gather (needs --ag-group)")
    ap.add_argument("--teardown-timeout", type=float, default=60, help="seconds destroy_process_group may take")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--dim", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--megatron-core", default=os.environ.get("MEGATRON_CORE_PATH", ""))
    ap.add_argument("--snapshot", default="", help="write rank 0's torch memory snapshot (from fully_shard to "
                    "the last step) as JSON here, a trace for `ncclpool replay`")
    args = ap.parse_args()
    if args.ag_cta_policy == "zero" and not args.ag_group:
        ap.error("--ag-cta-policy zero needs --ag-group (the policy is that group's)")
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=device)

    replaced = []
    if args.allocator == "ncclpool":
        import ncclpool.torch.megatron

        replaced = ncclpool.torch.megatron.install()
    elif args.allocator == "megatron":
        if not args.megatron_core:
            raise SystemExit("--allocator megatron needs --megatron-core PATH (or MEGATRON_CORE_PATH)")
        prepare_megatron_allocator(args.megatron_core)
    import megatron_fsdp
    import megatron_fsdp.param_and_grad_buffer as buffers

    allocator_module = getattr(buffers, "nccl_allocator", None)
    allocator_name = getattr(allocator_module, "__name__", "none")
    expected = {"ncclpool": "ncclpool.torch", "megatron": "megatron.core.nccl_allocator"}.get(args.allocator)
    if expected and allocator_name != expected:
        raise SystemExit(f"megatron_fsdp uses {allocator_name}, not {expected}")

    ag_group = None
    if args.ag_group and args.ag_cta_policy == "zero":
        ag_group, why = ce_common.zero_cta_group(dist, range(world))
        if ag_group is None:
            if rank == 0:
                print("BENCH " + json.dumps(dict(allocator=args.allocator, symmetric=bool(args.symmetric), ag_group=True,
                                                 ag_cta_policy="zero", world=world, unavailable=why)), flush=True)
            ce_common.destroy_with_watchdog(dist, args.teardown_timeout)
            return
    elif args.ag_group:
        ag_group = dist.new_group(list(range(world)))
    torch.manual_seed(args.seed)  # the same parameters on every rank and in every configuration
    # Built on the GPU, as in bench/fsdp2_bench.py: a CPU initialisation costs seconds per large block.
    with device:
        model = torch.nn.Sequential(*[Block(args.dim) for _ in range(args.layers)])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    generator = torch.Generator(device="cuda").manual_seed(args.seed + 1 + rank)  # not the model's seed
    x = torch.randn(args.batch, args.seq, args.dim, device=device, generator=generator)
    y = torch.randn(args.batch, args.seq, args.dim, device=device, generator=generator)
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.reset_peak_memory_stats()
    used_before = device_used()
    if args.snapshot and rank == 0:
        torch_trace.start_recording()

    t0 = time.perf_counter()
    model, optimizer = megatron_fsdp.fully_shard(
        model,
        optimizer,
        fsdp_unit_modules=[Block],
        device=device,
        nccl_ub=args.allocator != "none",
        disable_symmetric_registration=not args.symmetric,
        fsdp_group_ag=ag_group,
    )
    torch.cuda.synchronize()
    dist.barrier()
    setup_s = time.perf_counter() - t0

    step_s, losses, peak_used = [], [], device_used()
    for _ in range(args.steps):
        t0 = time.perf_counter()
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        torch.cuda.synchronize()
        step_s.append(time.perf_counter() - t0)
        peak_used = max(peak_used, device_used())
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
    if args.snapshot and rank == 0:
        torch_trace.write_trace(args.snapshot, f"bench/megatron_fsdp_bench.py --allocator {args.allocator} on {world} GPUs, "
                                f"{args.layers} blocks of dim {args.dim}, {args.batch}x{args.seq} tokens, {args.steps} steps, "
                                f"torch {torch.__version__}")
    steady = step_s[2:] if len(step_s) > 3 else step_s
    result = dict(
        allocator=args.allocator,
        symmetric=bool(args.symmetric) if args.allocator != "none" else None,
        ag_group=args.ag_group,
        ag_cta_policy=args.ag_cta_policy if args.ag_group else None,
        world=world,
        layers=args.layers,
        dim=args.dim,
        tokens=args.batch * args.seq,
        allocator_module=allocator_name,
        replaced=replaced,
        setup_ms=setup_s * 1e3,
        first_step_ms=step_s[0] * 1e3,
        steady_step_ms=statistics.median(steady) * 1e3,
        steady_min_ms=min(steady) * 1e3,
        steady_max_ms=max(steady) * 1e3,
        peak_reserved_gib=torch.cuda.max_memory_reserved() / 2**30,
        device_used_gib=(peak_used - used_before) / 2**30,
        losses=losses,
    )
    if args.allocator == "ncclpool" and buffers.NCCL_MEMORY_POOL is not None:
        import ncclpool.torch as layer

        s = layer.stats(buffers.NCCL_MEMORY_POOL)
        result["ncclpool"] = dict(
            reserved_gib=s["stats"]["reserved_bytes"] / 2**30,
            segments=s["stats"]["segment_count"],
            communicators=[{k: c[k] for k in ("kind", "registered_segments", "registration_seconds")} for c in s["communicators"]],
        )
        import ncclpool

        f = ncclpool.features()
        result["ncclpool"]["symmetric_kernels_enabled"] = f.get("symmetric_kernels_enabled")
        # Which CTA count the symmetric kernels took (install() declares training: NCCL's own).
        result["ncclpool"]["symmetric_ctas"] = f["symmetric_ctas"] if f["symmetric_ctas_decided"] else None
        result["ncclpool"]["symmetric_ctas_source"] = f["symmetric_ctas_source"]
    if rank == 0:
        print("BENCH " + json.dumps(result), flush=True)
    ce_common.destroy_with_watchdog(dist, args.teardown_timeout)


if __name__ == "__main__":
    main()
