"""Every environment variable the Python package reads or sets, in this one file (as
src/core/environment.cpp is for the C++ library; docs/environment.md lists them all). The start-up
line in ``ncclpool-sglang.pth`` is the one exception: it checks ``NCCLPOOL_SGLANG`` without importing
anything.

Why one file: a variable that changes what a rank does collectively must be read once, where its value
becomes part of what the ranks agree on (``ncclpool.sglang``'s agreed settings), never re-read per call
in some module of its own. scripts/check-tree.py refuses ``os.environ`` / ``os.getenv`` elsewhere in
python/ncclpool/.

Imports nothing but the standard library: ``_sglang_hook`` uses it at interpreter start-up.
"""
from __future__ import annotations

import os
import sys
import warnings

_SIZE_MAX = 2**64 - 1

# ---- the library and its NCCL -------------------------------------------------------------------

LIBRARY = "NCCLPOOL_LIBRARY"            # the libncclpool to load (explicit: that one or an error)
NCCL_LIBRARY = "NCCLPOOL_NCCL_LIBRARY"  # the NCCL libncclpool loads when none is loaded yet


def library_path() -> str:
    """$NCCLPOOL_LIBRARY ('' when unset)."""
    return os.environ.get(LIBRARY, "")


def nccl_library() -> str:
    """$NCCLPOOL_NCCL_LIBRARY ('' when unset)."""
    return os.environ.get(NCCL_LIBRARY, "")


def set_nccl_library(path: str) -> None:
    """Sets $NCCLPOOL_NCCL_LIBRARY for libncclpool (which reads it when it first loads NCCL)."""
    os.environ[NCCL_LIBRARY] = path


# ---- pool sizes ---------------------------------------------------------------------------------

GROWTH_CHUNK = "NCCLPOOL_GROWTH_CHUNK"
MIN_SEGMENT = "NCCLPOOL_MIN_SEGMENT"


def bytes_setting(variable: str) -> int:
    """$variable: bytes (an integer from 0 to 2**64 - 1; unset, empty or 0: the pool's default).
    Anything else is InvalidArgument (`ncclpool info` reports it too)."""
    from .errors import InvalidArgument  # here: this module is imported at start-up, errors is not needed then

    value = os.environ.get(variable, "")
    if value == "":
        return 0
    if not (value.isascii() and value.isdigit()) or int(value) > _SIZE_MAX:
        raise InvalidArgument(f"{variable}={value!r} is not a number of bytes (an integer from 0 to 2**64 - 1; "
                              "0 or unset: the pool's default)")
    return int(value)


def growth_chunk() -> int:
    """$NCCLPOOL_GROWTH_CHUNK (see bytes_setting)."""
    return bytes_setting(GROWTH_CHUNK)


def min_segment() -> int:
    """$NCCLPOOL_MIN_SEGMENT (see bytes_setting)."""
    return bytes_setting(MIN_SEGMENT)


CHECK = "NCCLPOOL_CHECK"


def check_mode() -> str:
    """$NCCLPOOL_CHECK as written ('' when unset); the library parses it (a pool with check=None)."""
    return os.environ.get(CHECK, "")


# ---- the torch layer ----------------------------------------------------------------------------

TORCH = "NCCLPOOL_TORCH"  # off: ncclpool.torch falls back to torch's own path (for bisecting)


def torch_layer() -> str:
    """$NCCLPOOL_TORCH: 'on' (unset, empty, on, 1, true, yes) or 'off' (off, 0, false, no): with 'off'
    ncclpool.torch makes plain torch MemPools and registers nothing (docs/python.md, "Turning the
    torch layer off"). Anything else is InvalidArgument: the switch changes what a rank does
    collectively, so a value some ranks would read one way and others another is refused."""
    from .errors import InvalidArgument

    value = os.environ.get(TORCH, "").strip().lower()
    if value in _ON or value == "":
        return "on"
    if value in _OFF:
        return "off"
    raise InvalidArgument(f"{TORCH}={os.environ[TORCH]!r} is not on or off (unset: on; 1, true, yes / 0, false, no too)")


# ---- SGLang -------------------------------------------------------------------------------------

SGLANG = "NCCLPOOL_SGLANG"            # 1: SGLang's pynccl_allocator resolves to ncclpool.sglang
SGLANG_KIND = "NCCLPOOL_SGLANG_KIND"  # the registration kind of ncclpool.sglang's pool
SGLANG_KINDS = ("auto", "symmetric", "local")
_ON = ("1", "true", "yes", "y", "on")
_OFF = ("", "0", "false", "no", "n", "off")
_warned_switch = False  # site may read the .pth twice (a venv's lib64 -> lib): one line is enough


def sglang_switch() -> bool:
    """$NCCLPOOL_SGLANG: 1/true/yes/on switches the hook on, unset/0/false/no/off leaves it off;
    anything else leaves it off with a line on stderr (a start-up hook must not stop the program)."""
    global _warned_switch
    value = os.environ.get(SGLANG, "").strip().lower()
    if value in _ON:
        return True
    if value not in _OFF and not _warned_switch:
        _warned_switch = True
        sys.stderr.write(f"ncclpool: {SGLANG}={os.environ[SGLANG]!r} is not one of 1, true, yes, on, 0, false, no, off: "
                         "SGLang keeps its own pynccl_allocator\n")
    return False


def switch_sglang_on():
    """Sets NCCLPOOL_SGLANG=1 for the processes this one starts; returns the undo (None: it was set)."""
    previous = os.environ.get(SGLANG)
    if previous == "1":
        return None
    os.environ[SGLANG] = "1"
    return lambda: os.environ.__setitem__(SGLANG, previous) if previous is not None else os.environ.pop(SGLANG, None)


def sglang_kind() -> str:
    """$NCCLPOOL_SGLANG_KIND: ncclpool.sglang's registration kind (unset or empty: auto)."""
    from .errors import InvalidArgument

    kind = os.environ.get(SGLANG_KIND, "") or "auto"
    if kind not in SGLANG_KINDS:
        raise InvalidArgument(f"{SGLANG_KIND}={kind!r} is not one of {', '.join(SGLANG_KINDS)} (unset: auto)")
    return kind


def sglang_bool(name: str, default: bool) -> bool:
    """SGLang's EnvBool (a boolean of SGLang's, read as SGLang reads it), for a process without
    SGLang's modules."""
    value = os.environ.get(name)
    if value is None:
        return default
    if value.lower() in ("true", "1", "yes", "y"):
        return True
    if value.lower() in ("false", "0", "no", "n"):
        return False
    warnings.warn(f'Invalid value for {name}: "{value}" is not a valid boolean value, using default "{default}"')
    return default


def sglang_int(name: str, default: int) -> int:
    """SGLang's EnvInt, for a process without SGLang's modules: InvalidArgument when not an integer."""
    from .errors import InvalidArgument

    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise InvalidArgument(f"{name}={value!r} is not an integer") from None
