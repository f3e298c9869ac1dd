import os
import sys

# Run from a source checkout without installing: the package is in python/, the library in build/.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))


import pytest  # noqa: E402

import torch_stand_in  # noqa: E402


@pytest.fixture
def torch_layer(monkeypatch):
    """ncclpool.torch imported over a stand-in for torch (no GPU, no torch needed): enough of
    torch.cuda and torch.distributed for the layer's bookkeeping, with pools on the simulator."""
    for name, module in torch_stand_in.make_modules().items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.delitem(sys.modules, "ncclpool.torch", raising=False)
    import ncclpool
    monkeypatch.setattr(ncclpool, "features", lambda: {"nccl_available": True, "nccl_version": 0, "why_not": ""})
    monkeypatch.delitem(sys.modules, "ncclpool.torch.megatron", raising=False)
    import ncclpool.torch as layer
    return layer


