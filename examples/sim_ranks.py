"""Ranks simulated in threads: ncclpool's pool, registration and agreement on any machine, no GPU.

    python3 examples/sim_ranks.py [--ranks N]

Each rank of a distributed job is a thread here, and a SimGroup stands in for an NCCL communicator
across them (its collectives wait until every rank made the same call). Part 1 is what every GPU
process of a job does with ncclpool; part 2 shows what happens when one rank does something else.

Needs ncclpool: pip install . at the repository root, or a build of this checkout (scripts/run.sh,
or cmake --preset default && cmake --build --preset default), whose python/ and build/default the
example finds by itself.
"""
import argparse
import os
import sys
import textwrap
import threading

try:
    import ncclpool
except ImportError:  # run from a checkout without installing: the package is in ../python
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import ncclpool

MiB = 1 << 20


def run_ranks(n, body):
    """Runs body(rank) for ranks 0..n-1, one thread each, like n processes of one job. Returns one
    result per rank: what body returned, or the exception it raised."""
    results = [None] * n

    def run(rank):
        try:
            results[rank] = body(rank)
        except Exception as e:  # noqa: BLE001 - handed back to the caller, rank by rank
            results[rank] = e

    threads = [threading.Thread(target=run, args=(r,), name=f"rank {r}") for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def make_pool():
    # One pool per rank, as one per GPU process ("sim": host memory, no GPU needed). "symmetric":
    # segments become NCCL windows, which need the same layout on every rank, so placement is
    # deterministic. Pools are matched across ranks by name: give it the same name on every rank.
    return ncclpool.Pool(source="sim", registration="symmetric", name="shared", growth_chunk=64 * MiB)


def part1_ranks_that_agree(world):
    def rank(r):
        lines = []
        pool = make_pool()
        comm = pool.attach_sim(world, r)  # collective: every rank attaches, in the same order

        with pool.scope():
            # New memory: each request gets a segment of its own size here (the pool is young).
            bufs = [pool.alloc(size) for size in (8 * MiB, 24 * MiB, 1 * MiB)]
            lines.append(f"inside the scope: {pool.stats()['segment_count']} segments, "
                         f"{pool.pending} window(s) pending")
        # The scope's exit was an agreement point: the ranks compared what each would register, all
        # said yes, and each registered its windows. Every rank must reach it (same schedule).
        first = comm.stats()
        lines.append(f"after the scope:  {first['registered_segments']} window(s) registered, "
                     f"{pool.pending} pending")

        # Steady state: memory freed and taken again comes from the pool's cache: no new segment,
        # so nothing to register (the expensive NCCL call happened once per segment and group).
        for b in bufs:
            pool.free(b)
        with pool.scope():
            again = pool.alloc(16 * MiB)
        lines.append(f"a second use:     {comm.stats()['registrations'] - first['registrations']} new registration(s)")

        pool.commit()  # an agreement point on demand (collective); nothing is pending, so it registers nothing
        summary = pool.memory_summary() if r == 0 else None
        pool.free(again)
        comm.detach()  # collective: deregisters this group's windows on every rank
        pool.close()
        return lines, summary

    results = run_ranks(world.size, rank)
    for r, result in enumerate(results):
        if isinstance(result, Exception):
            raise SystemExit(f"rank {r} failed: {type(result).__name__}: {result}")
        for line in result[0]:
            print(f"  rank {r}: {line}")
    print("\nrank 0's memory_summary():")
    print(results[0][1])


def part2_one_rank_differs(world):
    def rank(r):
        pool = make_pool()
        comm = pool.attach_sim(world, r)
        bufs = []
        try:
            with pool.scope():
                bufs.append(pool.alloc(8 * MiB))
                if r == world.size - 1:
                    bufs.append(pool.alloc(8 * MiB))  # the last rank makes one segment more: its windows differ
            outcome = "no error (unexpected: the ranks differ)"
        except ncclpool.AgreementError as e:
            # Every rank gets it at the same agreement point (the scope's exit), nothing was
            # registered, and no rank is left waiting in a collective the others never join. The
            # message names what each rank had. The fix is in the program: every rank must make the
            # same requests; until then the windows stay pending and the next agreement fails too.
            outcome = f"AgreementError: {e}"
        pending = pool.pending  # free, detach and close still work as usual
        for b in bufs:
            pool.free(b)
        comm.detach()
        pool.close()
        return outcome, pending

    results = run_ranks(world.size, rank)
    ok = True
    for r, result in enumerate(results):
        if isinstance(result, Exception):
            raise SystemExit(f"rank {r} failed: {type(result).__name__}: {result}")
        outcome, pending = result
        ok = ok and outcome.startswith("AgreementError")
        print(textwrap.fill(f"rank {r}: {outcome}", 100, initial_indent="  ", subsequent_indent=" " * 10))
        print(f"          windows still pending (not registered): {pending}")
    if not ok:
        raise SystemExit("expected an AgreementError on every rank")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=2, help="simulated ranks (threads), at least 2 (default 2)")
    args = ap.parse_args()
    if args.ranks < 2:
        ap.error("--ranks must be at least 2 (part 2 needs a rank that differs from another)")

    print(f"ncclpool {ncclpool.version()}, {args.ranks} simulated ranks (threads)\n")
    # A simulated communicator over `ranks` threads; its collectives give up after timeout_ms
    # (a missing rank is an error, not a hang).
    world = ncclpool.SimGroup("world", args.ranks, timeout_ms=10000)
    print("Part 1: every rank allocates the same, windows are registered after the ranks agree")
    part1_ranks_that_agree(world)
    print("Part 2: the last rank allocates one segment more")
    part2_one_rank_differs(world)
    left = world.live_registrations  # every rank detached: no window may be left behind
    world.close()
    if left:
        raise SystemExit(f"{left} window(s) left registered in the group")
    print(f"\ndone: {args.ranks} simulated ranks, no window left registered")


if __name__ == "__main__":
    main()
