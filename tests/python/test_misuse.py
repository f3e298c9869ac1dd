"""Misuse of the Python API gets ncclpool's own errors (issue 47): integers that ctypes would wrap,
arguments of the wrong type, addresses that are no block or no communicator, and the environment
checked alike by `ncclpool info` and the code that reads it."""
import json
import os
import subprocess

import pytest

import ncclpool
from ncclpool import _environment
from ncclpool.errors import InvalidArgument
from ncclpool.sim import SimGroup, sim_inject_oom


@pytest.fixture
def pool():
    p = ncclpool.Pool(source="sim", name="misuse")
    yield p
    p.close()


@pytest.mark.parametrize("address", [0xdeadbeef, -1, 0, 2**64, 0x10001])
def test_attach_nccl_refuses_what_is_no_communicator(pool, address):
    # It used to hand 0xdeadbeef or -1 (wrapped to 2**64 - 1) to NCCL: a segmentation fault in a CUDA build.
    with pytest.raises(InvalidArgument, match="nccl_comm"):
        pool.attach_nccl(address)
    assert pool.communicators == []


def test_attach_nccl_on_a_sim_pool_is_refused(pool):
    with pytest.raises(InvalidArgument, match=r"is a simulator \(SIM\) pool.*ncclpool_attach_sim"):
        pool.attach_nccl(0x10000)  # aligned, positive: could be a communicator, but not on the simulator
    with pytest.raises(InvalidArgument, match="must be an int address"):
        pool.attach_nccl(None)


@pytest.mark.parametrize("device", [2**32, 2**31, -1])
def test_a_device_ctypes_would_wrap_is_refused(device):
    with pytest.raises(InvalidArgument, match="device"):
        ncclpool.Pool(source="sim", device=device)


@pytest.mark.parametrize("kwargs, what", [
    ({"size": 2**32 + 2}, "size"),
    ({"size": 0}, "size"),
    ({"size": 2, "timeout_ms": 2**40}, "timeout_ms"),
    ({"size": 2, "timeout_ms": 0}, "timeout_ms"),
    ({"size": "2"}, "size"),
])
def test_sim_group_numbers_are_checked_before_ctypes(kwargs, what):
    with pytest.raises(InvalidArgument, match=what):
        SimGroup("z", **kwargs)


def test_attach_sim_checks_the_group_and_the_rank(pool):
    group = SimGroup("z", 2)
    with pytest.raises(InvalidArgument, match="rank"):
        pool.attach_sim(group, 2**32)  # was rank 4294967296 in the label, rank 0 in the pool
    with pytest.raises(InvalidArgument, match="group must be a SimGroup, not NoneType"):
        pool.attach_sim(None, 0)
    assert pool.communicators == []
    group.close()


def test_sim_inject_oom_refuses_a_negative_count(pool):
    with pytest.raises(InvalidArgument, match="count"):
        sim_inject_oom(pool, -1)
    with pytest.raises(InvalidArgument, match="count"):
        sim_inject_oom(pool, 2**32)
    sim_inject_oom(pool, 0)


def test_a_name_must_be_text():
    with pytest.raises(InvalidArgument, match="name must be a str, not NoneType"):
        ncclpool.Pool(source="sim", name=None)
    with pytest.raises(InvalidArgument, match="name must be a str"):
        SimGroup(None, 2)


@pytest.mark.parametrize("ptr, message", [
    ("abc", "must be an int address, not str"),
    (None, "must be an int address, not NoneType"),
    (0, "is not an address"),
    (-1, "is not an address"),
    (2**64, "is not an address"),
])
def test_free_refuses_what_is_no_address(pool, ptr, message):
    # free(None) and free(0) did nothing, silently; free("abc") was ctypes' TypeError.
    with pytest.raises(InvalidArgument, match=message):
        pool.free(ptr)


def _tool():
    """The `ncclpool` command of the build whose library the tests load (build/tools/ncclpool)."""
    library = os.environ.get("NCCLPOOL_LIBRARY", "")
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(library))), "tools", "ncclpool") if library else ""
    if not os.access(path, os.X_OK):
        pytest.skip(f"no ncclpool command beside NCCLPOOL_LIBRARY ({path or 'unset'})")
    return path


def _info_problems(variable, value):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCLPOOL_") or k == "NCCLPOOL_LIBRARY"}
    env[variable] = value
    out = subprocess.run([_tool(), "info", "--json"], env=env, capture_output=True, text=True, check=True).stdout
    return [p for p in json.loads(out)["environment_problems"] if p["variable"] == variable]


@pytest.mark.parametrize("value", ["auto", "symmetric", "local", "", "foo", "Local", " local"])
def test_info_and_ncclpool_sglang_judge_sglang_kind_alike(monkeypatch, value):
    # `ncclpool info` said NCCLPOOL_SGLANG_KIND=foo was accepted; ncclpool.sglang refused it.
    monkeypatch.setenv(_environment.SGLANG_KIND, value)
    try:
        _environment.sglang_kind()
        refused = False
    except InvalidArgument:
        refused = True
    assert bool(_info_problems(_environment.SGLANG_KIND, value)) == refused, value


@pytest.mark.parametrize("value", ["off", "1", "collectives", "everything", "3", "Layout"])
def test_info_and_the_pool_judge_ncclpool_check_alike(monkeypatch, value):
    monkeypatch.setenv(_environment.CHECK, value)
    try:
        ncclpool.Pool(source="sim", name="check").close()
        refused = False
    except InvalidArgument:
        refused = True
    assert bool(_info_problems(_environment.CHECK, value)) == refused, value
