"""ncclpool.torch when one rank alone differs or fails, from a second review (issue 44):
fsdp.enable(copy_engine=True) with a local pool on one rank (it votes first), graph(reserve=) on
one rank, a failed deregistration, a refused local registration under an auto pool, check mode's
buffers differing, FSDP2's allocate raising. Ranks are threads over the stand-ins."""
import contextlib
import sys
import threading

import pytest

import ncclpool
import torch_stand_in
from ncclpool import errors

from ranks import rank_outcomes, run_ranks
from lockstep_judge import check, finish
from test_sglang_lockstep import App
from test_torch_lockstep import rig
from test_torch_copy_engine import fsdp, vote, yes  # noqa: F401

MiB = 1 << 20


def forget_all(layer, mempools):
    for mp in mempools:
        try:
            pool = layer.ncclpool_pool(mp)
        except errors.Error:
            continue
        for c in list(pool.communicators):
            c.forget()


def test_fsdp_enable_copy_engine_true_with_a_local_pool_on_one_rank(fsdp, vote):
    """Rank 0's pool registers locally (another setting there), rank 1's is symmetric; copy_engine=True.
    Rank 0 raises InvalidArgument before the shard group's vote, rank 1 votes and waits."""
    vote(yes)
    shards = torch_stand_in.make_group(2, desc="shard")
    models = [fsdp.Block(shards[r], [fsdp.Block(shards[r])]) for r in range(2)]
    mempools = [fsdp.pool(symmetric=(r != 0)) for r in range(2)]
    out = rank_outcomes(2, lambda r: fsdp.helper.enable(models[r], mempools[r], copy_engine=True))
    kinds = [(k, type(e).__name__, str(e)[:160]) for k, e in out]
    assert all(k == "raised" for k, _ in out), kinds
    assert not any("Broken" in name for _, name, _ in kinds), f"a rank waited for a vote another skipped: {kinds}"


def _graph_capture(monkeypatch, layer, mempools, fail_rank=None):
    who = threading.local()

    @contextlib.contextmanager
    def capture(cuda_graph, pool=None, **kwargs):
        mp = next(m for m in mempools.values() if m.id == pool)
        ncclpool.sim_set_capturing(layer.ncclpool_pool(mp), True)
        try:
            yield
        finally:
            ncclpool.sim_set_capturing(layer.ncclpool_pool(mp), False)
    monkeypatch.setattr(sys.modules["torch"].cuda, "graph", capture, raising=False)
    return who


@pytest.mark.parametrize("fault", ["oom", "fresh_block"])
def test_graph_reserve_differs_on_one_rank(torch_layer, monkeypatch, fault):
    layer = torch_layer
    g = rig(layer, monkeypatch, {"tp": 2})
    sim, handles = g["tp"]
    mempools = {r: layer.create_nccl_mem_pool(symmetric=True, source="sim", name="shared", growth_chunk=8 * MiB)
                for r in range(2)}
    _graph_capture(monkeypatch, layer, mempools)

    def rank(r):
        mp = mempools[r]
        pool = layer.ncclpool_pool(mp)
        with layer.nccl_mem(mp, group=handles[r]):
            pass
        if r == 0:
            if fault == "oom":
                ncclpool.sim_inject_oom(pool, 1)
            else:
                kept = pool.alloc(MiB)
                pool.free(kept)
        err = None
        try:
            with layer.graph(object(), mp, groups=[handles[r]], reserve=16 * MiB):
                pass
        except Exception as e:  # noqa: BLE001
            err = f"{type(e).__name__}: {e}"[:200]
        return finish(pool, sim, r, 3, err)

    try:
        results, failures = run_ranks(2, rank)
    finally:
        forget_all(layer, mempools.values())
    check(results, failures)


@pytest.mark.parametrize("op", ["deregister_window", "deregister_local"])
def test_deregister_failing_on_one_rank(torch_layer, monkeypatch, op):
    layer = torch_layer
    g = rig(layer, monkeypatch, {"tp": 2})
    sim, handles = g["tp"]
    mempools = {r: layer.create_nccl_mem_pool(symmetric=True, source="sim", name="shared", growth_chunk=8 * MiB)
                for r in range(2)}
    sim.inject_failure(op, rank=0, nth=1)

    def rank(r):
        mp = mempools[r]
        pool = layer.ncclpool_pool(mp)
        kept = pool.alloc(MiB)  # noqa: F841
        with layer.nccl_mem(mp, group=handles[r]):
            pass
        err = None
        try:
            layer.deregister_mem_pool(mp, handles[r])
        except Exception as e:  # noqa: BLE001
            err = f"{type(e).__name__}: {e}"[:200]
        app = None
        try:
            App(sim, r).collective(3)
        except errors.Error as e:
            app = str(e)[:300]
        try:
            pool.poll()
        except errors.Error as e:
            err = err or f"poll {type(e).__name__}: {e}"[:200]
        # next use: attach again (both) and a scope end
        try:
            with layer.nccl_mem(mp, group=handles[r]):
                pass
        except Exception as e:  # noqa: BLE001
            err = err or f"reuse {type(e).__name__}: {e}"[:200]
        try:
            App(sim, r).collective(4)
        except errors.Error as e:
            app = app or str(e)[:300]
        return err, app

    try:
        results, failures = run_ranks(2, rank)
    finally:
        forget_all(layer, mempools.values())
    check(results, failures)


