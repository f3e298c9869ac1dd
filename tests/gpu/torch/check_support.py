"""What the GPU torch checks (check_*.py beside it, run on every rank by torchrun) share: one check's
outcome agreed by every rank, a value gathered from every rank, destroy_process_group() bounded in
time (a teardown hang was reported with ZERO-CTA-policy groups, Megatron-LM PR #5858), and the run
around them (Checks: the CHECK lines, the failures, the notes of the RESULT line). Imported by the
check scripts (their folder is on sys.path when they run)."""
from __future__ import annotations

import os
import threading
import time
import traceback

import torch
import torch.distributed as dist


def passed_everywhere(fn, device: int) -> bool:
    """Runs fn() on this rank (an exception is printed and counts as a failure), then a MIN over WORLD
    of every rank's success: True only where fn passed on every rank, the same answer on each. Every
    rank joins the all-reduce, whatever fn did on it."""
    ok = 1
    try:
        fn()
    except Exception:
        ok = 0
        traceback.print_exc()
    flag = torch.tensor([ok], device=f"cuda:{device}")
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return flag.item() == 1


def same_everywhere(value, world_size: int) -> list:
    """Every rank's `value` (picklable), gathered: [rank 0's, rank 1's, ...]."""
    out = [None] * world_size
    dist.all_gather_object(out, value)
    return out


def destroy_within(rank: int, world_size: int, key: str, timeout_s: float = 120.0) -> tuple[bool, float, int]:
    """Runs destroy_process_group() in a thread (a hang stays there) and waits up to timeout_s. Every
    rank's outcome is counted in the job's store under `key` (the store outlives the groups: torchrun's
    agent keeps it). Returns (every rank finished without error: rank 0 knows, the others speak for
    themselves; this rank's seconds; ranks that finished, as rank 0 counted them)."""
    try:
        store = dist.distributed_c10d._get_default_store()
    except Exception:  # noqa: BLE001 - then each rank speaks for itself
        store = None
    done, errors_seen = threading.Event(), []

    def run():
        try:
            dist.destroy_process_group()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors_seen.append(e)
        finally:
            done.set()

    t0 = time.perf_counter()
    threading.Thread(target=run, daemon=True).start()
    finished = done.wait(timeout_s)
    seconds = time.perf_counter() - t0
    ok = finished and not errors_seen
    print(f"rank {rank}: destroy_process_group {'finished' if finished else 'STILL RUNNING'} after {seconds:.1f} s"
          + (f" ({errors_seen[0]!r})" if errors_seen else ""), flush=True)
    oks = 1 if ok else 0
    if store is not None:
        try:
            store.add(f"{key}_ok", oks)
            store.add(f"{key}_done", 1)
            deadline = time.time() + 60
            while rank == 0 and store.add(f"{key}_done", 0) < world_size and time.time() < deadline:
                time.sleep(0.2)
            oks = store.add(f"{key}_ok", 0) if rank == 0 else oks
        except Exception as e:  # noqa: BLE001
            print(f"rank {rank}: the store after teardown: {e!r}", flush=True)
    everyone = oks == world_size if rank == 0 and store is not None else ok
    return everyone, seconds, oks


class Checks:
    """One check script's run on this rank. A script makes one, binds its log, check, same_everywhere
    and teardown to module names, and sets rank, world_size and device once it knows them (main)."""

    def __init__(self, keep_going_variable: str | None = None):
        self.rank = self.world_size = self.device = 0
        self.failures = []  # the failed checks' names, in order (a script may add its own)
        self.notes = []     # what the RESULT line says besides ok/FAILED
        self.keep_going_variable = keep_going_variable  # set to 1, the checks after a failed one still run
        self._gate_failed = False

    def log(self, msg):
        if self.rank == 0:
            print(msg, flush=True)

    def check(self, name, gate=True):
        """Runs a check on every rank; one failing rank fails it (a MIN over WORLD). After a failed gate
        check the later checks are skipped: their collectives could pair with the failed one's (and
        wait out the agreement timeout each). A check made with gate=False runs all its collectives
        before it asserts anything, so its failure leaves the ranks in step and the later checks
        still run."""
        def wrap(fn):
            keep_going = self.keep_going_variable and os.environ.get(self.keep_going_variable) == "1"
            if self._gate_failed and not keep_going:
                hint = f"; {self.keep_going_variable}=1 runs it" if self.keep_going_variable else ""
                self.log(f"CHECK {name}: skipped (an earlier check failed{hint})")
                return fn
            passed = passed_everywhere(fn, self.device)
            if not passed:
                self.failures.append(name)
                self._gate_failed = self._gate_failed or gate
            self.log(f"CHECK {name}: {'ok' if passed else 'FAILED'}")
            return fn
        return wrap

    def same_everywhere(self, value):
        """Every rank's `value` (picklable), gathered: [rank 0's, rank 1's, ...]."""
        return same_everywhere(value, self.world_size)

    def teardown(self, key: str, timeout_s: float = 120.0):
        """destroy_process_group() within timeout_s on every rank (destroy_within, its outcome counted
        in the store under `key`), as a CHECK line; a failure is named 'teardown'."""
        everyone, seconds, oks = destroy_within(self.rank, self.world_size, key, timeout_s)
        self.log(f"CHECK destroy_process_group finishes within {timeout_s:.0f} s on every rank: "
                 f"{'ok' if everyone else 'FAILED'} (rank 0: {seconds:.1f} s; {oks}/{self.world_size} ranks ok)")
        if not everyone:
            self.failures.append("teardown")
        self.notes.append(f"teardown {seconds:.1f} s")
