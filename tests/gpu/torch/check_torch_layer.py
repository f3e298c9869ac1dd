"""GPU check of ncclpool.torch, run on every rank by torchrun (2 or 4 GPUs):

    torchrun --nproc-per-node 4 tests/gpu/torch/check_torch_layer.py

A Megatron-style FSDP+EP layout (world, expert-dp and ep groups) shares one pool. Checks: results of
all-gather / reduce-scatter / all-reduce on pool tensors; every segment registered with every group
once; a second use registers nothing; a CUDA graph captured with pool tensors replays correctly,
and with graph(reserve=) its buffers have windows (without, a PerformanceWarning);
OOM surfaces as torch.OutOfMemoryError carrying ncclpool's message; an FSDP2 model with the helper
trains with the default allocator's losses; divergent ranks raise on every rank; a rank with
nothing pending joins the agreement; check mode stops a collective on misplaced buffers; destroying the
process groups forgets their registrations. Prints one 'CHECK name: ok|FAILED' line per check (rank 0)
and exits non-zero on any failure.
"""
import ctypes
import os
import sys
import time
import warnings

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "python"))
import ncclpool  # noqa: E402
import ncclpool.torch as nccl_allocator  # noqa: E402
from check_support import Checks  # noqa: E402  (this folder)

MiB = 1 << 20
rank = world_size = device = 0
# After a failure the later checks are skipped (their collectives could pair with a failed check's and
# wait out the agreement timeout each: minutes of GPU time); NCCLPOOL_CHECK_KEEP_GOING=1 runs them.
checks = Checks(keep_going_variable="NCCLPOOL_CHECK_KEEP_GOING")
log, check, failures = checks.log, checks.check, checks.failures


def groups_fsdp_ep():
    """ep groups of 2 consecutive ranks; expert-dp groups of ranks with the same position in them."""
    ep_ranks = [list(range(i, i + 2)) for i in range(0, world_size, 2)]
    edp_ranks = [list(range(j, world_size, 2)) for j in range(2)]
    ep = edp = None
    for ranks in ep_ranks:
        g = dist.new_group(ranks)
        if rank in ranks:
            ep = g
    for ranks in edp_ranks:
        g = dist.new_group(ranks)
        if rank in ranks:
            edp = g
    return ep, edp


