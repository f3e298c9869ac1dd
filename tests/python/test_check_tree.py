"""scripts/check-tree.py: each check passes a good tree and fails a bad one (trees made in a temp dir)."""

import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "scripts", "check-tree.py")


def write(root, path, text):
    full = root / path
    full.parent.mkdir(parents=True, exist_ok=True)
    full.write_text(text)


def run(root, *checks):
    r = subprocess.run([sys.executable, SCRIPT, "--root", str(root), *checks], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


@pytest.fixture
def tree(tmp_path):
    """A small tree that passes every check: one file per layer including down the order."""
    write(tmp_path, "include/ncclpool/export.hpp", "#pragma once\n")
    write(tmp_path, "include/ncclpool/pool.hpp", "#pragma once\n#include <ncclpool/export.hpp>\n#include <vector>\n")
    write(tmp_path, "include/ncclpool/registry.hpp", "#pragma once\n#include <ncclpool/pool.hpp>\n")
    write(tmp_path, "include/ncclpool/nccl.hpp", "#pragma once\n#include <ncclpool/registry.hpp>\n#include <ncclpool/profile.hpp>\n")
    write(tmp_path, "include/ncclpool/profile.hpp", "#pragma once\n#include <ncclpool/registry.hpp>\n")
    write(tmp_path, "include/ncclpool/ncclpool.h", "#pragma once\n#include <stddef.h>\n")
    write(tmp_path, "src/core/block.hpp", "#pragma once\n")
    write(tmp_path, "src/core/pool.cpp", '#include "block.hpp"\n#include <ncclpool/pool.hpp>\n')
    write(tmp_path, "src/core/environment.cpp", '#include <cstdlib>\nconst char* f() { return std::getenv("X"); }\n')
    write(tmp_path, "src/registry/registry.cpp", '#include "core/block.hpp"\n#include <ncclpool/registry.hpp>\n')
    write(tmp_path, "src/routing/profile.cpp", '#include "core/block.hpp"\n#include <ncclpool/profile.hpp>\n')
    write(tmp_path, "src/backends/nccl/library.hpp", "#pragma once\n#include <ncclpool/nccl.hpp>\n")
    write(tmp_path, "src/backends/nccl/library.cpp", '#include "library.hpp"\n#include "../cuda/driver.hpp"\n#include <nccl.h>\n')
    write(tmp_path, "src/backends/cuda/driver.hpp", "#pragma once\n")
    write(tmp_path, "src/capi/api.cpp", '#include "backends/nccl/library.hpp"\n#include <ncclpool/ncclpool.h>\n')
    write(tmp_path, "src/CMakeLists.txt", "add_library(ncclpool SHARED core/pool.cpp backends/nccl/library.cpp)\n")
    write(tmp_path, "tools/CMakeLists.txt", "add_executable(tool main.cpp)\ntarget_link_libraries(tool PRIVATE ncclpool_internal)\n")
    write(tmp_path, "tools/main.cpp", '#include "core/block.hpp"\nint main() {}\n')
    write(tmp_path, "python/pkg/__init__.py", "x = 1\n" * 500)
    # The Python package imports downward only; a name under TYPE_CHECKING (never run) may point up.
    write(tmp_path, "python/ncclpool/__init__.py", "from . import errors\nfrom .pool import Pool\n")
    write(tmp_path, "python/ncclpool/errors.py", "class Error(Exception):\n    pass\n")
    write(tmp_path, "python/ncclpool/communicator.py", "from typing import TYPE_CHECKING\nfrom .errors import Error\n"
                                                       "if TYPE_CHECKING:\n    from .pool import Pool\n")
    write(tmp_path, "python/ncclpool/pool.py", "from .communicator import Communicator\n\ndef f():\n    from . import errors\n")
    write(tmp_path, "python/ncclpool/torch/__init__.py", "from .binding import init\nfrom .state import forget_group\n")
    write(tmp_path, "python/ncclpool/torch/state.py", "import threading\nimport ncclpool as _np\nlock = threading.RLock()\n")
    write(tmp_path, "python/ncclpool/torch/binding.py", "from . import state\nfrom ncclpool import errors\nfrom ..pool import Pool\n")
    write(tmp_path, "tests/unit/test_long.cpp", "// a test may be long\n" * 900)
    return tmp_path


def test_a_good_tree_passes_every_check(tree):
    code, out = run(tree)
    assert code == 0, out
    assert out == ""


@pytest.mark.parametrize("path, text, expected", [
    # A core file including a registry header, by its public name, by path, and relatively.
    ("src/core/pool.cpp", "#include <ncclpool/registry.hpp>\n", "src/core/pool.cpp:1: includes <ncclpool/registry.hpp> (registry, layer 1) from core (layer 0)"),
    ("src/core/pool.cpp", '#include "registry/registry.cpp"\n', 'src/core/pool.cpp:1: includes "registry/registry.cpp" (registry, layer 1) from core (layer 0)'),
    ("src/core/pool.cpp", '\n#include "../routing/profile.cpp"\n', 'src/core/pool.cpp:2: includes "../routing/profile.cpp" (routing, layer 2) from core (layer 0)'),
    # The registry may not reach the routing layer, the routing layer not the backends, the backends not the C ABI.
    ("src/registry/registry.cpp", "#include <ncclpool/profile.hpp>\n", "(routing, layer 2) from registry (layer 1)"),
    ("src/routing/profile.cpp", '#include "backends/nccl/library.hpp"\n', "(backends, layer 3) from routing (layer 2)"),
    ("src/backends/cuda/driver.cpp", "#include <ncclpool/ncclpool.h>\n", "(capi, layer 4) from backends (layer 3)"),
    # A public header follows its layer too.
    ("include/ncclpool/pool.hpp", "#include <ncclpool/nccl.hpp>\n", "include/ncclpool/pool.hpp:1: includes <ncclpool/nccl.hpp> (backends, layer 3) from core (layer 0)"),
    # A new public header must be placed in the table; so must one a library file includes.
    ("include/ncclpool/brand_new.hpp", "#pragma once\n", "include/ncclpool/brand_new.hpp: a public header missing from the layer table"),
    ("src/utilities/x.cpp", "", "src/utilities/x.cpp: not in a layer folder"),
    ("src/loose.cpp", "", "src/loose.cpp: not in a layer folder"),
    # The library may not include the tools.
    ("src/capi/api.cpp", '#include "../../tools/main.cpp"\n', "outside the library's layers"),
])
def test_layers_fail_on_an_include_up_the_order(tree, path, text, expected):
    write(tree, path, text)
    code, out = run(tree, "layers")
    assert code == 1, out
    assert expected in out, out


def test_layers_name_an_included_header_without_a_layer(tree):
    write(tree, "include/ncclpool/brand_new.hpp", "#pragma once\n")
    write(tree, "src/core/pool.cpp", "#include <ncclpool/brand_new.hpp>\n")
    code, out = run(tree, "layers")
    assert code == 1
    assert "src/core/pool.cpp:1: includes <ncclpool/brand_new.hpp>: include/ncclpool/brand_new.hpp has no layer" in out, out


@pytest.mark.parametrize("path", ["src/core/pool.cpp", "include/ncclpool/pool.hpp", "tools/main.cpp", "bench/b.cpp", "python/pkg/__init__.py",
                                  "scripts/run.sh", "examples/demo.cpp", "tools/CMakeLists.txt"])
def test_lines_fail_on_a_source_file_over_500_lines_outside_tests(tree, path):
    write(tree, path, "x\n" * 501)
    code, out = run(tree, "lines")
    assert code == 1, out
    assert f"{path}: 501 lines, over the limit of 500" in out, out


def test_lines_pass_500_lines_and_anything_in_tests(tree):
    write(tree, "src/core/pool.cpp", "x\n" * 500)
    write(tree, "tests/python/test_big.py", "x\n" * 2000)
    code, out = run(tree, "lines")
    assert code == 0, out


@pytest.mark.parametrize("path, call", [("src/registry/registry.cpp", 'std::getenv("NCCLPOOL_CHECK")'),
                                        ("tools/main.cpp", 'getenv("NCCL_NVLS_ENABLE")'),
                                        ("src/backends/nccl/library.cpp", 'setenv("NCCL_SYM_CTAS", "32", 0)')])
def test_getenv_fails_outside_the_environment_file(tree, path, call):
    write(tree, path, f"void f() {{ (void){call}; }}\n")
    code, out = run(tree, "getenv")
    assert code == 1, out
    assert f"{path}:1: reads or sets the environment: only src/core/environment.cpp does" in out, out


@pytest.mark.parametrize("line", ['x = os.environ.get("NCCLPOOL_SGLANG_KIND")', 'os.environ["NCCLPOOL_SGLANG"] = "1"',
                                  'x = os.getenv("NCCLPOOL_CHECK")', "from os import environ"])
def test_getenv_fails_in_the_python_package_outside_its_environment_file(tree, line):
    write(tree, "python/ncclpool/_environment.py", 'import os\nx = os.environ.get("A")\n')
    write(tree, "python/ncclpool/sglang.py", "import os\n# os.environ in a comment is fine\n" + line + "\n")
    code, out = run(tree, "getenv")
    assert code == 1, out
    assert "python/ncclpool/sglang.py:3: reads or sets the environment: only python/ncclpool/_environment.py does" in out, out
    assert "_environment.py" not in out.split("only")[0] and ":2:" not in out, out


@pytest.mark.parametrize("files, expected", [
    # Two modules at the top of each other, relatively and by absolute name.
    ({"python/ncclpool/torch/state.py": "from .binding import init\n"},
     "import circle ncclpool.torch.binding -> ncclpool.torch.state -> ncclpool.torch.binding "
     "(python/ncclpool/torch/binding.py:1 imports ncclpool.torch.state, python/ncclpool/torch/state.py:1 imports ncclpool.torch.binding)"),
    ({"python/ncclpool/torch/state.py": "import ncclpool.torch.binding as b\n"}, "ncclpool.torch.binding -> ncclpool.torch.state -> "),
    # An import inside a function dodges the circle at import time but is one all the same.
    ({"python/ncclpool/torch/state.py": "def f():\n    if True:\n        from .binding import init\n"},
     "python/ncclpool/torch/state.py:3 imports ncclpool.torch.binding"),
    # `from . import x` names the module x; `from ncclpool import name` names the package's __init__.
    ({"python/ncclpool/errors.py": "from . import pool\n"}, "ncclpool.communicator -> ncclpool.errors -> ncclpool.pool -> ncclpool.communicator"),
    ({"python/ncclpool/errors.py": "from ncclpool import Pool\n"}, "import circle ncclpool -> ncclpool.errors -> ncclpool "),
    # Three modules around: named in full, with the step that closes it.
    ({"python/ncclpool/torch/checks.py": "from .copy_engine import x\n", "python/ncclpool/torch/copy_engine.py": "from .binding import y\n",
      "python/ncclpool/torch/state.py": "from .checks import z\n"},
     "ncclpool.torch.binding -> ncclpool.torch.state -> ncclpool.torch.checks -> ncclpool.torch.copy_engine -> ncclpool.torch.binding"),
    # Two circles through one module: the whole tangle is named.
    ({"python/ncclpool/torch/state.py": "from . import binding, checks\n", "python/ncclpool/torch/checks.py": "from . import state\n"},
     "all of ncclpool.torch.binding, ncclpool.torch.checks, ncclpool.torch.state reach each other"),
    # The TYPE_CHECKING block's else runs.
    ({"python/ncclpool/communicator.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    pass\nelse:\n    from .pool import Pool\n"},
     "python/ncclpool/communicator.py:5 imports ncclpool.pool"),
    # A module that is no Python cannot be checked: that is a problem too.
    ({"python/ncclpool/torch/state.py": "def f(:\n"}, "python/ncclpool/torch/state.py:1: not Python"),
])
def test_pyimports_fail_on_an_import_circle_in_the_python_package(tree, files, expected):
    for path, text in files.items():
        write(tree, path, text)
    code, out = run(tree, "pyimports")
    assert code == 1, out
    assert out.startswith("check-tree pyimports: ") and expected in out, out


def test_pyimports_pass_imports_downward_outside_the_package_and_under_type_checking(tree):
    write(tree, "python/ncclpool/torch/fsdp.py", "from . import binding\nfrom .state import lock\nimport ncclpool.torch.binding\n")
    write(tree, "python/other/a.py", "from other import b\n")  # outside python/ncclpool: not checked
    write(tree, "python/other/b.py", "from other import a\n")
    write(tree, "python/ncclpool/sim.py", "import typing\nif typing.TYPE_CHECKING:\n    from .pool import Pool\nimport os, json\n")
    write(tree, "python/ncclpool/pool.py", "from .communicator import Communicator\nfrom .sim import x\n")
    code, out = run(tree, "pyimports")
    assert code == 0, out


@pytest.mark.parametrize("line", ["add_executable(t main.cpp ${PROJECT_SOURCE_DIR}/src/backends/cuda/driver.cpp)",
                                  "target_sources(t PRIVATE ../src/core/json.cpp)",
                                  "  src/backends/nccl/library.cpp"])
def test_sources_fail_on_a_library_source_compiled_outside_src(tree, line):
    write(tree, "bench/CMakeLists.txt", "# header comment naming src/core/json.cpp is fine\n" + line + "\n")
    code, out = run(tree, "sources")
    assert code == 1, out
    assert "bench/CMakeLists.txt:2: compiles the library's" in out, out
    assert ":1:" not in out, out


def test_unknown_check_is_an_error(tree):
    code, out = run(tree, "nonsense")
    assert code == 2
    assert "unknown check(s) nonsense" in out


def test_builtin_routes_fail_when_a_file_differs_from_the_run_it_names(tree):
    root = os.path.dirname(os.path.dirname(SCRIPT))
    run_file = "2026-11-27-gpu-check-2xh200-s4/call3-toolbench/bench-coll.json"
    write(tree, "docs/benchmarks/data/" + run_file, open(os.path.join(root, "docs/benchmarks/data", run_file)).read())
    made = subprocess.run([sys.executable, os.path.join(root, "scripts", "builtin-routes.py"), str(tree / "docs/benchmarks/data" / run_file)],
                          capture_output=True, text=True, check=True).stdout
    made = made.replace(str(tree / "docs/benchmarks/data" / run_file), "data/" + run_file)
    write(tree, "src/routing/builtin/sm90-2ranks.json", made)
    code, out = run(tree, "builtin-routes")
    assert code == 0, out
    write(tree, "src/routing/builtin/sm90-2ranks.json", made.replace('"reduce_scatter": "none"', '"reduce_scatter": "local"'))
    code, out = run(tree, "builtin-routes")
    assert code == 1 and "sm90-2ranks.json: differs from what data/" + run_file + " gives" in out, out
    write(tree, "src/routing/builtin/sm90-2ranks.json", made.replace("data/" + run_file, "/tmp/elsewhere.json"))
    code, out = run(tree, "builtin-routes")
    assert code == 1 and "is no file under docs/benchmarks/data/" in out, out
