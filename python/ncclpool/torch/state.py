"""ncclpool.torch's shared state, with one owner: the lock every module of the layer takes, the table of
torch MemPools made over ncclpool pools (``bindings``: MemPool id -> Binding, each with the groups
attached to its pool), forget_group, and the destroy_process_group hook that keeps the tables true when
a group goes.

The layer's modules import it and it imports none of them (imports run downward only: state <- checks,
copy_engine <- binding <- contexts <- fsdp; scripts/check-tree.py's ``pyimports`` check fails on a
circle). What a module above keeps about a group of its own (copy_engine's decisions) it forgets
through a listener it registers here (:func:`on_group_destroyed`), so this module needs no import of it.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

import torch.distributed as dist

import ncclpool as _np

# The layer's one lock: the tables here, copy_engine's decisions, the patched collectives. The other
# modules read it as state.lock (never a copy of the name), so that one replacement reaches them all
# (the tests give each rank thread a lock of its own, as each rank process has).
lock = threading.RLock()


@dataclass
class Attachment:
    """A process group registered with a pool: its communicator's address, the kind asked, and the
    ncclpool Communicator the pool attached."""

    group: object
    comm_ptr: int
    kind: str
    comm: _np.Communicator

    @property
    def windows(self) -> bool:
        """Whether some of the pool's memory is a window with it (its detach is collective): the pool
        owns its attachments and says (the communicator's has_windows)."""
        return self.comm.attached and bool(self.comm.stats()["has_windows"])


@dataclass
class Binding:
    """A torch MemPool made over an ncclpool pool, and the groups registered with the pool."""

    pool: _np.Pool
    mempool: object
    attachments: dict = field(default_factory=dict)  # comm_ptr -> Attachment


bindings: dict = {}  # torch MemPool id -> Binding

# Called under the lock with the group destroy_process_group is about to destroy (None: every group);
# each returns the groups made for it that go first (forgotten, then destroyed before it).
_group_listeners: list = []
_original_destroy_process_group = None


def on_group_destroyed(listener) -> None:
    """Registers `listener(group) -> list of groups`, run by the destroy hook before a group goes (see
    _group_listeners). Registering the same listener again changes nothing."""
    with lock:
        if listener not in _group_listeners:
            _group_listeners.append(listener)


def forget_group(group=None) -> int:
    """Drops every registration with `group` (None: every group) without calling NCCL. For a
    communicator that was destroyed or aborted. destroy_process_group() does this by itself after
    init(). Returns how many attachments were dropped."""
    dropped = 0
    with lock:
        for binding in bindings.values():
            for ptr, a in list(binding.attachments.items()):
                if group is None or a.group is group:
                    a.comm.forget()
                    del binding.attachments[ptr]
                    dropped += 1
    return dropped


def install_destroy_hook() -> None:
    """destroy_process_group frees the communicators: forget their registrations first. Idempotent."""
    global _original_destroy_process_group
    with lock:
        if _original_destroy_process_group is not None:
            return
        original = dist.destroy_process_group
        destroyed_with_source = []  # groups the hook destroyed with their source group (copy-engine groups)

        def destroy_process_group(group=None, *args, **kwargs):
            everything = group is None or group is dist.group.WORLD  # torch destroys every group then
            with lock:
                if not everything and any(g is group for g in destroyed_with_source):
                    # Gone with its source group already: destroying it again is a no-op here, whatever
                    # order a rank destroys them in (torch would raise on this rank alone).
                    destroyed_with_source[:] = [g for g in destroyed_with_source if g is not group]
                    return None
                companions = [c for listener in _group_listeners for c in listener(None if everything else group)]
                if everything:
                    destroyed_with_source.clear()
            # A group made for `group` (its copy-engine group) goes first, the same on every rank of it.
            for companion in companions:
                forget_group(companion)
                original(companion)
                with lock:
                    destroyed_with_source.append(companion)
            forget_group(None if everything else group)
            return original(group, *args, **kwargs)

        destroy_process_group.__doc__ = original.__doc__
        destroy_process_group.__wrapped__ = original
        _original_destroy_process_group = original
        dist.destroy_process_group = destroy_process_group
        dist.distributed_c10d.destroy_process_group = destroy_process_group
