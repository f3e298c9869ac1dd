"""The two failures SGLang's symmetric-memory allocator is known for, run on it and on ncclpool.sglang
(one process per GPU, under torchrun; bench/sglang_bench.py starts them and prints the outcomes):

  --case growth    after warm-up and a capture, rank 0's pool grows at run time and rank 1's does not
                   (a bigger batch on one rank; SGLang #36943: every rank hangs in
                   ncclCommWindowRegister). 8 context uses, each followed by SGLang's all-reduce.
  --case offsets   in a capture, rank 1 allocates one more tensor before the step's buffer, so the
                   buffer sits at another offset of the same window (SGLang #33037, #34230: symmetric
                   kernels read peers at the wrong place, silently). The captured all-reduce is
                   checked as SGLang checks it (debug_check_symmetric_mempool), then SGLang's
                   finalize point (prealloc_symmetric_memory_pool) runs, then the graph is replayed
                   and its result compared with the right one.
  --case oom       (ncclpool only; issue 44 item 1) rank 0 holds most of its GPU's free memory in plain
                   torch tensors, then every rank asks allocate_symmetric_buffer for the same 2 GiB:
                   out of memory on rank 0 alone must end in an error on every rank, at the same commit.
  --case kind      (ncclpool only; issue 44 item 4) NCCLPOOL_SGLANG_KIND=local on rank 0, the default
                   (auto) on the others: every rank must end in an error at the group's first use.
  --case pdl       (issue 46) a kernel that lets its dependents start at once and writes its output
                   after a delay (tests/gpu/pdl_producer.ptx, what PDL-enabled kernels of flashinfer or
                   sgl-kernel do), then SGLang's all-reduce of that output from the allocator's
                   buffer, --launches times eagerly and as replays of one captured CUDA graph. On NCCL
                   2.28.0-2.30.6 the symmetric kernels may read the buffer before the producer wrote
                   it: SGLang's allocator is exposed (the positive control); ncclpool.sglang fences
                   (rows "as SGLang calls it"), and its buffer all-reduced past the fence (PyNccl's
                   unwrapped all_reduce, rows "unfenced") is the control on its own windows.
  --case pdl-nomix the same with NCCL_GRAPH_MIXING_SUPPORT=0 (SGLang's setting with decode context
                   parallelism): NCCL < 2.29 then keeps no event wait of its own in the graph, so the
                   captured rows are exposed too, and ncclpool's fence is a graph node.
  Each ends with SGLang's all-reduce, which must pair and be right on every rank (pdl: every launch is
  one; its outcome counts wrong results per row).

    torchrun --nproc-per-node 2 bench/sglang_cases.py --case growth|offsets|oom|kind|pdl|pdl-nomix
             --allocator sglang|ncclpool --json-dir DIR --name NAME [--timeout 60] [--launches 200]
             (SGLANG_DEBUG_SYMM_MEM=1: SGLang's debug mode)

Each rank writes DIR/NAME.rankN.json: its outcome in words, the errors it raised (where, type,
message), whether results were right (pdl: "pdl", its rows of wrong results), or, after --timeout seconds
without an end, "hang" with where its threads were."""
import argparse
import contextlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sglang_common as common  # noqa: E402

MiB = 1 << 20


def record(events, where, error):
    events.append(dict(where=where, type=type(error).__name__, message=str(error)[:600]))


