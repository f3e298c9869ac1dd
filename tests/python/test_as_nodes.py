"""The parts of "as across nodes" (issue 34; docs/scaling.md) that need no GPU: scripts/as-nodes.sh
(each rank's NCCL_HOSTID, its errors), tests/gpu/torch/as_nodes_support.py (NCCL_DEBUG_FILE's
expansion, NCCL's INFO lines read, the routes and outcomes judged), check_as_nodes.py's paths before
NCCL (one GPU: "needs 2 GPUs", exit 0; not under the wrapper: exit 2), over the stand-in torch, and
bench/coll_reference_torch.py's pool options and comparison."""
import importlib
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WRAPPER = os.path.join(ROOT, "scripts", "as-nodes.sh")
CHECK = os.path.join(ROOT, "tests", "gpu", "torch", "check_as_nodes.py")


@pytest.fixture
def support(monkeypatch):
    monkeypatch.syspath_prepend(os.path.join(ROOT, "tests", "gpu", "torch"))
    sys.modules.pop("as_nodes_support", None)
    return importlib.import_module("as_nodes_support")


@pytest.fixture
def reference(monkeypatch):
    monkeypatch.syspath_prepend(os.path.join(ROOT, "bench"))
    sys.modules.pop("coll_reference_torch", None)
    return importlib.import_module("coll_reference_torch")


def wrapper(env, *command):
    """scripts/as-nodes.sh COMMAND under `env` (torchrun's variables as given, nothing inherited of them)."""
    base = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "NCCL_HOSTID", "NCCLPOOL_AS_NODES_RANKS_PER_NODE")}
    return subprocess.run(["bash", WRAPPER, *command], env={**base, **env}, capture_output=True, text=True, timeout=30)


def exported(env):
    out = wrapper(env, "env")
    assert out.returncode == 0, out.stderr
    return dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)


# -- scripts/as-nodes.sh ---------------------------------------------------------------------------

def test_wrapper_gives_every_rank_its_own_host_id():
    ids = [exported({"RANK": str(r), "NCCL_HOSTID": "box"}) for r in range(4)]
    assert [e["NCCL_HOSTID"] for e in ids] == [f"box-as-node-{r}" for r in range(4)]
    assert [e["NCCLPOOL_AS_NODE"] for e in ids] == ["0", "1", "2", "3"]
    for e in ids:
        assert (e["NCCL_NVLS_ENABLE"], e["TORCH_SYMM_MEM_DISABLE_MULTICAST"], e["NVSHMEM_DISABLE_NVLS"]) == ("0", "1", "1")
        assert e["NCCLPOOL_AS_NODES_RANKS_PER_NODE"] == "1"


def test_wrapper_groups_consecutive_ranks_into_nodes_and_falls_back_to_local_rank():
    nodes = [exported({"RANK": str(r), "NCCLPOOL_AS_NODES_RANKS_PER_NODE": "2", "NCCL_HOSTID": "h"})["NCCL_HOSTID"] for r in range(4)]
    assert nodes == ["h-as-node-0", "h-as-node-0", "h-as-node-1", "h-as-node-1"]
    assert exported({"LOCAL_RANK": "1", "NCCL_HOSTID": "h"})["NCCL_HOSTID"] == "h-as-node-1"
    default = exported({"RANK": "0"})["NCCL_HOSTID"]  # the host name as the prefix
    assert default.endswith("-as-node-0") and len(default) > len("-as-node-0")


def test_wrapper_execs_its_arguments_as_they_are():
    out = wrapper({"RANK": "0"}, "printf", "[%s]", "a b", "", "c")
    assert (out.returncode, out.stdout) == (0, "[a b][][c]")
    assert wrapper({"RANK": "0"}, "sh", "-c", "exit 7").returncode == 7


