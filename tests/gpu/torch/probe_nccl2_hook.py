"""What torch 2.15's nccl2 process group does to ncclpool's pools (issue 45 item 2), on every rank
under torchrun (2 GPUs):

    torchrun --nproc-per-node 2 tests/gpu/torch/probe_nccl2_hook.py --json OUT.json --log-dir DIR
    TORCH_DIST_USE_NCCL2=1 torchrun ... probe_nccl2_hook.py --refusal --json OUT.json --log-dir DIR   (torch 2.14)

nccl2 (c10d::nccl2::ProcessGroupNCCL, torch 2.15's default "nccl") attaches every communicator to one
process-wide NCCLCachingAllocatorHook, which watches the caching allocator's SEGMENT_ALLOC and
SEGMENT_FREE events and calls ncclCommRegister / ncclCommDeregister for the segment with every nccl2
communicator of its device. Which segments (its shouldTrackSegment): every one, of every pool, unless
PYTORCH_CUDA_ALLOC_CONF has expandable_segments:True, which leaves out the default pool's alone. So a
MemPool made by ncclpool.torch (a private pool over a pluggable allocator) has each torch segment
registered by torch beside ncclpool's own registration (a local one, or a window) of the ncclpool
segment it was carved from. NCCL 2.30's ncclCommRegister counts a registration inside a range it
already holds as a reference to that one (src/register/register.cc), so nothing is mapped twice, but
every call logs "register comm C buffer B size S" (NCCL_DEBUG_SUBSYS=REG).

The probe makes a pool of each kind (--kinds, default local and symmetric), registers it with the
default group and a second group, and allocates tensors that make torch segments of three sizes; then
per tensor and group a first and a second all-reduce (timed, values checked); then frees the tensors,
trims, lets torch release its segments, trims again, deregisters the groups and releases the pool; a last pool stays live
through destroy_process_group. After each step it reads what NCCL logged since the step before
(NCCL_DEBUG_FILE, one per rank, under --log-dir) and this rank's stderr (where torch's warnings go):
"register comm" lines per group, told apart by range: ncclpool's (as many as its communicators' own
registration counters rose) and the hook's (the range of a torch segment: ncclpool's MemPool or the
default pool); window exports ("Segment ... Type"), IPC registrations and deregistrations, NCCL's
WARN lines and torch's warnings. Rank 0 writes one JSON (--json) with every step of every rank, a
table per torch segment and the figures, prints 'PROBE ...' lines and a RESULT line (FAILED on a
wrong result or an error; what the hook does is measured, not judged).

--refusal (torch 2.14 with TORCH_DIST_USE_NCCL2=1, whose nccl2 has no _comm_ptr): ncclpool.torch must
refuse the group on every rank with an error naming TORCH_DIST_USE_NCCL2=0, before any collective.
"""
import argparse
import gc
import json
import os
import re
import sys
import time
import types

RANK = int(os.environ.get("RANK", "0"))
ARGS = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ARGS.add_argument("--json", default="")
ARGS.add_argument("--log-dir", default="build/probe-nccl2")
ARGS.add_argument("--kinds", default="local,symmetric")
ARGS.add_argument("--refusal", action="store_true")
args = ARGS.parse_args()
os.makedirs(args.log_dir, exist_ok=True)
# Before NCCL's first call (torch's or ncclpool's): NCCL reads these once.
NCCL_LOG = os.path.join(args.log_dir, f"nccl.rank{RANK}.log")
ERR_LOG = os.path.join(args.log_dir, f"stderr.rank{RANK}.log")
for stale in (NCCL_LOG, ERR_LOG, os.path.join(args.log_dir, f"probe.rank{RANK}.json")):
    if os.path.exists(stale):
        os.remove(stale)
os.environ.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,REG,DESTROY", NCCL_DEBUG_FILE=NCCL_LOG)
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "python"))
import ncclpool  # noqa: E402
import ncclpool.torch as layer  # noqa: E402
from ncclpool import errors  # noqa: E402
from ncclpool.torch import binding, state, versions  # noqa: E402

