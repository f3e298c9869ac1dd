"""The symmetric fence (issue 46) attacked where one rank alone fails or differs: the fence before a
wrapped collective raising on one rank (ncclpool.torch's torch.distributed wrappers, ncclpool.sglang's
PyNccl wrappers) must never decide whether that rank enters the collective; a group whose pool has
windows on one rank and none on another; one rank that decided ``fence`` at an auto pool's attach.
Ranks are threads over the simulator and the stand-in torch (its groups meet at a rendezvous, so a
rank that skips a collective leaves the others waiting: BrokenBarrierError)."""
import itertools
import sys
import types

import pytest

import ncclpool
from ncclpool import errors

from ranks import current, lock_per_rank, run_ranks
from torch_stand_in import ProcessGroup, Rendezvous

MiB = 1 << 20


def _fenced_torch_layer(layer, monkeypatch, failing_rank):
    """init() in a process whose decision is `fence`; ncclpool.symmetric_fence raises on `failing_rank`
    (a CUDA launch error, as the fence's launch or its first-use set-up reports it). Returns the
    fences launched per rank."""
    features = {"nccl_available": True, "nccl_version": 22809, "why_not": "", "symmetric_kernels_decision": "fence"}
    monkeypatch.setattr(ncclpool, "features", lambda: features)
    fences = {}

    def fence(stream=None):
        r = getattr(current, "rank", 0)
        if r == failing_rank:
            raise errors.BackendError("symmetric fence: cuLaunchKernel: CUDA_ERROR_LAUNCH_FAILED (stand-in)")
        fences.setdefault(r, []).append(stream)
        return True

    monkeypatch.setattr(ncclpool, "symmetric_fence", fence)
    layer.init()
    return fences


def _rig(layer, monkeypatch, size, name="tp", kinds=None):
    """One group of `size` ranks: a SimGroup behind the pools' attaches and stand-in ProcessGroup handles
    that meet at one rendezvous (a short timeout: a rank left waiting fails fast). Each rank thread
    gets its own layer lock (ranks are processes in real life)."""
    sim = ncclpool.SimGroup(name, size, timeout_ms=2000, matching="strict")
    meet = Rendezvous(size, timeout=3.0)
    handles = [ProcessGroup(list(range(size)), p, meet, desc=name) for p in range(size)]
    ptrs = itertools.count(0x9000)
    table = {}
    for p, h in enumerate(handles):
        h._ptr = next(ptrs)
        table[h._ptr] = p
    monkeypatch.setattr(ncclpool.Pool, "attach_nccl", lambda self, ptr, kind=None: self.attach_sim(sim, table[ptr], kind))
    monkeypatch.setattr(layer.binding, "_comm_ptr", lambda g, device: g._ptr)
    lock_per_rank(monkeypatch, layer)
    return sim, handles, meet


class _Stream:
    """A stand-in stream whose synchronize() the wrapper may call as its fallback."""

    def __init__(self, fail=False):
        self.synchronized, self.fail = 0, fail

    def synchronize(self):
        if self.fail:
            raise RuntimeError("CUDA error: an illegal memory access was encountered (stand-in)")
        self.synchronized += 1