@pytest.mark.parametrize("env, args, message", [
    ({"RANK": "0"}, (), "no command to run"),
    ({}, ("true",), "neither RANK nor LOCAL_RANK is set"),
    ({"RANK": "one"}, ("true",), "rank 'one'"),
    ({"RANK": "-1"}, ("true",), "rank '-1'"),
    ({"RANK": "0", "NCCLPOOL_AS_NODES_RANKS_PER_NODE": "0"}, ("true",), "NCCLPOOL_AS_NODES_RANKS_PER_NODE='0'"),
    ({"RANK": "0", "NCCLPOOL_AS_NODES_RANKS_PER_NODE": "x"}, ("true",), "NCCLPOOL_AS_NODES_RANKS_PER_NODE='x'"),
])
def test_wrapper_refuses_bad_settings_with_a_message(env, args, message):
    out = wrapper(env, *args)
    assert out.returncode == 2 and message in out.stderr, (out.returncode, out.stderr)


# -- as_nodes_support ------------------------------------------------------------------------------

def test_nccl_debug_file_expands_like_nccl(support):
    assert support.nccl_debug_file("/d/nccl.%h.%p.log", "gpu7.cluster.local", 4242) == "/d/nccl.gpu7.4242.log"
    assert support.nccl_debug_file("%%h-%x-%", "h", 1) == "%h-%x-%"
    with pytest.raises(ValueError, match="no %p"):
        support.nccl_log_env("/d/nccl.%h.log")
    env = support.nccl_log_env("/d/n.%p")
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_FILE"] == "/d/n.%p"
    assert set(env["NCCL_DEBUG_SUBSYS"].split(",")) >= {"INIT", "ENV", "TUNING"}


TWO_NODES = """\
vm:100:100 [0] NCCL INFO NCCL_HOSTID set by environment to vm-as-node-0
vm:100:100 [0] NCCL INFO comm 0x55d5c0a0b0c0 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0
vm:100:100 [0] NCCL INFO Channel 00/02 :    0   1
vm:100:180 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [receive] via NET/Socket/0
vm:100:180 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0
vm:100:100 [0] NCCL INFO AllReduce: 4194304 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..1}
vm:100:100 [0] NCCL INFO comm 0x55d5c0ffff00 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0
""".splitlines()

ONE_NODE = """\
vm:100:100 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0
vm:100:180 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
vm:100:180 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct
vm:100:100 [0] NCCL INFO AllReduce [Symmetric]: 4194304 Bytes -> Kernel AllReduce_RSxLD_AGxST nchannels 32 nthreads 512 nWorks 1
vm:100:100 [0] NCCL INFO Init CE, rank 0 baseUCSymReadyPtr 0x1, baseUCSymComplPtr 0x2, seq num 0
vm:100:100 [0] NCCL INFO AllGather [Copy Engine]: 4194304 Bytes -> cudaMemcpy
vm:100:100 [0] NCCL WARN Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0 failed (a WARN line: not counted)
""".splitlines()


def test_read_topology_counts_nodes_transports_and_kernels(support):
    t = support.read_topology(TWO_NODES)
    assert t["channels"] == {"NET": 2, "P2P": 0, "SHM": 0} and t["nets"] == ["Socket"]
    assert t["hostids"] == ["vm-as-node-0"] and (t["symmetric"], t["copy_engine"]) == (0, 0)
    assert sorted(c["nnodes"] for c in t["comms"].values()) == [2, 2]
    assert support.topology_problems(t, ranks=2, nodes=2) == []
    assert "2 communicator(s): 2 ranks on 2 node(s); channels NET 2 (Socket), P2P 0, SHM 0" in support.describe_topology(t)
    one = support.read_topology(ONE_NODE)
    assert one["channels"] == {"NET": 0, "P2P": 1, "SHM": 1} and (one["symmetric"], one["copy_engine"]) == (1, 2)