from check_support import destroy_within  # noqa: E402  (this folder)

MiB = 1 << 20
# float32 elements: a 2 MiB torch segment (small pool), a 20 MiB one, and one of 96 MiB (at least
# 64 MiB: ncclpool gives it a segment of its own, the same range as torch's)
TENSORS = (("small", 64 << 10), ("mid", 1 << 20), ("large", 24 << 20))
REG = re.compile(r"register comm (0x[0-9a-f]+) buffer (0x[0-9a-f]+) size (\d+)")
WINDOW = re.compile(r"\] Segment \d+, Type : \d+, numSegments : \d+, Segment size : (\d+)")
IPC_REG = re.compile(r"IPC register buffer (0x[0-9a-f]+) size (\d+)")
IPC_REUSE = re.compile(r"IPC reuse buffer (0x[0-9a-f]+)")
IPC_DEREG = re.compile(r"IPC deregistered buffer (0x[0-9a-f]+)")
CLEANUP = re.compile(r"Cleanup buffer (0x[0-9a-f]+) pages")
TORCH_WARNING = re.compile(r"(?i)warn.*(nccl|regist|window|segment|hook)|(nccl|regist|window|segment|hook).*warn")


class Tail:
    """What a file gained since the last call."""

    def __init__(self, path):
        self.path, self.offset = path, 0

    def new(self) -> str:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                text = f.read()
        except FileNotFoundError:
            return ""
        self.offset += len(text)
        return text.decode(errors="replace")


