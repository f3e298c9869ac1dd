"""FSDP2 (torch's ``fully_shard``) with and without registered communication buffers: step time and
device memory, each mode in its own processes, modes interleaved and repeated.

    python3 bench/fsdp2_bench.py [--rounds 3] [--modes plain,torch-symm,ncclpool-local,ncclpool-symmetric,ncclpool-auto]
                                 [--config compute-bound|comm-heavy] [--layers N --dim N --batch N --seq N]
                                 [--steps 25] [--nccl-paths] [--out DIR] [--json FILE]

Modes (the first five are the default list):
  plain               FSDP2 as it is (torch's caching allocator, no registration)
  torch-symm          torch's own route: FSDPModule.set_allocate_memory_from_process_group_for_comm(True)
  ncclpool-local      ncclpool.torch.fsdp.enable(model, create_nccl_mem_pool(symmetric=False))
  ncclpool-symmetric  the same with a symmetric pool (windows, NCCL's symmetric kernels)
  ncclpool-auto       the same with an auto pool (create_nccl_mem_pool(kind="auto"): each size class
                      registered as this machine's profile or the built-in routes say)
  Copy-engine (zero-SM) all-gather (issue 35; bench/ce_common.py):
  ncclpool-ce         a symmetric pool and ncclpool.torch.fsdp.enable(model, pool, copy_engine=True): the
                      all-gather on a group with NCCL's ZERO CTA policy; run with
                      NCCLPOOL_SYMMETRIC_KERNELS=on (the NCCL-version guard) unless the spec sets it
  torch-ce            torch's own zero-CTA route, the baseline: a ZERO-policy group
                      (ProcessGroupNCCL.Options().config.cta_policy) and FSDP2's all-gather on it
                      (set_custom_all_gather), its buffers from torch's NCCL symmetric-memory pool
                      (torch.distributed._symmetric_memory) rendezvoused with that group
  torch-ce-builtin    torch's FSDPModule.set_copy_engine_all_gather(True) (or set_symm_mem_for_comm) where
                      this torch has it, with the default group made ZERO (every collective on it)
  A mode this torch or ncclpool cannot run reports why ('not available') and does not fail the run.
A mode may name another ncclpool library to load, ``MODE@/path/libncclpool.so`` (NCCLPOOL_LIBRARY):
two builds side by side in one run; and environment variables for its runs, ``MODE+VAR=VALUE`` (after
any ``@LIB``, repeatable), e.g. ``ncclpool-symmetric+NCCLPOOL_SYM_CTAS=32`` beside
``ncclpool-symmetric``: ncclpool's measured default CTA count against NCCL's own, which the FSDP2
helper asks for (ncclpool.prefer_nccl_symmetric_ctas; ``+NCCLPOOL_SYM_CTAS=nccl`` is the same now).

Configurations (--config; a flag given beside it wins): compute-bound (the default: 12 blocks of dim
4096, 4 x 1,024 tokens per rank) and comm-heavy (8 blocks of dim 8192, 1 x 512 tokens: 1-2 GiB
all-gathers, little compute to hide them). --nccl-paths runs NCCL with NCCL_DEBUG=INFO
NCCL_DEBUG_SUBSYS=TUNING (files under DIR) and counts how each all-gather ran (copy engine, symmetric
kernel, other kernel): evidence, not timing (use a short run apart from the timed one).

Each run launches torchrun on 2 GPUs (4 where there are 4; ``--gpus N`` sets it, 1 for one rank's
memory and code paths) with ``--worker``; rank 0
prints one line 'BENCH {...}': steady step (median, min, max over the steps after the second), device
memory in use from before the model to the end as cudaMemGetInfo sees it (includes NCCL's own buffers
and memory outside torch's allocator), torch's peak reserved, the ncclpool pool's reserved bytes and
windows, the all-gather route, and the loss of every step; every rank then prints whether
destroy_process_group returned ('TEARDOWN ok' or 'hung' after --teardown-timeout s). The driver writes
every BENCH line to DIR/fsdp2.jsonl (and --json), prints a table (medians over rounds, with the spread
of the steady step; first step and setup (fully_shard and the helper) as medians; the last loss and
whether each mode's losses equal plain's bitwise), and exits non-zero when a run fails or hangs in
teardown, when the losses of one mode differ between rounds, or when a copy-engine mode's losses differ
from those of the same mode without copy engines (torch-ce: plain; ncclpool-ce: ncclpool-symmetric;
an all-gather moves bytes, so its transport must not change them); a copy-engine mode that differs from
plain is flagged. Model: ``layers`` MLP blocks of dim ``dim`` (bf16 params, fp32 gradient reduction),
batch x seq tokens per rank. NVLink multicast stays off.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

import ce_common  # bench/, the script's folder

DEFAULT_MODES = ("plain", "torch-symm", "ncclpool-local", "ncclpool-symmetric", "ncclpool-auto")
MODES = DEFAULT_MODES + ("ncclpool-ce", "torch-ce", "torch-ce-builtin")
# Each copy-engine mode beside the mode that differs from it only in the all-gather's transport.
CE_COUNTERPART = {"ncclpool-ce": "ncclpool-symmetric", "torch-ce": "plain", "torch-ce-builtin": "plain"}
CONFIGS = {"compute-bound": dict(layers=12, dim=4096, batch=4, seq=1024),
           "comm-heavy": dict(layers=8, dim=8192, batch=1, seq=512)}
POOL_KINDS = {"ncclpool-local": "local", "ncclpool-symmetric": "symmetric", "ncclpool-auto": "auto", "ncclpool-ce": "symmetric"}


def model_shape(config, overrides):
    """The model of a --config preset with the flags given beside it (None: not given)."""
    if config not in CONFIGS:
        raise ValueError(f"unknown configuration '{config}' (one of {', '.join(CONFIGS)})")
    shape = dict(CONFIGS[config])
    for key, value in overrides.items():
        if value is not None:
            if value < 1:
                raise ValueError(f"--{key} must be at least 1, got {value}")
            shape[key] = value
    return shape


def device_used(torch):
    free, total = torch.cuda.mem_get_info()
    return total - free


def setup_mode(mode, model, torch, dist, device, world):
    """Applies a mode's all-gather/reduce-scatter route to the sharded model. Returns (pool, facts,
    unavailable): the ncclpool pool or None, what the BENCH line says of the route, and why the mode
    cannot run here ('' when it can)."""
    from torch.distributed.fsdp import FSDPModule

    modules = [m for m in model.modules() if isinstance(m, FSDPModule)]
    setters = ce_common.torch_fsdp_ce_setters(FSDPModule)
    if mode == "torch-symm":
        for m in modules:
            m.set_allocate_memory_from_process_group_for_comm(True)
        return None, {"all_gather_route": "torch: ProcessGroup allocator"}, ""
    if mode == "torch-ce":
        zero_group, why = ce_common.zero_cta_group(dist, range(world))
        if zero_group is None:
            return None, {}, why
        try:
            comm, route = ce_common.torch_ce_all_gather(torch, dist, zero_group, device)
        except RuntimeError as e:
            return None, {}, str(e)
        for m in modules:
            m.set_custom_all_gather(comm)
        return None, {"all_gather_route": "torch: " + route, "torch_fsdp_ce_setters": setters}, ""
    if mode == "torch-ce-builtin":  # the default group was made with the ZERO policy (worker)
        if not setters:
            return None, {}, "this torch's FSDPModule has neither set_copy_engine_all_gather nor set_symm_mem_for_comm"
        for m in modules:
            if setters[0] == "set_copy_engine_all_gather":
                m.set_copy_engine_all_gather(True)
            else:
                m.set_symm_mem_for_comm()
        return None, {"all_gather_route": f"torch: FSDPModule.{setters[0]}, default group with the ZERO CTA policy",
                      "torch_fsdp_ce_setters": setters}, ""
    if mode.startswith("ncclpool"):
        import ncclpool.torch as nccl_allocator
        from ncclpool.torch import fsdp as ncclpool_fsdp

        pool = nccl_allocator.create_nccl_mem_pool(kind=POOL_KINDS[mode])
        if mode != "ncclpool-ce":
            ncclpool_fsdp.enable(model, pool)
            return pool, {"all_gather_route": f"ncclpool: {POOL_KINDS[mode]} pool"}, ""
        try:  # copy_engine=True raises the same error on every rank when one cannot honour it
            ncclpool_fsdp.enable(model, pool, copy_engine=True)
        except Exception as e:  # noqa: BLE001 - the reason is the result (an older ncclpool: TypeError)
            return pool, {}, f"ncclpool.torch.fsdp.enable(copy_engine=True): {type(e).__name__}: {e}"
        return pool, {"all_gather_route": "ncclpool: symmetric pool, all-gather on its zero-CTA group"}, ""
    return None, {"all_gather_route": "FSDP default"}, ""


def pool_facts(pool):
    """What the BENCH line says of an ncclpool pool: bytes, windows, the symmetric-kernel and
    copy-engine decisions."""
    import ncclpool
    import ncclpool.torch as nccl_allocator

    s = nccl_allocator.stats(pool)
    f = ncclpool.features()
    return dict(
        reserved_gib=s["stats"]["reserved_bytes"] / 2**30,
        peak_reserved_gib=s["stats"]["peak_reserved_bytes"] / 2**30,
        segments=s["stats"]["segment_count"],
        windows_per_group=[c["registered_segments"] for c in s["communicators"]],
        registration_ms=sum(c["registration_seconds"] for c in s["communicators"]) * 1e3,
        symmetric_ctas=f["symmetric_ctas"] if f["symmetric_ctas_decided"] else None,
        symmetric_ctas_source=f["symmetric_ctas_source"],
        symmetric_kernels_enabled=f.get("symmetric_kernels_enabled"),
        symmetric_kernels_why=f.get("symmetric_kernels_why"),
        copy_engine=s.get("copy_engine", "stats() has no copy_engine entry"),
    )


def worker(args):
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from mlp_block import Block  # bench/, the script's folder

    mode = args.worker
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    unavailable = ""
    if mode == "torch-ce-builtin":  # torch's recipe: the whole default group with the ZERO policy
        options, unavailable = ce_common.zero_cta_options(dist)
        dist.init_process_group("nccl", device_id=device, **({"pg_options": options} if options is not None else {}))
    else:
        dist.init_process_group("nccl", device_id=device)
    torch.manual_seed(args.seed)  # the same parameters on every rank and in every mode
    # Built on the GPU: initialising the comm-heavy model (4.3 G parameters) on the CPU made a run ~60 s
    # instead of ~20 s on 2x H200 (the CUDA generator is seeded by manual_seed too).
    with device:
        model = torch.nn.Sequential(*[Block(args.dim) for _ in range(args.layers)])
    generator = torch.Generator(device="cuda").manual_seed(args.seed + 1 + rank)  # not the model's seed
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
    pool, facts = None, {}
    if not unavailable:
        pool, facts, unavailable = setup_mode(mode, model, torch, dist, device, world)
    if unavailable:
        if rank == 0:
            print("BENCH " + json.dumps(dict(mode=mode, world=world, config=args.config, unavailable=unavailable)), flush=True)
        ce_common.destroy_with_watchdog(dist, args.teardown_timeout)
        return
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
        world=world, config=args.config, layers=args.layers, dim=args.dim, tokens=args.batch * args.seq, steps=args.steps,
        setup_ms=setup_s * 1e3, first_step_ms=step_s[0] * 1e3,
        steady_step_ms=statistics.median(steady) * 1e3, steady_min_ms=min(steady) * 1e3, steady_max_ms=max(steady) * 1e3,
        peak_reserved_gib=torch.cuda.max_memory_reserved() / 2**30,
        device_used_gib=(peak_used - used_before) / 2**30,
        losses=losses, **facts,
    )
    if pool is not None:
        result["ncclpool"] = pool_facts(pool)
    if rank == 0:
        print("BENCH " + json.dumps(result, default=str), flush=True)
    ce_common.destroy_with_watchdog(dist, args.teardown_timeout)


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


def run_environment(base, mode, extra):
    """A run's environment: the driver's, the spec's variables, and for ncclpool-ce the guard's
    NCCLPOOL_SYMMETRIC_KERNELS=on (copy engines need symmetric windows) unless the spec sets it."""
    env = dict(base, **extra)
    if mode == "ncclpool-ce" and "NCCLPOOL_SYMMETRIC_KERNELS" not in extra:
        env["NCCLPOOL_SYMMETRIC_KERNELS"] = "on"
    return env


def read_run(log, rc, spec, rnd):
    """(row or None, failed) of one run from its log: a row when rank 0 printed its BENCH line (kept
    when teardown hung, which fails the run), None when the run failed before that."""
    lines = open(log, errors="replace").read().splitlines()
    line = next((ln[6:] for ln in lines if ln.startswith("BENCH ")), None)
    if line is None:
        return None, True
    row = dict(json.loads(line), round=rnd, spec=spec, teardown=ce_common.teardown_state(lines))
    return row, rc != 0 or row["teardown"] == "hung"


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
    bench_dir = os.path.dirname(os.path.abspath(__file__))
    python_dir = os.path.join(bench_dir, "..", "python")
    env["PYTHONPATH"] = python_dir + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    rows, failed = [], False
    for rnd in range(1, args.rounds + 1):
        for spec in modes:
            mode, lib, extra, _ = parse_spec(spec)
            run_env = run_environment(env, mode, extra)
            if lib:
                run_env["NCCLPOOL_LIBRARY"] = os.path.abspath(lib)
            name = f"run-{rnd}-{re.sub(r'[^A-Za-z0-9._-]', '_', spec)}"
            log = os.path.join(args.out, name + ".log")
            if args.nccl_paths:
                run_env.update(ce_common.NCCL_LOG_ENV, NCCL_DEBUG_FILE=os.path.join(os.path.abspath(args.out), name + ".nccl.%h.%p.log"))
            print(f"fsdp2_bench: round {rnd}/{args.rounds}, {spec}", file=sys.stderr, flush=True)
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
                   os.path.abspath(__file__), "--worker", mode] + passthrough
            with open(log, "w") as f:
                try:
                    rc = subprocess.run(cmd, env=run_env, stdout=f, stderr=subprocess.STDOUT, timeout=args.timeout).returncode
                except subprocess.TimeoutExpired:
                    rc = "timeout"
            row, run_failed = read_run(log, rc, spec, rnd)
            if run_failed:
                print(f"fsdp2_bench: {spec} FAILED (rc={rc}{', teardown hung' if row else ''}), see {log}", file=sys.stderr)
                print("".join(open(log, errors="replace").readlines()[-5:]), file=sys.stderr)
                failed = True
            if row is None:
                continue
            if args.nccl_paths:
                row["nccl_paths"] = ce_common.count_nccl_path_files(os.path.join(args.out, name + ".nccl.*.log"))
            rows.append(row)
            with open(os.path.join(args.out, "fsdp2.jsonl"), "a") as f:
                f.write(json.dumps(row) + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if rows and not summarize(rows):
        failed = True
    sys.exit(1 if failed or not rows else 0)


def max_relative_difference(a, b):
    return max((abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b)), default=0.0) if len(a) == len(b) else float("inf")


def compare_losses(by_spec):
    """{spec: 'plain' | 'equal' | 'differs (max rel X)' | '-'}: each mode's first run against plain's
    first run, bitwise; and the problems: copy-engine modes whose losses differ from their counterpart's
    (failures) or from plain's (flags). by_spec: {spec: [rows]}, unavailable modes left out."""
    plain = by_spec.get("plain")
    first_mode = {parse_spec(spec)[0]: rs[0]["losses"] for spec, rs in reversed(list(by_spec.items()))}
    states, failures, flags = {}, [], []
    for spec, rs in by_spec.items():
        mode, losses = parse_spec(spec)[0], rs[0]["losses"]
        if spec == "plain":
            states[spec] = "plain"
        elif plain is None:
            states[spec] = "-"
        else:
            equal = losses == plain[0]["losses"]
            states[spec] = "equal" if equal else f"differs (max rel {max_relative_difference(losses, plain[0]['losses']):.1e})"
            if not equal and mode in CE_COUNTERPART:
                flags.append(f"{spec}: losses differ bitwise from plain's ({states[spec]})")
        counterpart = CE_COUNTERPART.get(mode)
        if counterpart in first_mode and losses != first_mode[counterpart]:
            failures.append(f"{spec}: losses differ from {counterpart}'s (max rel "
                            f"{max_relative_difference(losses, first_mode[counterpart]):.1e}): only the all-gather's transport changed")
    return states, failures, flags


