"""One NCCL per process, judged on the libraries actually loaded (issue 28, item 0).

Stand-ins for libnccl.so.2 (tiny shared libraries that export NCCL's API as stubs and say their
version) are compiled into temporary folders; each case runs in a fresh Python process, since NCCL is
loaded once per process. What each case checks:
* torch's NCCL swapped for a newer one (the same file for torch and ncclpool, a version other than the
  one torch was built with): ncclpool.torch.init() allows it;
* a second libnccl.so.2 LD_PRELOAD-ed beside the one torch loads by its path: refused, naming both;
* the same file reached by two paths (a symlink) is one copy; torch without NCCL behaves as before.
No GPU, no torch: the torch layer runs over tests/python/torch_stand_in.py."""
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc) for the stand-in NCCLs")


def _nccl_names():
    """Every NCCL function ncclpool's loader resolves (required and optional), read from its list."""
    text = open(os.path.join(ROOT, "src", "backends", "nccl", "library.hpp")).read()
    names = re.findall(r"\bX\((nccl\w+)\)", text)
    assert "ncclGetVersion" in names and "ncclCommRegister" in names
    return sorted(set(names))


def _stand_in(folder, version):
    """folder/libnccl.so.2: exports every function the loader looks for; ncclGetVersion says `version`."""
    os.makedirs(folder, exist_ok=True)
    src = os.path.join(folder, "nccl_stand_in.c")
    stubs = "".join(f"int {n}(void) {{ return 0; }}\n" for n in _nccl_names()
                    if n not in ("ncclGetVersion", "ncclGetErrorString"))
    with open(src, "w") as f:
        f.write(f"int ncclGetVersion(int* v) {{ *v = {version}; return 0; }}\n"
                "const char* ncclGetErrorString(int r) { (void)r; return \"stand-in\"; }\n" + stubs)
    lib = os.path.join(folder, "libnccl.so.2")
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libnccl.so.2", "-o", lib, src], check=True)
    return lib


@pytest.fixture(scope="module")
def nccls(tmp_path_factory):
    base = tmp_path_factory.mktemp("ncclcheck")
    torchs = _stand_in(str(base / "venv" / "nvidia" / "nccl" / "lib"), 23007)  # torch's file, swapped for 2.30.7
    other = _stand_in(str(base / "preload"), 22809)
    link_dir = base / "link"
    link_dir.mkdir()
    os.symlink(torchs, link_dir / "libnccl.so.2")
    return {"torchs": torchs, "other": other, "link": str(link_dir / "libnccl.so.2")}