class Probe:
    def __init__(self, rank, world, device):
        self.rank, self.world, self.device = rank, world, device
        self.nccl, self.err = Tail(NCCL_LOG), Tail(ERR_LOG)
        self.groups = {}          # name -> process group
        self.comm_names = {}      # hex comm pointer -> group name
        self.steps, self.collectives, self.segments, self.errors = [], [], [], []
        self.counters = {}        # (pool name, comm pointer) -> ncclpool's registrations counter at the last step
        self.pools = {}           # pool label -> MemPool (or its stand-in once torch's reference is dropped)
        self.default_segments = set()
        self.all_regs = []        # (step, comm, buffer, size) of every register line
        self.pool_segments = {}   # (address, size) -> pool label
        self.wrong = 0

    # -- what the logs say --
    def torch_segments(self):
        for s in torch.cuda.memory_snapshot():
            if s.get("device", self.device) != self.device:
                continue
            key = (s["address"], s["total_size"])
            if tuple(s.get("segment_pool_id", (0, 0))) == (0, 0):
                self.default_segments.add(key)
            else:
                label = next((lbl for lbl, mp in self.pools.items() if tuple(mp.id) == tuple(s["segment_pool_id"])), "other pool")
                self.pool_segments.setdefault(key, label)

    def ncclpool_deltas(self):
        """Per group: how many registrations ncclpool's communicators made since the last step."""
        out = {}
        for b in list(state.bindings.values()):
            for ptr, a in list(b.attachments.items()):
                if not a.comm.attached:
                    continue
                now = a.comm.stats()["registrations"]
                key = (b.pool.name, ptr)
                name = self.comm_names.get(hex(ptr), hex(ptr))
                out[name] = out.get(name, 0) + now - self.counters.get(key, 0)
                self.counters[key] = now
        return out

    def step(self, name, **extra):
        torch.cuda.synchronize(self.device)
        self.torch_segments()
        text, err = self.nccl.new(), self.err.new()
        ncclpool_made = self.ncclpool_deltas()
        per_group = {}
        for comm, buf, size in REG.findall(text):
            per_group.setdefault(self.comm_names.get(comm, comm), []).append((int(buf, 16), int(size)))
        groups = {}
        for group, regs in per_group.items():
            owed = ncclpool_made.get(group, 0)
            # ncclpool's registrations are made first (in the allocation, before torch's SEGMENT_ALLOC
            # event; windows at commit): the lines not shaped like a torch segment, then the earliest others
            counts = dict(ncclpool=0, hook_ncclpool_mempool=0, hook_default_pool=0, hook_other=0)
            shaped = [r for r in regs if r in self.pool_segments or r in self.default_segments]
            unshaped = len(regs) - len(shaped)
            counts["ncclpool"] = min(owed, len(regs))
            rest = shaped[max(0, owed - unshaped):]
            counts["hook_other"] = max(0, unshaped - owed)
            for r in rest:
                counts["hook_ncclpool_mempool" if r in self.pool_segments else "hook_default_pool"] += 1
            counts["lines"] = len(regs)
            groups[group] = counts
        for group, made in ncclpool_made.items():
            groups.setdefault(group, dict(lines=0, ncclpool=0, hook_ncclpool_mempool=0, hook_default_pool=0, hook_other=0))
            groups[group]["ncclpool_counter"] = made
        record = dict(step=name, groups=groups, window_exports=len(WINDOW.findall(text)),
                      ipc_register=len(IPC_REG.findall(text)), ipc_reuse=len(IPC_REUSE.findall(text)),
                      ipc_deregister=len(IPC_DEREG.findall(text)), cleanup=len(CLEANUP.findall(text)),
                      nccl_warnings=[line.strip()[-300:] for line in text.splitlines() if " NCCL WARN " in line],
                      torch_warnings=[line.strip()[-300:] for line in err.splitlines() if TORCH_WARNING.search(line)], **extra)
        self.steps.append(record)
        self.all_regs += [(name, c, int(b, 16), int(s)) for c, b, s in REG.findall(text)]
        return record

    # -- the work --
    def sync(self, group):
        dist.all_reduce(self.token, group=group)
        torch.cuda.synchronize(self.device)

    def all_reduce_checked(self, label, tensor_name, t, group_name):
        group = self.groups[group_name]
        expected = self.world * (self.world + 1) / 2
        times = []
        for _ in range(2):  # the first on a fresh segment, then the same again
            t.fill_(self.rank + 1)
            self.sync(group)
            t0 = time.perf_counter()
            dist.all_reduce(t, group=group)
            torch.cuda.synchronize(self.device)
            times.append((time.perf_counter() - t0) * 1e3)
            if not bool(torch.all(t == expected)):
                self.wrong += 1
                self.errors.append(f"{label} {tensor_name} on {group_name}: wrong all-reduce result")
        self.collectives.append(dict(pool=label, tensor=tensor_name, bytes=t.numel() * 4, group=group_name,
                                     first_ms=times[0], second_ms=times[1]))

    def pool_run(self, kind):
        label = f"{kind} pool"
        groups = [self.groups["world"], self.groups["second"]]
        mp = layer.create_nccl_mem_pool(kind=kind)
        self.pools[label] = mp
        npool = layer.ncclpool_pool(mp)
        self.step(f"{label}: created")
        with layer.MultiGroupMemPoolAllocator(mp, groups):
            pass
        self.step(f"{label}: groups attached")
        tensors = {}
        for name, numel in TENSORS:
            torch.cuda.synchronize(self.device)
            t0 = time.perf_counter()
            with layer.MultiGroupMemPoolAllocator(mp, groups):
                tensors[name] = torch.empty(numel, dtype=torch.float32, device=f"cuda:{self.device}")
            torch.cuda.synchronize(self.device)
            ms = (time.perf_counter() - t0) * 1e3
            self.step(f"{label}: {name} allocated", alloc_ms=ms, address=hex(tensors[name].data_ptr()))
        for name, t in tensors.items():
            for group_name in ("world", "second"):
                self.all_reduce_checked(label, name, t, group_name)
                self.step(f"{label}: {name} all-reduce on {group_name}")
        handles = {}
        for name, t in tensors.items():
            for group_name, group in (("world", self.groups["world"]), ("second", self.groups["second"])):
                a = binding.attachment_of(binding.binding_of(mp), group)
                handles[f"{name} {group_name}"] = dict(local=bool(a and a.comm.handle_of(t.data_ptr())),
                                                       window=bool(a and a.comm.window_of(t.data_ptr())))
        del t
        tensors.clear()
        self.step(f"{label}: tensors freed", ncclpool_handles=handles)
        self.step(f"{label}: trimmed while torch holds its segments", trimmed_bytes=npool.trim())
        pool_id = tuple(mp.id)
        self.pools[label] = types.SimpleNamespace(id=pool_id)  # the probe's own reference goes
        del mp
        gc.collect()
        torch.cuda.empty_cache()
        held = sum(1 for s in torch.cuda.memory_snapshot() if tuple(s.get("segment_pool_id", (0, 0))) == pool_id)
        self.step(f"{label}: the user's MemPool reference dropped, empty_cache", torch_segments_left=held)
        # ncclpool.torch's table still holds the MemPool (state.Binding.mempool): dropped here, so that
        # torch destroys it and frees its segments (SEGMENT_FREE: the hook deregisters them)
        state.bindings[pool_id].mempool = None
        gc.collect()
        torch.cuda.empty_cache()
        held_after = sum(1 for s in torch.cuda.memory_snapshot() if tuple(s.get("segment_pool_id", (0, 0))) == pool_id)
        self.step(f"{label}: ncclpool.torch's MemPool reference dropped, empty_cache", torch_segments_left=held_after)
        self.step(f"{label}: trimmed", trimmed_bytes=npool.trim())
        for group in groups:  # collective for windows: release_mem_pool leaves those to the caller
            layer.deregister_mem_pool(self.pools[label], group)
        self.step(f"{label}: groups deregistered (deregister_mem_pool)")
        layer.release_mem_pool(self.pools[label])
        self.step(f"{label}: released (release_mem_pool)")

    def run(self, kinds):
        self.token = torch.zeros(1, device=f"cuda:{self.device}")
        self.groups["world"] = dist.group.WORLD
        self.groups["second"] = dist.new_group(list(range(self.world)))
        for name, g in self.groups.items():
            self.comm_names[hex(binding._comm_ptr(g, self.device))] = name
            self.sync(g)
        self.step("process groups made")
        plain = {name: torch.empty(numel, dtype=torch.float32, device=f"cuda:{self.device}") for name, numel in TENSORS}
        self.step("plain tensors allocated (torch's default pool)")
        for name, t in plain.items():
            for group_name in ("world", "second"):
                self.all_reduce_checked("plain", name, t, group_name)
        self.step("plain tensors: all-reduce")
        for kind in kinds:
            try:
                self.pool_run(kind)
            except Exception as e:  # noqa: BLE001 - recorded; the next steps may still say something
                self.errors.append(f"{kind} pool: {type(e).__name__}: {str(e)[:400]}")
                self.step(f"{kind} pool: FAILED ({type(e).__name__})")
        live = layer.create_nccl_mem_pool(kind="local")
        self.pools["live pool"] = live
        with layer.MultiGroupMemPoolAllocator(live, [self.groups["world"], self.groups["second"]]):
            kept = torch.empty(TENSORS[1][1], dtype=torch.float32, device=f"cuda:{self.device}")
        self.all_reduce_checked("live pool", "mid", kept, "world")
        self.step("live pool: allocated, all-reduce")
        self.table()
        ok, seconds, _ = destroy_within(self.rank, self.world, "probe_nccl2", 120)
        self.step("destroy_process_group", seconds=seconds, finished=ok)
        if not ok:
            self.errors.append("destroy_process_group did not finish on every rank")
        del kept
        pool_id = tuple(live.id)
        self.pools["live pool"] = types.SimpleNamespace(id=pool_id)
        del live
        state.bindings[pool_id].mempool = None
        gc.collect()
        torch.cuda.empty_cache()
        self.step("after teardown: the live pool's tensor freed, its MemPool dropped")
        layer.release_mem_pool(self.pools["live pool"])
        self.step("after teardown: the live pool released")

    def table(self):
        """Per torch segment of the probe's pools: the register lines of its exact range, per group."""
        regs = self.all_regs
        for (addr, size), label in sorted(self.pool_segments.items(), key=lambda kv: (kv[1], kv[0])):
            per_group = {}
            for _, comm, b, s in regs:
                g = self.comm_names.get(comm, comm)
                d = per_group.setdefault(g, dict(exact=0, covering=0))
                if (b, s) == (addr, size):
                    d["exact"] += 1
                elif b <= addr and addr + size <= b + s:
                    d["covering"] += 1
            self.segments.append(dict(pool=label, address=hex(addr), bytes=size, register_lines=per_group))


