"""Copy-engine (zero-SM) all-gather in the training benchmarks (bench/fsdp2_bench.py,
bench/megatron_fsdp_bench.py; issue 35, docs/benchmarks/fsdp2.md): a process group with NCCL's ZERO
CTA policy, torch's own symmetric-memory all-gather for FSDP2 (the baseline beside ncclpool's), a
bounded teardown, and the count of the paths NCCL took per collective, read from its INFO log:

    python3 bench/ce_common.py paths LOG...     one line per collective: copy engine / symmetric / kernel

Standard library at import (the drivers and tests/python import it without torch); torch only inside
the functions that are handed it.
"""
import glob
import json
import os
import re
import sys
import threading
import time

NCCL_CTA_POLICY_ZERO = 2  # nccl.h; torch calls it ProcessGroupNCCL.NCCL_CTA_POLICY_ZERO where it has it
TEARDOWN_HUNG_RC = 75  # the process's exit status when destroy_process_group did not return in time
# NCCL's TUNING lines (rank 0): "AllGather [Copy Engine]: N Bytes -> cudaMemcpy", "AllGather
# [Symmetric]: N Bytes -> Kernel ...", "AllGather: N Bytes -> Algo RING proto SIMPLE ..." (2.28-2.30).
NCCL_PATH_LINE = re.compile(r"\b([A-Z][A-Za-z]+)(?: \[(Copy Engine|Symmetric)\])?: (\d+) Bytes -> ")
PATH_NAMES = {"Copy Engine": "copy_engine", "Symmetric": "symmetric", None: "kernel"}
# INIT too: "Init CE" (once per rank whose copy-engine path started) is the one sign of the copy
# engines that every NCCL version logs; 2.28.9 writes no TUNING line for a copy-engine all-gather.
NCCL_LOG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,TUNING"}
# Collectives of at most this many bytes are counted apart ("small"): ncclpool's agreement votes
# (all-gathers of 128-520 bytes) and torch's own small exchanges, which are not the workload's.
SMALL_BYTES = 1024


def zero_cta_options(dist):
    """(ProcessGroupNCCL.Options with the ZERO CTA policy, "") or (None, why this torch cannot make one)."""
    pg_nccl = getattr(dist, "ProcessGroupNCCL", None)
    if pg_nccl is None:
        return None, "torch.distributed has no ProcessGroupNCCL (torch built without NCCL)"
    options = pg_nccl.Options()
    config = getattr(options, "config", None)
    if config is None or not hasattr(config, "cta_policy"):
        return None, "this torch's ProcessGroupNCCL.Options().config has no cta_policy (NCCL's CTA policy cannot be set)"
    config.cta_policy = getattr(pg_nccl, "NCCL_CTA_POLICY_ZERO", NCCL_CTA_POLICY_ZERO)
    return options, ""


def zero_cta_group(dist, ranks):
    """A new process group over `ranks` made with the ZERO CTA policy, or (None, why not). Collective
    (dist.new_group) on every rank; every rank runs the same torch, so all take the same branch."""
    options, why = zero_cta_options(dist)
    if options is None:
        return None, why
    return dist.new_group(list(ranks), pg_options=options), ""


def torch_fsdp_ce_setters(fsdp_module_class):
    """The zero-CTA helpers this torch's FSDPModule has (newer releases: set_copy_engine_all_gather,
    set_symm_mem_for_comm); they run FSDP's all-gather on its own shard group."""
    return [name for name in ("set_copy_engine_all_gather", "set_symm_mem_for_comm") if hasattr(fsdp_module_class, name)]


def torch_symmetric_pool(torch, symm_mem, device):
    """torch's NCCL symmetric-memory pool for `device` (segments from ncclMemAlloc) and how it was
    reached: symm_mem.get_mem_pool where this torch has it, else a MemPool over get_mempool_allocator."""
    symm_mem.set_backend("NCCL")
    if hasattr(symm_mem, "get_mem_pool"):
        return symm_mem.get_mem_pool(device), "symm_mem.get_mem_pool"
    if hasattr(symm_mem, "get_mempool_allocator"):
        return torch.cuda.MemPool(symm_mem.get_mempool_allocator(device)), "torch.cuda.MemPool(symm_mem.get_mempool_allocator)"
    raise RuntimeError("torch.distributed._symmetric_memory has neither get_mem_pool nor get_mempool_allocator: "
                       "no symmetric-memory pool in this torch")


