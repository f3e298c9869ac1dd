"""GPU check of the copy-engine (zero-SM) all-gather (docs/python.md, "Copy-engine all-gather (zero
SMs)"), run on every rank by torchrun on N >= 1 GPUs:

    NCCLPOOL_SYMMETRIC_KERNELS=on torchrun --nproc-per-node N tests/gpu/torch/check_copy_engine.py
    NCCLPOOL_SYMMETRIC_KERNELS=on torchrun --nproc-per-node N tests/gpu/torch/check_copy_engine.py --off-rank 1

Default: this torch has ProcessGroupNCCL.Options().config.cta_policy (printed); auto (no profile)
stays off on every rank with one reason, and a later copy_engine=True on that group raises the same
InvalidState everywhere (the first call decides); copy_engine_group(copy_engine=True) makes a group
whose communicator has the ZERO CTA policy; all-gathers on pool windows of that group (out-of-place and
in-place, on a side stream, with async_op=True, and on the default stream through the layer's
helper) equal the same all-gather on plain memory on WORLD; one captured in a CUDA graph replays
equal to it three times (a watchdog ends the job with a FAILED line after 90 s if it hangs); FSDP2 (a few MLP blocks, fully_shard)
with fsdp.enable(..., copy_engine=True) trains 3 steps with losses bitwise equal to plain FSDP2;
destroy_process_group finishes within a timeout on every rank.

--off-rank R: rank R (the last rank if there are fewer) sets NCCLPOOL_COPY_ENGINE=off before any
vote: copy_engine=True raises the same error on every rank, naming rank R; auto stays off on every
rank (answered from the same vote); WORLD still pairs afterwards (no hang); teardown as above.

With one GPU NCCL copies locally for its one rank (no peer): the copy engines are not reached, and
the checks run the plumbing (vote, group, windows, FSDP2) only. The NCCL log proves the copy engines
(NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING: "Init CE" once per rank, and "AllGather [Copy
Engine]" per all-gather on rank 0 where that NCCL logs it).
Prints 'CHECK name: ok|FAILED|skipped' lines and one 'RESULT ...' line on rank 0; exits non-zero on
any failure.
"""
import argparse
import os
import sys
import threading

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "python"))
import ncclpool  # noqa: E402
import ncclpool.torch as nccl_allocator  # noqa: E402
from ncclpool.torch import copy_engine  # noqa: E402
from check_support import Checks  # noqa: E402  (this folder)

MiB = 1 << 20
ZERO = 2  # NCCL_CTA_POLICY_ZERO
rank = world_size = device = 0
checks = Checks()  # every check is a gate: after a failure the later ones are skipped
log, check, same_everywhere = checks.log, checks.check, checks.same_everywhere
failures, notes = checks.failures, checks.notes


def cta_policy_support():
    """What this torch has for CTA policies, as text, and whether cta_policy is there."""
    nccl = getattr(dist, "ProcessGroupNCCL", None)
    config = getattr(nccl.Options(), "config", None) if nccl is not None else None
    has = config is not None and hasattr(config, "cta_policy")
    constant = getattr(nccl, "NCCL_CTA_POLICY_ZERO", None) if nccl is not None else None
    text = (f"torch {torch.__version__} (built with NCCL {torch.cuda.nccl.version()}): ProcessGroupNCCL "
            f"{'yes' if nccl is not None else 'no'}, Options().config {'yes' if config is not None else 'no'}, "
            f"config.cta_policy {'yes (default ' + str(config.cta_policy) + ')' if has else 'no'}, "
            f"NCCL_CTA_POLICY_ZERO {constant if constant is not None else 'absent (ncclpool uses 2)'}, "
            f"dist.split_group {'yes' if hasattr(dist, 'split_group') else 'no'}")
    return has, text


def cta_policy_of(group):
    return group._get_backend(torch.device("cuda", device)).options.config.cta_policy


def teardown(timeout_s=120.0):
    """destroy_process_group() within timeout_s on every rank, as a CHECK line (check_support)."""
    checks.teardown("ncclpool_ce_teardown", timeout_s)