def test_topology_problems_name_what_is_not_across_nodes(support):
    problems = support.topology_problems(support.read_topology(ONE_NODE), ranks=2, nodes=2)
    text = " | ".join(problems)
    for phrase in ("read no NCCL_HOSTID", "nNodes 1, localRanks 2 (expected 2 nodes of 1)", "no channel via NET",
                   "via SHM", "via P2P with one rank per node"):
        assert phrase in text, (phrase, problems)
    mnnvl = [line.replace("MNNVL 0", "MNNVL 1") for line in TWO_NODES]
    assert [p for p in support.topology_problems(support.read_topology(mnnvl), 2, 2) if "MNNVL 1" in p] == [
        "communicator 0x55d5c0a0b0c0: MNNVL 1: NCCL joins the nodes over NVLink (NCCL_MNNVL_ENABLE=0 keeps them apart)",
        "communicator 0x55d5c0ffff00: MNNVL 1: NCCL joins the nodes over NVLink (NCCL_MNNVL_ENABLE=0 keeps them apart)"]
    assert "no communicator over all 4 ranks" in " ".join(support.topology_problems(support.read_topology(TWO_NODES), 4, 2))
    # Two nodes of two: P2P inside a node is expected.
    four = [line.replace("nRanks 2 nNodes 2 localRanks 1", "nRanks 4 nNodes 2 localRanks 2") for line in TWO_NODES]
    four.append("vm:100:180 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read")
    assert support.topology_problems(support.read_topology(four), ranks=4, nodes=2) == []


def test_window_classes_finds_sizes_routed_to_windows(support):
    assert support.window_classes({"classes": [{"min_bytes": 0, "placement": "local"}], "by_collective": {}}) == []
    routes = {"classes": [{"min_bytes": 0, "placement": "none"}, {"min_bytes": 33554432, "placement": "symmetric"}],
              "by_collective": {"all_gather": "symmetric at every size", "all_reduce": "local at every size"}}
    assert support.window_classes(routes) == ["from 33554432 B", "all_gather: symmetric at every size"]
    with pytest.raises(ValueError):
        support.window_classes(None)


def test_expected_symmetric_attach_per_nccl_version(support):
    assert support.expected_symmetric_attach(22809)[:2] == ("windows", None)
    assert support.expected_symmetric_attach(22809, win_enable=False)[:2] == ("error", support.LOCAL_HANDLE_PHRASE)
    for win_enable in (True, False):
        assert support.expected_symmetric_attach(22903, win_enable)[:2] == ("error", support.NO_WINDOW_PHRASE)
        assert support.expected_symmetric_attach(23007, win_enable)[:2] == ("error", support.CANNOT_REGISTER_PHRASE)
        assert support.expected_symmetric_attach(22700, win_enable)[:2] == (None, None)


def test_outcome_problems(support):
    windows = support.expected_symmetric_attach(22809)
    local = support.expected_symmetric_attach(22809, win_enable=False)
    either = (None, None, "not read")
    error = ("error", "RegistrationError", "window registration ... " + support.LOCAL_HANDLE_PHRASE + " (...)")
    assert support.outcome_problems([("windows", True, True)] * 2, windows) == []
    assert support.outcome_problems([error, error], local) == []
    assert support.outcome_problems([error, error], either) == [] and support.outcome_problems([("windows", True, True)] * 2, either) == []
    assert "ranks ended differently: rank 0 windows, rank 1 error" in support.outcome_problems([("windows", True, True), error], either)[0]
    assert support.outcome_problems([("windows", False, True), ("windows", True, False)], windows) == [
        "rank 0: not every pool buffer is a window", "rank 1: collectives on the windows differ from plain memory"]
    assert "expected windows" in support.outcome_problems([error, error], windows)[0]
    assert "expected error" in support.outcome_problems([("windows", True, True)] * 2, local)[0]
    other = ("error", "RegistrationError", "ncclCommWindowRegister failed: internal error")
    assert "not every rank's error says" in support.outcome_problems([other, other], local)[0]
    assert "different errors" in support.outcome_problems([error, ("error", "AgreementError", "x")], either)[0]


def test_summary_command(tmp_path):
    log = tmp_path / "nccl.vm.100.log"
    log.write_text("\n".join(TWO_NODES) + "\n")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "gpu", "torch", "as_nodes_support.py"), "summary", str(log)],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "channels NET 2 (Socket)" in out.stdout, out
    assert subprocess.run([sys.executable, os.path.join(ROOT, "tests", "gpu", "torch", "as_nodes_support.py")],
                          capture_output=True, text=True, timeout=30).returncode != 0