def summarize(rows):
    """Prints the table; False when the losses of a mode differ between rounds or a copy-engine mode's
    from its counterpart's."""
    available = [r for r in rows if "unavailable" not in r]
    if not available:
        for r in rows:
            print(f"  {r['spec']}: not available: {r['unavailable']}")
        return True
    first = available[0]
    print(f"FSDP2, {first['world']} GPUs, {first['layers']} blocks of dim {first['dim']}, {first['tokens']} tokens per rank "
          f"({first.get('config', '-')}), {first['steps']} steps; {max(r['round'] for r in rows)} round(s), modes interleaved")
    print(f"{'mode':<44} {'steady ms: median (min-max over rounds)':<40} {'1st step ms':>11} {'setup ms':>8} {'device GiB':>10} {'vs plain':>8} "
          f"{'torch peak GiB':>14} {'pool GiB':>8} {'windows/group':>13} {'last loss':>9}  losses vs plain")
    by_spec, ok = {}, True
    for r in available:
        by_spec.setdefault(r["spec"], []).append(r)
    plain = by_spec.get("plain")
    plain_used = statistics.median(r["device_used_gib"] for r in plain) if plain else None
    loss_states, failures, flags = compare_losses(by_spec)
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
              f"{statistics.median(r['peak_reserved_gib'] for r in rs):14.2f} {pool_gib:>8} {windows:>13} {rs[0]['losses'][-1]:9.6f}  {loss_states[spec]}")
        if any(r["losses"] != rs[0]["losses"] for r in rs):
            print(f"  {spec}: losses differ between rounds")
            ok = False
    for spec, rs in by_spec.items():
        ctas = {(r["ncclpool"].get("symmetric_ctas"), r["ncclpool"].get("symmetric_ctas_source")) for r in rs if "ncclpool" in r}
        for count, source in sorted(ctas, key=str):
            if source is not None:
                print(f"  {spec}: symmetric kernels' CTAs {count if count else 'NCCL choice'}: {source}")
        for route in sorted({r["all_gather_route"] for r in rs if r.get("all_gather_route")}):
            print(f"  {spec}: all-gather: {route}")
        for ce in sorted({json.dumps(r["ncclpool"]["copy_engine"], default=str) for r in rs if "ncclpool" in r and parse_spec(spec)[0] == "ncclpool-ce"}):
            print(f"  {spec}: ncclpool copy engine: {ce}")
        for paths in sorted({ce_common.format_paths(r["nccl_paths"]) for r in rs if "nccl_paths" in r}):
            print(f"  {spec}: NCCL all-gather paths: {paths}")
        for r in rs:
            if r["teardown"] == "hung":
                print(f"  {spec}: round {r['round']}: destroy_process_group hung")
    for r in rows:
        if "unavailable" in r and r["round"] == 1:
            print(f"  {r['spec']}: not available: {r['unavailable']}")
    for line in flags:
        print(f"  FLAG {line}")
    for line in failures:
        print(f"  FAILED {line}")
    print(f"losses: step 1 {first['losses'][0]:.6f}, last {first['losses'][-1]:.6f}; copy-engine modes bitwise equal to plain: "
          + ("-" if not any(parse_spec(s)[0] in CE_COUNTERPART for s in by_spec) else "no" if flags else "yes"))
    return ok and not failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", choices=MODES, help=argparse.SUPPRESS)
    ap.add_argument("--modes", default=",".join(DEFAULT_MODES))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="build/fsdp2")
    ap.add_argument("--json", default="", help="also write every run's BENCH result here")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per run")
    ap.add_argument("--teardown-timeout", type=float, default=60, help="seconds destroy_process_group may take")
    ap.add_argument("--gpus", type=int, default=0, help="ranks per run (default: 4 where there are 4 GPUs, else 2)")
    ap.add_argument("--nccl-paths", action="store_true", help="log NCCL's TUNING lines and count the all-gather paths")
    ap.add_argument("--config", default="compute-bound", choices=sorted(CONFIGS), help="model preset; flags beside it win")
    for flag in ("layers", "dim", "batch", "seq"):
        ap.add_argument(f"--{flag}", type=int, default=None, help=f"(default: the configuration's {flag})")
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    try:
        shape = model_shape(args.config, {k: getattr(args, k) for k in ("layers", "dim", "batch", "seq")})
    except ValueError as e:
        ap.error(str(e))
    if args.steps < 1:
        ap.error("--steps must be at least 1")
    for key, value in shape.items():
        setattr(args, key, value)
    if args.worker:
        worker(args)
        return
    passthrough = [str(v) for key in ("layers", "dim", "batch", "seq", "steps", "seed") for v in (f"--{key}", getattr(args, key))]
    passthrough += ["--config", args.config, "--teardown-timeout", str(args.teardown_timeout)]
    drive(args, passthrough)


if __name__ == "__main__":
    main()
