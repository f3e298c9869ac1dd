"""What the torch layer does with torch 2.14 and 2.15 (issue 45), over the stand-in torch
(conftest.torch_layer): FSDP2 modules with several parameter groups (the ``_fsdp_param_group``
property raising AssertionError, read on the real wheels by scripts/torch-matrix.py), 2.14's opt-in
nccl2 without ``_comm_ptr`` (the one refusal: an error naming TORCH_DIST_USE_NCCL2=0), and
process_group_implementation() / the report `ncclpool info` prints."""
import types

import pytest

import torch_stand_in
from ncclpool import errors


# ---- FSDP2: several parameter groups (torch 2.12+) ----

def _several(fqns):
    """The property of torch 2.14.1 / 2.15.0's FSDPState._fsdp_param_group (_fsdp_state.py)."""
    return AssertionError(f"Expected at most 1 param group for backward compatibility, but got {len(fqns)} "
                          f"(fqns: {fqns}). Use `_fsdp_param_groups` (plural) to access all param groups")


def _state(groups, plural=True):
    """An FSDPState as 2.12+ has it (plural list and the asserting property), or as 2.11 (singular only)."""
    class State:
        @property
        def _fsdp_param_group(self):
            if len(groups) > 1:
                raise _several([f"m{i}" for i in range(len(groups))])
            return groups[0] if groups else None

    state = State()
    if plural:
        state._fsdp_param_groups = list(groups)
    return state


def _param_group(shard):
    return types.SimpleNamespace(mesh_info=types.SimpleNamespace(shard_process_group=shard))


@pytest.fixture
def fsdp(torch_layer):
    import ncclpool.torch.fsdp as helper

    class Block(helper.FSDPModule):
        def __init__(self, state, children=()):
            self.state, self.kids, self.ag, self.rs = state, list(children), None, None

        def modules(self):
            yield self
            for k in self.kids:
                yield from k.modules()

        def _get_fsdp_state(self):
            return self.state

        def set_custom_all_gather(self, comm):
            self.ag = comm

        def set_custom_reduce_scatter(self, comm):
            self.rs = comm

    return types.SimpleNamespace(layer=torch_layer, helper=helper, Block=Block)


@pytest.mark.parametrize("plural", [True, False], ids=["list-and-property", "property-only"])
def test_several_parameter_groups_are_refused_before_any_vote(fsdp, plural):
    layer, (shard,) = fsdp.layer, torch_stand_in.make_group(1, desc="shard")
    two = _state([_param_group(shard), _param_group(torch_stand_in.make_group(1)[0])], plural)
    model = fsdp.Block(_state([_param_group(shard)], plural), [fsdp.Block(two), fsdp.Block(_state([], plural))])
    pool = layer.create_nccl_mem_pool(source="sim", symmetric=True, name="several")
    with pytest.raises(errors.Unsupported, match="several parameter groups.*set_custom_all_gather raises"):
        fsdp.helper.enable(model, pool)
    assert layer.dist.calls == []  # no vote started: every rank (same model) refuses at the same point
    assert all(m.ag is None and m.rs is None for m in model.modules())  # nothing configured


@pytest.mark.parametrize("plural", [True, False], ids=["list-and-property", "property-only"])
def test_one_or_no_parameter_group_reads_the_shard_group(fsdp, plural):
    (shard,) = torch_stand_in.make_group(1, desc="shard")
    shard_group = fsdp.helper._shard_group
    assert shard_group(fsdp.Block(_state([_param_group(shard)], plural))) is shard
    assert shard_group(fsdp.Block(_state([], plural))) is None  # no parameters of its own: no vote
    assert shard_group(fsdp.Block(types.SimpleNamespace())) is fsdp.layer.dist.group.WORLD  # internals not there
    assert shard_group(fsdp.Block(_state([types.SimpleNamespace()], plural))) is fsdp.layer.dist.group.WORLD


def test_enable_with_one_group_per_module_configures_every_module(fsdp):
    (shard,) = torch_stand_in.make_group(1, desc="shard")
    model = fsdp.Block(_state([]), [fsdp.Block(_state([_param_group(shard)]))])
    pool = fsdp.layer.create_nccl_mem_pool(source="sim", kind="local", name="one")
    assert fsdp.helper.enable(model, pool, copy_engine=False) == 2
    assert model.kids[0].ag.groups == [shard] and model.ag.groups == [fsdp.layer.dist.group.WORLD]


# ---- 2.14's opt-in nccl2: no _comm_ptr ----

class ProcessGroupNCCL2:
    """torch 2.14.1's nccl2 backend as the layer sees it: no _comm_ptr (read on the real wheel)."""


def test_a_backend_without_comm_ptr_is_refused_naming_the_variable(torch_layer):
    layer = torch_layer
    group = torch_stand_in.make_group(1, desc="nccl2")[0]
    group._get_backend = lambda device: ProcessGroupNCCL2()
    with pytest.raises(errors.Unsupported, match=r"ProcessGroupNCCL2 gives no communicator address.*TORCH_DIST_USE_NCCL2=0"):
        layer.binding._comm_ptr(group, 0)
    pool = layer.create_nccl_mem_pool(source="sim", symmetric=True, name="nccl2")
    with pytest.raises(errors.Unsupported, match="TORCH_DIST_USE_NCCL2=0"):
        layer.register_mem_pool(pool, group)
    assert layer.dist.calls == []  # refused before the lazy-init all-reduce: no rank is left in a collective
    assert layer.state.bindings[pool.id].attachments == {}


def test_a_backend_with_comm_ptr_still_works(torch_layer):
    group = torch_stand_in.make_group(1, desc="classic")[0]
    group._get_backend = lambda device: types.SimpleNamespace(_comm_ptr=lambda: 1234)
    assert torch_layer.binding._comm_ptr(group, 0) == 1234