# -- check_as_nodes.py before NCCL (the stand-in torch) --------------------------------------------

RUN_CHECK = """
import runpy, sys
sys.path.insert(0, {tests!r})
import torch_stand_in
modules = torch_stand_in.make_modules()
modules["torch.cuda"].device_count = lambda: {gpus}
sys.modules.update(modules)
sys.argv = [{check!r}]
runpy.run_path({check!r}, run_name="__main__")
raise SystemExit("the check returned instead of ending the process")
"""


def run_check(gpus, env):
    code = RUN_CHECK.format(tests=os.path.join(ROOT, "tests", "python"), gpus=gpus, check=CHECK)
    base = {k: v for k, v in os.environ.items() if k not in ("NCCL_HOSTID", "NCCLPOOL_AS_NODE", "NCCLPOOL_AS_NODES_RANKS_PER_NODE")}
    return subprocess.run([sys.executable, "-c", code], env={**base, "PYTHONPATH": os.path.join(ROOT, "python"), **env},
                          capture_output=True, text=True, timeout=60)


def test_check_with_one_gpu_says_it_needs_two_and_exits_0():
    out = run_check(1, {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"})
    assert out.returncode == 0, out.stderr
    assert "needs 2 GPUs" in out.stdout and out.stdout.splitlines()[-1].startswith("RESULT not run: needs 2 GPUs"), out.stdout


def test_check_outside_the_wrapper_or_with_partial_nodes_fails_clearly():
    out = run_check(2, {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"})
    assert out.returncode == 2 and "scripts/as-nodes.sh" in out.stdout and "RESULT FAILED" in out.stdout, out
    wrapped = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "NCCL_HOSTID": "h-as-node-0", "NCCLPOOL_AS_NODE": "0",
               "NCCLPOOL_AS_NODES_RANKS_PER_NODE": "2"}
    out = run_check(2, wrapped)
    assert out.returncode == 2 and "not 2 or more whole nodes" in out.stdout, out


# -- bench/coll_reference_torch.py -----------------------------------------------------------------

def test_reference_pool_options(reference):
    assert reference.parse_pools("none") == ["none"] and reference.parse_pools(" none, auto ") == ["none", "auto"]
    for bad in ("", "none,none", "auto,windows"):
        with pytest.raises(ValueError, match="--pool"):
            reference.parse_pools(bad)
    assert [reference.rotated(["none", "auto", "local"], r) for r in range(4)] == [
        ["none", "auto", "local"], ["auto", "local", "none"], ["local", "none", "auto"], ["none", "auto", "local"]]
    assert reference.sizes(1024, 4096, 2) == [1024, 2048, 4096] and reference.sizes(1 << 16, 1 << 20, 4) == [1 << 16, 1 << 18, 1 << 20]
    with pytest.raises(ValueError):
        reference.sizes(1024, 4096, 1)
    with pytest.raises(ValueError):
        reference.sizes(4096, 1024, 2)


def test_reference_compares_each_pool_with_plain_memory(reference):
    MiB = 1 << 20
    rows = lambda bws: [{"op": op, "bytes": b, "us": 1.0, "busbw": bw} for (op, b), bw in zip(
        [("all_reduce", MiB // 2), ("all_reduce", MiB), ("all_gather", 4 * MiB)], bws)]
    table, line = reference.compare_pools({"none": rows([1.0, 2.0, 4.0]), "auto": rows([9.0, 1.0, 4.4])})
    assert [round(x[2], 3) for x in table["auto"]] == [0.5, 1.1]  # the 512 KiB row is below 1 MiB
    assert line == "auto/none busbw at >= 1 MiB: median 0.800, lowest 0.500 (all_reduce 1 MiB), 2 points"
    _, none_common = reference.compare_pools({"none": rows([1.0])[:1], "local": rows([1.0])[:1]})
    assert none_common == "local/none: no common size >= 1 MiB"
