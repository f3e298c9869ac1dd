"""How ``import sglang.srt.distributed.device_communicators.pynccl_allocator`` comes to resolve to
:mod:`ncclpool.sglang` (docs/sglang.md, "Switching").

* An import hook (a ``sys.meta_path`` finder) answers that one module name with ncclpool.sglang; it
  imports nothing until SGLang imports the module, so it is cheap to install at interpreter start-up.
* ``ncclpool-sglang.pth``, installed beside the package by ``pip install .`` (the wheel) and
  ``pip install ./python``, calls :func:`startup` in every Python process of that environment: with
  ``NCCLPOOL_SGLANG=1`` in the environment the hook is installed there too. SGLang starts its
  scheduler and worker processes with the spawn method (fresh interpreters), and they inherit the
  environment, so this is what reaches them.
* :func:`install` (what ``ncclpool.sglang.install()`` calls) installs the hook in this process, sets
  ``NCCLPOOL_SGLANG=1`` for the processes it starts, and, where SGLang's module was imported already,
  puts ncclpool.sglang in its place in ``sys.modules`` and in every module that holds it or one of
  its functions.

No torch here: this module runs at interpreter start-up.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import os
import site
import sys
import warnings

from ncclpool import _environment

TARGET = "sglang.srt.distributed.device_communicators.pynccl_allocator"
REPLACEMENT = "ncclpool.sglang"
ENV = _environment.SGLANG
PTH = "ncclpool-sglang.pth"

_undo: list = []  # callables that revert install(), newest last


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        return importlib.import_module(REPLACEMENT)  # the one module object, under both names

    def exec_module(self, module):
        pass  # ncclpool.sglang ran when it was imported


class _Finder(importlib.abc.MetaPathFinder):
    """Answers TARGET with ncclpool.sglang; every other name goes to the next finder."""

    def find_spec(self, name, path=None, target=None):
        if name != TARGET:
            return None
        return importlib.util.spec_from_loader(name, _Loader(), origin=f"{REPLACEMENT} (ncclpool's drop-in)")


_finder = _Finder()


def enabled_by_env() -> bool:
    """$NCCLPOOL_SGLANG (read by _environment.sglang_switch: 1/true/yes/on, else off)."""
    return _environment.sglang_switch()


def active() -> bool:
    return _finder in sys.meta_path


def activate() -> None:
    if not active():
        sys.meta_path.insert(0, _finder)


def deactivate() -> None:
    while _finder in sys.meta_path:
        sys.meta_path.remove(_finder)


def startup() -> None:
    """Called by ncclpool-sglang.pth at interpreter start-up; never raises."""
    try:
        if enabled_by_env():
            activate()
    except Exception as e:  # noqa: BLE001 (start-up must go on; say why)
        sys.stderr.write(f"ncclpool: {PTH}: the SGLang hook was not installed: {e}\n")


def startup_hook_path() -> str | None:
    """Where ncclpool-sglang.pth is found in this interpreter's site directories (None: nowhere, so
    processes started with the spawn method will not get the hook)."""
    dirs = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    for d in dirs:
        path = os.path.join(d, PTH)
        if os.path.isfile(path):
            return path
    return None


def _set(owner, name: str, value) -> None:
    previous = getattr(owner, name)
    setattr(owner, name, value)
    _undo.append(lambda: setattr(owner, name, previous))


def install(layer, public_names) -> list[str]:
    """Routes TARGET to `layer` (ncclpool.sglang) in this process and in processes it starts; returns
    what it replaced. A second call changes nothing more."""
    replaced: list[str] = []
    if not active():
        activate()
        _undo.append(deactivate)
        replaced.append(f"import hook for {TARGET}")
    undo_switch = _environment.switch_sglang_on()
    if undo_switch is not None:
        _undo.append(undo_switch)
        replaced.append(f"{ENV}=1 for the processes this one starts")
    original = sys.modules.get(TARGET)
    if original is not None and original is not layer:
        sys.modules[TARGET] = layer
        _undo.append(lambda: sys.modules.__setitem__(TARGET, original))
        replaced.append(f"sys.modules['{TARGET}'] (was {getattr(original, '__file__', original)})")
        replaced += _rebind(original, layer, public_names)
        if getattr(original, "_mem_pool", None) is not None:
            warnings.warn(f"ncclpool.sglang.install(): SGLang's allocator already made its pool; tensors and contexts made "
                          f"through it stay with it: install before SGLang creates its groups", stacklevel=3)
    if replaced and startup_hook_path() is None:
        warnings.warn(f"ncclpool.sglang.install(): {PTH} is not in this interpreter's site directories, so processes "
                      f"started with the spawn method (SGLang's schedulers) keep SGLang's allocator: install ncclpool "
                      f"with `pip install .` (or `pip install ./python`), or call install() in each process", stacklevel=3)
    if replaced:
        warnings.warn("ncclpool.sglang.install() replaced: " + "; ".join(replaced), stacklevel=3)
    return replaced


def _rebind(original, layer, public_names) -> list[str]:
    """Every module that holds SGLang's module, or one of its public functions and classes (``from
    ... import use_symmetric_memory``), gets ncclpool.sglang's in its place."""
    swap = {id(original): layer}
    for name in public_names:
        if hasattr(original, name) and hasattr(layer, name):
            swap[id(getattr(original, name))] = getattr(layer, name)
    parent_name, _, child = TARGET.rpartition(".")
    rebound = []
    for module in list(sys.modules.values()):
        name = getattr(module, "__name__", "")
        if module is None or module is layer or module is original or name.startswith("ncclpool"):
            continue
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for attr, value in list(namespace.items()):
            new = swap.get(id(value))
            if new is not None and new is not value:
                _set(module, attr, new)
                if not (name == parent_name and attr == child):
                    rebound.append(f"{name}.{attr}")
    return rebound


def uninstall() -> None:
    """Reverts install()."""
    while _undo:
        _undo.pop()()
