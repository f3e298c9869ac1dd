"""Stand-in for sglang.srt.utils.common (sglang 0.5.23): the two names pynccl and pynccl_allocator import."""
import re

import torch

torch_release = tuple(int(x) for x in re.findall(r"\d+", torch.__version__.split("+")[0])[:3])


def get_current_device_stream_fast():
    """The current stream of the current device (SGLang caches the device index)."""
    return torch.cuda.current_stream(torch.cuda.current_device())
