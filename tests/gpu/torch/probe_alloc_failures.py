"""What torch does when a CUDAPluggableAllocator's alloc returns NULL or throws a C++ exception.

    python3 tests/gpu/torch/probe_alloc_failures.py build/gpu/tests/libncclpool_torch_probe.so

Each case runs in a child process (a throw might terminate it). Prints one 'PROBE' line per case:
the exception type and message torch raised, whether torch still allocates afterwards, exit code."""
import subprocess
import sys

CHILD = r"""
import sys, torch
lib, fn = sys.argv[1], sys.argv[2]
alloc = torch.cuda.memory.CUDAPluggableAllocator(lib, fn, "probe_free")
pool = torch.cuda.MemPool(alloc.allocator())
try:
    with torch.cuda.use_mem_pool(pool):
        torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    print("RESULT no exception")
except BaseException as e:
    print(f"RESULT {type(e).__module__}.{type(e).__name__}: {str(e).splitlines()[0][:160]}")
x = torch.ones(10, device="cuda")
print("AFTER torch still allocates:", bool(x.sum().item() == 10))
"""


def main():
    lib = sys.argv[1]
    for fn in ("probe_null_alloc", "probe_throw_alloc"):
        r = subprocess.run([sys.executable, "-c", CHILD, lib, fn], capture_output=True, text=True, timeout=120)
        lines = [l for l in r.stdout.splitlines() if l.startswith(("RESULT", "AFTER"))]
        err = r.stderr.strip().splitlines()[-1][:160] if r.returncode and r.stderr.strip() else ""
        print(f"PROBE {fn}: exit {r.returncode}; " + "; ".join(lines) + (f"; stderr: {err}" if err else ""), flush=True)


if __name__ == "__main__":
    main()
