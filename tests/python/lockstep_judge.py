"""How the one-rank fault tests of the Python layers judge an outcome (test_sglang_lockstep_*.py,
test_torch_lockstep*.py):
after the fault, the application's next collective must pair on every rank, no rank may time out,
and every rank ends in an error or none does."""
import sys

from ncclpool import errors

from ranks import current
from test_sglang_lockstep import App


def finish(pool, sims, r, arg, err, commit=False):
    """After a program on rank r: the pool's next agreement point (commit=True), the application's next
    collective on each simulated group in `sims` (one or a list), then the pool's poll (a rank that did
    not wait hears there). `pool`: the rank's ncclpool.Pool, or None where it made none. Returns (this
    rank's first error or None, the application's error or None)."""
    app = None
    if commit:
        try:
            if pool is not None:
                pool.commit()
        except Exception as e:  # noqa: BLE001 - the judge's input
            err = err or f"commit: {type(e).__name__}: {e}"[:300]
    for i, sim in enumerate(sims if isinstance(sims, (list, tuple)) else [sims]):
        try:
            App(sim, r).collective(arg + i)
        except errors.Error as e:
            app = app or str(e)[:300]
    try:
        if pool is not None:
            pool.poll()
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


def arm_stream_fence(sg, monkeypatch):
    """The stream fence before a collective step (torch.cuda.current_stream().synchronize()) raises once
    on rank 0 after `armed["on"] = True` (an asynchronous CUDA error surfacing there). Returns `armed`."""
    fake, armed, original = sg.torch, {"on": False}, sg.torch.stream_synchronize

    def sync():
        if armed["on"] and current.rank == 0:
            armed["on"] = False
            raise RuntimeError("CUDA error: stand-in asynchronous error surfacing at the stream fence")
        original()
    monkeypatch.setattr(fake, "stream_synchronize", sync)
    return armed


def arm_device_fence(sg, monkeypatch, nth=1):
    """The device fence after a collective step (torch.cuda.synchronize()) raises once on rank 0, at its
    nth call after `armed["on"] = True`. Returns `armed`."""
    fake, armed, original = sg.torch, {"on": False, "n": 0}, sg.torch.device_synchronize

    def sync(device=None):
        if armed["on"] and current.rank == 0:
            armed["n"] += 1
            if armed["n"] == nth:
                armed["on"] = False
                raise RuntimeError("CUDA error: an illegal memory access was encountered (late, at the device fence)")
        original(device)
    monkeypatch.setattr(fake, "device_synchronize", sync)
    monkeypatch.setattr(sys.modules["torch"].cuda, "synchronize", sync)
    return armed
