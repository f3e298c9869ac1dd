"""The symmetric fence (issue 46) without a GPU: the C ABI on the simulator (the decision word a
simulated rank reports, the fence's no-op before any decision, features), ncclpool.torch's wrapped
collectives (the fence before each collective of a group attached with windows, FSDP2's helper
through them), and ncclpool.sglang's wrapped PyNccl collectives (only tensors in a window of that
communicator)."""
import sys
import types

import pytest

import ncclpool
from ncclpool import errors

from ranks import run_ranks

MiB = 1 << 20


# ---- the C ABI on the simulator ----

def test_the_fence_does_nothing_before_a_decision_and_counts_its_calls():
    ncclpool.prefer_symmetric_fence()  # no attach decided anything in this process: accepted, idempotent
    ncclpool.prefer_symmetric_fence()
    before = ncclpool.features()
    assert before["symmetric_fence_declared"] is True
    assert before["symmetric_kernels_decided"] is False
    assert before["symmetric_kernels_decision"] in ("on", "fence", "guard", "off")
    assert before["symmetric_fence_kind"] in ("kernel", "memset", "node")
    assert ncclpool.symmetric_fence(None) is False
    assert ncclpool.symmetric_fence(0x1234) is False  # no CUDA call: any handle is fine before the decision
    after = ncclpool.features()
    assert after["symmetric_fence_calls"] == before["symmetric_fence_calls"] + 2
    assert after["symmetric_fences_launched"] == before["symmetric_fences_launched"]
    with pytest.raises(errors.InvalidArgument, match="is not a stream"):
        ncclpool.symmetric_fence("stream")


def test_the_fence_kind_comes_from_the_environment_until_the_decision(monkeypatch):
    monkeypatch.setenv("NCCLPOOL_SYMMETRIC_FENCE", "memset")
    assert ncclpool.features()["symmetric_fence_kind"] == "memset"
    monkeypatch.setenv("NCCLPOOL_SYMMETRIC_FENCE", "kernel")
    assert ncclpool.features()["symmetric_fence_kind"] == "kernel"


@pytest.mark.parametrize("others,alone", [("guard", "fence"), ("on", "fence"), ("fence", "off")])
def test_one_rank_that_decided_otherwise_fails_every_rank_at_attach(others, alone):
    world = ncclpool.SimGroup("world", 3, timeout_ms=3000)
    world.set_symmetric_kernels(-1, 32, decision=others)
    world.set_symmetric_kernels(1, 32, decision=alone)

    def rank(r):
        p = ncclpool.Pool(0, "sim", "symmetric", name="fence-pool", growth_chunk=4 * MiB)
        ptr = p.alloc(MiB)
        with pytest.raises(errors.AgreementError, match="ranks disagree at attach #0") as info:
            p.attach_sim(world, r)
        assert "NCCLPOOL_SYMMETRIC_KERNELS" in str(info.value) and "fence declaration" in str(info.value)
        assert p.communicators == []
        p.free(ptr)
        p.close()
        return True

    results, failures = run_ranks(3, rank)
    assert failures == [None, None, None], failures
    assert world.live_registrations == 0


def test_the_simulated_decision_word_is_checked():
    world = ncclpool.SimGroup("world", 2)
    world.set_symmetric_kernels(0, 0, decision="fence")
    world.set_symmetric_kernels(0, -1)
    with pytest.raises(errors.InvalidArgument, match="decision 'sometimes'"):
        world.set_symmetric_kernels(0, 32, decision="sometimes")
    lib = ncclpool.library()
    assert lib.ncclpool_sim_group_set_symmetric_kernels(world.handle, 0, 0x30000 | 32) == 1  # off and fenced at once
    assert lib.ncclpool_sim_group_set_symmetric_kernels(world.handle, 0, 0x20000 | 65) == 1


# ---- ncclpool.torch: the wrapped collectives ----

@pytest.fixture
def fenced_layer(torch_layer, monkeypatch):
    """The torch layer after init() in a process whose decision is `fence`, with ncclpool.symmetric_fence
    recording its streams."""
    layer = torch_layer
    features = {"nccl_available": True, "nccl_version": 22809, "why_not": "", "symmetric_kernels_decision": "fence"}
    monkeypatch.setattr(ncclpool, "features", lambda: features)
    fences = []
    monkeypatch.setattr(ncclpool, "symmetric_fence", lambda stream=None: fences.append(stream) or True)
    layer.init()
    yield layer, fences
    layer.checks.fence_collectives(False)
    layer.checks.check_collectives(False)