def summarize(ranks):
    """The figures over every rank's steps (a rank that failed early has only its error)."""
    ranks = [dict(dict(steps=[], collectives=[], wrong=0, errors=[]), **r) for r in ranks]
    for r in ranks:
        if "error" in r:
            r["errors"] = r["errors"] + [f"rank {r.get('rank')}: {r['error']}"]
    def total(key):
        out = {}
        for r in ranks:
            for s in r["steps"]:
                for g, c in s["groups"].items():
                    if g in ("world", "second"):
                        out[g] = out.get(g, 0) + c.get(key, 0)
        return out
    def per_step(key):  # step -> the count over every rank, where not 0
        out = {}
        for r in ranks:
            for s in r["steps"]:
                if s.get(key):
                    out[s["step"]] = out.get(s["step"], 0) + s[key]
        return out
    first = {}
    for r in ranks:
        for c in r["collectives"]:
            first.setdefault((c["pool"], c["tensor"], c["group"]), []).append((c["first_ms"], c["second_ms"]))
    return dict(
        hook_registrations_on_ncclpool_segments=total("hook_ncclpool_mempool"),
        hook_registrations_on_default_pool=total("hook_default_pool"),
        hook_registrations_other=total("hook_other"),
        ncclpool_registrations=total("ncclpool"),
        collectives_ms={f"{p}, {t}, {g}": dict(first=round(max(x[0] for x in v), 3), second=round(max(x[1] for x in v), 3))
                        for (p, t, g), v in first.items()},
        wrong=sum(r["wrong"] for r in ranks),
        nccl_warnings=sum(len(s["nccl_warnings"]) for r in ranks for s in r["steps"]),
        torch_warnings=sum(len(s["torch_warnings"]) for r in ranks for s in r["steps"]),
        ipc_deregistered=per_step("ipc_deregister"), cleanup=per_step("cleanup"),
        errors=[e for r in ranks for e in r["errors"]])


