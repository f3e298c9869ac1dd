"""Communicator: a communicator attached to a pool (made by Pool.attach_nccl / attach_sim): detach,
forget, statistics, the buffer check of one collective, the window covering an address."""
from __future__ import annotations

from ctypes import byref, c_size_t, c_uint64, c_void_p
from typing import TYPE_CHECKING

from . import errors
from ._arguments import _KIND_NAMES
from ._capi import call, read_stats
from .errors import InvalidState

if TYPE_CHECKING:
    from .pool import Pool


class Communicator:
    """A communicator attached to a pool (made by :meth:`Pool.attach_nccl` / :meth:`Pool.attach_sim`,
    never directly). Detach (collective for symmetric) or forget to remove it. ``pool``: the pool;
    ``label``: how messages name it."""

    def __init__(self, pool: Pool, handle: c_void_p, label: str):
        self.pool = pool
        self._handle = handle
        self.label = label

    @property
    def handle(self) -> c_void_p:
        """The C ABI's ``ncclpool_comm_t`` handle. Raises InvalidState once detached or forgotten."""
        if self._handle is None:
            raise InvalidState(f"{self.label} is no longer attached to pool '{self.pool.name}'")
        return self._handle

    @property
    def attached(self) -> bool:
        """False once detached, forgotten, or its pool closed."""
        return self._handle is not None

    def _drop(self):
        self._handle = None
        if self in self.pool._comms:
            self.pool._comms.remove(self)

    def detach(self) -> None:
        """Deregisters everything of this communicator (collective for symmetric windows). A refused
        deregistration (RegistrationError) detaches it regardless: the handle is dropped then too."""
        try:
            call("ncclpool_detach", self.handle)
        except errors.RegistrationError:
            self._drop()
            raise
        self._drop()

    def forget(self) -> None:
        """Drops the registrations without calling NCCL: for a destroyed or aborted communicator."""
        call("ncclpool_forget", self.handle)
        self._drop()

    def stats(self) -> dict:
        """The communicator's counters (the C ABI's ``ncclpool_comm_stats_t`` as a dict: ``rank``,
        ``size``, ``device``, ``kind`` by name, registrations, bytes registered, agreements, errors,
        ``segments_created_in_capture``, ``has_windows``). Raises InvalidState once detached."""
        out = read_stats("comm", self.handle)
        out["kind"] = _KIND_NAMES.get(out["kind"], str(out["kind"]))
        return out

    def verify_buffers(self, *ptrs: int) -> None:
        """Collective: proves that the buffers of one collective sit at the same offset of the same
        symmetric window on every rank (or in none); AgreementError names ranks and offsets."""
        array = (c_void_p * max(1, len(ptrs)))(*ptrs)
        call("ncclpool_verify_buffers", self.handle, array, c_size_t(len(ptrs)))

    def sim_user_collective(self, argument: int = 0) -> None:
        """Simulator only: stands in for an application collective on this communicator."""
        call("ncclpool_sim_user_collective", self.handle, c_uint64(argument))

    def handle_of(self, ptr: int) -> int | None:
        """The window (or local registration handle) covering ptr, None if there is none."""
        out = c_void_p()
        call("ncclpool_comm_handle_of", self.handle, c_void_p(ptr), byref(out))
        return out.value

    def window_of(self, ptr: int) -> int | None:
        """The symmetric window of this communicator that holds ptr; None where ptr's segment is
        registered locally (an auto pool's non-symmetric parts), pending, or not in the pool."""
        out = c_void_p()
        call("ncclpool_comm_window_of", self.handle, c_void_p(ptr), byref(out))
        return out.value

    def __repr__(self):
        return f"<ncclpool.Communicator {self.label} on pool '{self.pool.name}'{'' if self.attached else ' (detached)'}>"
