"""ncclpool.torch when an exception is raised inside a context on one rank alone (a third review of
issue 44): every kind of context, MemPoolAllocatorWithoutRegistration included (it ends no scope: the
failure is still that rank's "no" at the next agreement point)."""
import pytest

import ncclpool

from ranks import run_ranks
from lockstep_judge import check, finish
from test_torch_lockstep import rig

MiB = 1 << 20


def _run(layer, monkeypatch, body, nranks=2):
    g = rig(layer, monkeypatch, {"tp": 2})
    sim, handles = g["tp"]
    mempools = {r: layer.create_nccl_mem_pool(symmetric=True, source="sim", name="shared", growth_chunk=8 * MiB)
                for r in range(2)}
    lib = ncclpool.library()

    def rank(r):
        mp = mempools[r]
        npool = layer.ncclpool_pool(mp)
        err = None
        try:
            body(layer, r, mp, handles[r], lib)
        except Exception as e:  # noqa: BLE001
            err = f"{type(e).__name__}: {e}"[:300]
        return finish(npool, sim, r, 3, err, commit=True)

    try:
        results, failures = run_ranks(2, rank)
    finally:
        for r in range(2):
            for c in list(layer.ncclpool_pool(mempools[r]).communicators):
                c.forget()
    check(results, failures)


@pytest.mark.parametrize("ctx", ["without_registration", "nccl_mem", "use_mem_pool", "nccl_mem_late"])
def test_exception_inside_a_context_on_one_rank(torch_layer, monkeypatch, ctx):
    def body(layer, r, mp, handle, lib):
        with layer.nccl_mem(mp, group=handle):
            lib.ncclpool_torch_alloc(2 * MiB, 0, None)
        n = 20 if ctx == "nccl_mem_late" else 1
        first = None
        for i in range(n):
            try:
                c = {"without_registration": lambda: layer.MemPoolAllocatorWithoutRegistration(mp),
                     "nccl_mem": lambda: layer.nccl_mem(mp, group=handle),
                     "nccl_mem_late": lambda: layer.nccl_mem(mp, group=handle),
                     "use_mem_pool": lambda: layer.use_mem_pool(mp)}[ctx]()
                with c:
                    if r == 0 and i == n - 1:
                        raise KeyError("a kernel failed on rank 0")
            except Exception as e:  # noqa: BLE001
                first = first or e
        if first:
            raise first
    _run(torch_layer, monkeypatch, body)