def main_checks():
    world = dist.group.WORLD
    has, text = cta_policy_support()
    log(f"      {text}")

    @check("this torch has ProcessGroupNCCL.Options().config.cta_policy")
    def _():
        assert has, text

    # A group's first call decides (later calls answer from it without a collective), so auto is
    # asked of a group of its own.
    probe = dist.new_group(list(range(world_size)))

    @check("auto without a profile stays off on every rank, with one reason")
    def _():
        zero = nccl_allocator.copy_engine_group(probe)
        decision = copy_engine._decision_of(probe)
        whys = same_everywhere(decision.why)
        log(f"      {whys[0]}")
        assert zero is None and not decision.used, decision
        assert len(set(whys)) == 1 and whys[0].startswith("off: "), whys

    @check("a later copy_engine=True on that group raises InvalidState on every rank, without a collective")
    def _():
        message = ""
        try:
            nccl_allocator.copy_engine_group(probe, copy_engine=True)
        except ncclpool.InvalidState as e:
            message = str(e)
        messages = same_everywhere(message)
        assert all(messages) and len(set(messages)) == 1 and "first call" in messages[0], messages

    state = {}

    @check("copy_engine_group(copy_engine=True) makes a group with the ZERO CTA policy")
    def _():
        zero = nccl_allocator.copy_engine_group(world, copy_engine=True)
        assert zero is not None and zero.size() == world_size, zero
        assert nccl_allocator.copy_engine_group(world, copy_engine=True) is zero  # kept: no second vote
        assert nccl_allocator.copy_engine_group(world) is zero  # auto too: the group is made
        policy = cta_policy_of(zero)
        log(f"      {copy_engine._decision_of(world).why}; its communicator's cta_policy {policy}")
        assert policy == ZERO, policy
        state["zero"] = zero

    @check("all-gathers on pool windows of the copy-engine group equal plain ones on WORLD")
    def _():
        zero = state["zero"]
        n = 4 * MiB  # 16 MiB of fp32 per rank
        pool = nccl_allocator.create_nccl_mem_pool(symmetric=True, name="copy-engine")
        g = torch.Generator(device="cuda").manual_seed(1000 + rank)
        plain_in = torch.randn(n, device="cuda", generator=g)
        golden = torch.empty(n * world_size, device="cuda")
        dist.all_gather_into_tensor(golden, plain_in, group=world)
        with nccl_allocator.nccl_mem(pool, group=zero):
            inp = torch.empty(n, device="cuda")
            outs = {name: torch.empty(n * world_size, device="cuda")
                    for name in ("side stream", "async_op", "in place, side stream", "in place, async_op", "default stream")}
        attachment = nccl_allocator.binding.attachment_of(nccl_allocator.binding.binding_of(pool), zero)
        assert attachment is not None and attachment.kind == "symmetric", attachment
        for t in (inp, *outs.values()):
            assert attachment.comm.handle_of(t.data_ptr()), "a pool tensor is not a window of the copy-engine group"
        state.update(pool=pool, inp=inp, golden=golden)
        inp.copy_(plain_in)
        mine = slice(n * rank, n * (rank + 1))
        for name in ("in place, side stream", "in place, async_op"):
            outs[name][mine].copy_(plain_in)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            dist.all_gather_into_tensor(outs["side stream"], inp, group=zero)
            dist.all_gather_into_tensor(outs["in place, side stream"], outs["in place, side stream"][mine], group=zero)
        torch.cuda.current_stream().wait_stream(side)
        dist.all_gather_into_tensor(outs["async_op"], inp, group=zero, async_op=True).wait()
        place = outs["in place, async_op"]
        dist.all_gather_into_tensor(place, place[mine], group=zero, async_op=True).wait()
        assert torch.cuda.current_stream() == torch.cuda.default_stream()
        copy_engine.all_gather_into_tensor(outs["default stream"], inp, zero)  # the layer's guard: off the default stream
        torch.cuda.synchronize()
        wrong = [name for name, out in outs.items() if not torch.equal(out, golden)]
        log(f"      {len(outs)} all-gathers of {n * 4 // MiB} MiB per rank: {'all equal' if not wrong else 'WRONG: ' + ', '.join(wrong)}")
        assert not wrong, wrong

    graph_check = ("an all-gather on windows of the copy-engine group captured in a CUDA graph replays "
                   "equal to plain, in time")

    @check(graph_check)
    def _():
        # A decode server captures its collectives: NCCL's copy-engine all-gather has a capture path of
        # its own (flags reset inside the graph). If it hangs, nothing after it can run: the watchdog
        # ends the job with a FAILED line instead of leaving it to the caller's timeout.
        zero, inp, golden = state["zero"], state["inp"], state["golden"]
        with nccl_allocator.nccl_mem(state["pool"], group=zero):
            out = torch.empty_like(golden)
        watchdog = threading.Timer(90.0, hung, args=(graph_check,))
        watchdog.daemon = True
        watchdog.start()
        try:  # an error is this check's failure, not a hang: the watchdog goes either way
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                dist.all_gather_into_tensor(out, inp, group=zero)
            replays_right = 0
            for _ in range(3):
                out.zero_()
                graph.replay()
                torch.cuda.synchronize()
                replays_right += int(torch.equal(out, golden))
        finally:
            watchdog.cancel()
        log(f"      {replays_right}/3 replays equal to plain")
        assert replays_right == 3, replays_right
        del graph

    @check("FSDP2 with fsdp.enable(copy_engine=True) trains 3 steps with losses bitwise equal to plain FSDP2")
    def _():
        import toy_fsdp
        from ncclpool.torch import fsdp as ncclpool_fsdp

        def train(copy_engines):
            pool = nccl_allocator.create_nccl_mem_pool(symmetric=True, name="fsdp-copy-engine") if copy_engines else None

            def configure(model):
                # Reduce-scatter stays plain: only the all-gather (a copy) changes route, so the losses
                # must be the same bits.
                assert ncclpool_fsdp.enable(model, pool, reduce_scatter=False, copy_engine=True) == 4

            return toy_fsdp.train(rank, 3, configure if copy_engines else None), pool

        plain, _ = train(False)
        engines, pool = train(True)
        ce = nccl_allocator.stats(pool)["copy_engine"]
        log(f"      losses plain        {[f'{v:.9g}' for v in plain]}")
        log(f"      losses copy engines {[f'{v:.9g}' for v in engines]}")
        log(f"      stats: {ce['why']}")
        log(nccl_allocator.memory_summary(pool))
        assert ce["used"], ce
        assert engines == plain, (plain, engines)  # bitwise: the same floats

    if world_size == 1:
        notes.append("one GPU: copy engines not reached (NCCL copies locally for one rank), plumbing checked")
    else:
        notes.append("copy engines: see the NCCL log's 'Init CE' lines")


