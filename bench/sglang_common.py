"""Shared by bench/sglang_bench.py and bench/sglang_cases.py: SGLang's own allocator module, unmodified
(the three files scripts/sglang-inputs.sh takes from the sglang==0.5.23 wheel into .whl/sglang),
beside ncclpool.sglang, over a tensor-parallel group made as SGLang makes it (a PyNcclCommunicator on
a gloo process group, in a stand-in GroupCoordinator: bench/sglang_standins).

SGLang's allocator JIT-builds a small C++ library at its first use (torch's load_inline, linked
with -lnccl). The GPU host has no linker name libnccl.so beside torch's libnccl.so.2, and maybe no
ninja: jit_toolchain() makes a symlink in a temporary folder (LIBRARY_PATH, LD_LIBRARY_PATH) and puts
.whl/sglang/bin/ninja on PATH when ninja is missing."""
import contextlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback

os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INPUTS = os.environ.get("SGLANG_INPUTS", os.path.join(ROOT, ".whl", "sglang"))
STANDINS = os.path.join(ROOT, "bench", "sglang_standins")
TARGET = "sglang.srt.distributed.device_communicators.pynccl_allocator"
FILES = ("pynccl.py", "pynccl_wrapper.py", "pynccl_allocator.py")
JIT_DIR = os.path.join(tempfile.gettempdir(), "symm_allocator")  # where SGLang's allocator builds itself


def prepare_paths() -> None:
    """SGLang's files and the stand-ins on sys.path (namespace packages merge them), ncclpool from the checkout."""
    inner = os.path.join(INPUTS, "sglang", "srt", "distributed", "device_communicators")
    missing = [f for f in FILES if not os.path.isfile(os.path.join(inner, f))]
    if missing:
        raise SystemExit(f"sglang bench: {', '.join(missing)} missing under {inner}: run scripts/sglang-inputs.sh "
                         "(on a machine that reaches PyPI) and carry .whl/sglang")
    for path in (os.path.join(ROOT, "python"), STANDINS, INPUTS):
        if path not in sys.path:
            sys.path.insert(0, path)


def jit_toolchain() -> dict:
    """What SGLang's JIT build needs: ninja on PATH and the linker name libnccl.so for torch's NCCL."""
    done = {}
    if shutil.which("ninja") is None:
        carried = os.path.join(INPUTS, "bin")
        if os.path.isfile(os.path.join(carried, "ninja")):
            os.environ["PATH"] = carried + os.pathsep + os.environ.get("PATH", "")
            done["ninja"] = os.path.join(carried, "ninja")
    done["ninja"] = done.get("ninja") or shutil.which("ninja") or "missing"
    nccl = loaded_nccl()
    if nccl:
        folder = tempfile.mkdtemp(prefix="sglang-bench-nccl-")
        os.symlink(nccl, os.path.join(folder, "libnccl.so"))
        for var in ("LIBRARY_PATH", "LD_LIBRARY_PATH"):
            os.environ[var] = folder + (os.pathsep + os.environ[var] if os.environ.get(var) else "")
        done["libnccl.so"] = f"{folder}/libnccl.so -> {nccl}"
    else:
        done["libnccl.so"] = "no libnccl.so.2 loaded: the JIT build's -lnccl will fail"
    return done


def loaded_nccl() -> str:
    """The libnccl.so.2 this process has loaded (torch's), from /proc/self/maps; else the one torch's
    nvidia.nccl package ships (what torch will load)."""
    import torch  # noqa: F401 (loads torch's NCCL)
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split(None, 5)[-1].strip()
            if os.path.basename(path).startswith("libnccl.so"):
                return os.path.realpath(path)
    try:
        import nvidia.nccl
        for folder in nvidia.nccl.__path__:
            if os.path.isfile(os.path.join(folder, "lib", "libnccl.so.2")):
                return os.path.realpath(os.path.join(folder, "lib", "libnccl.so.2"))
    except ImportError:
        pass
    return ""


def init_distributed():
    """(rank, world, local) under torchrun (gloo default group: SGLang's PyNccl refuses an NCCL group),
    or a one-process world."""
    import torch
    import torch.distributed as dist
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    if "MASTER_ADDR" not in os.environ:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29517"))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    return rank, world, local


