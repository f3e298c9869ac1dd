"""docs/api.md is what scripts/api-reference.py generates from the docstrings and headers (issue 47: an
API reference that CI keeps current), and the check fails when they differ."""
import importlib.util
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "api-reference.py")
PAGE = os.path.join(ROOT, "docs", "api.md")


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=120)


def test_the_page_is_current():
    p = run("--check")
    assert p.returncode == 0, f"docs/api.md is stale: run scripts/api-reference.py\n{p.stderr}"


def test_a_page_that_differs_fails_the_check_naming_the_difference(tmp_path):
    stale = tmp_path / "api.md"
    shutil.copy(PAGE, stale)
    text = stale.read_text()
    assert "Allocates `size` bytes ordered on `stream`" in text
    stale.write_text(text.replace("Allocates `size` bytes ordered on `stream`", "Allocates bytes"))
    p = run("--check", "--output", str(stale))
    assert p.returncode == 1
    assert "is not what scripts/api-reference.py writes (run it)" in p.stderr
    assert "-Allocates bytes" in p.stderr and "+Allocates `size` bytes ordered on `stream`" in p.stderr
    missing = run("--check", "--output", str(tmp_path / "none.md"))
    assert missing.returncode == 1 and "run scripts/api-reference.py" in missing.stderr


def test_the_page_covers_every_public_name_and_both_native_apis():
    text = open(PAGE).read()
    for heading in ("### `class ncclpool.Pool`", "#### `ncclpool.Pool.alloc(", "### `ncclpool.features()",
                    "### `class ncclpool.errors.AgreementError`", "### `ncclpool.torch.create_nccl_mem_pool(",
                    "### `class ncclpool.torch.nccl_mem`", "### `ncclpool.torch.fsdp.enable(",
                    "### `ncclpool.torch.megatron.install()", "### `ncclpool.sglang.install(",
                    "## C ABI: `ncclpool.h`", "### C: Pools", "ncclpool_status_t ncclpool_alloc(",
                    "### C++: `pool.hpp`", "class NCCLPOOL_API Pool", "### C++: `registry.hpp`"):
        assert heading in text, heading
    assert "NCCLPOOL_C_API" not in text  # the export macro is left out of the declarations
    assert "(no docstring)" not in text


def test_a_public_name_without_a_docstring_is_refused():
    spec = importlib.util.spec_from_file_location("api_reference", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines, imports nothing of the package

    def undocumented():
        pass

    assert module.doc_of(undocumented, "somewhere.undocumented") == "(no docstring)"
    assert module.UNDOCUMENTED == ["somewhere.undocumented"]


def test_private_cxx_members_and_plain_comments_are_left_out():
    spec = importlib.util.spec_from_file_location("api_reference", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    header = """
/// A thing.
class Thing {
 public:
  /// Does it.
  void run();
  // an implementation note
 private:
  int hidden_ = 0;
  struct Inner { int x; };
 public:
  int visible() const;
};
/// After.
int after();
"""
    out = module.cxx_declarations(header)
    assert "/// Does it." in out and "void run();" in out and "int visible() const;" in out
    assert "hidden_" not in out and "Inner" not in out and "implementation note" not in out
    assert out.rstrip().endswith("int after();") and "};" in out
