"""GPU check of ncclpool "as across nodes" (issue 34; docs/scaling.md, "As across nodes"): on one
host, scripts/as-nodes.sh gives every rank its own NCCL_HOSTID, so that NCCL takes the ranks for
N >= 2 nodes and connects them with its network transport (NET/Socket without InfiniBand). Run on
every rank by torchrun:

    python3 -m torch.distributed.run --nproc-per-node 2 --no-python bash scripts/as-nodes.sh \
        python3 tests/gpu/torch/check_as_nodes.py --nccl-log-dir DIR [--win-enable-off]

NCCL's INFO log (subsystems as_nodes_support.NCCL_LOG_SUBSYS) goes to DIR/nccl-as-nodes*.%h.%p.log
(a temporary folder without --nccl-log-dir); each rank reads its own back.

Checks: every rank has its host id, and NCCL sees N nodes with channels via NET only (its log); a
local pool registered with the group: all-reduce (in place) / all-gather / reduce-scatter on its
buffers equal the same on plain memory; a symmetric pool's windows end the same way on every rank, as
this NCCL's source says (2.28: windows made, no symmetric kernel can run; results right); auto pools
(built-in routes, and a profile's) route no size to windows, since NCCL's symmetric kernels cannot
run across nodes, and every rank reports the same routes; the copy-engine vote: auto off on every
rank with one reason (the nodes), and copy_engine=True the same Unsupported on every rank; FSDP2 with fsdp.enable on an auto pool trains 3
steps with losses bitwise equal to plain FSDP2; NCCL ran no symmetric kernel and no copy engine (its
log); destroy_process_group finishes within 120 s on every rank.

--win-enable-off: NCCL_WIN_ENABLE=0 (no symmetric support on any communicator). NCCL 2.28 then
answers a window registration with its local registration handle, which ncclpool refuses with a
RegistrationError on every rank (src/backends/nccl/communicator.cpp, register_window). Checks: host
ids and nodes, the local pool, that error on every rank, teardown.

One GPU (or one rank): says it needs 2 GPUs, prints a RESULT line saying so, exits 0.
Prints 'CHECK name: ok|FAILED|skipped' lines and one 'RESULT ...' line on rank 0; exits non-zero on
any failure.
"""
import argparse
import contextlib
import json
import os
import re
import socket
import sys
import tempfile
import traceback

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "python"))
sys.path.insert(0, HERE)
import as_nodes_support as support  # noqa: E402
import ncclpool  # noqa: E402
import ncclpool.torch as nccl_allocator  # noqa: E402
from ncclpool.torch import copy_engine  # noqa: E402
from check_support import Checks  # noqa: E402  (this folder)

MiB = 1 << 20
NO_PROFILE = "/nonexistent/ncclpool-check-as-nodes/profile.json"  # auto pools and the copy-engine vote: no profile
rank = world_size = device = per_node = nodes = 0
checks = Checks()  # check(name, gate=False): a failure that leaves the ranks in step, later checks still run
log, check, same_everywhere = checks.log, checks.check, checks.same_everywhere
failures, notes = checks.failures, checks.notes
state = {}     # what a check found that a later one needs
log_path = ""  # this rank's NCCL log


def inputs(count, salt):
    """Integer-valued fp32 (sums exact in any order), different on every rank."""
    g = torch.Generator(device="cuda").manual_seed(1000 * salt + rank)
    return torch.randint(-8, 8, (count,), device="cuda", generator=g).to(torch.float32)


def golden(count, salt, group):
    """(inputs, outputs) of all-reduce, all-gather and reduce-scatter of `count` fp32 per rank on plain memory."""
    n = dist.get_world_size(group)
    ins = (inputs(count, salt), inputs(count, salt + 1), inputs(count * n, salt + 2))
    ar = ins[0].clone()
    dist.all_reduce(ar, group=group)
    ag = torch.empty(count * n, device="cuda")
    dist.all_gather_into_tensor(ag, ins[1], group=group)
    rs = torch.empty(count, device="cuda")
    dist.reduce_scatter_tensor(rs, ins[2], group=group)
    return ins, (ar, ag, rs)


def pool_buffers(context, count, n):
    """The five buffers of the three collectives, allocated inside `context`."""
    with context:
        return [torch.empty(count, device="cuda"), torch.empty(count, device="cuda"), torch.empty(count * n, device="cuda"),
                torch.empty(count * n, device="cuda"), torch.empty(count, device="cuda")]


