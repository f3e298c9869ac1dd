"""FSDP2 (torch's ``fully_shard``) with and without registered communication buffers: step time and
device memory, each mode in its own processes, modes interleaved and repeated.

    python3 bench/fsdp2_bench.py [--rounds 3] [--modes plain,torch-symm,ncclpool-local,ncclpool-symmetric,ncclpool-auto]
                                 [--layers 12 --dim 4096 --batch 4 --seq 1024 --steps 25] [--out DIR] [--json FILE]

Modes:
  plain               FSDP2 as it is (torch's caching allocator, no registration)
  torch-symm          torch's own route: FSDPModule.set_allocate_memory_from_process_group_for_comm(True)
  ncclpool-local      ncclpool.torch.fsdp.enable(model, create_nccl_mem_pool(symmetric=False))
  ncclpool-symmetric  the same with a symmetric pool (windows, NCCL's symmetric kernels)
  ncclpool-auto       the same with an auto pool (create_nccl_mem_pool(kind="auto"): each size class
                      registered as this machine's profile or the built-in routes say)
A mode may name another ncclpool library to load, ``MODE@/path/libncclpool.so`` (NCCLPOOL_LIBRARY):
two builds side by side in one run; and environment variables for its runs, ``MODE+VAR=VALUE`` (after
any ``@LIB``, repeatable), e.g. ``ncclpool-symmetric+NCCLPOOL_SYM_CTAS=nccl`` beside
``ncclpool-symmetric``: NCCL's own symmetric CTA count against ncclpool's default.

Each run launches torchrun on 2 GPUs (4 where there are 4; ``--gpus N`` sets it, 1 for one rank's
memory and code paths) with ``--worker``; rank 0
prints one line 'BENCH {...}': steady step (median, min, max over the steps after the second), device
memory in use from before the model to the end as cudaMemGetInfo sees it (includes NCCL's own buffers
and memory outside torch's allocator), torch's peak reserved, the ncclpool pool's reserved bytes and
windows, and the loss of every step. The driver writes every BENCH line to DIR/fsdp2.jsonl (and --json),
prints a table (medians over rounds, with the spread of the steady step; first step and setup
(fully_shard and the helper) as medians), and exits non-zero when a run fails or the
losses of one mode differ between rounds. Model: ``layers`` MLP blocks of dim ``dim`` (bf16 params,
fp32 gradient reduction), batch x seq tokens per rank. NVLink multicast stays off.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

MODES = ("plain", "torch-symm", "ncclpool-local", "ncclpool-symmetric", "ncclpool-auto")


def device_used(torch):
    free, total = torch.cuda.mem_get_info()
    return total - free


def worker(args):
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    from mlp_block import Block  # bench/, the script's folder

    mode = args.worker
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=device)
    torch.manual_seed(args.seed)  # the same parameters on every rank and in every mode
    model = torch.nn.Sequential(*[Block(args.dim) for _ in range(args.layers)]).to(device)
    generator = torch.Generator(device="cuda").manual_seed(args.seed + rank)
    x = torch.randn(args.batch, args.seq, args.dim, device=device, generator=generator, dtype=torch.bfloat16)
    y = torch.randn(args.batch, args.seq, args.dim, device=device, generator=generator, dtype=torch.bfloat16)
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.reset_peak_memory_stats()
    used_before = device_used(torch)

    t0 = time.perf_counter()
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    pool = None
    if mode == "torch-symm":
        for m in model.modules():
            if isinstance(m, FSDPModule):
                m.set_allocate_memory_from_process_group_for_comm(True)
    elif mode.startswith("ncclpool"):
        import ncclpool.torch as nccl_allocator
        from ncclpool.torch import fsdp as ncclpool_fsdp

        pool = nccl_allocator.create_nccl_mem_pool(kind={"ncclpool-local": "local", "ncclpool-symmetric": "symmetric",
                                                         "ncclpool-auto": "auto"}[mode])
        ncclpool_fsdp.enable(model, pool)
    torch.cuda.synchronize()
    dist.barrier()
    setup_s = time.perf_counter() - t0

    step_s, losses, peak_used = [], [], device_used(torch)
    for _ in range(args.steps):
        t0 = time.perf_counter()
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x).float(), y.float())
        loss.backward()
        optimizer.step()
        torch.cuda.synchronize()
        step_s.append(time.perf_counter() - t0)
        peak_used = max(peak_used, device_used(torch))
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
    steady = step_s[2:] if len(step_s) > 3 else step_s
    result = dict(
        mode=mode, library=os.environ.get("NCCLPOOL_LIBRARY", "") if pool is not None else "",
        world=world, layers=args.layers, dim=args.dim, tokens=args.batch * args.seq, steps=args.steps,
        setup_ms=setup_s * 1e3, first_step_ms=step_s[0] * 1e3,
        steady_step_ms=statistics.median(steady) * 1e3, steady_min_ms=min(steady) * 1e3, steady_max_ms=max(steady) * 1e3,
        peak_reserved_gib=torch.cuda.max_memory_reserved() / 2**30,
        device_used_gib=(peak_used - used_before) / 2**30,
        losses=losses,
    )
    if pool is not None:
        import ncclpool.torch as nccl_allocator

        s = nccl_allocator.stats(pool)
        result["ncclpool"] = dict(
            reserved_gib=s["stats"]["reserved_bytes"] / 2**30,
            peak_reserved_gib=s["stats"]["peak_reserved_bytes"] / 2**30,
            segments=s["stats"]["segment_count"],
            windows_per_group=[c["registered_segments"] for c in s["communicators"]],
            registration_ms=sum(c["registration_seconds"] for c in s["communicators"]) * 1e3,
        )
        import ncclpool

        f = ncclpool.features()
        result["ncclpool"]["symmetric_ctas"] = f["symmetric_ctas"] if f["symmetric_ctas_decided"] else None
        result["ncclpool"]["symmetric_ctas_source"] = f["symmetric_ctas_source"]
    if rank == 0:
        print("BENCH " + json.dumps(result), flush=True)
    dist.destroy_process_group()


def gpu_count():
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return 0
    return len([line for line in out.splitlines() if line.startswith("GPU ")])


def parse_spec(spec):
    """'MODE[@LIB][+VAR=VALUE...]' -> (mode, lib, {VAR: VALUE}, ['VAR=VALUE', ...])."""
    head, *env_vars = spec.split("+")
    mode, _, lib = head.partition("@")
    return mode, lib, dict(v.split("=", 1) for v in env_vars if "=" in v), env_vars


def drive(args, passthrough):
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        mode, _, _, env_vars = parse_spec(m)
        if mode not in MODES or any("=" not in v for v in env_vars):
            sys.exit(f"fsdp2_bench: unknown mode '{m}' (one of {', '.join(MODES)}, optionally MODE@LIBRARY and +VAR=VALUE)")
    gpus = gpu_count()
    nproc = args.gpus or (4 if gpus >= 4 else 2)
    if nproc > gpus or nproc < 1:
        sys.exit(f"fsdp2_bench: {nproc} GPU(s) asked for, {gpus} found (--gpus 1 runs one rank: memory and "
                 "code paths, no communication to measure)")
    os.makedirs(args.out, exist_ok=True)
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    python_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python")
    env["PYTHONPATH"] = python_dir + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    rows, failed = [], False
    for rnd in range(1, args.rounds + 1):
        for spec in modes:
            mode, lib, extra, _ = parse_spec(spec)
            run_env = dict(env, **extra)
            if lib:
                run_env["NCCLPOOL_LIBRARY"] = os.path.abspath(lib)
            log = os.path.join(args.out, f"run-{rnd}-{re.sub(r'[^A-Za-z0-9._-]', '_', spec)}.log")
            print(f"fsdp2_bench: round {rnd}/{args.rounds}, {spec}", file=sys.stderr, flush=True)
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
                   os.path.abspath(__file__), "--worker", mode] + passthrough
            with open(log, "w") as f:
                try:
                    rc = subprocess.run(cmd, env=run_env, stdout=f, stderr=subprocess.STDOUT, timeout=args.timeout).returncode
                except subprocess.TimeoutExpired:
                    rc = "timeout"
            line = next((ln[6:] for ln in open(log) if ln.startswith("BENCH ")), None)
            if rc != 0 or line is None:
                print(f"fsdp2_bench: {spec} FAILED (rc={rc}), see {log}", file=sys.stderr)
                print("".join(open(log).readlines()[-5:]), file=sys.stderr)
                failed = True
                continue
            row = dict(json.loads(line), round=rnd, spec=spec)
            rows.append(row)
            with open(os.path.join(args.out, "fsdp2.jsonl"), "a") as f:
                f.write(json.dumps(row) + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if rows and not summarize(rows):
        failed = True
    sys.exit(1 if failed or not rows else 0)


def summarize(rows):
    """Prints the table; False when the losses of a mode differ between rounds."""
    first = rows[0]
    print(f"FSDP2, {first['world']} GPUs, {first['layers']} blocks of dim {first['dim']}, {first['tokens']} tokens per rank, "
          f"{first['steps']} steps; {max(r['round'] for r in rows)} round(s), modes interleaved")
    print(f"{'mode':<44} {'steady ms: median (min-max over rounds)':<40} {'1st step ms':>11} {'setup ms':>8} {'device GiB':>10} {'vs plain':>8} {'torch peak GiB':>14} {'pool GiB':>8} {'windows/group':>13}")
    by_spec, ok = {}, True
    for r in rows:
        by_spec.setdefault(r["spec"], []).append(r)
    plain = by_spec.get("plain")
    plain_used = statistics.median(r["device_used_gib"] for r in plain) if plain else None
    for spec, rs in by_spec.items():
        steps = [r["steady_step_ms"] for r in rs]
        used = statistics.median(r["device_used_gib"] for r in rs)
        versus = f"{(used / plain_used - 1) * 100:+.1f}%" if plain_used else "-"
        pool = [r["ncclpool"] for r in rs if "ncclpool" in r]
        pool_gib = "%.2f" % statistics.median(p["reserved_gib"] for p in pool) if pool else "-"
        windows = str(pool[0]["windows_per_group"]) if pool else "-"
        first_ms = statistics.median(r["first_step_ms"] for r in rs)
        setup_ms = statistics.median(r["setup_ms"] for r in rs)
        print(f"{spec:<44} {statistics.median(steps):8.2f} ({min(steps):.2f}-{max(steps):.2f}){'':<20} {first_ms:11.1f} {setup_ms:8.0f} {used:10.2f} {versus:>8} "
              f"{statistics.median(r['peak_reserved_gib'] for r in rs):14.2f} {pool_gib:>8} {windows:>13}")
        if any(r["losses"] != rs[0]["losses"] for r in rs):
            print(f"  {spec}: losses differ between rounds")
            ok = False
    for spec, rs in by_spec.items():
        ctas = {(r["ncclpool"].get("symmetric_ctas"), r["ncclpool"].get("symmetric_ctas_source")) for r in rs if "ncclpool" in r}
        for count, source in sorted(ctas, key=str):
            if source is not None:
                print(f"  {spec}: symmetric kernels' CTAs {count if count else 'NCCL choice'}: {source}")
    print(f"losses: step 1 {first['losses'][0]:.6f}, last {first['losses'][-1]:.6f}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", choices=MODES, help=argparse.SUPPRESS)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="build/fsdp2")
    ap.add_argument("--json", default="", help="also write every run's BENCH result here")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per run")
    ap.add_argument("--gpus", type=int, default=0, help="ranks per run (default: 4 where there are 4 GPUs, else 2)")
    model_args = (("--layers", 12), ("--dim", 4096), ("--batch", 4), ("--seq", 1024), ("--steps", 25), ("--seed", 1234))
    for flag, default in model_args:
        ap.add_argument(flag, type=int, default=default)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    passthrough = [str(v) for flag, _ in model_args for v in (flag, getattr(args, flag[2:]))]
    drive(args, passthrough)


if __name__ == "__main__":
    main()