def _attached(layer, monkeypatch, kind):
    mempool = layer.create_nccl_mem_pool(kind=kind, source="sim")
    pool = layer.ncclpool_pool(mempool)
    group = ncclpool.SimGroup("dp", 1)
    monkeypatch.setattr(pool, "attach_nccl", lambda ptr, k: pool.attach_sim(group, 0, k))
    monkeypatch.setattr(layer.binding, "_comm_ptr", lambda g, device: 1)
    world = layer.dist.ProcessGroup()
    layer.register_mem_pool(mempool, world)
    return mempool, pool, world


def test_torch_collectives_of_groups_with_windows_follow_the_fence(fenced_layer, monkeypatch):
    layer, fences = fenced_layer
    dist = layer.dist
    assert getattr(dist.all_reduce, "__wrapped__", None) is not None, "init() wrapped the collectives"
    mempool, pool, world = _attached(layer, monkeypatch, "symmetric")
    other = dist.ProcessGroup()  # a group with no pool: never fenced
    tensor = sys.modules["torch"].tensor([1.0])
    dist.all_reduce(tensor, group=world)
    dist.all_gather_into_tensor(sys.modules["torch"].empty(1), tensor, group=world)
    assert fences == [layer.torch.cuda.current_stream()] * 2
    dist.all_reduce(tensor, group=other)
    assert len(fences) == 2
    layer.check_collectives(False)  # the other duty off: the fence stays
    dist.all_reduce(tensor, group=world)
    assert len(fences) == 3
    for c in list(pool.communicators):
        c.forget()
    dist.all_reduce(tensor, group=world)  # no longer attached: no fence
    assert len(fences) == 3


def test_local_groups_get_no_fence_and_the_wrappers_go_with_both_duties(fenced_layer, monkeypatch):
    layer, fences = fenced_layer
    mempool, pool, world = _attached(layer, monkeypatch, "local")
    layer.dist.all_reduce(sys.modules["torch"].tensor([1.0]), group=world)
    assert fences == []
    layer.checks.fence_collectives(False)
    assert getattr(layer.dist.all_reduce, "__wrapped__", None) is None, "neither duty on: the originals are back"
    for c in list(pool.communicators):
        c.forget()


def test_fsdp2_helpers_go_through_the_fenced_collectives(fenced_layer, monkeypatch):
    layer, fences = fenced_layer
    from ncclpool.torch import fsdp
    mempool, pool, world = _attached(layer, monkeypatch, "symmetric")
    torch = sys.modules["torch"]
    fsdp.PoolAllGather(mempool, [world])(torch.empty(1), torch.tensor([1.0]), world)
    assert len(fences) == 1
    monkeypatch.setattr(layer.dist, "reduce_scatter_tensor", lambda *a, **k: None, raising=False)
    layer.checks.fence_collectives(False)
    layer.checks.fence_collectives(True)  # wraps reduce_scatter_tensor, now that the stand-in has it
    fsdp.PoolReduceScatter(mempool, [world])(torch.empty(1), torch.tensor([1.0]), world, "sum")
    assert len(fences) == 2
    for c in list(pool.communicators):
        c.forget()


def test_init_keeps_the_originals_where_the_decision_is_not_fence(torch_layer):
    torch_layer.init()
    assert getattr(torch_layer.dist.all_reduce, "__wrapped__", None) is None


# ---- ncclpool.sglang: SGLang's PyNccl collectives ----



def test_pynccl_collectives_on_windows_follow_the_fence(pynccl):
    fence, PyNcclCommunicator, CudaTensor, fences = pynccl
    window = types.SimpleNamespace(attached=True, window_of=lambda ptr: 0xabc if 0x1000 <= ptr < 0x2000 else None)
    attachments = {0x77: types.SimpleNamespace(comm=window)}
    original = PyNcclCommunicator.all_reduce
    assert fence.install(attachments) == [f"{PyNcclCommunicator.__module__}.PyNcclCommunicator.all_reduce"]
    assert fence.install(attachments) == [], "a second install wraps nothing more"
    comm = PyNcclCommunicator(0x77)
    comm.all_reduce(CudaTensor(0x1800))
    assert len(fences) == 1 and comm.calls[-1][0] == "all_reduce"
    stream = types.SimpleNamespace(cuda_stream=5)
    comm.all_reduce(CudaTensor(0x1800), stream=stream)
    assert fences[-1] is stream, "the stream PyNccl is given"
    comm.all_reduce(CudaTensor(0x9000))  # torch's own memory: no window, no fence
    PyNcclCommunicator(0x88).all_reduce(CudaTensor(0x1800))  # a communicator of no ncclpool.sglang group
    PyNcclCommunicator(0x77, disabled=True).all_reduce(CudaTensor(0x1800))  # a disabled PyNccl calls no NCCL
    assert len(fences) == 2 and len(comm.calls) == 3
    fence.uninstall()
    assert PyNcclCommunicator.all_reduce is original
