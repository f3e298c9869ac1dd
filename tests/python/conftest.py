import os
import sys

# Run from a source checkout without installing: the package is in python/, the library in build/.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))


import contextlib  # noqa: E402
import types  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture
def torch_layer(monkeypatch):
    """ncclpool.torch imported over a stand-in for torch (no GPU, no torch needed): enough of
    torch.cuda and torch.distributed for the layer's bookkeeping, with pools on the simulator."""
    torch = types.ModuleType("torch")
    torch.Tensor = type("Tensor", (), {})
    torch.device = lambda *a: types.SimpleNamespace(index=a[-1] if len(a) > 1 else None)
    cuda = types.ModuleType("torch.cuda")
    cuda.is_available = lambda: True
    cuda.current_device = lambda: 0
    cuda.nccl = types.SimpleNamespace(version=lambda: 0)
    cuda.is_current_stream_capturing = lambda: False
    ids = iter(range(1, 1000))
    cuda.MemPool = lambda allocator: types.SimpleNamespace(id=(next(ids), 0))
    cuda.memory = types.SimpleNamespace(CUDAPluggableAllocator=lambda *a: types.SimpleNamespace(allocator=lambda: None))
    cuda.use_mem_pool = lambda pool, device=None: contextlib.nullcontext()
    torch.cuda = cuda
    dist = types.ModuleType("torch.distributed")
    dist.ProcessGroup = type("ProcessGroup", (), {})
    dist.group = types.SimpleNamespace(WORLD=dist.ProcessGroup())
    dist.destroy_process_group = lambda group=None: None
    dist.distributed_c10d = types.SimpleNamespace(destroy_process_group=dist.destroy_process_group)
    dist.all_reduce = lambda tensor, op=None, group=None, async_op=False: None
    torch.distributed = dist
    for name, module in (("torch", torch), ("torch.cuda", cuda), ("torch.distributed", dist)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.delitem(sys.modules, "ncclpool.torch", raising=False)
    import ncclpool
    monkeypatch.setattr(ncclpool, "features", lambda: {"nccl_available": True, "nccl_version": 0, "why_not": ""})
    monkeypatch.delitem(sys.modules, "ncclpool.torch.megatron", raising=False)
    import ncclpool.torch as layer
    return layer


