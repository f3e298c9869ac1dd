"""Stand-in for sglang.srt.runtime_context (sglang 0.5.23): ``get_exec()`` raises ValueError until a
configuration is published, as SGLang's does before the server publishes its arguments."""
from types import SimpleNamespace

_exec = None


def publish_exec(*, enable_symm_mem: bool) -> None:
    """What SGLang publishes from --enable-symm-mem."""
    global _exec
    _exec = SimpleNamespace(comm=SimpleNamespace(enable_symm_mem=bool(enable_symm_mem)))


def clear_exec() -> None:
    global _exec
    _exec = None


def get_exec():
    if _exec is None:
        raise ValueError("the 'exec' configuration is not published (stand-in for sglang.srt.runtime_context)")
    return _exec
