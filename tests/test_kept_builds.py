"""`build/in_memory.py`: what a build keeps in memory, found by structure, bounded by versions.

Direct: PrimFuncs and modules that TVMScript parses, and the libraries a build would keep for
them stood for by plain objects (the store never looks inside them).
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm.script import tirx as T

from tvm_pyfunc_nb._core.build import in_memory
from tvm_pyfunc_nb._core.build.in_memory import MAX_KEPT_VERSIONS, MAX_KEPT_VMS, KeptBuilds
from tvm_pyfunc_nb._core.build.linking import Linked


def kernel(k: int) -> tvm.tirx.PrimFunc:
    """Version `k` of one kernel: a new structure for every `k`, the same for the same `k`."""

    @T.prim_func
    def f(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
        for i in range(4):
            B[i] = A[i] + T.float32(k)

    return f


def test_a_kernel_is_found_by_structure_not_by_identity():
    kept, library = KeptBuilds(), object()
    kept.keep_kernel("f", kernel(1), library)
    assert kept.kernel("f", kernel(1)) is library  # parsed again: equal, not the same object
    assert kept.kernel("f", kernel(2)) is None
    assert kept.counts() == {"kernels": 1, "vms": 0}


def test_an_edit_loop_keeps_the_last_few_versions_and_a_revert_finds_them():
    kept = KeptBuilds()
    libraries = {k: object() for k in range(MAX_KEPT_VERSIONS + 2)}
    for k, library in libraries.items():
        kept.keep_kernel("f", kernel(k), library)
    assert kept.counts()["kernels"] == MAX_KEPT_VERSIONS
    assert kept.kernel("f", kernel(0)) is None and kept.kernel("f", kernel(1)) is None
    oldest_kept = len(libraries) - MAX_KEPT_VERSIONS
    assert kept.kernel("f", kernel(oldest_kept)) is libraries[oldest_kept]  # a revert
    # found again, it is the latest version now: the next new one pushes out another
    kept.keep_kernel("f", kernel(99), object())
    assert kept.kernel("f", kernel(oldest_kept)) is libraries[oldest_kept]
    assert kept.kernel("f", kernel(oldest_kept + 1)) is None


def test_the_versions_are_counted_per_function_and_the_store_is_bounded(monkeypatch):
    kept = KeptBuilds()
    for name in "abc":
        kept.keep_kernel(name, kernel(ord(name)), object())
    assert kept.counts()["kernels"] == 3  # one version each: none pushed out
    monkeypatch.setattr(in_memory, "MAX_KEPT_LIBRARIES", 2)
    kept.keep_kernel("d", kernel(0), object())
    assert kept.counts()["kernels"] == 2
    assert kept.kernel("a", kernel(ord("a"))) is None  # the least recently used went first


def test_linked_vms_are_found_by_the_module_they_came_from_a_few_of_them():
    kept = KeptBuilds()
    mods = [tvm.IRModule({"f": kernel(k)}) for k in range(MAX_KEPT_VMS + 1)]
    for mod in mods:
        kept.keep_vm(tvm_ffi.structural_hash(mod), Linked(mod, mod, None, {}))
    assert kept.counts()["vms"] == MAX_KEPT_VMS
    assert kept.vm(tvm_ffi.structural_hash(mods[0]), mods[0]) is None
    again = tvm.IRModule({"f": kernel(MAX_KEPT_VMS)})
    assert kept.vm(tvm_ffi.structural_hash(again), again).mod is mods[-1]
    kept.forget_vms()
    assert kept.counts() == {"kernels": 0, "vms": 0}
