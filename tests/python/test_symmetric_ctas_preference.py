"""NCCL's own symmetric CTA count for a process whose symmetric collectives overlap compute
(ncclpool.prefer_nccl_symmetric_ctas) without a GPU: the C ABI and features() on the simulator, the
training layers that declare it (the FSDP2 helper, ncclpool.torch.megatron.install()) before they
attach anything, their warning (never an exception) where the process decided already, and the
decode paths that do not declare it. The precedence itself and the refusal after ncclpool's measured
default are proven in C++ (tests/unit/test_agreement.cpp, SymmetricCtas*): only an NCCL communicator
decides the count. Ranks that decided differently (declared on some only): test_capi.py's
test_ranks_that_would_launch_symmetric_kernels_differently_fail_at_attach."""
import os
import subprocess
import sys
import textwrap
import warnings

import pytest

import ncclpool
from ncclpool import errors

from test_megatron_dropin import packages  # noqa: F401 - the fixture
from test_torch_copy_engine import fsdp, vote  # noqa: F401 - the fixtures

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ---- the C ABI ----

def test_the_declaration_flips_the_features_flag_in_a_fresh_process():
    # A process of its own: in this one another test may have declared already.
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python"), env.get("PYTHONPATH", "")])
    script = textwrap.dedent("""
        import ncclpool
        before = ncclpool.features()
        assert before["symmetric_ctas_nccl_preferred"] is False, before
        assert ncclpool.prefer_nccl_symmetric_ctas() is None
        ncclpool.prefer_nccl_symmetric_ctas()  # idempotent
        after = ncclpool.features()
        assert after["symmetric_ctas_nccl_preferred"] is True, after
        assert after["symmetric_ctas_decided"] is False, "the declaration decides nothing"
        assert ncclpool.last_error() == ""
        print("fine")
    """)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip().splitlines()[-1] == "fine", out.stderr


def test_the_declaration_is_in_the_api_and_features():
    assert "prefer_nccl_symmetric_ctas" in ncclpool.__all__
    assert ncclpool.prefer_nccl_symmetric_ctas() is None  # no NCCL attach decided anything here
    assert ncclpool.features()["symmetric_ctas_nccl_preferred"] is True


# ---- the training layers declare it, before they attach anything ----

@pytest.fixture
def declarations(monkeypatch):
    """ncclpool.prefer_nccl_symmetric_ctas replaced by a recorder; .fail = an exception to raise."""
    calls = []
    state = type("Declarations", (), {"calls": calls, "fail": None, "on_call": None})()

    def prefer():
        calls.append("prefer")
        if state.on_call is not None:
            state.on_call()
        if state.fail is not None:
            raise state.fail

    monkeypatch.setattr(ncclpool, "prefer_nccl_symmetric_ctas", prefer)
    return state


def test_the_fsdp2_helper_declares_once_before_its_first_attach(fsdp, vote, declarations):  # noqa: F811
    mempool = fsdp.pool(symmetric=True)
    pool = fsdp.layer.ncclpool_pool(mempool)
    declarations.on_call = lambda: fsdp.attached.append("declared") if not pool.communicators else None
    assert fsdp.helper.enable(fsdp.model, mempool, copy_engine=False) == 3
    assert declarations.calls == ["prefer"]
    fsdp.model.ag.allocate((4,), dtype="uint8", device="cuda")  # the buffers' first attach
    assert fsdp.attached == ["declared", (fsdp.shard, "symmetric")], "declared before the pool's first attach"
    fsdp.helper.PoolAllGather(mempool, [fsdp.shard])  # made directly: declared already, once per process
    fsdp.helper.enable(fsdp.model, mempool, copy_engine=False)
    assert declarations.calls == ["prefer"]


def test_the_fsdp2_helper_made_directly_declares(torch_layer, declarations):
    from ncclpool.torch import fsdp as helper
    mempool = torch_layer.create_nccl_mem_pool(source="sim", kind="symmetric", name="direct")
    world = torch_layer.dist.group.WORLD
    helper.PoolReduceScatter(mempool, [world])
    helper.PoolAllGather(mempool, [world])
    assert declarations.calls == ["prefer"]


