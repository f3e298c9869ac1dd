"""NCCLPOOL_TORCH=off (issue 47): ncclpool.torch falls back to torch's own path, for bisecting, and says
so once; the variable is read in ncclpool/_environment.py. Over the torch stand-in (no torch, no GPU)."""
import contextlib
import types
import warnings

import pytest

import ncclpool
from ncclpool import _environment


@pytest.fixture
def off_layer(request, monkeypatch):
    """ncclpool.torch imported with NCCLPOOL_TORCH=off (the switch is read at import), and the warnings."""
    monkeypatch.setenv("NCCLPOOL_TORCH", "off")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        layer = request.getfixturevalue("torch_layer")
    return layer, [w for w in caught if "NCCLPOOL_TORCH=off" in str(w.message)]


@pytest.mark.parametrize("value, expected", [(None, "on"), ("", "on"), ("on", "on"), ("1", "on"), ("TRUE", "on"),
                                             ("off", "off"), ("0", "off"), ("no", "off"), (" Off ", "off")])
def test_the_switch_is_read_in_environment(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv("NCCLPOOL_TORCH", raising=False)
    else:
        monkeypatch.setenv("NCCLPOOL_TORCH", value)
    assert _environment.torch_layer() == expected


def test_a_value_neither_on_nor_off_is_refused(monkeypatch):
    monkeypatch.setenv("NCCLPOOL_TORCH", "of")
    with pytest.raises(ncclpool.InvalidArgument, match="NCCLPOOL_TORCH='of' is not on or off"):
        _environment.torch_layer()


def test_off_makes_plain_torch_mempools_and_says_so_once(off_layer):
    layer, said = off_layer
    assert len(said) == 1 and said[0].category is RuntimeWarning
    assert "create_nccl_mem_pool returns a plain torch.cuda.MemPool" in str(said[0].message)
    layer.init()
    pool = layer.create_nccl_mem_pool(symmetric=True)
    assert pool.allocator is None  # torch.cuda.MemPool(): torch's caching allocator, not ncclpool's
    with pytest.raises(ncclpool.InvalidArgument, match="give one of them"):
        layer.create_nccl_mem_pool(symmetric=True, kind="local")  # arguments still checked
    with pytest.raises(ncclpool.InvalidArgument, match="NCCLPOOL_TORCH=off"):
        layer.ncclpool_pool(pool)
    with pytest.raises(ncclpool.InvalidArgument, match="NCCLPOOL_TORCH=off"):
        layer.stats(pool)
    assert "ncclpool.torch is off (NCCLPOOL_TORCH=off)" in layer.memory_summary()
    assert not layer.memory_summary(pool).startswith("ncclpool memory summary\n")


def test_off_contexts_only_route_allocations_and_register_nothing(off_layer, monkeypatch):
    layer, _ = off_layer
    import torch
    import torch.distributed as dist

    routed = []

    @contextlib.contextmanager
    def use_mem_pool(pool, device=None):
        routed.append(("enter", pool.id))
        try:
            yield
        finally:
            routed.append(("exit", pool.id))

    monkeypatch.setattr(torch.cuda, "use_mem_pool", use_mem_pool)
    captured = []
    monkeypatch.setattr(torch.cuda, "graph", lambda g, pool=None, **kw: captured.append((g, pool, kw))
                        or contextlib.nullcontext(), raising=False)
    pool = layer.create_nccl_mem_pool()
    group = dist.group.WORLD
    layer.register_mem_pool(pool, group, symmetric=True)
    with layer.nccl_mem(pool, group=group):
        pass
    with layer.MultiGroupMemPoolAllocator(pool, [group, group], collective="all_gather"):
        pass
    with layer.MemPoolAllocatorWithoutRegistration(pool):
        pass
    with layer.use_mem_pool(pool):
        pass
    with layer.nccl_mem(pool, enabled=False):
        pass
    assert routed == [("enter", pool.id), ("exit", pool.id)] * 4
    with layer.graph("g", pool, groups=[group], reserve=1 << 20, stream="s"):
        pass
    assert captured == [("g", pool.id, {"stream": "s"})]
    layer.deregister_mem_pool(pool, group)
    layer.release_mem_pool(pool)
    assert layer.forget_group(group) == 0
    assert layer.copy_engine_group(group, copy_engine=True) is None
    assert dist.calls == []  # no collective, no communicator probe: nothing of ncclpool ran
    with pytest.raises(ValueError):  # an error inside a context is the program's, unchanged
        with layer.nccl_mem(pool, group=group):
            raise ValueError("the program's")
    assert routed[-1] == ("exit", pool.id)


def test_on_by_default_no_warning(torch_layer):
    assert torch_layer.create_nccl_mem_pool is torch_layer.binding.create_nccl_mem_pool
    assert not hasattr(torch_layer, "_off")