def _run(script, env_extra=None):
    """Runs `script` in a fresh python over the stand-in torch; returns its stdout (a repr of a dict)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python"), HERE, env.get("PYTHONPATH", "")])
    env.pop("NCCLPOOL_NCCL_LIBRARY", None)
    env.update(env_extra or {})
    prologue = textwrap.dedent("""
        import ctypes, sys
        import torch_stand_in
        for name, module in torch_stand_in.make_modules().items():
            sys.modules[name] = module
        def load(path):  # as torch's wheels load nvidia/nccl/lib/libnccl.so.2: by its full path
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        def torch_built_with(version):
            sys.modules["torch.cuda"].nccl.version = version
        def init():
            import ncclpool, ncclpool.torch
            try:
                ncclpool.torch.init()
                return "ok"
            except ncclpool.Unsupported as e:
                return str(e)
        def features():
            import ncclpool
            f = ncclpool.features()
            return {k: f[k] for k in ("nccl_available", "nccl_version", "nccl_library", "nccl_other_copies",
                                      "nccl_other_version", "nccl_other_library")}
    """)
    out = subprocess.run([sys.executable, "-c", prologue + textwrap.dedent(script)], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return eval(out.stdout.strip().splitlines()[-1])  # noqa: S307 (our own child's repr)


def test_same_file_newer_than_torchs_build_is_allowed(nccls):
    r = _run(f"""
        load({nccls['torchs']!r})
        torch_built_with(lambda: (2, 28, 9))
        print(repr({{"features": features(), "init": init()}}))
    """)
    f = r["features"]
    assert f["nccl_available"] and f["nccl_version"] == 23007
    assert os.path.realpath(f["nccl_library"]) == os.path.realpath(nccls["torchs"])
    assert f["nccl_other_copies"] == 0 and f["nccl_other_library"] == "" and f["nccl_other_version"] == 0
    assert r["init"] == "ok"


def test_ld_preload_beside_torchs_nccl_is_refused(nccls):
    r = _run(f"""
        load({nccls['torchs']!r})
        torch_built_with(lambda: (2, 28, 9))
        print(repr({{"features": features(), "init": init()}}))
    """, {"LD_PRELOAD": nccls["other"]})
    f = r["features"]
    assert f["nccl_other_copies"] == 1
    # ncclpool reuses the copy the loader finds first by soname (the preloaded one); the other is named.
    assert {os.path.realpath(f["nccl_library"]), os.path.realpath(f["nccl_other_library"])} == \
        {os.path.realpath(nccls["torchs"]), os.path.realpath(nccls["other"])}
    assert {f["nccl_version"], f["nccl_other_version"]} == {23007, 22809}
    msg = r["init"]
    assert "one NCCL per process" in msg and "LD_PRELOAD" in msg, msg
    assert nccls["torchs"] in msg and nccls["other"] in msg, msg


def test_two_copies_of_the_same_version_are_two_copies(nccls, tmp_path):
    """Identity is the file, not its name or version: a copy of torch's file is a second NCCL."""
    copy = tmp_path / "copy" / "libnccl.so.2"
    copy.parent.mkdir()
    shutil.copy(nccls["torchs"], copy)
    r = _run(f"""
        load({nccls['torchs']!r})
        load({str(copy)!r})
        torch_built_with(lambda: (2, 30, 7))
        print(repr({{"features": features(), "init": init()}}))
    """)
    assert r["features"]["nccl_other_copies"] == 1 and r["features"]["nccl_other_version"] == 23007
    assert str(copy) in r["init"] and nccls["torchs"] in r["init"]


def test_one_file_by_two_paths_is_one_copy(nccls):
    r = _run(f"""
        load({nccls['torchs']!r})
        load({nccls['link']!r})  # a symlink to the same file: the loader maps it once
        print(repr({{"features": features(), "init": init()}}))
    """)
    assert r["features"]["nccl_other_copies"] == 0
    assert r["init"] == "ok"


def test_second_copy_loaded_after_ncclpool_looked_is_seen(nccls):
    """Copies are looked for at each call, not only when ncclpool first loaded NCCL."""
    r = _run(f"""
        load({nccls['torchs']!r})
        before = features()
        load({nccls['other']!r})
        print(repr({{"before": before, "after": features()}}))
    """)
    assert r["before"]["nccl_other_copies"] == 0
    assert r["after"]["nccl_other_copies"] == 1 and r["after"]["nccl_other_library"] == nccls["other"]
    assert r["after"]["nccl_other_version"] == 22809


def test_torch_without_nccl_is_not_checked(nccls):
    """torch built without NCCL (torch.cuda.nccl.version() raises): as before, no one-NCCL check."""
    r = _run(f"""
        load({nccls['torchs']!r})
        load({nccls['other']!r})
        def no_nccl():
            raise RuntimeError("torch built without NCCL")
        torch_built_with(no_nccl)
        print(repr({{"init": init()}}))
    """)
    assert r["init"] == "ok"


def test_no_nccl_loaded_and_no_other_copies(tmp_path):
    """Without any NCCL in reach: unavailable as before, and no other copy reported."""
    r = _run("""
        print(repr({"features": features()}))
    """, {"NCCLPOOL_NCCL_LIBRARY": str(tmp_path / "missing" / "libnccl.so.2"), "LD_LIBRARY_PATH": str(tmp_path)})
    f = r["features"]
    assert f["nccl_other_copies"] == 0
    if not f["nccl_available"]:
        assert f["nccl_version"] == 0
