"""How the one-rank fault tests of the Python layers judge an outcome (test_sglang_lockstep_*.py):
after the fault, the application's next collective must pair on every rank, no rank may time out,
and every rank ends in an error or none does."""
from ncclpool import errors

from test_sglang_lockstep import App


def finish(m, sims, r, arg, err, commit=False):
    """After a program on rank r: the pool's next agreement point (commit=True), the application's next
    collective on each simulated group in `sims` (one or a list), then the pool's poll (a rank that did
    not wait hears there). Returns (this rank's first error or None, the application's error or None)."""
    app = None
    if commit:
        try:
            if m._pool is not None:
                m._pool.commit()
        except Exception as e:  # noqa: BLE001 - the judge's input
            err = err or f"commit: {type(e).__name__}: {e}"[:300]
    for i, sim in enumerate(sims if isinstance(sims, (list, tuple)) else [sims]):
        try:
            App(sim, r).collective(arg + i)
        except errors.Error as e:
            app = app or str(e)[:300]
    try:
        if m._pool is not None:
            m._pool.poll()
    except Exception as e:  # noqa: BLE001
        err = err or f"poll: {type(e).__name__}: {e}"[:300]
    return err, app


def check(results, failures):
    """results: (error, application error) per rank."""
    assert failures == [None] * len(results), failures
    errs = [res[0] is not None for res in results]
    apps = [res[1] for res in results]
    assert all(a is None for a in apps), f"app collective did not pair: {results}"
    assert not any("did not complete within" in (res[0] or "") for res in results), results
    assert all(errs) or not any(errs), f"one rank failed alone: {results}"
