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
