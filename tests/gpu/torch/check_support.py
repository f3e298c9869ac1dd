"""What the GPU torch checks (check_*.py beside it, run on every rank by torchrun) share: one check's
outcome agreed by every rank, a value gathered from every rank, and destroy_process_group() bounded
in time (a teardown hang was reported with ZERO-CTA-policy groups, Megatron-LM PR #5858). Imported by
the check scripts (their folder is on sys.path when they run)."""
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