def growth(torch, api, group, rank, world, events):
    """Returns the outcome in words. Every rank keeps the same collective sequence whatever it raised
    (the all-reduce runs after the context either way), as a rank that survives its error would."""
    for _ in range(3):  # warm-up: the pool's first segments and windows
        with api.use_symmetric_memory(group):
            y = torch.ones(MiB // 2, dtype=torch.bfloat16, device="cuda")
        common.all_reduce(group, y)
    graph = torch.cuda.CUDAGraph()
    pool = torch.cuda.graph_pool_handle()
    api.set_graph_pool_id(pool)
    with common.graph_capture() as stream:  # SGLang's graph runner: a warm-up on the capture's stream, then the capture
        for warm_up in (True, False):
            with torch.cuda.graph(graph, pool=pool, stream=stream) if not warm_up else contextlib.nullcontext():
                with api.use_symmetric_memory(group):
                    y = torch.empty(MiB // 2, dtype=torch.bfloat16, device="cuda")
                common.all_reduce(group, y)
            torch.cuda.synchronize()
    kept = []
    for use in range(8):
        y = None
        try:
            with api.use_symmetric_memory(group):
                y = torch.ones(MiB // 2, dtype=torch.bfloat16, device="cuda")
                if rank == 0 and use == 0:
                    kept.append(torch.empty(256 * MiB, dtype=torch.uint8, device="cuda"))  # grows rank 0's pool only
        except Exception as e:  # noqa: BLE001 (the outcome)
            record(events, f"context exit, use {use}", e)
        common.all_reduce(group, y if y is not None else torch.ones(MiB // 2, dtype=torch.bfloat16, device="cuda"))
        torch.cuda.synchronize()
    del graph
    if not events:
        return "no error, no hang (the growth was registered where every rank agreed, or needed no window)"
    return f"error at {events[0]['where']}: {events[0]['type']}: {events[0]['message'][:240]}"


def offsets(torch, api, group, rank, world, events):
    count = 4 * MiB // 2
    x_in = torch.full((count,), float(rank + 1), dtype=torch.bfloat16, device="cuda")
    graph = torch.cuda.CUDAGraph()
    pool = torch.cuda.graph_pool_handle()
    api.set_graph_pool_id(pool)
    # SGLang's graph runner: warm-up and capture on one side stream (common.graph_capture), so that the
    # capture reuses the warm-up's segment (windowed) instead of growing the pool while capturing.
    with common.graph_capture() as stream:
        with api.use_symmetric_memory(group):  # warm-up: a 64 MiB segment (windowed) that torch splits later
            warm = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda")
        common.all_reduce(group, torch.ones(1024, device="cuda"))
        del warm
        torch.cuda.synchronize()
        try:
            with torch.cuda.graph(graph, pool=pool, stream=stream):
                with api.use_symmetric_memory(group):
                    pad = torch.empty(count, dtype=torch.bfloat16, device="cuda") if rank == 1 else None
                    y = x_in * 1.0
                api.debug_check_symmetric_mempool(group, {"input": y}, "all_reduce")  # what GroupCoordinator.all_reduce does
                common.all_reduce(group, y)
        except Exception as e:  # noqa: BLE001 (the outcome)
            record(events, "capture", e)
            return f"error during the capture: {events[-1]['type']}: {events[-1]['message'][:240]}"
    try:
        api.prealloc_symmetric_memory_pool(is_draft_worker=False, enable_symm_mem=True, device="cuda",
                                           forward_stream=torch.cuda.current_stream())  # SGLang's finalize point
    except Exception as e:  # noqa: BLE001 (the outcome)
        record(events, "after the capture (SGLang's finalize: prealloc_symmetric_memory_pool)", e)
        return f"error before any replay: {events[-1]['type']}: {events[-1]['message'][:240]}"
    x_in.fill_(rank + 1)
    graph.replay()
    torch.cuda.synchronize()
    expect = world * (world + 1) / 2
    got = sorted(set(y.float().unique().tolist()))
    del pad, graph
    if got == [expect]:
        return f"no error; results right ({expect:g})"
    return f"no error; WRONG results: {got[:4]} instead of {expect:g} (silent)"


def _all_reduce_right(torch, group, world) -> bool:
    """SGLang's all-reduce after a failure: it pairs (nothing of ncclpool's left unmatched) and is right."""
    x = torch.ones(1024, dtype=torch.float32, device="cuda")
    common.all_reduce(group, x)
    torch.cuda.synchronize()
    return x.unique().tolist() == [float(world)]


def oom(torch, api, group, rank, world, events):
    hog = None
    if rank == 0:  # most of the free memory: the pool cannot grow by 2 GiB here
        free, _ = torch.cuda.mem_get_info()
        hog = torch.empty(max(free - (1 << 30), 0), dtype=torch.uint8, device="cuda")
    try:
        api.allocate_symmetric_buffer(group.pynccl_comm, 2 << 30)
        outcome = "no error"
    except Exception as e:  # noqa: BLE001 (the outcome)
        record(events, "allocate_symmetric_buffer", e)
        outcome = f"error: {type(e).__name__}"
    del hog
    return f"{outcome}; next all-reduce {'right' if _all_reduce_right(torch, group, world) else 'WRONG'}"


def kind(torch, api, group, rank, world, events):
    try:
        with api.use_symmetric_memory(group):
            torch.empty(MiB, dtype=torch.uint8, device="cuda")
        outcome = "no error"
    except Exception as e:  # noqa: BLE001 (the outcome)
        record(events, "first use", e)
        outcome = f"error: {type(e).__name__}"
    return f"{outcome}; next all-reduce {'right' if _all_reduce_right(torch, group, world) else 'WRONG'}"


def _unfenced_all_reduce(group, tensor) -> None:
    """SGLang's all-reduce past ncclpool.sglang's fence: PyNccl's own all_reduce (the wrapper's
    __wrapped__, or the method itself where nothing wrapped it)."""
    method = type(group.pynccl_comm).all_reduce
    with group.pynccl_comm.change_state(enable=True):
        getattr(method, "__wrapped__", method)(group.pynccl_comm, tensor)


def pdl(torch, api, group, rank, world, events, launches=200, delay_us=300, kib=1024):
    """Returns (outcome, {"pdl": rows}): per row (how the all-reduce is called, eager or graph) the
    wrong results of this rank out of `launches`, and the fences ncclpool launched meanwhile."""
    import ncclpool
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "gpu", "torch"))
    from pdl_producer import Producer, count_wrong
    producer = Producer()
    with api.use_symmetric_memory(group):
        x = torch.empty(kib * 1024 // 4, dtype=torch.float32, device="cuda")
    expected = world * (world + 1) / 2
    calls = {"as SGLang calls it": common.all_reduce}
    if api.__name__ == "ncclpool.sglang":  # the control on ncclpool's own windows
        calls["unfenced"] = _unfenced_all_reduce

    def step(all_reduce):
        x.zero_()
        producer.launch(x, float(rank + 1), delay_us * 1000, torch.cuda.current_stream())
        all_reduce(group, x)

    rows = []
    for how, all_reduce in calls.items():
        for graph in (False, True):
            g = None
            before = ncclpool.features()["symmetric_fences_launched"]  # a graph's fence node counts at its capture
            if graph:  # SGLang's graph runner: warm-up and capture on one side stream
                g = torch.cuda.CUDAGraph()
                with common.graph_capture() as stream:
                    step(all_reduce)
                    torch.cuda.synchronize()
                    with torch.cuda.graph(g, stream=stream):
                        step(all_reduce)
                torch.cuda.synchronize()
            wrong, example = count_wrong(x, expected, launches, g.replay if graph else lambda: step(all_reduce))
            rows.append(dict(call=how, graph=graph, wrong=wrong, launches=launches, example=example,
                             fences=ncclpool.features()["symmetric_fences_launched"] - before))
            del g
    f = ncclpool.features()
    text = "; ".join(f"{r['call']} {'graph' if r['graph'] else 'eager'} {r['wrong']}/{r['launches']} wrong"
                     + (f" ({r['fences']} fences)" if r["fences"] else "") for r in rows)
    ours = api.__name__ == "ncclpool.sglang"  # ncclpool's decision is nothing to SGLang's allocator
    return (f"{text}; NCCL {f['nccl_version']}" + (f", {f['symmetric_kernels_decision']} ({f['symmetric_fence_kind']})" if ours else ""),
            dict(pdl=rows, decision=f["symmetric_kernels_decision"], hazard=bool(f["symmetric_kernels_hazard"]),
                 fence_kind=f["symmetric_fence_kind"], graph_mixing_support=os.environ.get("NCCL_GRAPH_MIXING_SUPPORT", "(unset)")))


CASES = {"growth": growth, "offsets": offsets, "oom": oom, "kind": kind, "pdl": pdl, "pdl-nomix": pdl}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", choices=tuple(CASES), required=True)
    ap.add_argument("--allocator", choices=("sglang", "ncclpool"), required=True)
    ap.add_argument("--json-dir", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--launches", type=int, default=200, help="pdl: launches per row")
    args = ap.parse_args()
    if args.case == "pdl-nomix":  # read by NCCL at its first communicator (below)
        os.environ["NCCL_GRAPH_MIXING_SUPPORT"] = "0"
    common.prepare_paths()
    import torch
    rank, world, local = common.init_distributed()
    if args.case == "kind" and rank == 0:
        os.environ["NCCLPOOL_SGLANG_KIND"] = "local"  # read when the pool is made (below): rank 0 alone
    if args.case == "oom":  # windows, so that the commit is collective (a pool without any has no agreement to fail)
        os.environ.setdefault("NCCLPOOL_SGLANG_KIND", "symmetric")
    toolchain = common.jit_toolchain()
    group = common.make_tp_group(rank, world, local)
    events = []
    result = dict(rank=rank, world=world, case=args.case, allocator=args.allocator, events=events, toolchain=toolchain,
                  debug=os.environ.get("SGLANG_DEBUG_SYMM_MEM", "0"), versions=common.versions())
    try:
        api = common.load_allocator(args.allocator)
        api.get_nccl_mem_pool()  # SGLang's JIT build (cached by the perf runs) before the clock starts
    except Exception as e:  # noqa: BLE001 (the outcome: no case without the allocator)
        record(events, "setup", e)
        result.update(outcome=f"not run: the allocator could not be set up: {type(e).__name__}: {str(e)[-240:]}")
        common.write_rank_result(args.json_dir, args.name, rank, result)
        sys.stdout.flush()
        os._exit(0)

    def hung(seconds, stacks):  # no CUDA or NCCL call here: the main thread may be stuck inside one
        result.update(outcome=f"HANG: no end within {seconds:g} s", stacks=stacks)
        common.write_rank_result(args.json_dir, args.name, rank, result)

    watchdog = common.Watchdog(args.timeout, hung)
    try:
        if args.case.startswith("pdl"):
            outcome, details = pdl(torch, api, group, rank, world, events, launches=args.launches)
            result.update(details)
        else:
            outcome = CASES[args.case](torch, api, group, rank, world, events)
    except Exception as e:  # noqa: BLE001 (the outcome)
        record(events, "case", e)
        outcome = f"error: {type(e).__name__}: {str(e)[:240]}"
    watchdog.cancel()
    result.update(outcome=outcome, versions=common.versions())  # the guard's decision, made at the first attach
    common.write_rank_result(args.json_dir, args.name, rank, result)
    sys.stdout.flush()
    os._exit(0)  # no teardown: a failed case may leave NCCL work that never ends


if __name__ == "__main__":
    main()
