"""Simulated ranks for the Python tests: fn(rank) on one thread per rank, each thread knowing its
rank. What a test makes rank-local (a setting read on some ranks only, a vote, a failure armed on
rank 0, a lock of each rank's own) reads ``current.rank``."""
import threading

current = threading.local()  # .rank: the rank this thread runs (absent outside run_ranks' threads)


def run_ranks(n, fn, timeout=None):
    """fn(rank) on n threads, the simulated ranks (named rank0, rank1, ...); ([result], [exception or
    None]) in rank order. With `timeout` seconds, a rank still running then fails the test: the ranks
    did not make the same collectives, and one waits for the others."""
    results, failures = [None] * n, [None] * n

    def body(r):
        current.rank = r
        threading.current_thread().name = f"rank{r}"
        try:
            results[r] = fn(r)
        except BaseException as e:  # noqa: BLE001 - each rank's outcome is what the tests check
            failures[r] = e

    threads = [threading.Thread(target=body, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a rank is still waiting: the ranks did not do the same collectives"
    return results, failures


def rank_outcomes(n, fn, timeout=30):
    """run_ranks as [("ok", result) or ("raised", exception)] in rank order."""
    results, failures = run_ranks(n, fn, timeout)
    return [("ok", v) if e is None else ("raised", e) for v, e in zip(results, failures)]


def lock_per_rank(monkeypatch, layer):
    """The torch layer's process lock (layer.state.lock) made one per rank thread: ranks are threads
    of one process here, and one lock would serialize their collective attaches (one real process per
    rank has its own)."""
    tls = threading.local()

    class PerThreadLock:
        def _l(self):
            if not hasattr(tls, "lock"):
                tls.lock = threading.RLock()
            return tls.lock

        def __enter__(self):
            return self._l().__enter__()

        def __exit__(self, *a):
            return self._l().__exit__(*a)
    monkeypatch.setattr(layer.state, "lock", PerThreadLock())
