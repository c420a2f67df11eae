"""What a build keeps in memory: kernel libraries by the structure of the PrimFunc they were
built from (the last few versions of each function), and linked Relax VMs by the structure of
the module they were linked from. A revert (a cell's previous text again) finds its kernels
and its VM here and rebuilds nothing; an edit loop keeps the last few versions, not all it went
through (~1 MB each)."""

from __future__ import annotations

from collections import OrderedDict

import tvm_ffi

MAX_KEPT_LIBRARIES = 256
MAX_KEPT_VERSIONS = 4  # of one function
MAX_KEPT_VMS = 4  # the current one and a few earlier versions


class KeptBuilds:
    """Libraries and VMs kept by structural hash (and checked by structural equality)."""

    def __init__(self):
        self._libs: OrderedDict[int, list[tuple[object, object]]] = OrderedDict()
        self._versions: dict[str, list[int]] = {}  # name -> keys of its libraries, oldest first
        self._vms: OrderedDict[int, list] = OrderedDict()

    def counts(self) -> dict[str, int]:
        """How many compiled kernel libraries and Relax VMs are kept."""
        return {
            "kernels": sum(len(v) for v in self._libs.values()),
            "vms": sum(len(v) for v in self._vms.values()),
        }

    def clear(self) -> None:
        self._libs.clear()
        self._versions.clear()
        self._vms.clear()

    def forget_vms(self) -> None:
        self._vms.clear()

    def kernel(self, name: str, func):
        """What was built from `func` (now the latest version of `name`), or None."""
        key = tvm_ffi.structural_hash(func)
        for known, built in self._libs.get(key, ()):
            if tvm_ffi.structural_equal(known, func):
                self._libs.move_to_end(key)
                self._note_version(name, key)
                return built
        return None

    def keep_kernel(self, name: str, func, built) -> None:
        key = tvm_ffi.structural_hash(func)
        self._libs.setdefault(key, []).append((func, built))
        self._libs.move_to_end(key)
        self._note_version(name, key)
        while len(self._libs) > MAX_KEPT_LIBRARIES:
            self._libs.popitem(last=False)

    def vm(self, key: int, mod):
        """The VM linked from `mod` (structural hash `key`), or None."""
        for linked in self._vms.get(key, ()):
            if tvm_ffi.structural_equal(linked.mod, mod):
                self._vms.move_to_end(key)
                return linked
        return None

    def keep_vm(self, key: int, linked) -> None:
        self._vms.setdefault(key, []).append(linked)
        self._vms.move_to_end(key)
        while len(self._vms) > MAX_KEPT_VMS:
            self._vms.popitem(last=False)

    def _note_version(self, name: str, key: int) -> None:
        """`key` is the latest version of `name`; versions older than the last few are released."""
        versions = self._versions.setdefault(name, [])
        if key in versions:
            versions.remove(key)
        versions.append(key)
        while len(versions) > MAX_KEPT_VERSIONS:
            self._libs.pop(versions.pop(0), None)