def refusal(rank, device):
    """torch 2.14's opt-in nccl2: ncclpool.torch refuses it, on every rank, naming TORCH_DIST_USE_NCCL2=0."""
    mp = layer.create_nccl_mem_pool(kind="local")
    try:
        with layer.nccl_mem(mp):
            torch.empty(1 << 20, device=f"cuda:{device}")
        return dict(refused=False, message="no error")
    except errors.Unsupported as e:
        return dict(refused="TORCH_DIST_USE_NCCL2=0" in str(e), message=str(e)[:400])
    except Exception as e:  # noqa: BLE001 - the wrong error is the outcome
        return dict(refused=False, message=f"{type(e).__name__}: {str(e)[:400]}")


def main():
    saved_stderr = os.dup(2)
    fd = os.open(ERR_LOG, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 2)
    os.close(fd)
    rank, world = RANK, int(os.environ.get("WORLD_SIZE", "1"))
    device = int(os.environ.get("LOCAL_RANK", rank))
    out = dict(torch=torch.__version__, nccl_built=versions._nccl_version(), world=world, rank_results=[],
               alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), use_nccl2=os.environ.get("TORCH_DIST_USE_NCCL2", "(unset)"))
    result = "RESULT FAILED: nothing ran"
    lines = []
    try:
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=torch.device("cuda", device))
        out["implementation"] = versions.process_group_implementation()
        out["nccl_loaded"] = ncclpool.features().get("nccl_version")
        if args.refusal:
            mine = refusal(rank, device)
            ranks = [None] * world
            dist.all_gather_object(ranks, mine)
            out["rank_results"] = ranks
            ok = all(r["refused"] for r in ranks)
            destroy_within(rank, world, "probe_refusal", 60)
            result = "RESULT ok" if ok else "RESULT FAILED: " + "; ".join(f"rank {i}: {r['message'][:160]}" for i, r in enumerate(ranks))
            lines = [f"PROBE refusal of {out['implementation']}: " + ("every rank, naming TORCH_DIST_USE_NCCL2=0" if ok else "NOT on every rank")]
        else:
            probe = Probe(rank, world, device)
            probe.run([k for k in args.kinds.split(",") if k])
            mine = dict(rank=rank, steps=probe.steps, collectives=probe.collectives, segments=probe.segments,
                        wrong=probe.wrong, errors=probe.errors)
            ranks = gather_after_teardown(mine, rank, world)  # the groups are gone by now
            out["rank_results"] = ranks
            if rank != 0:
                lines = []
                result = "RESULT ok" if not (probe.wrong or probe.errors) else "RESULT FAILED: " + "; ".join(probe.errors)[:300]
            elif ranks and all(ranks):
                out["summary"] = s = summarize(ranks)
                lines = probe_lines(out, s)
                bad = s["wrong"] or s["errors"]
                result = "RESULT ok" if not bad else f"RESULT FAILED: {s['wrong']} wrong result(s); " + "; ".join(s["errors"])[:300]
            else:
                lines, result = [], "RESULT FAILED: not every rank's steps came back"
    except Exception as e:  # noqa: BLE001 - the outcome
        out["error"] = f"{type(e).__name__}: {str(e)[:600]}"
        lines, result = [], f"RESULT FAILED: {out['error'][:300]}"
        if not args.refusal:  # rank 0's JSON gets what the others said, if they get that far
            out["rank_results"] = gather_after_teardown(dict(rank=rank, error=out["error"]), rank, world, wait_s=15)
    finally:
        sys.stderr.flush()
        os.dup2(saved_stderr, 2)
        with open(ERR_LOG, errors="replace") as f:
            sys.stderr.write(f.read())
        sys.stderr.flush()
    if rank == 0:
        for line in lines:
            print(line, flush=True)
        print(result, flush=True)
        out["result"] = result
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1, default=str)
    # The other ranks end with 0 whatever happened (their record is in rank 0's JSON): a rank that
    # exits non-zero first makes torchrun stop rank 0 before it writes anything.
    return 0 if result == "RESULT ok" or rank != 0 else 1


