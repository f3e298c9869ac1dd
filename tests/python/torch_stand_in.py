"""A stand-in for torch (no GPU, no torch needed): enough of torch.cuda and torch.distributed for
ncclpool.torch's bookkeeping, with pools on the simulator. Used by conftest.torch_layer and by
bench/torch_layer_overhead.py."""
import contextlib
import types


def make_modules():
    """Returns {"torch": ..., "torch.cuda": ..., "torch.distributed": ...} to put in sys.modules."""
    torch = types.ModuleType("torch")
    torch.Tensor = type("Tensor", (), {})
    torch.device = lambda *a: types.SimpleNamespace(index=a[-1] if len(a) > 1 else None)
    cuda = types.ModuleType("torch.cuda")
    cuda.is_available = lambda: True
    cuda.current_device = lambda: 0
    cuda.nccl = types.SimpleNamespace(version=lambda: 0)
    cuda.is_current_stream_capturing = lambda: False
    ids = iter(range(1, 1 << 30))
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
    return {"torch": torch, "torch.cuda": cuda, "torch.distributed": dist}