def test_the_fsdp2_helper_warns_once_where_the_process_decided_already(fsdp, vote, declarations):  # noqa: F811
    declarations.fail = errors.InvalidState("ncclpool_prefer_nccl_symmetric_ctas: after this process decided its count")
    mempool = fsdp.pool(symmetric=True)
    with pytest.warns(RuntimeWarning, match=r"ncclpool.torch.fsdp.enable\(\): .*after this process decided"):
        assert fsdp.helper.enable(fsdp.model, mempool, copy_engine=False) == 3
    assert all(b.ag is not None and b.rs is not None for b in fsdp.model.modules()), "configured regardless"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once: no second warning
        fsdp.helper.enable(fsdp.model, mempool, copy_engine=False)
        fsdp.helper.PoolAllGather(mempool, [fsdp.shard])
    assert declarations.calls == ["prefer"]


def test_a_refusal_under_warnings_as_errors_keeps_the_rank_in(fsdp, vote, declarations, capsys):  # noqa: F811
    # `python -W error` turns the warning into an exception: a rank leaving enable() there would miss
    # the copy-engine vote the other ranks make next. The text goes to stderr instead.
    declarations.fail = errors.InvalidState("ncclpool_prefer_nccl_symmetric_ctas: after this process decided its count")
    mempool = fsdp.pool(symmetric=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fsdp.helper.enable(fsdp.model, mempool, copy_engine=False) == 3
    assert "ncclpool: warning: ncclpool.torch.fsdp.enable(): " in capsys.readouterr().err


def test_the_fence_declaration_refused_under_warnings_as_errors_keeps_the_rank_in(torch_layer, monkeypatch, capsys):
    def refuse():
        raise errors.InvalidState("the fence was declared after this process decided its symmetric kernels")

    monkeypatch.setattr(ncclpool, "prefer_symmetric_fence", refuse)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch_layer.binding._declare_fence()  # what init() calls first
    assert "ncclpool: warning: ncclpool.torch.init(): the fence was declared after" in capsys.readouterr().err


def test_a_second_caller_waits_for_the_first_callers_declaration(torch_layer, declarations):
    # Two helpers made at once in one process: the second must not go on (and attach, deciding
    # ncclpool's default where the other ranks decide NCCL's count) before the declaration is made.
    import threading
    entered, release = threading.Event(), threading.Event()
    declarations.on_call = lambda: (entered.set(), release.wait(5))
    first = threading.Thread(target=torch_layer.binding.prefer_nccl_ctas_for_training, args=("first",))
    first.start()
    assert entered.wait(5)
    second = threading.Thread(target=torch_layer.binding.prefer_nccl_ctas_for_training, args=("second",))
    second.start()
    second.join(0.2)
    assert second.is_alive(), "the second caller went on while the first caller's declaration was still being made"
    release.set()
    first.join(5)
    second.join(5)
    assert declarations.calls == ["prefer"]


def test_megatron_install_declares_once_before_it_replaces_anything(torch_layer, packages, declarations):  # noqa: F811
    packages()
    import ncclpool.torch.megatron as dropin
    declarations.on_call = lambda: declarations.calls.append(sys.modules.get("megatron.core.nccl_allocator") is torch_layer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # install()'s own "replaced" warning
        dropin.install()
        dropin.install()
    assert declarations.calls == ["prefer", False], "declared once, before Megatron's allocator was replaced"
    dropin.uninstall()


def test_megatron_install_warns_where_the_process_decided_already(torch_layer, packages, declarations):  # noqa: F811
    packages()
    declarations.fail = errors.InvalidState("after this process decided its count at its first symmetric attach")
    import ncclpool.torch.megatron as dropin
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        replaced = dropin.install()
    assert replaced, "installed regardless"
    said = [w for w in caught if issubclass(w.category, RuntimeWarning) and "first symmetric attach" in str(w.message)]
    assert len(said) == 1 and str(said[0].message).startswith("ncclpool.torch.megatron.install(): ")
    dropin.uninstall()


# ---- the decode paths do not ----

def test_torch_init_and_sglang_do_not_declare(torch_layer, pynccl, declarations):
    torch_layer.init()
    fence, _, _, _ = pynccl
    fence.install({})
    assert declarations.calls == []
