"""Asserts taken out of vectorized loops, on kernels written with the asserts in them: a check
that holds for the loop when it holds at its ends is made once before it and the loop stays
vectorized; any other keeps its place and its loop runs serially. Either way the kernel
compiles (an assert in a vectorized loop did not), and a bad argument still stops it."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import tirx
from tvm.script import tirx as T

from tvm_pyfunc_nb._core.build.vectorized_checks import out_of_vector_loops


@T.prim_func
def shifted(a: T.Buffer((16,), "float32"), b: T.Buffer((8,), "float32"), offset: T.int32):
    for i in T.vectorized(8):
        assert i + offset < 16, "index out of bounds"
        b[i] = a[i + offset]


@T.prim_func
def gathered(
    a: T.Buffer((16,), "float32"), idx: T.Buffer((8,), "int32"), b: T.Buffer((8,), "float32")
):
    for i in T.vectorized(8):
        assert idx[i] < 16, "index out of bounds"
        b[i] = a[idx[i]]


@T.prim_func
def plain(a: T.Buffer((8,), "float32"), b: T.Buffer((8,), "float32")):
    for i in T.vectorized(8):
        b[i] = a[i]


def loops_and_asserts(func) -> list[tuple[tirx.ForKind, int]]:
    """Each loop's kind, and how many asserts its body holds."""
    loops = []
    tvm_ffi.structural_walk(func.body, [(tirx.For, loops.append)])
    found = []
    for loop in loops:
        inside = []
        tvm_ffi.structural_walk(loop.body, [(tirx.AssertStmt, inside.append)])
        found.append((loop.kind, len(inside)))
    return found


def test_a_check_linear_in_the_loop_is_made_once_before_it_and_the_loop_stays_vectorized():
    checked = out_of_vector_loops(shifted)
    assert loops_and_asserts(checked) == [(tirx.ForKind.VECTORIZED, 0)]
    lib = tvm.tirx.build(checked, target="llvm")
    a, b = np.arange(16, dtype="float32"), np.zeros(8, "float32")
    lib(a, b, 8)
    assert b.tolist() == list(range(8, 16))
    with pytest.raises(Exception, match="index out of bounds"):
        lib(a, b, 9)  # the last lane would read a[16]


def test_a_check_on_data_each_lane_reads_keeps_its_place_in_a_serial_loop():
    checked = out_of_vector_loops(gathered)
    assert loops_and_asserts(checked) == [(tirx.ForKind.SERIAL, 1)]
    lib = tvm.tirx.build(checked, target="llvm")
    a, b = np.arange(16, dtype="float32"), np.zeros(8, "float32")
    lib(a, np.array([15, 1, 2, 3, 4, 5, 6, 7], "int32"), b)
    assert b.tolist() == [15, 1, 2, 3, 4, 5, 6, 7]
    with pytest.raises(Exception, match="index out of bounds"):
        lib(a, np.array([0, 1, 2, 3, 4, 5, 6, 16], "int32"), b)


def test_a_kernel_without_asserts_in_vector_loops_is_left_as_it_was():
    assert tvm_ffi.structural_equal(out_of_vector_loops(plain), plain)
