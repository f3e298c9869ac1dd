"""`python -m ncclpool ...` and the `ncclpool` console script: runs the `ncclpool` command that
`pip install .` puts inside the package (ncclpool/bin/ncclpool). Without it (a pure-Python install),
`info` is answered from the library through ctypes and anything else says how to get the command.

`info` ends with what it says about torch where torch is installed (its version, the NCCL it was built
with, and the process group `init_process_group("nccl")` makes: classic ProcessGroupNCCL or nccl2;
ncclpool.torch.versions.torch_report). The C++ command does not know torch: this Python entry point
runs it, then adds its own line (text) or key `torch` (--json)."""
from __future__ import annotations

import json
import os
import sys


def _bundled_command() -> str | None:
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "ncclpool")
    return path if os.access(path, os.X_OK) else None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    command = _bundled_command()
    if command is not None:
        from ncclpool._capi import prefer_torchs_nccl

        prefer_torchs_nccl()  # the command then runs on the NCCL torch would use, not the system's
        if args[:1] == ["info"]:
            return _info_with_torch(command, args)
        os.execv(command, [command, *args])  # does not return
    if args[:1] == ["info"]:
        import ncclpool
        features = ncclpool.features()  # before torch is imported here: the NCCL this process would load
        if "--json" in args:
            print(json.dumps({**features, "torch": _torch_report()}, indent=2))
        else:
            for key, value in features.items():
                print(f"{key:20} {value}")
            print(_torch_line(_torch_report()))
        return 0
    print("ncclpool: this installation has no `ncclpool` command (only `info`); install with `pip install .` "
          "from the repository root to get it", file=sys.stderr)
    return 2


def _info_with_torch(command: str, args: list[str]) -> int:
    """`ncclpool info` through the bundled command, then what it says about torch."""
    import subprocess
    if "--json" not in args:
        sys.stdout.flush()
        rc = subprocess.call([command, *args])
        print(_torch_line(_torch_report()))
        return rc
    done = subprocess.run([command, *args], stdout=subprocess.PIPE, text=True)
    try:
        doc = json.loads(done.stdout)
    except ValueError:  # not the JSON expected: pass it on as it is
        sys.stdout.write(done.stdout)
        return done.returncode or 1
    doc["torch"] = _torch_report()
    print(json.dumps(doc))
    return done.returncode


def _torch_report() -> dict | None:
    """ncclpool.torch.versions.torch_report(); None: torch not installed; {"error": ...}: its import fails."""
    import importlib.util
    try:
        if importlib.util.find_spec("torch") is None:
            return None
        from ncclpool.torch.versions import torch_report
        return torch_report()
    except Exception as e:  # noqa: BLE001 - a torch that fails to import is what info should say
        return {"error": f"{type(e).__name__}: {e}"}


def _torch_line(report: dict | None) -> str:
    if report is None:
        return "\ntorch      not installed (ncclpool.torch needs it)"
    if "error" in report:
        return f"\ntorch      installed, but `import torch` fails: {report['error']}"
    return (f"\ntorch      {report['version']} (CUDA {report['cuda']}, built with NCCL {report['nccl'] or 'none'}); "
            f"init_process_group(\"nccl\") makes {report['nccl_process_group']}: {report['why']}")


if __name__ == "__main__":
    sys.exit(main())