def make_tp_group(rank: int, world: int, local: int):
    """SGLang's TP group: a PyNcclCommunicator (symmetric memory on) in a GroupCoordinator; published
    as the TP group with --enable-symm-mem on."""
    import torch.distributed as dist
    from sglang.srt import runtime_context
    from sglang.srt.distributed import parallel_state
    from sglang.srt.distributed.device_communicators.pynccl import PyNcclCommunicator
    comm = PyNcclCommunicator(group=dist.group.WORLD, device=local, is_symmetric_memory_enabled=True) if world > 1 else None
    group = parallel_state.GroupCoordinator(unique_name="tp", rank_in_group=rank, world_size=world, pynccl_comm=comm,
                                            cpu_group=dist.group.WORLD, device=f"cuda:{local}")
    parallel_state.set_tp_group(group)
    runtime_context.publish_exec(enable_symm_mem=True)
    return group


def load_allocator(which: str):
    """'sglang': SGLang's module from the wheel; 'ncclpool': ncclpool.sglang; 'plain': None."""
    import importlib
    if which == "plain":
        return None
    if which == "sglang":
        module = importlib.import_module(TARGET)
        assert os.path.realpath(module.__file__).startswith(os.path.realpath(INPUTS)), module.__file__
        return module
    if which == "ncclpool":
        return importlib.import_module("ncclpool.sglang")
    raise SystemExit(f"unknown allocator {which!r}")


@contextlib.contextmanager
def graph_capture():
    """What SGLang's graph_capture() (GroupCoordinator, used by its CUDA graph runner) does: a side
    stream, after the current one, made current; the runner warms up on it and captures on it
    (torch.cuda.graph(..., stream=)). Warm-up and capture must share a stream: torch's caching
    allocator keeps freed blocks per stream, so a capture on another stream than its warm-up finds
    none of the warm-up's blocks and grows the pool inside the capture, which SGLang's allocator
    (ncclMemAlloc and ncclCommWindowRegister at the context's exit) cannot do while capturing."""
    import torch
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        yield stream
    torch.cuda.current_stream().wait_stream(stream)


def all_reduce(group, tensor) -> None:
    """What GroupCoordinator.all_reduce does with symmetric memory on: PyNccl, in place, current stream."""
    with group.pynccl_comm.change_state(enable=True):
        group.pynccl_comm.all_reduce(tensor)


def versions() -> dict:
    import torch
    import ncclpool
    f = ncclpool.features()
    return dict(torch=torch.__version__, nccl_torch_built=str(torch.cuda.nccl.version()), nccl_loaded=f["nccl_version"],
                nccl_library=f["nccl_library"], symmetric_kernels=f["symmetric_kernels_enabled"],
                symmetric_kernels_why=f["symmetric_kernels_why"], symmetric_ctas=f["symmetric_ctas"],
                symmetric_ctas_source=f["symmetric_ctas_source"], gpu=torch.cuda.get_device_name(),
                env={k: os.environ.get(k, "(unset)") for k in ("NCCLPOOL_SYMMETRIC_KERNELS", "NCCLPOOL_SYM_CTAS", "NCCL_SYM_CTAS",
                                                               "NCCLPOOL_SGLANG_KIND", "SGLANG_DEBUG_SYMM_MEM", "NCCL_NVLS_ENABLE")})


def write_rank_result(folder: str, name: str, rank: int, result: dict) -> None:
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{name}.rank{rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(result, f, indent=1, default=str)
    os.replace(path + ".tmp", path)


class Watchdog:
    """A case that may hang (SGLang's registration, #36943): after `seconds` the result says where each
    thread was, is written, and the process exits (so that torchrun returns and the next case runs)."""

    def __init__(self, seconds: float, on_timeout):
        self._done = threading.Event()
        self._on_timeout = on_timeout
        self._thread = threading.Thread(target=self._run, args=(seconds,), daemon=True)
        self._thread.start()

    def _run(self, seconds):
        if self._done.wait(seconds):
            return
        frames = sys._current_frames()
        stacks = {t.name: "".join(traceback.format_stack(frames[t.ident])[-6:]) for t in threading.enumerate()
                  if t.ident in frames and t is not threading.current_thread()}
        try:
            self._on_timeout(seconds, stacks)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)

    def cancel(self):
        self._done.set()


def now() -> float:
    return time.perf_counter()
