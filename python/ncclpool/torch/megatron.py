"""Megatron drop-in: makes ``megatron.core.nccl_allocator`` resolve to :mod:`ncclpool.torch` without
editing Megatron, for Megatron-Core and for the ``megatron-fsdp`` package (which imports
``megatron.core.nccl_allocator`` when it can)::

    import ncclpool.torch.megatron
    replaced = ncclpool.torch.megatron.install()   # before or after Megatron was imported
    print(replaced)                                # what now points at ncclpool.torch

Call it before the model is wrapped (``fully_shard(..., nccl_ub=True)`` creates its pool on first
use). What it does:

* ``sys.modules['megatron.core.nccl_allocator']`` becomes ncclpool.torch, so later imports get it;
* every module already imported that holds Megatron's allocator module (``import ... as
  nccl_allocator``) gets ncclpool.torch in its place, and modules that chose an allocator at import
  (megatron-fsdp's ``NCCL_ALLOCATOR``) are switched to the Megatron-Core flavour;
* where Megatron-Core is not installed (megatron-fsdp alone), empty ``megatron`` / ``megatron.core``
  packages are registered so that megatron-fsdp's import finds ncclpool.torch;
* every ncclpool.torch context exit commits pending windows at once, as Megatron-Core's allocator
  registers at every exit (Megatron enters ``nccl_mem`` only to allocate a new buffer): without the
  drop-in, exits commit on the pool's schedule (its first 16, then every 16th);
* unlike Megatron's ``init()``, ncclpool never sets ``NCCL_NVLS_ENABLE``;
* the process declares that its symmetric collectives overlap compute
  (ncclpool.prefer_nccl_symmetric_ctas): NCCL's own CTA count for the symmetric kernels instead of
  ncclpool's measured default, taken on decode all-reduces (docs/python.md, "The symmetric kernels'
  CTA count"). Installed after the process's first symmetric attach, the count stays (a warning says so).

``uninstall()`` puts back everything ``install()`` changed, except the CTA declaration (a process
declares it once; its count is decided once).
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
import types
import warnings

TARGET = "megatron.core.nccl_allocator"

_undo: list = []  # callables that revert install(), newest last


def _set_module(name: str, module) -> None:
    previous = sys.modules.get(name)
    sys.modules[name] = module
    _undo.append(lambda: sys.modules.__setitem__(name, previous) if previous is not None else sys.modules.pop(name, None))


def _set_attr(owner, name: str, value) -> None:
    previous = getattr(owner, name)
    setattr(owner, name, value)
    _undo.append(lambda: setattr(owner, name, previous))


def _set_attr_new(owner, name: str, value) -> None:
    """Sets an attribute that may not exist yet; undo restores or removes it."""
    if hasattr(owner, name):
        _set_attr(owner, name, value)
        return
    setattr(owner, name, value)
    _undo.append(lambda: delattr(owner, name) if hasattr(owner, name) else None)


def _installable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return name in sys.modules


def install() -> list[str]:
    """Routes Megatron's NCCL allocator to ncclpool.torch; returns (and warns with) what it replaced.
    Calling it again changes nothing more."""
    import ncclpool.torch as layer
    import ncclpool.torch.binding as binding
    import ncclpool.torch.contexts as contexts

    binding.prefer_nccl_ctas_for_training("ncclpool.torch.megatron.install()")  # before Megatron attaches anything
    replaced: list[str] = []
    original = sys.modules.get(TARGET)
    if original is layer:
        return replaced
    if _installable("megatron.core"):
        # The parents must exist (import a.b.c binds through them); importing them may import
        # Megatron's allocator too, which the loop below then replaces.
        importlib.import_module("megatron.core")
        original = sys.modules.get(TARGET)
    elif not _installable("megatron"):
        for name in ("megatron", "megatron.core"):
            package = types.ModuleType(name, "stand-in parent made by ncclpool.torch.megatron.install()")
            package.__path__ = []
            _set_module(name, package)
        _set_attr_new(sys.modules["megatron"], "core", sys.modules["megatron.core"])
        replaced.append("megatron, megatron.core (not installed: empty parent packages)")
    _set_module(TARGET, layer)
    _set_attr(contexts, "_commit_at_every_exit", True)
    replaced.append(f"sys.modules['{TARGET}']" + (f" (was {getattr(original, '__file__', original)})" if original else ""))
    core = sys.modules.get("megatron.core")
    if core is not None:
        _set_attr_new(core, "nccl_allocator", layer)
    for module in list(sys.modules.values()):
        if module is None or module is layer or getattr(module, "__name__", "").startswith("ncclpool"):
            continue
        names = getattr(module, "__dict__", {})
        for attr, value in list(names.items()):
            if original is not None and value is original:
                _set_attr(module, attr, layer)
                replaced.append(f"{module.__name__}.{attr}")
        # megatron-fsdp chose its allocator at import: "MCORE", "APEX" or none.
        if "NCCL_ALLOCATOR" in names and "nccl_allocator" in names and names["nccl_allocator"] is not layer:
            _set_attr(module, "nccl_allocator", layer)
            _set_attr(module, "NCCL_ALLOCATOR", "MCORE")
            replaced.append(f"{module.__name__}.nccl_allocator (was {names.get('NCCL_ALLOCATOR')!r})")
        if names.get("NCCL_MEMORY_POOL") is not None and names["NCCL_MEMORY_POOL"] is not layer:
            warnings.warn(f"ncclpool.torch.megatron.install(): {module.__name__}.NCCL_MEMORY_POOL already exists and "
                          "stays with the allocator that made it: install before the model is wrapped", stacklevel=2)
    warnings.warn("ncclpool.torch.megatron.install() replaced: " + "; ".join(replaced), stacklevel=2)
    return replaced


def uninstall() -> None:
    """Reverts install() (the CTA declaration stays: see the module's docstring)."""
    while _undo:
        _undo.pop()()
