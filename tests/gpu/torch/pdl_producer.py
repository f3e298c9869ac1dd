"""The PDL producer of the torch-level PDL checks (check_pdl_hazard.py, bench/sglang_cases.py's ``pdl``
case): ncclpool_trigger_then_write from tests/gpu/pdl_producer.ptx, a kernel that lets its dependents
start at once and writes its output after a delay, launched through the driver API (ctypes, no torch
extension to build) on a given stream; and count_wrong, the checks' launch loop."""
import ctypes
import os

PTX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pdl_producer.ptx")


class Producer:
    """ncclpool_trigger_then_write, loaded once into the current CUDA context."""

    def __init__(self, ctas=4, carveout=100):
        # Few CTAs with the maximum shared-memory carveout: NCCL's CTAs (512 threads, 82,240 B of
        # dynamic shared memory) start early only on SMs where they fit (pdl_hazard.cpp's comment).
        self.ctas = ctas
        self.cuda = ctypes.CDLL("libcuda.so.1")
        ptx = open(PTX, "rb").read() + b"\0"
        self.module = ctypes.c_void_p()
        self.function = ctypes.c_void_p()
        self._check(self.cuda.cuModuleLoadData(ctypes.byref(self.module), ctypes.c_char_p(ptx)), "cuModuleLoadData")
        self._check(self.cuda.cuModuleGetFunction(ctypes.byref(self.function), self.module, b"ncclpool_trigger_then_write"), "cuModuleGetFunction")
        # CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT = 9
        self._check(self.cuda.cuFuncSetAttribute(self.function, 9, ctypes.c_int(carveout)), "cuFuncSetAttribute")

    @staticmethod
    def _check(result, what):
        if result != 0:
            raise RuntimeError(f"{what} failed: CUresult {result}")

    def launch(self, tensor, value, delay_ns, stream):
        """Writes `value` into the float32 `tensor` (all of it) after `delay_ns`, on `stream` (a
        torch.cuda.Stream), having let the next kernel on it start at once."""
        if tensor.element_size() != 4 or not tensor.is_contiguous():
            raise ValueError(f"the producer writes float32 into contiguous memory, not {tensor.dtype}")
        buf = ctypes.c_uint64(tensor.data_ptr())
        count = ctypes.c_uint64(tensor.numel())
        val = ctypes.c_float(value)
        delay = ctypes.c_uint64(delay_ns)
        args = (ctypes.c_void_p * 4)(*[ctypes.cast(ctypes.byref(a), ctypes.c_void_p) for a in (buf, count, val, delay)])
        self._check(self.cuda.cuLaunchKernel(self.function, self.ctas, 1, 1, 256, 1, 1, 0, ctypes.c_void_p(stream.cuda_stream), args, None),
                    "cuLaunchKernel")


def count_wrong(tensor, expected, launches, run_once):
    """Runs `run_once` (a producer launch and the collective, or a graph replay) `launches` times, each
    waited for; returns how many left `tensor` anything but `expected`, and one wrong value seen."""
    import torch
    wrong, example = 0, None
    for _ in range(launches):
        run_once()
        torch.cuda.synchronize()
        bad = tensor != expected
        if bool(bad.any()):
            wrong += 1
            example = float(tensor[bad.nonzero()[0]].item())
    return wrong, example