# ---- process_group_implementation() and the report ----

def _torch_dist(layer, monkeypatch, *, initialized=False, registers=None, nccl2_has_comm_ptr=True):
    """dist as torch 2.11 (registers None: "nccl" built in) or 2.14+ (registers: the creator function's
    name "nccl" resolves to, registered at the first _ensure_backend_registered)."""
    dist = layer.dist
    monkeypatch.setattr(dist, "is_available", lambda: True, raising=False)
    monkeypatch.setattr(dist, "is_initialized", lambda: initialized, raising=False)
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True, raising=False)
    backend = types.SimpleNamespace(_plugins={})
    if registers is not None:
        def ensure(name):
            creator = types.SimpleNamespace(__name__=registers, __module__="torch.distributed.distributed_c10d")
            backend._plugins[name.upper()] = types.SimpleNamespace(creator_fn=creator, extended_api=True)
        backend._ensure_backend_registered = ensure
    monkeypatch.setattr(dist, "Backend", backend, raising=False)
    monkeypatch.setattr(dist, "ProcessGroupNCCL", type("ProcessGroupNCCL", (), {"_comm_ptr": lambda self: 1}), raising=False)
    nccl2 = {"_comm_ptr": lambda self: 1} if nccl2_has_comm_ptr else {}
    monkeypatch.setattr(dist, "ProcessGroupNCCL2", type("ProcessGroupNCCL2", (), nccl2), raising=False)
    return backend


@pytest.mark.parametrize("registers, expected", [
    (None, "ProcessGroupNCCL"),                            # 2.11: "nccl" built into init_process_group
    ("_create_nccl_process_group", "ProcessGroupNCCL"),    # 2.14 default, 2.15 with TORCH_DIST_USE_NCCL2=0
    ("_create_nccl2_process_group", "ProcessGroupNCCL2"),  # 2.15 default, 2.14 with TORCH_DIST_USE_NCCL2=1
])
def test_the_default_implementation_is_what_torch_registered(torch_layer, monkeypatch, registers, expected):
    backend = _torch_dist(torch_layer, monkeypatch, registers=registers)
    assert torch_layer.process_group_implementation() == expected
    if registers is not None:
        assert list(backend._plugins) == ["NCCL"]  # torch's own registration, as init_process_group makes it


def test_an_initialized_group_reports_its_backends_class(torch_layer, monkeypatch):
    _torch_dist(torch_layer, monkeypatch, initialized=True)
    world = torch_layer.dist.group.WORLD
    monkeypatch.setattr(world, "_get_backend", lambda device: ProcessGroupNCCL2(), raising=False)
    assert torch_layer.process_group_implementation() == "ProcessGroupNCCL2"
    gloo = torch_stand_in.make_group(1)[0]
    gloo._get_backend = lambda device: type("ProcessGroupGloo", (), {})()
    assert torch_layer.process_group_implementation(gloo) == "ProcessGroupGloo"


@pytest.mark.parametrize("has, usable, why", [
    (True, True, "nccl2 .torch 2.15's default.; TORCH_DIST_USE_NCCL2=0 gives the classic"),
    (False, False, "no _comm_ptr .torch 2.14's opt-in nccl2.: ncclpool.torch refuses it; run with TORCH_DIST_USE_NCCL2=0"),
])
def test_the_report_says_whether_the_layer_can_use_the_default(torch_layer, monkeypatch, has, usable, why):
    _torch_dist(torch_layer, monkeypatch, registers="_create_nccl2_process_group", nccl2_has_comm_ptr=has)
    torch_layer.torch.version = types.SimpleNamespace(cuda="13.0")
    from ncclpool.torch import versions
    report = versions.torch_report()
    assert report["nccl_process_group"] == "ProcessGroupNCCL2" and report["usable"] is usable
    assert __import__("re").search(why, report["why"]), report["why"]


# ---- `ncclpool info` (python -m ncclpool / the console script) ----

@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_info_through_the_bundled_command_adds_torch(tmp_path, monkeypatch, capfd, as_json):
    import json

    import ncclpool.__main__ as entry
    command = tmp_path / "ncclpool"
    command.write_text('#!/bin/sh\nif [ "$2" = --json ]; then echo \'{"simulator": true}\'; else echo "ncclpool 0.1.0"; fi\nexit 3\n')
    command.chmod(0o755)
    monkeypatch.setattr(entry, "_bundled_command", lambda: str(command))
    report = {"version": "2.15.0+cu132", "cuda": "13.2", "nccl": "2.30.7", "nccl_process_group": "ProcessGroupNCCL2",
              "usable": True, "why": "nccl2 (torch 2.15's default); TORCH_DIST_USE_NCCL2=0 gives the classic ProcessGroupNCCL"}
    monkeypatch.setattr(entry, "_torch_report", lambda: report)
    assert entry.main(["info", "--json"] if as_json else ["info"]) == 3  # the command's exit status
    out = capfd.readouterr().out
    if as_json:
        assert json.loads(out) == {"simulator": True, "torch": report}
    else:
        assert out.startswith("ncclpool 0.1.0\n")
        assert 'torch      2.15.0+cu132 (CUDA 13.2, built with NCCL 2.30.7); init_process_group("nccl") makes ' \
               "ProcessGroupNCCL2: nccl2 (torch 2.15's default)" in out


def test_info_says_when_torch_is_missing_or_fails_to_import():
    import ncclpool.__main__ as entry
    assert "torch      not installed" in entry._torch_line(None)
    assert "`import torch` fails: OSError: libtorch_nvshmem.so: undefined symbol" in entry._torch_line(
        {"error": "OSError: libtorch_nvshmem.so: undefined symbol: nvshmem_selected_device_transport"})
