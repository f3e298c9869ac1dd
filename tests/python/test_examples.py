"""The examples under examples/ run as a newcomer runs them (a subprocess each): the ones that need
no GPU completely, the torch ones as far as a machine without torch or torchrun lets them (--help,
argument checks, the message that says how to launch them). Their GPU runs are in
scripts/gpu-check.sh, section `examples`."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
TORCH_EXAMPLES = ("torch_two_groups.py", "fsdp2.py", "megatron_shim.py")


def run(args, **env):
    """Runs a command with this environment (NCCLPOOL_LIBRARY from ctest, if set) plus `env`."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    full_env.update(env)
    return subprocess.run(args, capture_output=True, text=True, timeout=120, env=full_env, cwd=ROOT)


def example(name, *args):
    return run([sys.executable, os.path.join(EXAMPLES, name), *args])


def flat(text):
    """The text with every run of whitespace made one space (the example wraps long messages)."""
    return " ".join(text.split())


def test_sim_ranks_registers_after_agreement_then_fails_every_rank_on_a_mismatch():
    p = example("sim_ranks.py", "--ranks", "3")
    assert p.returncode == 0, p.stdout + p.stderr
    out = flat(p.stdout)
    for r in range(3):
        # Part 1: three segments, their windows pending inside the scope and registered at its exit;
        # a second use registers nothing.
        assert f"rank {r}: inside the scope: 3 segments, 3 window(s) pending" in out
        assert f"rank {r}: after the scope: 3 window(s) registered, 0 pending" in out
        assert f"rank {r}: a second use: 0 new registration(s)" in out
        # Part 2: every rank gets the AgreementError, which names what each rank had.
        assert f"rank {r}: AgreementError: ncclpool_scope_end: loopback comm 'world' (rank {r} of 3" in out
    assert out.count("ranks disagree at commit #1 of pool 'shared'; nothing was registered there") == 3
    assert out.count("ranks 0,1: pool 'shared' (attachment #0), commit #1: 1 segment(s)") == 3
    assert out.count("rank 2: pool 'shared' (attachment #0), commit #1: 2 segment(s)") == 3
    assert out.count("windows still pending (not registered): 1") == 2  # ranks 0 and 1
    assert out.count("windows still pending (not registered): 2") == 1  # rank 2
    # Rank 0's memory_summary() after part 1.
    assert "pool 'shared' device 0 source: sim device 0 (host memory)" in out
    assert "deterministic placement" in out and "communicators 1, pending registrations 0" in out
    assert p.stdout.rstrip().endswith("done: 3 simulated ranks, no window left registered")


def test_sim_ranks_refuses_fewer_than_two_ranks():
    p = example("sim_ranks.py", "--ranks", "1")
    assert p.returncode == 2
    assert "--ranks must be at least 2" in p.stderr


def demo_binary():
    path = os.environ.get("NCCLPOOL_DEMO") or os.path.join(ROOT, "build", "default", "examples", "ncclpool_demo")
    if not os.path.exists(path):
        pytest.skip(f"no ncclpool_demo at {path} (build the default preset; ctest sets NCCLPOOL_DEMO)")
    return path


def test_pool_demo_prints_its_statistics_and_pure_json_with_json():
    demo = demo_binary()
    text = run([demo, "--source", "sim"])
    assert text.returncode == 0, text.stdout + text.stderr
    assert text.stdout.startswith("source: sim device 0 (host memory)")
    assert "allocations                       224" in text.stdout  # 24 parameters + 5 steps x 40
    p = run([demo, "--source", "sim", "--json"])
    assert p.returncode == 0, p.stderr
    stats = json.loads(p.stdout)  # stdout holds the JSON only; the source line went to stderr
    assert "source: sim device 0" in p.stderr
    assert stats["allocation_count"] == 224 and stats["deallocation_count"] == 200
    assert stats["active_allocations"] == 24  # the parameters, live when the statistics are taken
    assert 0 < stats["allocated_bytes"] <= stats["reserved_bytes"]
    bad = run([demo, "--source", "nowhere"])
    assert bad.returncode == 2 and "usage:" in bad.stderr


@pytest.mark.parametrize("args, why", [
    (["--source", "bogus"], "--source 'bogus' is not one of auto, sim, cuda, vmm"),
    (["--source"], "--source needs a value"),
    (["--device", "x"], "--device 'x' is not a device ordinal (0 to 1023)"),
    (["--device", "99999"], "--device '99999' is not a device ordinal"),
    (["--jsn"], "unknown argument '--jsn'"),
])
def test_pool_demo_says_why_it_refuses_a_command_line(args, why):
    """Issue 47 defect 12: the demo printed its usage without a reason."""
    p = run([demo_binary(), *args])
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.startswith(f"ncclpool_demo: {why}") and "usage:" in p.stderr


def test_pool_demo_help_is_no_error():
    """Issue 47 defect 12: --help exited 2 (usage on stderr); now the usage on stdout, exit 0."""
    for flag in ("--help", "-h"):
        p = run([demo_binary(), flag])
        assert p.returncode == 0 and p.stderr == ""
        assert p.stdout.startswith("usage: ") and "--source auto|sim|cuda|vmm" in p.stdout


@pytest.mark.parametrize("name", TORCH_EXAMPLES)
def test_torch_examples_explain_themselves_without_torch_or_torchrun(name):
    helped = example(name, "--help")
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith(f"usage: {name}") and "--steps" in helped.stdout
    refused = example(name, "--steps", "0")
    assert refused.returncode == 2 and "--steps" in refused.stderr
    # Outside torchrun (no RANK): how to launch it, before torch is even imported.
    alone = example(name)
    assert alone.returncode == 1
    assert f"run it under torchrun: torchrun --nproc-per-node NGPUS examples/{name}" in alone.stderr