def test_register_local_failing_on_one_rank_auto_pool(torch_layer, monkeypatch):
    layer = torch_layer
    g = rig(layer, monkeypatch, {"tp": 2})
    sim, handles = g["tp"]
    mempools = {r: layer.create_nccl_mem_pool(kind="auto", source="sim", name="shared", growth_chunk=8 * MiB)
                for r in range(2)}
    sim.inject_failure("register_local", rank=0, nth=2)  # at growth, after the attach

    def rank(r):
        mp = mempools[r]
        pool = layer.ncclpool_pool(mp)
        kept = pool.alloc(MiB)  # noqa: F841
        err = None
        for i in range(3):
            try:
                with layer.nccl_mem(mp, group=handles[r]):
                    pool.alloc(16 * MiB)  # grows the pool inside (as torch would through the allocator)
            except Exception as e:  # noqa: BLE001
                err = err or f"use {i}: {type(e).__name__}: {e}"[:200]
        return finish(pool, sim, r, 3, err)

    try:
        results, failures = run_ranks(2, rank)
    finally:
        forget_all(layer, mempools.values())
    check(results, failures)


@pytest.mark.parametrize("fault", ["foreign", "cpu", "offset"])
def test_check_collectives_buffers_differ_on_one_rank(torch_layer, monkeypatch, fault):
    layer = torch_layer
    g = rig(layer, monkeypatch, {"tp": 2})
    sim, handles = g["tp"]
    torch = sys.modules["torch"]
    dist = layer.dist
    apps = {}

    class T(torch.Tensor):
        def __init__(self, ptr, cuda=True):
            super().__init__([0])
            self.ptr, self.is_cuda = ptr, cuda

        def data_ptr(self):
            return self.ptr

    def all_reduce(tensor, op=None, group=None, async_op=False):  # the real collective: a user collective on the sim
        apps[group.rank()].collective(11)
    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    monkeypatch.setattr(dist.distributed_c10d, "all_reduce", all_reduce, raising=False)
    mempools = {r: layer.create_nccl_mem_pool(symmetric=True, source="sim", name="shared", growth_chunk=8 * MiB,
                                              check="collectives") for r in range(2)}

    def rank(r):
        mp = mempools[r]
        pool = layer.ncclpool_pool(mp)
        apps[r] = App(sim, r)
        with layer.nccl_mem(mp, group=handles[r]):
            ptr = pool.alloc(MiB)
            ptr2 = pool.alloc(MiB)
        t = T(ptr)
        if r == 0:
            t = {"foreign": T(1 << 50), "cpu": T(ptr, cuda=False), "offset": T(ptr2)}[fault]
        err = None
        try:
            dist.all_reduce(t, group=handles[r])
        except Exception as e:  # noqa: BLE001
            err = f"{type(e).__name__}: {e}"[:200]
        return finish(pool, sim, r, 3, err)

    try:
        results, failures = run_ranks(2, rank)
    finally:
        layer.checks.check_collectives(False) if hasattr(layer, "checks") else None
        forget_all(layer, mempools.values())
    assert failures == [None] * 2, failures
    assert all(app is None for _, app in results), results
    assert all(err for err, _ in results), results


@pytest.mark.parametrize("which", ["all_gather", "reduce_scatter"])
def test_fsdp_allocate_raising_on_one_rank(torch_layer, monkeypatch, which):
    layer = torch_layer
    import ncclpool.torch.fsdp as helper
    g = rig(layer, monkeypatch, {"tp": 2})
    sim, handles = g["tp"]
    torch = sys.modules["torch"]
    tl = threading.local()
    plain = torch.empty
    mempools = {r: layer.create_nccl_mem_pool(symmetric=True, source="sim", name="shared", growth_chunk=8 * MiB)
                for r in range(2)}

    def empty(*a, **k):
        if getattr(tl, "r", None) == 0 and getattr(tl, "arm", False):
            raise RuntimeError("CUDA out of memory")
        layer.ncclpool_pool(mempools[tl.r]).alloc(MiB)  # a new segment on every other rank
        return plain(1)
    monkeypatch.setattr(torch, "empty", empty)

    def rank(r):
        tl.r = r
        mp = mempools[r]
        pool = layer.ncclpool_pool(mp)
        cls = helper.PoolAllGather if which == "all_gather" else helper.PoolReduceScatter
        comm = cls(mp, [handles[r]])
        comm.allocate((4,), dtype="uint8", device="cuda")
        err = None
        tl.arm = True
        try:
            comm.allocate((4,), dtype="uint8", device="cuda")
        except Exception as e:  # noqa: BLE001
            err = f"{type(e).__name__}: {e}"[:200]
        tl.arm = False
        return finish(pool, sim, r, 3, err)

    try:
        results, failures = run_ranks(2, rank)
    finally:
        forget_all(layer, mempools.values())
    check(results, failures)
