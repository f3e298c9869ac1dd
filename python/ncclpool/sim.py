"""The simulator, for tests without GPUs: SimGroup (simulated ranks that are threads of this process,
with injected failures) and the pool's simulated graph capture and out-of-memory."""
from __future__ import annotations

from ctypes import byref, c_uint64, c_void_p
from typing import TYPE_CHECKING

from ._arguments import _int, _text
from ._capi import call
from .errors import InvalidArgument, InvalidState

if TYPE_CHECKING:
    from .pool import Pool


class SimGroup:
    """Simulated communicator: `size` ranks that are threads of this process (collectives block until
    every rank made its call, or fail after `timeout_ms`). matching='strict' fails mismatched calls on
    every rank; 'nccl' pairs calls by position unchecked, as NCCL does.

    Raises:
        InvalidArgument: name is no str, size or timeout_ms no int >= 1 that fits a C int, an unknown
            matching.
    """

    MATCHING = {"strict": 0, "nccl": 1}

    def __init__(self, name: str, size: int, timeout_ms: int = 5000, matching: str = "strict"):
        if matching not in self.MATCHING:
            raise InvalidArgument(f"matching {matching!r} is not 'strict' or 'nccl'")
        encoded = _text(name, "SimGroup: name")
        size = _int(size, "SimGroup: size", 1)
        timeout_ms = _int(timeout_ms, "SimGroup: timeout_ms", 1)
        handle = c_void_p()
        call("ncclpool_sim_group_create_matching", encoded, size, timeout_ms, self.MATCHING[matching], byref(handle))
        self._handle = handle
        self.name = name
        self.size = size

    @property
    def handle(self) -> c_void_p:
        """The C ABI's ``ncclpool_sim_group_t`` handle. Raises InvalidState once closed."""
        if self._handle is None:
            raise InvalidState(f"sim group '{self.name}' is closed")
        return self._handle

    def close(self) -> None:
        """Destroys the group (after every communicator of it was detached). Idempotent."""
        if self._handle is not None:
            call("ncclpool_sim_group_destroy", self._handle)
            self._handle = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def live_registrations(self) -> int:
        """Registrations of the group's simulated NCCL not yet deregistered (0 once everything detached:
        what the tests check for leaks)."""
        out = c_uint64()
        call("ncclpool_sim_group_live_registrations", self.handle, byref(out))
        return out.value

    OPS = {"register_local": 0, "deregister_local": 1, "register_window": 2, "deregister_window": 3}

    def inject_failure(self, op: str, rank: int = -1, nth: int = 1) -> None:
        """Makes the nth call of `op` on `rank` (-1: every rank) fail."""
        if op not in self.OPS:
            raise InvalidArgument(f"op {op!r} is not one of {sorted(self.OPS)}")
        call("ncclpool_sim_group_inject_failure", self.handle, self.OPS[op], _int(rank, "inject_failure: rank"),
             _int(nth, "inject_failure: nth"))

    # The decisions a simulated rank can report beside its CTA count (NCCLPOOL_SIM_SYMMETRIC_KERNELS_* in ncclpool.h).
    DECISIONS = {"on": 0, "off": 0x10000, "guard": 0x10000, "fence": 0x20000}

    def set_symmetric_kernels(self, rank: int, setting: int, decision: str = "on") -> None:
        """What `rank`'s (-1: every rank's) communicators report as their symmetric kernel setting (the
        CTA count; -1: nothing) and decision (``on``, ``off`` / ``guard``: windows without the symmetric
        flag, ``fence``: collectives on windows fenced), compared across ranks at a symmetric attach."""
        if decision not in self.DECISIONS:
            raise InvalidArgument(f"decision {decision!r} is not one of {sorted(self.DECISIONS)}")
        setting = _int(setting, "set_symmetric_kernels: setting")
        call("ncclpool_sim_group_set_symmetric_kernels", self.handle, _int(rank, "set_symmetric_kernels: rank"),
             setting if setting < 0 else setting | self.DECISIONS[decision])


def sim_set_capturing(pool: Pool, capturing: bool) -> None:
    """Simulator only: models a CUDA graph capture on the pool's device."""
    call("ncclpool_sim_set_capturing", pool.handle, int(capturing))


def sim_inject_oom(pool: Pool, count: int = 1) -> None:
    """Simulator only: the next `count` (>= 0) segment allocations fail with out of memory."""
    call("ncclpool_sim_inject_oom", pool.handle, _int(count, "sim_inject_oom: count", 0))