@pytest.mark.parametrize("sync_fails,capturing", [(False, False), (True, False), (False, True)])
def test_a_fence_failing_on_one_rank_never_skips_the_torch_collective(torch_layer, monkeypatch, sync_fails, capturing):
    """Rank 0's fence raises before dist.all_reduce on a group attached with windows. Before the fix the
    wrapper raised before the collective there while rank 1 entered it: rank 1 waited forever (here the
    rendezvous breaks). Now every rank enters the collective (the values are reduced over both ranks);
    where the stream's synchronize() stands in for the fence, rank 0 goes on with a warning; where that
    fails too (or in a CUDA graph capture, where the stream cannot be synchronized), rank 0 raises after
    the collective and its pool votes no, so that the pool's next
    agreement fails on every rank (a rank that did not wait there hears at its poll)."""
    layer = torch_layer
    fences = _fenced_torch_layer(layer, monkeypatch, failing_rank=0)
    sim, handles, meet = _rig(layer, monkeypatch, 2)
    mempools = [layer.create_nccl_mem_pool(symmetric=True, source="sim", name="fenced", growth_chunk=4 * MiB) for _ in range(2)]
    streams = [_Stream(fail=sync_fails), _Stream()]
    torch = sys.modules["torch"]
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing and current.rank == 0)
    sync_fails = sync_fails or capturing

    def rank(r):
        pool = layer.ncclpool_pool(mempools[r])
        kept = pool.alloc(MiB)
        layer.register_mem_pool(mempools[r], handles[r])
        torch.cuda.current_stream = lambda device=None: streams[current.rank]
        t = torch.tensor([r + 1.0])
        err = None
        try:
            with pytest.warns(RuntimeWarning, match="symmetric fence") if (r == 0 and not sync_fails) else _nothing():
                layer.dist.all_reduce(t, group=handles[r])
        except errors.Error as e:
            err = f"{type(e).__name__}: {e}"
        commit = None
        try:
            pool.commit()
        except errors.Error as e:
            commit = f"{type(e).__name__}: {e}"
        meet.exchange(r, None)  # the application's next collective
        try:
            pool.poll()  # a rank with nothing pending did not wait at the commit: it hears here
        except errors.Error as e:
            commit = commit or f"{type(e).__name__}: {e}"
        pool.free(kept)
        return t.data, err, commit

    try:
        results, failures = run_ranks(2, rank, timeout=20)
    finally:
        for mp in mempools:
            for c in list(layer.ncclpool_pool(mp).communicators):
                c.forget()
        layer.checks.fence_collectives(False)
    assert failures == [None, None], failures
    assert [res[0] for res in results] == [[3.0], [3.0]], "every rank entered the all-reduce"
    assert len(fences.get(1, [])) == 1 and 0 not in fences
    if sync_fails:
        assert streams[0].synchronized == 0
        assert results[0][1] is not None and "CUDA_ERROR_LAUNCH_FAILED" in results[0][1], results
        assert results[1][1] is None
        assert all(res[2] is not None for res in results), f"the pool's next agreement fails on every rank: {results}"
    else:
        assert streams[0].synchronized == 1, "the stream's synchronize() stood in for the fence"
        assert all(res[1] is None and res[2] is None for res in results), results


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def test_a_group_with_windows_on_one_rank_only_still_pairs_its_collectives(torch_layer, monkeypatch):
    """Rank 0's pool attached the group with windows, rank 1's pool is attached to another group only
    (the application registered its pools differently): the fence is rank 0's alone, a local launch;
    the collective pairs on both ranks."""
    layer = torch_layer
    fences = _fenced_torch_layer(layer, monkeypatch, failing_rank=None)
    sim, handles, meet = _rig(layer, monkeypatch, 1, name="solo")
    world = ProcessGroup([0, 1], 0, Rendezvous(2, timeout=3.0), desc="world")
    worlds = [world, ProcessGroup([0, 1], 1, world.rendezvous, desc="world")]
    mempool = layer.create_nccl_mem_pool(symmetric=True, source="sim", name="one-rank", growth_chunk=4 * MiB)
    torch = sys.modules["torch"]
    monkeypatch.setattr(layer.binding, "_comm_ptr", lambda g, device: handles[0]._ptr)
    layer.register_mem_pool(mempool, worlds[0])  # rank 0's world group has windows (through the 1-rank sim)

    def rank(r):
        t = torch.tensor([1.0])
        layer.dist.all_reduce(t, group=worlds[r])
        return t.data

    try:
        results, failures = run_ranks(2, rank, timeout=20)
    finally:
        for c in list(layer.ncclpool_pool(mempool).communicators):
            c.forget()
        layer.checks.fence_collectives(False)
    assert failures == [None, None], failures
    assert results == [[2.0], [2.0]]
    assert len(fences.get(0, [])) == 1 and 1 not in fences


def test_a_fence_failing_on_one_rank_never_skips_the_pynccl_collective(pynccl, monkeypatch):
    """ncclpool.sglang's wrapper: the fence before PyNccl's all_reduce raises (and so does the stream's
    synchronize): the original collective is still called, then the error raised, and the pool of the
    attachment votes no."""
    fence, PyNcclCommunicator, CudaTensor, _ = pynccl

    def failing(stream=None):
        raise errors.BackendError("symmetric fence: cuLaunchKernel: CUDA_ERROR_LAUNCH_FAILED (stand-in)")
    monkeypatch.setattr(ncclpool, "symmetric_fence", failing)
    votes = []
    pool = types.SimpleNamespace(vote_no=votes.append)
    window = types.SimpleNamespace(attached=True, pool=pool, window_of=lambda ptr: 0xabc)
    fence.install({0x77: types.SimpleNamespace(comm=window)})
    comm = PyNcclCommunicator(0x77)
    with pytest.raises(errors.BackendError, match="CUDA_ERROR_LAUNCH_FAILED"):
        comm.all_reduce(CudaTensor(0x1800), stream=_Stream(fail=True))
    assert len(comm.calls) == 1, "the collective was entered though the fence failed"
    assert len(votes) == 1 and "symmetric fence" in votes[0]
    s = _Stream()
    with pytest.warns(RuntimeWarning, match="symmetric fence"):
        comm.all_reduce(CudaTensor(0x1800), stream=s)
    assert len(comm.calls) == 2 and s.synchronized == 1