def torch_ce_all_gather(torch, dist, zero_group, device):
    """FSDP2's all-gather on torch's own zero-CTA route: output buffers from torch's symmetric pool,
    each registered as an NCCL symmetric window on zero_group (symm_mem.rendezvous: once per pool
    segment and group, cached by torch), the collective on zero_group. Returns (comm, description).
    FSDP's input is a view into the output (in-place all-gather), so both buffers are windows."""
    import torch.distributed._symmetric_memory as symm_mem
    from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather

    pool, pool_route = torch_symmetric_pool(torch, symm_mem, device)
    # Creates the group's communicator now: rendezvous registers windows with it.
    dist.all_reduce(torch.ones(1, device=device), group=zero_group)
    group_name = zero_group.group_name

    class TorchSymmetricAllGather(AllGather):
        checked = False

        def allocate(self, size, *, dtype, device):
            with torch.cuda.use_mem_pool(pool):
                return torch.empty(*size, dtype=dtype, device=device)

        def __call__(self, output_tensor, input_tensor, group, async_op=False):
            if not self.checked:  # FSDP placed this rank's shard at group.rank(): the ranks must agree
                if group.size() != zero_group.size() or group.rank() != zero_group.rank():
                    raise RuntimeError(f"FSDP's group (rank {group.rank()} of {group.size()}) and the zero-CTA group "
                                       f"(rank {zero_group.rank()} of {zero_group.size()}) differ")
                self.checked = True
            symm_mem.rendezvous(output_tensor, group_name)
            return dist.all_gather_into_tensor(output_tensor, input_tensor, group=zero_group, async_op=async_op)

    return TorchSymmetricAllGather(), f"custom AllGather on the zero-CTA group, buffers from {pool_route} + symm_mem.rendezvous"


def destroy_with_watchdog(dist, timeout_s, exit=os._exit, out=sys.stdout):
    """dist.destroy_process_group() bounded by timeout_s: prints 'TEARDOWN ok S s' or, when it has not
    returned by then, 'TEARDOWN hung ...' and ends the process with TEARDOWN_HUNG_RC (a teardown hang
    with a ZERO-policy group was reported: Megatron-LM PR #5858). Returns True when it finished."""
    done, fired = threading.Event(), threading.Event()

    def watch():
        if not done.wait(timeout_s):
            fired.set()
            print(f"TEARDOWN hung: destroy_process_group did not return in {timeout_s:g} s", file=out, flush=True)
            exit(TEARDOWN_HUNG_RC)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    start = time.perf_counter()
    dist.destroy_process_group()
    done.set()
    if fired.is_set():
        return False
    print(f"TEARDOWN ok {time.perf_counter() - start:.2f} s", file=out, flush=True)
    return True


def teardown_state(lines):
    """'ok', 'hung' or 'unknown' from a run's output (the TEARDOWN lines of every rank)."""
    states = {"hung" if line.startswith("TEARDOWN hung") else "ok" for line in lines if line.startswith("TEARDOWN ")}
    return "hung" if "hung" in states else ("ok" if states else "unknown")


def count_nccl_paths(lines):
    """{collective: {"copy_engine": n, "symmetric": n, "kernel": n}} from NCCL INFO lines (subsystem
    TUNING): how each launch ran. NCCL writes them on rank 0 of each communicator."""
    counts = {}
    for line in lines:
        if "NCCL INFO" not in line:
            continue
        m = NCCL_PATH_LINE.search(line)
        if m:
            per = counts.setdefault(m.group(1), {"copy_engine": 0, "symmetric": 0, "kernel": 0, "small": 0})
            per["small" if int(m.group(3)) <= SMALL_BYTES else PATH_NAMES[m.group(2)]] += 1
        elif "Init CE" in line:
            counts["Init CE"] = counts.get("Init CE", 0) + 1
    return counts


def count_nccl_path_files(pattern):
    """count_nccl_paths over every file matching the glob `pattern`."""
    lines = []
    for path in sorted(glob.glob(pattern)):
        with open(path, errors="replace") as f:
            lines.extend(f)
    return count_nccl_paths(lines)


def format_paths(counts, collective="AllGather"):
    """'copy engine 60, symmetric 0, kernel 2 (+3 of <= 1024 B); Init CE 2' for one collective
    ('none logged' when absent; the Init CE lines of the logs, where any)."""
    c = counts.get(collective)
    init = f"; Init CE {counts['Init CE']}" if counts.get("Init CE") else ""
    if not c or not any(c[k] for k in ("copy_engine", "symmetric", "kernel")):
        small = f" ({c['small']} of <= {SMALL_BYTES} B)" if c and c.get("small") else ""
        return f"none logged{small}{init}"
    small = f" (+{c['small']} of <= {SMALL_BYTES} B)" if c.get("small") else ""
    return f"copy engine {c['copy_engine']}, symmetric {c['symmetric']}, kernel {c['kernel']}{small}{init}"


def main(argv):
    if len(argv) < 2 or argv[0] != "paths":
        sys.exit("usage: python3 bench/ce_common.py paths LOG... (NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING logs)")
    lines = []
    for path in argv[1:]:
        with open(path, errors="replace") as f:
            lines.extend(f)
    counts = count_nccl_paths(lines)
    names = sorted(name for name in counts if name != "Init CE")
    print("; ".join(f"{name}: {format_paths(counts, name)}" for name in names) or "no collective lines (was NCCL_DEBUG_SUBSYS=TUNING set?)")
    print(json.dumps(counts))


if __name__ == "__main__":
    main(sys.argv[1:])
