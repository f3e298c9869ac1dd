"""`python -m ncclpool ...` and the `ncclpool` console script: runs the `ncclpool` command that
`pip install .` puts inside the package (ncclpool/bin/ncclpool). Without it (a pure-Python install),
`info` is answered from the library through ctypes and anything else says how to get the command."""
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
        os.execv(command, [command, *args])  # does not return
    if args[:1] == ["info"]:
        import ncclpool
        features = ncclpool.features()
        if "--json" in args:
            print(json.dumps(features, indent=2))
        else:
            for key, value in features.items():
                print(f"{key:20} {value}")
        return 0
    print("ncclpool: this installation has no `ncclpool` command (only `info`); install with `pip install .` "
          "from the repository root to get it", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