def hung(name):
    """The watchdog's end: the GPU work is stuck, so no later check (nor the teardown) could run."""
    print(f"rank {rank}: {name}: still running after the watchdog's time", flush=True)
    log(f"CHECK {name}: FAILED (hung: the watchdog ended the job)")
    if rank == 0:
        print(f"RESULT FAILED: {name} hung ({world_size} GPU(s))", flush=True)
    sys.stdout.flush()
    os._exit(3)


def off_rank_checks(off):
    world = dist.group.WORLD
    log(f"      rank {off} set NCCLPOOL_COPY_ENGINE=off before any vote")

    @check(f"copy_engine=True raises the same error on every rank, naming rank {off}")
    def _():
        message = ""
        try:
            nccl_allocator.copy_engine_group(world, copy_engine=True)
        except ncclpool.Unsupported as e:
            message = str(e)
        messages = same_everywhere(message)
        log(f"      {messages[0]}")
        assert all(messages) and len(set(messages)) == 1, messages
        assert f"rank {off} votes no" in messages[0] and "NCCLPOOL_COPY_ENGINE" in messages[0], messages[0]

    @check("auto stays off on every rank, with the same reason (from the same vote: no collective)")
    def _():
        zero = nccl_allocator.copy_engine_group(world)
        whys = same_everywhere(copy_engine._decision_of(world).why)
        log(f"      {whys[0]}")
        # Without a profile every rank's auto vote is no: the reason names the first, rank 0.
        assert zero is None and len(set(whys)) == 1 and whys[0].startswith("off: rank 0 votes no"), whys

    @check("WORLD still pairs afterwards (no stray collective, no hang)")
    def _():
        x = torch.full((1024,), float(rank + 1), device="cuda")
        dist.all_reduce(x)
        torch.cuda.synchronize()
        assert x[0].item() == world_size * (world_size + 1) / 2, x[0].item()

    notes.append(f"rank {off} forced off")


def main():
    global rank, world_size, device
    ap = argparse.ArgumentParser()
    ap.add_argument("--off-rank", type=int, default=None, help="this rank sets NCCLPOOL_COPY_ENGINE=off before any vote")
    args = ap.parse_args()
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = int(os.environ.get("LOCAL_RANK", rank))
    checks.rank, checks.world_size, checks.device = rank, world_size, device
    os.environ.setdefault("NCCLPOOL_SYMMETRIC_KERNELS", "on")  # the copy-engine route needs symmetric kernels on
    for var in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
        os.environ[var] = "0" if var == "NCCL_NVLS_ENABLE" else "1"
    os.environ["NCCLPOOL_PROFILE"] = "/nonexistent/ncclpool-check-copy-engine/profile.json"  # auto: no profile
    os.environ.pop("NCCLPOOL_COPY_ENGINE", None)
    off = None if args.off_rank is None else min(args.off_rank, world_size - 1)
    if off is not None and rank == off:
        os.environ["NCCLPOOL_COPY_ENGINE"] = "off"
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=torch.device("cuda", device))
    nccl_allocator.init()
    f = ncclpool.features()
    log(f"ncclpool {ncclpool.version()} | NCCL {f['nccl_version']} from {f['nccl_library']} | symmetric kernels: "
        f"{f['symmetric_kernels_why']} | {world_size} rank(s)")
    if world_size == 1:
        log("      one GPU: NCCL copies locally for one rank, so the copy engines are not reached; "
            "the checks run the plumbing (vote, group, windows, FSDP2) only")
    if off is None:
        main_checks()
    else:
        off_rank_checks(off)
    dist.barrier()
    teardown()
    if rank == 0:
        verdict = "ok" if not failures else "FAILED: " + ", ".join(failures)
        print(f"RESULT {verdict} ({world_size} GPU(s); {'; '.join(notes)})", flush=True)
    sys.stdout.flush()
    os._exit(1 if failures else 0)  # a teardown still hanging in its thread must not keep the process


if __name__ == "__main__":
    main()
