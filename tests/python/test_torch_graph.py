"""ncclpool.torch.graph over a stand-in for torch (conftest.torch_layer): a capture cannot register,
so reserve= commits windows before it, and a capture that still grows the pool is reported."""
import contextlib
import sys
import warnings

import pytest

import ncclpool

MiB = 1 << 20


@pytest.fixture
def graph_rig(torch_layer, monkeypatch):
    """A symmetric sim pool with one 1-rank group, and torch.cuda.graph standing in as a context in
    which the simulated device captures."""
    layer = torch_layer
    mempool = layer.create_nccl_mem_pool(symmetric=True, source="sim", growth_chunk=64 * MiB)
    pool = layer.ncclpool_pool(mempool)
    group = ncclpool.SimGroup("tp", 1)
    monkeypatch.setattr(pool, "attach_nccl", lambda ptr, kind: pool.attach_sim(group, 0, kind))
    monkeypatch.setattr(layer.binding, "_comm_ptr", lambda g, device: 1)

    @contextlib.contextmanager
    def capture(cuda_graph, pool=None, **kwargs):
        ncclpool.sim_set_capturing(layer.ncclpool_pool(mempool), True)
        try:
            yield
        finally:
            ncclpool.sim_set_capturing(layer.ncclpool_pool(mempool), False)

    monkeypatch.setattr(sys.modules["torch"].cuda, "graph", capture, raising=False)
    yield layer, mempool, pool, layer.dist.ProcessGroup()
    for c in list(pool.communicators):
        c.forget()


def captured_alloc(size):
    """What torch's caching allocator does inside the capture: ask the innermost scope's pool."""
    return ncclpool.library().ncclpool_torch_alloc(size, 0, None)


def test_reserve_commits_windows_before_the_capture(graph_rig):
    layer, mempool, pool, tp = graph_rig
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no PerformanceWarning
        with layer.graph(object(), mempool, groups=[tp], reserve=96 * MiB):
            ptr = captured_alloc(80 * MiB)
    (comm,) = pool.communicators
    assert comm.handle_of(ptr), "the captured tensor is not in a window"
    assert comm.stats()["segments_created_in_capture"] == 0
    assert pool.stats()["segment_count"] == 1 and pool.stats()["largest_fresh_block"] == 16 * MiB
    # A second capture that fits in the fresh rest of that segment grows nothing.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with layer.graph(object(), mempool, groups=[tp], reserve=16 * MiB):
            second = captured_alloc(16 * MiB)
    assert pool.stats()["segment_count"] == 1 and comm.handle_of(second)
    # Memory a stream freed is that stream's: a capturing stream could not take it without a wait,
    # so it does not count as room for the next capture.
    ncclpool.library().ncclpool_torch_free(ptr, 80 * MiB, 0, None)
    assert pool.stats()["largest_free_block"] == 80 * MiB and pool.stats()["largest_fresh_block"] == 0
    with layer.graph(object(), mempool, groups=[tp], reserve=64 * MiB):
        third = captured_alloc(64 * MiB)
    assert pool.stats()["segment_count"] == 2 and comm.handle_of(third)
    for p, size in ((second, 16 * MiB), (third, 64 * MiB)):
        ncclpool.library().ncclpool_torch_free(p, size, 0, None)
    pool.check()


def test_a_capture_that_grows_the_pool_is_reported(graph_rig):
    layer, mempool, pool, tp = graph_rig
    with pytest.warns(layer.PerformanceWarning, match="capture made 1 new segment registration"):
        with layer.graph(object(), mempool, groups=[tp]):
            ptr = captured_alloc(80 * MiB)
            (comm,) = pool.communicators
            assert not comm.handle_of(ptr), "no window can exist during the capture"
    assert comm.stats()["segments_created_in_capture"] == 1
    assert pool.stats_json()["communicators"][0]["segments_created_in_capture"] == 1
    assert comm.handle_of(ptr), "committed after the capture (for later, uncaptured, collectives)"
    ncclpool.library().ncclpool_torch_free(ptr, 80 * MiB, 0, None)


def test_reserve_must_not_be_negative(graph_rig):
    layer, mempool, _, tp = graph_rig
    with pytest.raises(ValueError, match="reserve must be >= 0"):
        layer.graph(object(), mempool, groups=[tp], reserve=-1)


def test_graph_commits_after_the_capture_whatever_the_scope_schedule(graph_rig):
    # Past a pool's first 16 scope ends most exits do not commit; graph() commits before and after
    # its capture anyway, so what the capture made gets its window at once.
    layer, mempool, pool, tp = graph_rig
    for _ in range(20):
        with layer.nccl_mem(mempool, group=tp):
            pass
    before = pool.stats_json()["scope_ends"]
    with pytest.warns(layer.PerformanceWarning):
        with layer.graph(object(), mempool, groups=[tp]):
            ptr = captured_alloc(80 * MiB)
    (comm,) = pool.communicators
    assert pool.pending == 0 and comm.handle_of(ptr), "the capture's segment waited for a scheduled scope end"
    assert pool.stats_json()["scope_ends"] == before, "graph() commits itself: its exit is not a scope end"
    ncclpool.library().ncclpool_torch_free(ptr, 80 * MiB, 0, None)