def gather_after_teardown(mine, rank, world, wait_s=120):
    """Every rank's record on rank 0 (the others get []), through a file per rank in --log-dir: the
    process groups are destroyed by now (the probe measures teardown too)."""
    path = os.path.join(args.log_dir, f"probe.rank{rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(mine, f, default=str)
    os.replace(path + ".tmp", path)
    if rank != 0:
        return []
    files = [os.path.join(args.log_dir, f"probe.rank{r}.json") for r in range(world)]
    deadline = time.time() + wait_s
    while time.time() < deadline and not all(os.path.exists(p) for p in files):
        time.sleep(0.5)
    return [json.load(open(p)) if os.path.exists(p) else None for p in files]


def probe_lines(out, s):
    def pair(d):
        return ", ".join(f"{g} {n}" for g, n in sorted(d.items())) or "none"
    first = [f"{k}: {v['first']:.2f}/{v['second']:.2f}" for k, v in s["collectives_ms"].items() if "mid" in k and "world" in k]
    return [f"PROBE {out['torch']} {out.get('implementation')}, NCCL {out.get('nccl_loaded')}: torch's hook registered "
            f"ncclpool's MemPool segments: {pair(s['hook_registrations_on_ncclpool_segments'])}; the default pool's: "
            f"{pair(s['hook_registrations_on_default_pool'])}; ncclpool's own: {pair(s['ncclpool_registrations'])}",
            "PROBE first/second all-reduce ms (20 MiB segment, world): " + "; ".join(first),
            f"PROBE results: {'right' if not s['wrong'] else str(s['wrong']) + ' WRONG'}; NCCL WARN lines {s['nccl_warnings']}, "
            f"torch warnings {s['torch_warnings']}; IPC deregistrations per step: {s['ipc_deregistered'] or 'none'}"]


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
