import os
import sys
import types

# Run from a source checkout without installing: the package is in python/, the library in build/.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))


import pytest  # noqa: E402

import torch_stand_in  # noqa: E402

import ncclpool  # noqa: E402


@pytest.fixture
def torch_layer(monkeypatch):
    """ncclpool.torch imported over a stand-in for torch (no GPU, no torch needed): enough of
    torch.cuda and torch.distributed for the layer's bookkeeping, with pools on the simulator."""
    for name, module in torch_stand_in.make_modules().items():
        monkeypatch.setitem(sys.modules, name, module)
    for name in [n for n in sys.modules if n == "ncclpool.torch" or n.startswith("ncclpool.torch.")]:
        monkeypatch.delitem(sys.modules, name)  # a fresh layer: its modules hold its tables
    import ncclpool
    monkeypatch.setattr(ncclpool, "features", lambda: {"nccl_available": True, "nccl_version": 0, "why_not": ""})
    import ncclpool.torch as layer
    return layer




@pytest.fixture
def sim_profile(tmp_path, monkeypatch):
    """write(ranks, classes): a profile of the simulator's machine (what ncclpool tune writes) in
    tmp_path, with NCCLPOOL_PROFILE pointing at it. classes: (min_bytes, kind), kind one name for
    every collective or a {collective: kind} dict."""
    import json

    def write(ranks, classes):
        ops = ("all_gather", "reduce_scatter", "all_reduce")
        doc = {"ncclpool_profile": 1, "gpu": "ncclpool simulator", "nccl_version": 0, "ranks": ranks, "symmetric_ctas": 0,
               "measured": "2026-11-23T18:00:00Z",
               "classes": [{"min_bytes": m, "kind": k if isinstance(k, dict) else {op: k for op in ops}} for m, k in classes]}
        path = tmp_path / "profile.json"
        path.write_text(json.dumps(doc))
        monkeypatch.setenv("NCCLPOOL_PROFILE", str(path))
        return str(path)

    return write


@pytest.fixture
def pynccl(torch_layer, monkeypatch):
    """ncclpool._sglang_fence over the stand-in torch, a stand-in of SGLang's pynccl module, and
    ncclpool.symmetric_fence recording its streams."""
    monkeypatch.delitem(sys.modules, "ncclpool._sglang_fence", raising=False)
    monkeypatch.delattr(ncclpool, "_sglang_fence", raising=False)
    from ncclpool import _sglang_fence as fence
    torch = sys.modules["torch"]

    class PyNcclCommunicator:
        def __init__(self, ptr, disabled=False):
            import ctypes
            self.comm, self.disabled, self.calls = ctypes.c_void_p(ptr), disabled, []

        def all_reduce(self, tensor, op=None, stream=None):
            self.calls.append(("all_reduce", tensor, stream))

    module = types.ModuleType(fence.PYNCCL)
    module.PyNcclCommunicator = PyNcclCommunicator
    monkeypatch.setitem(sys.modules, fence.PYNCCL, module)

    class CudaTensor(torch.Tensor):
        is_cuda = True

        def __init__(self, ptr):
            super().__init__([0])
            self.ptr, self.device = ptr, "cuda:0"

        def data_ptr(self):
            return self.ptr

    fences = []
    monkeypatch.setattr(ncclpool, "symmetric_fence", lambda stream=None: fences.append(stream) or True)
    yield fence, PyNcclCommunicator, CudaTensor, fences
    fence.uninstall()
    fence._tables.clear()