def run_on(buffers, ins, expect, group):
    """The three collectives on `buffers` (all-reduce in place); the names of those whose results differ from `expect`."""
    ar, ag_in, ag, rs_in, rs = buffers
    ar.copy_(ins[0])
    ag_in.copy_(ins[1])
    rs_in.copy_(ins[2])
    dist.all_reduce(ar, group=group)
    dist.all_gather_into_tensor(ag, ag_in, group=group)
    dist.reduce_scatter_tensor(rs, rs_in, group=group)
    torch.cuda.synchronize()
    return [name for name, got, want in (("all-reduce", ar, expect[0]), ("all-gather", ag, expect[1]), ("reduce-scatter", rs, expect[2]))
            if not torch.equal(got, want)]


def attachment(pool, group):
    return nccl_allocator.binding.attachment_of(nccl_allocator.binding.binding_of(pool), group)


def read_own_log():
    return support.read_topology_files([log_path]) if os.path.exists(log_path) else support.read_topology([])


def node_checks():
    world = dist.group.WORLD

    @check(f"every rank has its own NCCL_HOSTID ({nodes} nodes of {per_node} rank(s), scripts/as-nodes.sh)")
    def _():
        ids = same_everywhere((os.environ.get("NCCL_HOSTID"), os.environ.get("NCCLPOOL_AS_NODE")))
        log(f"      host ids: {[i for i, _ in ids]}")
        assert all(i for i, _ in ids), ids
        assert len({i for i, _ in ids}) == nodes, ids
        assert [int(k) for _, k in ids] == [r // per_node for r in range(world_size)], ids

    @check(f"NCCL sees {nodes} nodes, connected by its network transport (its INFO log)")
    def _():
        x = torch.ones(1024, device="cuda")
        dist.all_reduce(x, group=world)  # connects WORLD's channels (NCCL connects at the first collective)
        torch.cuda.synchronize()
        topology = read_own_log()
        problems = support.topology_problems(topology, world_size, nodes)
        every = same_everywhere((support.describe_topology(topology), problems))
        log(f"      rank 0: {every[0][0]}")
        state["nets"] = "/".join(topology["nets"]) or "no net named"
        assert x[0].item() == world_size, x[0].item()
        assert not any(p for _, p in every), [p for _, p in every]


def local_pool_check():
    world = dist.group.WORLD

    @check("a local pool registered with the group, all-reduce / all-gather / reduce-scatter on its buffers equal plain memory")
    def _():
        pool = nccl_allocator.create_nccl_mem_pool(kind="local", name="as-nodes-local")
        wrong, unregistered = [], 0
        for count in (MiB // 4, 24 * MiB // 4):  # 1 MiB and 24 MiB of fp32 per rank
            ins, expect = golden(count, 10 + count % 97, world)
            buffers = pool_buffers(nccl_allocator.nccl_mem(pool, group=world), count, world_size)
            a = attachment(pool, world)
            assert a is not None and a.kind == "local", a
            unregistered += sum(not a.comm.handle_of(t.data_ptr()) for t in buffers)
            wrong += [f"{name} at {count * 4 // MiB} MiB" for name in run_on(buffers, ins, expect, world)]
        stats = attachment(pool, world).comm.stats()
        log(f"      {stats['registered_segments']} segment(s) registered locally; "
            f"{'results equal' if not wrong else 'WRONG: ' + ', '.join(wrong)}")
        assert stats["kind"] == "local" and stats["registered_segments"] >= 1, stats
        assert unregistered == 0, f"{unregistered} pool buffer(s) without a local registration"
        assert not wrong, wrong


def symmetric_check(win_enable):
    world = dist.group.WORLD
    version = ncclpool.features()["nccl_version"]
    expected = support.expected_symmetric_attach(version, win_enable)
    log(f"      expected of NCCL {version}{'' if win_enable else ' with NCCL_WIN_ENABLE=0'}: {expected[0] or 'either'} ({expected[-1]})")

    # gate=False: every collective below is decided from what every rank gathered, and the assertion
    # comes last, so a surprise here (another outcome than NCCL's source says) leaves the ranks in step.
    @check(f"a symmetric pool's windows over {nodes} nodes end the same way on every rank", gate=False)
    def _():
        pool = nccl_allocator.create_nccl_mem_pool(symmetric=True, growth_chunk=64 * MiB, name="as-nodes-symmetric")
        count = 4 * MiB // 4
        ins, expect = golden(count, 30, world)
        buffers, error = None, None
        try:  # the attach agrees; the windows come at the scope's end (a commit, collective)
            buffers = pool_buffers(nccl_allocator.nccl_mem(pool, group=world), count, world_size)
        except ncclpool.Error as e:
            error = e
            traceback.print_exc()
        a = attachment(pool, world)
        every_buffer = error is None and all(a.comm.handle_of(t.data_ptr()) for t in buffers)
        kinds = same_everywhere("error" if error is not None else "windows")
        wrong = run_on(buffers, ins, expect, world) if set(kinds) == {"windows"} else []
        outcome = ("windows", bool(every_buffer), not wrong) if error is None else ("error", type(error).__name__, str(error))
        outcomes = same_everywhere(outcome)
        problems = support.outcome_problems(outcomes, expected)
        attached = same_everywhere(a is not None)
        if all(attached):  # the detach is collective: only where every rank is attached
            nccl_allocator.deregister_mem_pool(pool, world)
        elif any(attached):
            problems.append(f"attached on some ranks only: {attached}")
        state["windows"] = set(kinds) == {"windows"}
        what = (f"windows on every rank ({'results equal' if not wrong else 'WRONG: ' + ', '.join(wrong)})" if state["windows"]
                else f"{outcomes[0][1]} on every rank: {outcomes[0][2][:300]}" if set(kinds) == {"error"} else "ranks differ")
        log(f"      {what}")
        notes.append(f"symmetric pool: {'windows (no symmetric kernel across nodes)' if state['windows'] else kinds[0]}")
        assert not problems, problems


def auto_pool_checks():
    world = dist.group.WORLD

    def auto_pool(name, profile_classes=None):
        """An auto pool attached to WORLD with three tensors (4 KiB, 8 MiB, 64 MiB) all-reduced: (routes,
        results right). profile_classes: (min_bytes, kind) of a profile of this machine to route by."""
        path = None
        if profile_classes is not None:
            f = ncclpool.features()
            profile = {"ncclpool_profile": 1, "gpu": torch.cuda.get_device_name(device), "nccl_version": f["nccl_version"],
                       "ranks": world_size, "symmetric_ctas": 0, "measured": "2026-11-23T00:00:00Z",
                       "classes": [{"min_bytes": m, "kind": {op: k for op in ("all_gather", "reduce_scatter", "all_reduce")}}
                                   for m, k in profile_classes]}
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
                json.dump(profile, fh)
            path, os.environ["NCCLPOOL_PROFILE"] = fh.name, fh.name
        try:
            pool = nccl_allocator.create_nccl_mem_pool(kind="auto", name=name)
            with nccl_allocator.nccl_mem(pool, group=world):  # attaches (the routes agreement)
                tensors = [torch.full((n,), float(rank + 1), device="cuda") for n in (1024, 2 * MiB, 16 * MiB)]
        finally:
            if path is not None:
                os.environ["NCCLPOOL_PROFILE"] = NO_PROFILE
                os.unlink(path)
        for t in tensors:
            dist.all_reduce(t, group=world)
        torch.cuda.synchronize()
        total = world_size * (world_size + 1) / 2
        right = all(bool(torch.all(t == total)) for t in tensors)
        return nccl_allocator.ncclpool_pool(pool).routes(), right

    def judge(routes, right, source_says):
        """Every collective first (gathers), then the assertions: a failure leaves the ranks in step."""
        # The source names the file each rank read (a temporary file of its own here): compared without it.
        source = re.sub(r"(profile|at) \S+\.json", r"\1 FILE", routes["source"])
        views = same_everywhere((routes["description"], source, json.dumps(routes.get("by_collective", {}), sort_keys=True)))
        rights = same_everywhere(right)
        windows = support.window_classes(routes)
        log(f"      routes: {routes['description']} ({routes['source'][:260]})")
        assert len(set(views)) == 1, f"ranks report different routes: {views}"
        assert all(rights), f"an all-reduce on the auto pool's tensors is wrong on rank(s) {[r for r, ok in enumerate(rights) if not ok]}"
        assert source_says in routes["source"], routes["source"]
        assert not windows, f"sizes routed to windows where NCCL's symmetric kernels cannot run: {windows}"

    @check("an auto pool (built-in routes) routes no size to windows across nodes; every rank reports the same routes",
           gate=False)
    def _():
        routes, right = auto_pool("as-nodes-auto")
        notes.append(f"auto routes: {routes['description']}")
        judge(routes, right, "built-in")

    @check("an auto pool with a profile (windows from 32 MiB) routes no size to windows across nodes; the same routes everywhere",
           gate=False)
    def _():
        routes, right = auto_pool("as-nodes-auto-profile", [(0, "none"), (2 * MiB, "local"), (32 * MiB, "symmetric")])
        judge(routes, right, "the profile")


def copy_engine_checks():
    world = dist.group.WORLD

    @check(f"the copy-engine vote over {nodes} nodes, auto, stays off on every rank with one reason (the nodes)")
    def _():
        probe = dist.new_group(list(range(world_size)))
        zero = nccl_allocator.copy_engine_group(probe)
        decision = copy_engine._decision_of(probe)
        whys = same_everywhere(decision.why)
        log(f"      {whys[0]}")
        assert zero is None and not decision.used, decision
        assert len(set(whys)) == 1 and whys[0].startswith("off: ") and f"spans {nodes} nodes" in whys[0], whys

    @check("copy_engine=True raises the same Unsupported on every rank, naming the nodes (copy engines work within one node)")
    def _():
        # A group of its own (over every rank): a decision about WORLD would be FSDP2's too (its shard
        # group), and the FSDP2 check below is about the auto pool alone.
        source = dist.new_group(list(range(world_size)))
        zero, message = None, ""
        try:
            zero = nccl_allocator.copy_engine_group(source, copy_engine=True)
        except ncclpool.Unsupported as e:
            message = str(e)
        decided = same_everywhere((zero is not None, message))
        log(f"      {'group made: ' + copy_engine._decision_of(source).why if zero is not None else 'no group: ' + message}"[:300])
        assert len(set(decided)) == 1, decided
        assert zero is None and f"spans {nodes} nodes" in message, (zero, message)
        notes.append("copy-engine group: refused alike (the nodes)")
        if zero is None:
            return
        count = 4 * MiB // 4
        plain_in = inputs(count, 50)
        expect = torch.empty(count * world_size, device="cuda")
        dist.all_gather_into_tensor(expect, plain_in, group=world)
        # Windows of the ZERO-policy group where windows work across these nodes (the symmetric check).
        pool = nccl_allocator.create_nccl_mem_pool(symmetric=True, name="as-nodes-copy-engine") if state.get("windows") else None
        with nccl_allocator.nccl_mem(pool, group=zero) if pool is not None else contextlib.nullcontext():
            inp = torch.empty(count, device="cuda")
            outs = [torch.empty(count * world_size, device="cuda") for _ in range(2)]
        inp.copy_(plain_in)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            dist.all_gather_into_tensor(outs[0], inp, group=zero)
        torch.cuda.current_stream().wait_stream(side)
        copy_engine.all_gather_into_tensor(outs[1], inp, zero)  # the layer's guard: off the default stream
        torch.cuda.synchronize()
        wrong = [i for i, out in enumerate(outs) if not torch.equal(out, expect)]
        log(f"      all-gathers on the copy-engine group ({'pool windows' if pool is not None else 'plain memory'}): "
            f"{'equal' if not wrong else 'WRONG'}")
        notes.append("copy-engine group: made, all-gather right" if not wrong else "copy-engine group: WRONG")
        assert not wrong, wrong


def fsdp_check():
    @check("FSDP2 with fsdp.enable on an auto pool trains 3 steps with losses bitwise equal to plain FSDP2")
    def _():
        import toy_fsdp
        from ncclpool.torch import fsdp as ncclpool_fsdp

        def train(pooled):
            pool = nccl_allocator.create_nccl_mem_pool(kind="auto", name="as-nodes-fsdp") if pooled else None

            def configure(model):
                assert ncclpool_fsdp.enable(model, pool) == 4

            return toy_fsdp.train(rank, 3, configure if pooled else None), pool

        plain, _ = train(False)
        pooled, pool = train(True)
        log(f"      losses plain {[f'{v:.9g}' for v in plain]}")
        log(f"      losses auto  {[f'{v:.9g}' for v in pooled]}")
        routes = nccl_allocator.ncclpool_pool(pool).routes()
        log(f"      fsdp pool routes: {routes['description']}; copy engines: {nccl_allocator.stats(pool)['copy_engine']['why'][:160]}")
        assert pooled == plain, (plain, pooled)  # bitwise: the same floats


def log_check():
    @check("NCCL's log says every communicator over all ranks spans the nodes, and no symmetric kernel or copy engine ran", gate=False)
    def _():
        topology = read_own_log()
        problems = support.topology_problems(topology, world_size, nodes)
        every = same_everywhere((topology["symmetric"], topology["copy_engine"], problems, support.describe_topology(topology)))
        symmetric, engines = sum(e[0] for e in every), sum(e[1] for e in every)
        log(f"      rank 0: {every[0][3]}")
        log(f"      every rank: [Symmetric] kernel lines {symmetric}, copy-engine lines {engines}")
        assert not any(e[2] for e in every), [e[2] for e in every]
        assert symmetric == 0 and engines == 0, (symmetric, engines)


def teardown(timeout_s=120.0):
    """destroy_process_group() within timeout_s on every rank, as a CHECK line (check_support)."""
    checks.teardown("ncclpool_as_nodes_teardown", timeout_s)

def prepare_environment(args):
    """Before NCCL starts in this process: its log into a file of its own, NVLink multicast off, the
    symmetric kernels on (so that the auto routes are judged on the nodes, not on the PDL guard), no
    profile, NCCL_WIN_ENABLE=0 with --win-enable-off. Returns this rank's log file."""
    for var, value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
        os.environ[var] = value
    os.environ.setdefault("NCCLPOOL_SYMMETRIC_KERNELS", "on")
    os.environ["NCCLPOOL_PROFILE"] = NO_PROFILE
    os.environ.pop("NCCLPOOL_COPY_ENGINE", None)
    if args.win_enable_off:
        os.environ["NCCL_WIN_ENABLE"] = "0"
    folder = args.nccl_log_dir or tempfile.mkdtemp(prefix="ncclpool-as-nodes-")
    os.makedirs(folder, exist_ok=True)
    pattern = os.path.join(folder, f"nccl-as-nodes{'-win-off' if args.win_enable_off else ''}.%h.%p.log")
    os.environ.update(support.nccl_log_env(pattern))
    return support.nccl_debug_file(pattern, socket.gethostname(), os.getpid())


def finish(code, verdict):
    if rank == 0:
        print(f"RESULT {verdict}", flush=True)
    sys.stdout.flush()
    os._exit(code)  # a teardown still hanging in its thread must not keep the process


def main():
    global rank, world_size, device, per_node, nodes, log_path
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nccl-log-dir", default=None, help="folder for NCCL's INFO log (default: a temporary folder)")
    ap.add_argument("--win-enable-off", action="store_true", help="NCCL_WIN_ENABLE=0: the local-handle answer to a window registration")
    args = ap.parse_args()
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = int(os.environ.get("LOCAL_RANK", rank))
    checks.rank, checks.world_size, checks.device = rank, world_size, device
    gpus = torch.cuda.device_count()
    if world_size < 2 or gpus < 2:
        log(f"check_as_nodes: needs 2 GPUs ({world_size} rank(s), {gpus} GPU(s) visible): one rank has no other node to reach")
        finish(0, f"not run: needs 2 GPUs ({world_size} rank(s), {gpus} GPU(s))")
    if "NCCLPOOL_AS_NODE" not in os.environ or not os.environ.get("NCCL_HOSTID"):
        print(f"check_as_nodes: rank {rank}: NCCL_HOSTID / NCCLPOOL_AS_NODE are not set: run it under "
              "torchrun --no-python bash scripts/as-nodes.sh python3 ...", flush=True)
        finish(2, "FAILED: not run under scripts/as-nodes.sh")
    per_node = int(os.environ.get("NCCLPOOL_AS_NODES_RANKS_PER_NODE", "1"))
    if per_node < 1 or world_size % per_node or world_size // per_node < 2:
        log(f"check_as_nodes: {world_size} ranks at {per_node} per node are not 2 or more whole nodes")
        finish(2, f"FAILED: {world_size} ranks at {per_node} per node")
    nodes = world_size // per_node
    log_path = prepare_environment(args)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=torch.device("cuda", device))
    nccl_allocator.init()
    f = ncclpool.features()
    log(f"ncclpool {ncclpool.version()} | NCCL {f['nccl_version']} from {f['nccl_library']} | {world_size} ranks as {nodes} nodes "
        f"| symmetric kernels: {f['symmetric_kernels_why'][:120]} | NCCL log {log_path}")
    node_checks()
    local_pool_check()
    symmetric_check(win_enable=not args.win_enable_off)
    if not args.win_enable_off:
        auto_pool_checks()
        copy_engine_checks()
        fsdp_check()
        log_check()
    dist.barrier()
    teardown()
    net = state.get("nets", "?")
    finish(1 if failures else 0, f"{'ok' if not failures else 'FAILED: ' + ', '.join(failures)} ({world_size} ranks as {nodes} nodes "
           f"over NET/{net}; NCCL {f['nccl_version']}{'; NCCL_WIN_ENABLE=0' if args.win_enable_off else ''}; {'; '.join(notes)})")


if __name__ == "__main__":
    main()
