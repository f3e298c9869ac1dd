"""ncclpool.torch.megatron.install() against stand-ins shaped like Megatron-Core's
megatron.core.nccl_allocator and megatron-fsdp's param_and_grad_buffer (which picks an allocator
at import). Runs without torch or Megatron (conftest.torch_layer); the real wheels run on GPUs."""
import importlib
import os
import sys
import textwrap
import warnings

import pytest

MEGATRON_ALLOCATOR = '''
import os
def init():
    os.environ["NCCL_NVLS_ENABLE"] = "1"   # what Megatron's init does
def create_nccl_mem_pool(symmetric=None):
    return "megatron pool"
'''
FSDP_BUFFER = '''
try:
    import megatron.core.nccl_allocator as nccl_allocator
    NCCL_ALLOCATOR = "MCORE"
except ImportError:
    nccl_allocator = None
    NCCL_ALLOCATOR = None
NCCL_MEMORY_POOL = None
'''


def write(root, path, text=""):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as f:
        f.write(textwrap.dedent(text))


@pytest.fixture
def packages(tmp_path, monkeypatch):
    """Stand-in megatron (optional) and megatron_fsdp packages on sys.path, forgotten afterwards."""
    def make(with_megatron=True):
        if with_megatron:
            write(tmp_path, "megatron/__init__.py")
            write(tmp_path, "megatron/core/__init__.py")
            write(tmp_path, "megatron/core/nccl_allocator.py", MEGATRON_ALLOCATOR)
        write(tmp_path, "megatron_fsdp/__init__.py")
        write(tmp_path, "megatron_fsdp/param_and_grad_buffer.py", FSDP_BUFFER)
        monkeypatch.syspath_prepend(str(tmp_path))
        importlib.invalidate_caches()
    yield make
    for name in [n for n in sys.modules if n.split(".")[0] in ("megatron", "megatron_fsdp")]:
        del sys.modules[name]


def install(layer):
    import ncclpool.torch.megatron as dropin
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        replaced = dropin.install()
    assert any("replaced" in str(w.message) for w in caught), "install() must say what it replaced"
    return dropin, replaced


def test_install_before_megatron_is_imported(torch_layer, packages, monkeypatch):
    monkeypatch.delenv("NCCL_NVLS_ENABLE", raising=False)
    packages()
    dropin, replaced = install(torch_layer)
    import megatron.core.nccl_allocator as allocator
    import megatron_fsdp.param_and_grad_buffer as buffer
    assert allocator is torch_layer and buffer.nccl_allocator is torch_layer and buffer.NCCL_ALLOCATOR == "MCORE"
    assert any("sys.modules['megatron.core.nccl_allocator']" in r for r in replaced)
    assert "NCCL_NVLS_ENABLE" not in os.environ, "ncclpool must not turn NVLS on"
    dropin.uninstall()
    assert sys.modules.get("megatron.core.nccl_allocator") is not torch_layer


def test_install_after_megatron_and_fsdp_were_imported(torch_layer, packages):
    packages()
    import megatron.core.nccl_allocator as original
    import megatron_fsdp.param_and_grad_buffer as buffer
    assert buffer.nccl_allocator is original
    dropin, replaced = install(torch_layer)
    assert buffer.nccl_allocator is torch_layer and buffer.NCCL_ALLOCATOR == "MCORE"
    assert sys.modules["megatron.core"].nccl_allocator is torch_layer
    assert "megatron_fsdp.param_and_grad_buffer.nccl_allocator" in replaced
    assert dropin.install() == [], "a second install changes nothing"
    dropin.uninstall()
    assert buffer.nccl_allocator is original and sys.modules["megatron.core.nccl_allocator"] is original


def test_megatron_fsdp_alone_gets_ncclpool(torch_layer, packages):
    packages(with_megatron=False)
    import megatron_fsdp.param_and_grad_buffer as early
    assert early.nccl_allocator is None  # imported before install: no allocator at all
    dropin, replaced = install(torch_layer)
    assert early.nccl_allocator is torch_layer and early.NCCL_ALLOCATOR == "MCORE"
    assert any("not installed" in r for r in replaced)
    del sys.modules["megatron_fsdp.param_and_grad_buffer"]
    import megatron_fsdp.param_and_grad_buffer as late  # a fresh import resolves to ncclpool too
    assert late.nccl_allocator is torch_layer
    dropin.uninstall()
    assert "megatron" not in sys.modules


def test_a_pool_made_before_install_is_reported(torch_layer, packages):
    packages()
    import megatron_fsdp.param_and_grad_buffer as buffer
    buffer.NCCL_MEMORY_POOL = "made by Megatron's allocator"
    import ncclpool.torch.megatron as dropin
    with pytest.warns(UserWarning, match="NCCL_MEMORY_POOL already exists"):
        dropin.install()
    dropin.uninstall()


def test_with_the_dropin_every_context_exit_commits(torch_layer, packages, monkeypatch):
    # Megatron enters nccl_mem only to allocate a new buffer: on the pool's schedule alone (the first
    # 16 exits, then every 16th) the windows of the last buffers could wait for a use that never comes.
    import ncclpool
    packages()
    layer = torch_layer
    mempool = layer.create_nccl_mem_pool(symmetric=True, source="sim", growth_chunk=4 << 20)
    pool = layer.ncclpool_pool(mempool)
    group = ncclpool.SimGroup("dp", 1)
    monkeypatch.setattr(pool, "attach_nccl", lambda ptr, kind: pool.attach_sim(group, 0, kind))
    monkeypatch.setattr(layer.binding, "_comm_ptr", lambda g, device: 1)
    world = layer.dist.group.WORLD
    lib = ncclpool.library()
    buffers = []

    def new_buffer():
        with layer.nccl_mem(mempool, group=world):
            buffers.append(lib.ncclpool_torch_alloc(6 << 20, 0, None))  # a segment of its own
        return pool.pending

    dropin, _ = install(layer)
    assert [new_buffer() for _ in range(20)] == [0] * 20, "an exit left a window pending"
    dropin.uninstall()
    assert layer.contexts._commit_at_every_exit is False
    # The drop-in's exits committed themselves and are not the pool's scope ends: its schedule starts now.
    assert [new_buffer() for _ in range(17)] == [0] * 17  # scope ends 0..16: each scheduled
    for _ in range(15):  # scope ends 17..31: not scheduled
        new_buffer()
    assert pool.pending == 15
    new_buffer()  # scope end 32: scheduled
    assert pool.pending == 0
    for ptr in buffers:
        lib.ncclpool_torch_free(ptr, 0, 0, None)
    for c in list(pool.communicators):
        c.forget()
