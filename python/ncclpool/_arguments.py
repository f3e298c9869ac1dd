"""Python arguments to C ABI values, checked: the name tables (sources, registration kinds,
collectives, check levels) and the conversions that refuse what ctypes would wrap or take silently.
Shared by the pool, the communicators and ncclpool.torch."""
from __future__ import annotations

from ctypes import c_size_t, c_void_p

from . import _environment

from .errors import InternalError, InvalidArgument, SizeTooLarge

# The C enums' names and values (ncclpool_source_t, ncclpool_registration_t, ncclpool_collective_t):
# checked against the library's own (ncclpool_value_name) when it loads (check_names), as the stats
# structs are built from its tables; None stands for the C default.
SOURCES = {"auto": 0, "sim": 1, "cuda": 2, "vmm": 3, "vmm_host_numa": 4, "nccl": 5}
REGISTRATIONS = {None: -1, "default": -1, "local": 0, "symmetric": 1, "auto": 2}
_SOURCE_NAMES = {v: k for k, v in SOURCES.items()}
_KIND_NAMES = {v: k for k, v in REGISTRATIONS.items() if k not in (None, "default")}  # what a pool or attach reports
COLLECTIVES = {None: 0, "any": 0, "all_gather": 1, "reduce_scatter": 2, "all_reduce": 3}
# ncclpool_names_t -> the table of that enum here.
_C_ENUMS = {0: ("ncclpool_source_t", SOURCES), 1: ("ncclpool_registration_t", REGISTRATIONS),
            2: ("ncclpool_collective_t", COLLECTIVES)}


def check_names(value_name) -> None:
    """Raises InternalError where a table above differs from the loaded library's names;
    ``value_name(names, value)`` is its ncclpool_value_name (bytes, or None for no such value)."""
    for names, (enum, table) in _C_ENUMS.items():
        library = {}
        for value in range(-1, 64):
            name = value_name(names, value)
            if name is not None:
                library[name.decode()] = value
        ours = {k: v for k, v in table.items() if k is not None}
        if library != ours:
            raise InternalError(f"ncclpool: {enum}'s names differ between the library {library} and the package {ours}: "
                                "the library and the package are of different versions")


def _collective(collective) -> int:
    if collective not in COLLECTIVES:
        raise InvalidArgument(f"collective {collective!r} is not one of 'all_gather', 'reduce_scatter', 'all_reduce' or None")
    return COLLECTIVES[collective]


def _kind(kind) -> int:
    if kind not in REGISTRATIONS:
        raise InvalidArgument(f"registration kind {kind!r} is not one of 'local', 'symmetric', 'auto' or None (the pool's default)")
    return REGISTRATIONS[kind]


CHECK_LEVELS = {None: -1, "off": 0, "layout": 1, "collectives": 2, 0: 0, 1: 1, 2: 2}
_CHECK_NAMES = {0: "off", 1: "layout", 2: "collectives"}
_SIZE_MAX = 2**64 - 1


def _size(value, what: str) -> c_size_t:
    """A size_t from a Python int, refusing what ctypes would wrap silently (2**64 + 1024 -> 1024)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} must be an int, not {type(value).__name__}")
    if value < 0 or value > _SIZE_MAX:
        raise (SizeTooLarge if value > _SIZE_MAX else InvalidArgument)(
            f"{what} = {value} is outside 0 .. 2**64 - 1")
    return c_size_t(value)


_INT_MAX = 2**31 - 1


def _int(value, what: str, low: int = -_INT_MAX - 1, high: int = _INT_MAX) -> int:
    """A C int from a Python int in low .. high, refusing what ctypes would wrap silently (2**32 -> 0)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidArgument(f"{what} = {value} is outside {low} .. {high}")
    return value


def _address(value, what: str) -> c_void_p:
    """A non-null address (a block from alloc, an ncclComm_t) from a Python int in 1 .. 2**64 - 1."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} must be an int address, not {type(value).__name__} {value!r}")
    if not 0 < value <= _SIZE_MAX:
        raise InvalidArgument(f"{what} = {value} is not an address (1 .. 2**64 - 1)")
    return c_void_p(value)


def _text(value, what: str) -> bytes:
    """A C string from a Python str (no NUL inside)."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{what} must be a str, not {type(value).__name__}")
    if "\0" in value:
        raise InvalidArgument(f"{what} {value!r} holds a NUL character")
    return value.encode()


def _check_level(check) -> int:
    if check not in CHECK_LEVELS:
        raise InvalidArgument(f"check {check!r} is not one of None (NCCLPOOL_CHECK), 'off', 'layout', 'collectives', 0, 1, 2")
    return CHECK_LEVELS[check]


def _stream(stream) -> c_void_p:
    """Accepts an int handle, None (default stream) or anything with ``cuda_stream`` (torch.cuda.Stream).
    Anything else, and a handle outside 0 .. 2**64 - 1 (which ctypes would wrap), is InvalidArgument."""
    if stream is None:
        return c_void_p(0)
    handle = getattr(stream, "cuda_stream", stream)
    if isinstance(handle, bool) or not isinstance(handle, int):
        raise InvalidArgument(f"stream {stream!r} is not a stream: give an int handle (cudaStream_t), None (the default stream) "
                              "or an object with a cuda_stream attribute (torch.cuda.Stream)")
    if handle < 0 or handle > _SIZE_MAX:
        raise InvalidArgument(f"stream handle {handle} is outside 0 .. 2**64 - 1 (a cudaStream_t; 0: the default stream)")
    return c_void_p(handle)


# The pool sizes from the environment (read in _environment, the package's one reader of it).
_growth_chunk_from_env = _environment.growth_chunk
_min_segment_from_env = _environment.min_segment
