"""bench/decode_bench.py's drivers without a GPU: --sym-ctas and --guard run one torchrun per round
and value (a fake subprocess.run here), set the environment each value means, and print the table
over them; a failed run fails the driver."""
import importlib
import json
import os
import sys
import types

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def decode(monkeypatch):
    # The driver needs neither torch nor the torch layer: stand-ins so that the module imports.
    torch = types.ModuleType("torch")
    torch.distributed = types.ModuleType("torch.distributed")
    layer = types.ModuleType("ncclpool.torch")
    layer.PerformanceWarning = Warning
    package = types.ModuleType("ncclpool")
    package.torch = layer
    for name, module in (("torch", torch), ("torch.distributed", torch.distributed), ("ncclpool", package), ("ncclpool.torch", layer)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.syspath_prepend(os.path.join(ROOT, "bench"))
    sys.modules.pop("decode_bench", None)
    return importlib.import_module("decode_bench")


def fake_runs(decode, monkeypatch, us_of, fail=None):
    """subprocess.run stand-in: writes one round's samples, us_of(env, mode) each; records the envs."""
    seen = []

    def run(cmd, env, **_):
        seen.append(env)
        if fail and fail(env):
            return types.SimpleNamespace(returncode=3, stdout="", stderr="boom")
        out = cmd[cmd.index("--json") + 1]
        samples = [dict(round=0, size=16 << 10, mode=m, us=us_of(env, m)) for m in decode.MODES]
        with open(out, "w") as f:
            json.dump(dict(samples=samples), f)
        return types.SimpleNamespace(returncode=0, stdout="", stderr="")

    monkeypatch.setattr(decode.subprocess, "run", run)
    return seen


def drive(decode, monkeypatch, argv):
    monkeypatch.setattr(sys, "argv", ["decode_bench.py", "--sizes", "16K"] + argv)
    with pytest.raises(SystemExit) as done:
        decode.main()
    return done.value.code


def test_guard_driver_interleaves_settings_and_reports_each_pool(decode, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("NCCLPOOL_SYM_CTAS", "16")  # a CTA count the user set stays set for the guard runs
    seen = fake_runs(decode, monkeypatch, lambda env, mode: 10.0 if mode == "plain" else
                     (5.0 if env["NCCLPOOL_SYMMETRIC_KERNELS"] == "on" else 12.5))
    rc = drive(decode, monkeypatch, ["--guard", "auto,on", "--rounds", "2", "--json", str(tmp_path / "g.json")])
    assert rc == 0
    assert [e["NCCLPOOL_SYMMETRIC_KERNELS"] for e in seen] == ["auto", "on", "auto", "on"]
    assert all(e["NCCLPOOL_SYM_CTAS"] == "16" for e in seen)
    table = capsys.readouterr().out
    row = next(line for line in table.splitlines() if line.strip().startswith("16Ki"))
    assert row.split()[-4:] == ["0.80x", "0.80x", "2.00x", "2.00x"]  # plain/symm auto, plain/auto auto, then on
    written = json.load(open(tmp_path / "g.json"))
    assert written["variant"] == "guard" and written["values"] == ["auto", "on"] and len(written["samples"]) == 16


def test_cta_driver_sets_the_count_per_value(decode, monkeypatch, capsys):
    seen = fake_runs(decode, monkeypatch, lambda env, mode: 10.0 if mode == "plain" else float(env.get("NCCL_SYM_CTAS", 8)))
    assert drive(decode, monkeypatch, ["--sym-ctas", "nccl,ncclpool,16", "--rounds", "1"]) == 0
    assert [(e.get("NCCLPOOL_SYM_CTAS"), e.get("NCCL_SYM_CTAS")) for e in seen] == [("nccl", None), (None, None), (None, "16")]
    row = next(line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("16Ki"))
    assert row.split()[-1] == "1.25x"  # plain 10 over the best symmetric (8 us: NCCL's or ncclpool's count)


def test_a_failed_run_fails_the_driver(decode, monkeypatch, capsys):
    fake_runs(decode, monkeypatch, lambda env, mode: 1.0, fail=lambda env: env["NCCLPOOL_SYMMETRIC_KERNELS"] == "on")
    assert drive(decode, monkeypatch, ["--guard", "auto,on", "--rounds", "1"]) == 1
    assert "FAILED runs: round 1 NCCLPOOL_SYMMETRIC_KERNELS=on: rc=3" in capsys.readouterr().out


def test_guard_driver_runs_the_fence_kinds_beside_the_guard(decode, monkeypatch, capsys):
    monkeypatch.setenv("NCCLPOOL_SYMMETRIC_FENCE", "memset")  # each fence value names its kind, whatever the caller set
    seen = fake_runs(decode, monkeypatch, lambda env, mode: 10.0)
    assert drive(decode, monkeypatch, ["--guard", "guard,fence,fence-kernel,fence-memset,fence-node,on", "--rounds", "1"]) == 0
    assert [(e["NCCLPOOL_SYMMETRIC_KERNELS"], e.get("NCCLPOOL_SYMMETRIC_FENCE")) for e in seen] == [
        ("off", "memset"), ("fence", "node"), ("fence", "kernel"), ("fence", "memset"), ("fence", "node"), ("on", "memset")]
    assert "decisions: guard: ?; fence: ?" in capsys.readouterr().out  # the fake runs name none


@pytest.mark.parametrize("argv, message", [(["--guard", "maybe"], "--guard takes auto, on, off, guard, fence"),
                                          (["--guard", "on", "--sym-ctas", "16"], "two drivers")])
def test_bad_driver_arguments_are_refused(decode, monkeypatch, capsys, argv, message):
    assert drive(decode, monkeypatch, argv) == 2
    assert message in capsys.readouterr().err
