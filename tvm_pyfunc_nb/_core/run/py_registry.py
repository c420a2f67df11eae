"""The process-global `R.call_py_func` registry, shared safely between live modules.

TVM keeps one map from name to Python callable (`vm.builtin.register_py_func`)
with no way to remove one entry, and the interpreter segfaults at exit while
it is non-empty. So: every live module registers under names of its own
(`<prefix>.<name>`), this module remembers what is registered so that
dropping one module can clear the map and put the others back, and the map is
emptied at exit.
"""

from __future__ import annotations

import atexit
import itertools
from collections.abc import Callable

import tvm

_register = tvm.get_global_func("vm.builtin.register_py_func")
_clear = tvm.get_global_func("vm.builtin.clear_py_func_registry")
_entries: dict[str, Callable] = {}
_prefixes = itertools.count(1)


def new_prefix(module_name: str) -> str:
    """A registry prefix no other live module in this process uses."""
    return f"tvmnb{next(_prefixes)}.{module_name}"


def register(name: str, func: Callable) -> None:
    """Make `func` what `R.call_py_func` calls under `name`, remembered so that `unregister` can
    restore it.
    """
    _entries[name] = func
    _register(name, func)


def unregister(names: list[str] | set[str]) -> None:
    """Remove `names`; the registry has no per-name removal, so clear and restore the rest."""
    doomed = [n for n in names if n in _entries]
    if not doomed:
        return
    for name in doomed:
        del _entries[name]
    restore()


def restore() -> None:
    """Make TVM's registry hold exactly our entries again (e.g. after upstream's `__del__` cleared
    it).
    """
    _clear()
    for name, func in _entries.items():
        _register(name, func)


def was_cleared(err: BaseException) -> bool:
    """True if `err` says one of our names vanished from TVM's registry (someone cleared it).

    The registry is then restored, so the caller can retry once.
    """
    text = str(err)
    if "not found in registry" not in text or not any(f"'{name}'" in text for name in _entries):
        return False
    restore()
    return True


def registered() -> list[str]:
    """Every name this package has registered and not removed."""
    return list(_entries)


@atexit.register
def clear_at_exit() -> None:
    """An empty registry at exit avoids TVM's segfault (exit code 139) at interpreter shutdown."""
    _entries.clear()
    _clear()