def main():
    global rank, world_size, device
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = int(os.environ.get("LOCAL_RANK", rank))
    checks.rank, checks.world_size, checks.device = rank, world_size, device
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=torch.device("cuda", device))
    world = dist.group.WORLD
    ep, edp = groups_fsdp_ep()
    nccl_allocator.init()
    f = ncclpool.features()
    log(f"ncclpool {ncclpool.version()} | NCCL {f['nccl_version']} from {f['nccl_library']} "
        f"(reused torch's copy: {f['nccl_reused_loaded']}) | windows {f['nccl_windows']} | {world_size} ranks")

    @check("one NCCL in the process (torch's)")
    def _():
        assert f["nccl_reused_loaded"], f
        assert f["nccl_windows"], f

    pool = nccl_allocator.create_nccl_mem_pool(symmetric=True)
    npool = nccl_allocator.ncclpool_pool(pool)
    groups = [world, edp, ep]
    n = 8 * MiB // 4  # 8 MiB of float32 per rank
    state = {}

    @check("first use registers each segment once per group")
    def _():
        with nccl_allocator.MultiGroupMemPoolAllocator(pool, groups):
            state["ag_in"] = torch.full((n,), float(rank + 1), device="cuda")
            state["ag_out"] = torch.empty(n * world_size, device="cuda")
            state["rs_in"] = torch.full((n * edp.size(),), float(rank + 1), device="cuda")
            state["rs_out"] = torch.empty(n, device="cuda")
            state["ar"] = torch.full((n,), float(rank + 1), device="cuda")
            state["small"] = torch.ones(1000, device="cuda")  # a 2 MiB torch segment (torch's small pool)
        assert npool.pending == 0
        segments = npool.stats()["segment_count"]
        for comm in npool.communicators:
            s = comm.stats()
            assert s["kind"] == "symmetric" and s["registered_segments"] == segments, s
            for t in state.values():
                assert comm.handle_of(t.data_ptr()), f"{comm} has no window for a pool tensor"
        log(f"      {segments} segment(s) (growth chunk {npool.growth_chunk // MiB} MiB) for {len(state)} tensors "
            f"({npool.stats()['allocation_count']} torch segments); {len(npool.communicators)} groups")
        npool.check()

    @check("the symmetric kernels' CTA count is decided at the first symmetric attach, once")
    def _():
        assert not f["symmetric_ctas_decided"], f  # features() was read before any attach
        now = ncclpool.features()
        assert now["symmetric_ctas_decided"], now
        major, minor = torch.cuda.get_device_capability(device)
        user = os.environ.get("NCCL_SYM_CTAS") or os.environ.get("NCCLPOOL_SYM_CTAS")
        from_profile = "profile" in now["symmetric_ctas_source"] and "not used" not in now["symmetric_ctas_source"]
        if not user and not from_profile:  # ncclpool's measured default where it has one, NCCL's choice elsewhere
            assert now["symmetric_ctas"] == (32 if major == 9 else 0), now
            libc = ctypes.CDLL(None)
            libc.getenv.restype = ctypes.c_char_p
            in_env = libc.getenv(b"NCCL_SYM_CTAS")
            assert (in_env == b"32") if major == 9 else in_env is None, in_env
        log(f"      {now['symmetric_ctas'] or 'NCCL choice'} ({now['symmetric_ctas_source']}); compute {major}.{minor}")

    @check("collectives on pool tensors are right (world all-gather, edp reduce-scatter, ep all-reduce)")
    def _():
        dist.all_gather_into_tensor(state["ag_out"], state["ag_in"], group=world)
        dist.reduce_scatter_tensor(state["rs_out"], state["rs_in"], group=edp)
        dist.all_reduce(state["ar"], group=ep)
        torch.cuda.synchronize()
        expect_ag = torch.arange(1, world_size + 1, device="cuda", dtype=torch.float32).repeat_interleave(n)
        assert torch.equal(state["ag_out"], expect_ag)
        edp_sum = sum(r + 1 for r in range(world_size) if r % 2 == rank % 2)
        assert torch.all(state["rs_out"] == edp_sum)
        ep_sum = sum(r + 1 for r in range(world_size) if r // 2 == rank // 2)
        assert torch.all(state["ar"] == ep_sum)

    @check("a later use registers nothing and costs microseconds")
    def _():
        before = [c.stats()["registrations"] for c in npool.communicators]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        uses = 200
        for _ in range(uses):
            with nccl_allocator.MultiGroupMemPoolAllocator(pool, groups):
                x = torch.empty(1000, device="cuda")
                del x
        per_use = (time.perf_counter() - t0) / uses
        after = [c.stats()["registrations"] for c in npool.communicators]
        assert before == after, (before, after)
        log(f"      {per_use * 1e6:.1f} us per use with {len(groups)} groups")

    @check("CUDA graph captured with pool tensors replays correctly")
    def _():
        with nccl_allocator.nccl_mem(pool, group=world):
            static_in = torch.zeros(n, device="cuda")
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):  # warm-up outside capture, as torch requires
                    out = static_in * 2
                    dist.all_reduce(out, group=world)
            torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # torch refuses to capture into a pool that use_mem_pool routes to: ncclpool.torch.graph
        # opens the ncclpool scope (attribution) around torch.cuda.graph(pool=pool.id).
        with nccl_allocator.graph(graph, pool, groups=[world]):
            static_out = static_in * 2 + 1  # allocated during capture, from the pool
            dist.all_reduce(static_out, group=world)
        assert any(c.handle_of(static_out.data_ptr()) for c in npool.communicators), "capture allocation not in the pool"
        for step in range(3):
            static_in.fill_(float(rank + step))
            graph.replay()
            torch.cuda.synchronize()
            expect = sum(2 * (r + step) + 1 for r in range(world_size))
            assert torch.all(static_out == expect), (step, static_out[:4].tolist(), expect)
        assert npool.pending == 0
        del graph

    @check("graph(reserve=) captures on windows; a capture that grows the pool warns")
    def _():
        x = torch.ones(MiB, device="cuda")  # 4 MiB of fp32, outside the pools
        results = []
        for reserve, name in ((96 * MiB, "graphs-reserved"), (0, "graphs-fresh")):
            gpool = nccl_allocator.create_nccl_mem_pool(symmetric=True, growth_chunk=64 * MiB, name=name)
            gn = nccl_allocator.ncclpool_pool(gpool)
            g = torch.cuda.CUDAGraph()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", nccl_allocator.PerformanceWarning)
                with nccl_allocator.graph(g, gpool, groups=[world], reserve=reserve):
                    buf = x * 2  # allocated during the capture
                    in_window = all(c.handle_of(buf.data_ptr()) for c in gn.communicators)
                    dist.all_reduce(buf, group=world)
            warned = any(issubclass(w.category, nccl_allocator.PerformanceWarning) for w in caught)
            grown = sum(c.stats()["segments_created_in_capture"] for c in gn.communicators)
            for _ in range(2):
                g.replay()
            torch.cuda.synchronize()
            assert torch.all(buf == 2 * world_size), buf[:4].tolist()
            results.append((name, in_window, warned, grown))
            del g
        log(f"      {results}")
        assert results[0][1:] == (True, False, 0), results[0]   # reserved: the capture's buffer has its window
        assert results[1][1:] == (False, True, 1), results[1]   # fresh pool: no window in the graph, and a warning

    @check("OOM surfaces as torch.OutOfMemoryError with ncclpool's message")
    def _():
        caught = None
        try:
            with nccl_allocator.nccl_mem(pool, group=world):
                torch.empty(1 << 44, dtype=torch.uint8, device="cuda")  # 16 TiB
        except Exception as e:  # noqa: BLE001 - the type is what is checked
            caught = e
        notes = "\n".join(getattr(caught, "__notes__", []))
        log(f"      {type(caught).__module__}.{type(caught).__name__}: {str(caught).splitlines()[0][:150]}")
        log(f"      note: {notes[:220]}")
        assert isinstance(caught, torch.OutOfMemoryError), type(caught)
        assert "ncclpool" in notes and "exceeds" in notes, notes
        npool.check()

    @check("FSDP2 with the pool helper trains with the default allocator's losses")
    def _():
        import toy_fsdp
        from ncclpool.torch import fsdp as ncclpool_fsdp

        def train(use_pool):
            fsdp_pool = nccl_allocator.create_nccl_mem_pool(symmetric=True, name="fsdp") if use_pool else None

            def configure(model):
                assert ncclpool_fsdp.enable(model, fsdp_pool) == 4

            losses = toy_fsdp.train(rank, 5, configure if use_pool else None)
            if use_pool:
                npool_fsdp = nccl_allocator.ncclpool_pool(fsdp_pool)
                comms = npool_fsdp.communicators
                assert comms and all(c.stats()["registered_segments"] >= 1 for c in comms)
                log(f"      fsdp pool: {npool_fsdp.stats()['segment_count']} chunk(s), "
                    f"{npool_fsdp.stats()['allocation_count']} torch segments")
            return losses

        base = train(False)
        pooled = train(True)
        diff = max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(base, pooled))
        log(f"      losses default {['%.6f' % v for v in base]}")
        log(f"      losses ncclpool {['%.6f' % v for v in pooled]}  (max relative difference {diff:.2e})")
        assert diff <= 1e-5, diff

    @check("an auto pool serves each tensor from the part its profile routes it to; collectives are right")
    def _():
        # A profile for this machine: tensors below 2 MiB unregistered, 2-32 MiB local, larger windows.
        import json
        import tempfile
        profile = {"ncclpool_profile": 1, "gpu": torch.cuda.get_device_name(device), "nccl_version": f["nccl_version"],
                   "ranks": world_size, "symmetric_ctas": 0, "measured": "2026-11-23T00:00:00Z",
                   "classes": [{"min_bytes": m, "kind": {op: k for op in ("all_gather", "reduce_scatter", "all_reduce")}}
                               for m, k in ((0, "none"), (2 * MiB, "local"), (32 * MiB, "symmetric"))]}
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
            json.dump(profile, fh)
        os.environ["NCCLPOOL_PROFILE"] = fh.name
        try:
            apool = nccl_allocator.create_nccl_mem_pool(kind="auto", name="auto")
            an = nccl_allocator.ncclpool_pool(apool)
            with nccl_allocator.nccl_mem(apool, group=world):  # attaches (collective: the symmetric part)
                small = torch.full((1024,), float(rank + 1), device="cuda")          # a 2 MiB torch segment
                medium = torch.full((2 * MiB,), float(rank + 1), device="cuda")      # 8 MiB: a 20 MiB segment
                large = torch.full((16 * MiB,), float(rank + 1), device="cuda")      # 64 MiB: its own segment
        finally:
            del os.environ["NCCLPOOL_PROFILE"]
            os.unlink(fh.name)
        routes = an.routes()
        assert routes["description"] == "none below 2 MiB, local from 2 MiB to below 32 MiB, symmetric from 32 MiB", routes
        assert "the profile" in routes["source"], routes["source"]
        comm = an.communicators[0]
        assert comm.stats()["kind"] == "auto"
        held = [bool(comm.handle_of(t.data_ptr())) for t in (small, medium, large)]
        assert held == [False, True, True], held  # none, local registration, window
        for t in (small, medium, large):
            dist.all_reduce(t, group=world)
        torch.cuda.synchronize()
        total = world_size * (world_size + 1) / 2
        for t in (small, medium, large):
            assert torch.all(t == total), t[:4].tolist()
        parts = {p["placement"]: p["stats"]["active_allocations"] for p in routes["parts"]}
        log(f"      routes: {routes['description']}; torch segments per part {parts}")
        an.check()

    @check("divergent ranks raise AgreementError on every rank")
    def _():
        div = nccl_allocator.create_nccl_mem_pool(symmetric=True, growth_chunk=64 * MiB, name="divergent")
        keep = []
        raised = None
        try:
            with nccl_allocator.nccl_mem(div, group=world):
                for _ in range(1 + (rank == 0)):  # rank 0 makes one more chunk than the others
                    keep.append(torch.empty(48 * MiB, dtype=torch.uint8, device="cuda"))
        except ncclpool.AgreementError as e:
            raised = e
        assert raised is not None, "no AgreementError"
        # A mismatch named by the records, not a timeout that happens to raise the same class.
        assert "ranks disagree at commit" in str(raised) and "did not complete" not in str(raised), raised
        log(f"      {str(raised).splitlines()[0][:200]}")

    @check("a rank with nothing pending joins the agreement, the next collective is right, it hears later")
    def _():
        skip = nccl_allocator.create_nccl_mem_pool(symmetric=True, growth_chunk=64 * MiB, name="skip")
        keep = []
        with nccl_allocator.nccl_mem(skip, group=world):
            # a 2 MiB torch segment with 1 MiB left, in the pool's first segment, on every rank
            keep.append(torch.empty(MiB, dtype=torch.uint8, device="cuda"))
        now = None
        try:
            with nccl_allocator.nccl_mem(skip, group=world):
                # rank 0 needs a new segment (80 MiB: more than the segment has left), the others fit
                # in the torch segment they have (as torch's caching allocator may decide from event timing)
                keep.append(torch.empty(80 * MiB if rank == 0 else MiB, dtype=torch.uint8, device="cuda"))
        except ncclpool.AgreementError as e:
            now = str(e)
        assert (now is not None) == (rank == 0), now
        x = torch.full((1024,), float(rank + 1), device="cuda")
        dist.all_reduce(x, group=world)  # pairs with the others' all-reduce, not a stray agreement
        torch.cuda.synchronize()
        assert x[0].item() == world_size * (world_size + 1) / 2, x[0].item()
        if rank != 0:
            later = None
            try:
                nccl_allocator.ncclpool_pool(skip).poll()
            except ncclpool.AgreementError as e:
                later = str(e)
            assert later is not None and "found after the fact" in later, later

    @check("check mode 'collectives' stops an all-reduce on buffers at other offsets")
    def _():
        checked = nccl_allocator.create_nccl_mem_pool(symmetric=True, growth_chunk=64 * MiB, name="checked",
                                                      check="collectives")
        with nccl_allocator.nccl_mem(checked, group=world):
            first = torch.empty(MiB, dtype=torch.float32, device="cuda")   # 4 MiB
            second = torch.empty(MiB, dtype=torch.float32, device="cuda")  # 4 MiB, same torch segment
        x = first if rank == 0 else second  # allocated "in the other order" on the other ranks
        x.fill_(1.0)
        raised = None
        try:
            dist.all_reduce(x, group=world)
        except ncclpool.AgreementError as e:
            raised = str(e)
        finally:
            nccl_allocator.check_collectives(False)
        assert raised is not None and "not at the same place" in raised and "offset 4194304" in raised, raised
        log(f"      {raised[:220]}")
        dist.all_reduce(first, group=world)  # the same place everywhere: runs, symmetric, right
        torch.cuda.synchronize()

    log(nccl_allocator.memory_summary(pool))
    dist.barrier()

    # The last check cannot vote over NCCL: the process groups are gone afterwards.
    dist.destroy_process_group()
    if any(b.attachments for b in nccl_allocator.state.bindings.values()):
        failures.append("destroy_process_group forgets the registrations")
    log(f"CHECK destroy_process_group forgets the registrations: {'FAILED' if failures and failures[-1].startswith('destroy') else 'ok'}")

    if rank == 0:
        print(f"TORCH LAYER {'PASSED' if not failures else 'FAILED: ' + ', '.join(failures)} ({world_size} GPUs)", flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
