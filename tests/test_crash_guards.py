"""The crash guards on their own (`crash_guards.py`), without IPython: each check on kernels that
need it and kernels that do not, built by TVM as a module builds them.

A kernel is built for three CPUs, one for each vector width the CPU schedule uses (SSE's 4
floats, AVX2's 8, AVX-512's 16), and run only when built for plain x86-64, which every x86-64
CPU runs. A check inside a vectorized loop did not compile at all (TVM made its condition a
vector): the vectorized kernels here are the cases that failed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import tvm
import tvm_ffi
from tvm import relax, tirx
from tvm.script import relax as R
from tvm.script import tirx as T

from tvm_pyfunc_nb import CallError
from tvm_pyfunc_nb._core.build import cpu_schedules
from tvm_pyfunc_nb._core.build.crash_guards import (
    guard,
    guard_bounds,
    guard_division,
    has_guards,
    missing_symbols,
    out_of_bounds,
)
from tvm_pyfunc_nb._core.live.live_module import LiveModule

# An x86-64 CPU for each vector width: (float32 lanes, mcpu)
WIDTHS = [(4, "x86-64"), (8, "haswell"), (16, "skylake-avx512")]
AVX2 = '{"kind": "llvm", "mcpu": "haswell"}'


def build(func: tirx.PrimFunc, name: str, mcpu: str = "x86-64"):
    """`func` built as `name` for `mcpu` (LLVM checks the module here: what failed did so)."""
    mod = tvm.IRModule({name: func.with_attr("global_symbol", name)})
    return tvm.tirx.build(mod, target=tvm.target.Target({"kind": "llvm", "mcpu": mcpu}))


def run(func: tirx.PrimFunc, name: str, *args):
    """Build `func` for plain x86-64 and call it on `args` (numpy arrays and scalars); returns the
    arrays as the kernel left them."""
    tensors = [tvm.runtime.tensor(a) if isinstance(a, np.ndarray) else a for a in args]
    build(func, name)[name](*tensors)
    return [t.numpy() for t in tensors if isinstance(t, tvm.runtime.Tensor)]


def loop_kinds(func: tirx.PrimFunc) -> list:
    found = []
    tvm_ffi.structural_walk(func.body, [(tirx.For, lambda loop: found.append(loop.kind))])
    return found


def asserts_in_loops(func: tirx.PrimFunc) -> int:
    found = []
    for_loops = []
    tvm_ffi.structural_walk(func.body, [(tirx.For, for_loops.append)])
    for loop in for_loops:
        tvm_ffi.structural_walk(loop.body, [(tirx.AssertStmt, found.append)])
    return len(found)


F32 = np.float32
I32 = np.int32


# -- what TVM proves wrong when the cell runs -----------------------------------------------
@T.prim_func
def past_the_end(a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32")):
    for i in range(4):
        b[i] = a[i + 1]


@T.prim_func
def in_bounds(a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32")):
    for i in range(4):
        b[i] = a[3 - i]


def test_out_of_bounds_names_the_access_tvm_proves_outside_its_buffer():
    what, line = out_of_bounds(past_the_end)
    assert what.startswith("reads or writes outside a buffer")
    assert "a[i + 1]" in Path(__file__).read_text().splitlines()[line - 1]
    assert out_of_bounds(in_bounds) is None


@T.prim_func
def calls_out(a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32")):
    for i in range(4):
        b[i] = T.call_extern("float32", "no_such_symbol_here", a[i]) + T.call_extern(
            "float32", "expf", a[i]
        )


def test_missing_symbols_are_the_external_calls_this_process_lacks():
    assert missing_symbols(calls_out) == ["no_such_symbol_here"]
    assert missing_symbols(in_bounds) == []


# -- run-time checks in plain loops ----------------------------------------------------------
@T.prim_func
def divide(a: T.Buffer((4,), "int32"), b: T.Buffer((4,), "int32"), c: T.Buffer((4,), "int32")):
    for i in range(4):
        c[i] = a[i] // b[i]


@T.prim_func
def halve(a: T.Buffer((4,), "int32"), c: T.Buffer((4,), "int32")):
    for i in range(4):
        c[i] = a[i] // 2


@T.prim_func
def divide_where_nonzero(
    a: T.Buffer((4,), "int32"), b: T.Buffer((4,), "int32"), c: T.Buffer((4,), "int32")
):
    for i in range(4):
        c[i] = T.if_then_else(b[i] != 0, a[i] // b[i], 0)


def test_guard_division_stops_a_division_by_zero_and_leaves_the_rest_alone():
    guarded = guard_division(divide, "divide")
    a, b = np.array([8, 9, 10, 11], I32), np.array([2, 3, 5, 1], I32)
    assert run(guarded, "divide", a, b, np.zeros(4, I32))[2].tolist() == [4, 3, 2, 11]
    with pytest.raises(RuntimeError, match="integer division or remainder by zero in `divide`"):
        run(guarded, "divide", a, np.array([2, 0, 5, 1], I32), np.zeros(4, I32))
    # a constant divisor, and a division its author guarded with if_then_else: nothing to add
    assert guard_division(halve, "halve").same_as(halve)
    assert guard_division(divide_where_nonzero, "d").same_as(divide_where_nonzero)


@T.prim_func
def gather(
    a: T.Buffer((4,), "float32"), idx: T.Buffer((4,), "int32"), c: T.Buffer((4,), "float32")
):
    for i in range(4):
        c[i] = a[idx[i]]


@T.prim_func
def first_n(a: T.handle, c: T.handle, n: T.int32):
    m = T.int32()
    A = T.match_buffer(a, (m,), "float32")
    C = T.match_buffer(c, (n,), "float32")
    for i in range(n):
        C[i] = A[i]


def test_guard_bounds_stops_an_index_tvm_cannot_prove_and_adds_nothing_it_can():
    guarded = guard_bounds(gather, "gather")
    a = np.arange(4, dtype=F32)
    assert run(guarded, "gather", a, np.array([3, 2, 1, 0], I32), np.zeros(4, F32))[2].tolist() == [
        3,
        2,
        1,
        0,
    ]
    with pytest.raises(RuntimeError, match="index out of bounds in `gather`"):
        run(guarded, "gather", a, np.array([0, 1, 2, 9], I32), np.zeros(4, F32))
    # a loop over `n` into a buffer of size `m`: checked at run time
    with pytest.raises(RuntimeError, match="index out of bounds in `first_n`"):
        run(guard_bounds(first_n, "first_n"), "first_n", a[:2], np.zeros(3, F32), 3)
    assert guard_bounds(in_bounds, "in_bounds").same_as(in_bounds)
    assert not has_guards(in_bounds, "in_bounds") and has_guards(gather, "gather")


# -- reads under a condition: checked where the kernel reads, and only there ------------------
@T.prim_func
def padded(a: T.Buffer((8,), "float32"), b: T.Buffer((10,), "float32")):
    for i in range(10):
        b[i] = T.if_then_else(i >= 1 and i < 9, a[i - 1], T.float32(0))


@T.prim_func
def overreaching_pad(a: T.Buffer((8,), "float32"), b: T.Buffer((10,), "float32")):
    for i in range(10):
        b[i] = T.if_then_else(i >= 1, a[i - 1], T.float32(0))


@T.prim_func
def gathered_where_kept(
    a: T.Buffer((8,), "float32"),
    idx: T.Buffer((8,), "int32"),
    keep: T.Buffer((8,), "bool"),
    b: T.Buffer((8,), "float32"),
):
    for i in range(8):
        b[i] = T.if_then_else(keep[i], a[idx[i]], T.float32(-1))


@T.prim_func
def selected_where_kept(
    a: T.Buffer((8,), "float32"),
    idx: T.Buffer((8,), "int32"),
    keep: T.Buffer((8,), "bool"),
    b: T.Buffer((8,), "float32"),
):
    for i in T.vectorized(8):  # what the CPU schedule makes of a gather a `where` selects
        b[i] = T.Select(keep[i], a[idx[i]], T.float32(-1))


@T.prim_func
def copied_below(a: T.Buffer((8,), "float32"), b: T.Buffer((16,), "float32"), n: T.int32):
    for i in range(16):
        if i < n and i < 8:
            b[i] = a[i]


def test_a_padding_read_is_proved_under_its_condition_and_a_wrong_one_still_stops():
    assert not has_guards(padded, "padded")
    a = np.arange(8, dtype=F32)
    assert run(guard(padded, "padded"), "padded", a, np.zeros(10, F32))[1].tolist() == [
        0,
        *range(8),
        0,
    ]
    with pytest.raises(RuntimeError, match="index out of bounds in `overreaching_pad`"):
        run(guard(overreaching_pad, "overreaching_pad"), "overreaching_pad", a, np.zeros(10, F32))


@pytest.mark.parametrize("kernel", [gathered_where_kept, selected_where_kept])
def test_an_index_is_checked_only_where_the_kernel_reads_with_it(kernel):
    """An index that is out of bounds where its value is not wanted (`keep` false) is no error:
    the kernel does not read there (a `T.Select` is made to read lazily). Where it is wanted,
    it stops the kernel."""
    name = kernel.attrs["global_symbol"]
    guarded = guard(kernel, name)
    for _, mcpu in WIDTHS:
        build(guarded, name, mcpu)
    a = np.arange(8, dtype=F32)
    idx = np.array([7, 100, 5, -3, 3, 2, 1, 0], I32)
    keep = np.array([True, False, True, False, True, True, True, True])
    assert run(guarded, name, a, idx, keep, np.zeros(8, F32))[3].tolist() == [
        7,
        -1,
        5,
        -1,
        3,
        2,
        1,
        0,
    ]
    keep[1] = True
    with pytest.raises(RuntimeError, match=f"index out of bounds in `{name}`"):
        run(guarded, name, a, idx, keep, np.zeros(8, F32))


def test_a_read_inside_an_if_is_proved_knowing_the_condition():
    assert not has_guards(copied_below, "copied_below")


# -- run-time checks in vectorized loops -----------------------------------------------------
@T.prim_func
def shifted(a: T.Buffer((16,), "float32"), b: T.Buffer((8,), "float32"), offset: T.int32):
    for i in T.vectorized(8):
        b[i] = a[i + offset]


@T.prim_func
def shifted_wide(
    a: T.Buffer((T.int64(16),), "float32"), b: T.Buffer((T.int64(8),), "float32"), offset: T.int64
):
    for i in T.vectorized(8):
        b[i] = a[T.Cast("int64", i) + offset]


@T.prim_func
def row_of(
    a: T.Buffer((4, 8), "float32"), row: T.Buffer((1,), "int32"), b: T.Buffer((8,), "float32")
):
    for i in T.vectorized(8):
        b[i] = a[row[0], i]


@T.prim_func
def divided(a: T.Buffer((8,), "int32"), b: T.Buffer((8,), "int32"), d: T.int32):
    for i in T.vectorized(8):
        b[i] = a[i] // d


@T.prim_func
def gathered(
    a: T.Buffer((16,), "float32"), idx: T.Buffer((8,), "int32"), b: T.Buffer((8,), "float32")
):
    for i in T.vectorized(8):
        b[i] = a[idx[i]]


@T.prim_func
def divided_by_each(
    a: T.Buffer((8,), "int32"), d: T.Buffer((8,), "int32"), b: T.Buffer((8,), "int32")
):
    for i in T.vectorized(8):
        b[i] = a[i] // d[i]


@T.prim_func
def through_a_variable(
    a: T.Buffer((16,), "float32"), b: T.Buffer((8,), "float32"), offset: T.int32
):
    for i in T.vectorized(8):
        j = T.bind(i * 2 + offset)
        b[i] = a[j]


# kernel, its arguments (good or bad), what its output holds after the good ones, what the bad
# ones make it say, and whether its loop stays vectorized
VECTORIZED = {
    "shifted": (
        shifted,
        lambda bad: (np.arange(16, dtype=F32), np.zeros(8, F32), 9 if bad else 8),
        np.arange(8, 16),
        "index out of bounds in `shifted`",
        True,  # checked once before the loop: offset >= 0 and offset + 7 < 16
    ),
    "shifted_wide": (
        shifted_wide,
        lambda bad: (np.arange(16, dtype=F32), np.zeros(8, F32), 9 if bad else 8),
        np.arange(8, 16),
        "index out of bounds in `shifted_wide`",
        True,  # an int32 loop into int64 sizes: its index is still linear in the loop
    ),
    "row_of": (
        row_of,
        lambda bad: (
            np.arange(32, dtype=F32).reshape(4, 8),
            np.array([4 if bad else 3], I32),
            np.zeros(8, F32),
        ),
        np.arange(24, 32),
        "index out of bounds in `row_of`",
        True,  # the row read from data is the same for every lane: an embedding's `take`
    ),
    "divided": (
        divided,
        lambda bad: (np.arange(8, dtype=I32), np.zeros(8, I32), 0 if bad else 2),
        np.arange(8) // 2,
        "integer division or remainder by zero in `divided`",
        True,
    ),
    "gathered": (
        gathered,
        lambda bad: (
            np.arange(16, dtype=F32),
            np.array([15, 1, 2, 3, 4, 5, 6, 16 if bad else 7], I32),
            np.zeros(8, F32),
        ),
        np.array([15, 1, 2, 3, 4, 5, 6, 7]),
        "index out of bounds in `gathered`",
        False,  # each lane reads its own index from data: checked lane by lane
    ),
    "divided_by_each": (
        divided_by_each,
        lambda bad: (
            np.full(8, 6, I32),
            np.array([1, 2, 3, 6, 1, 2, 3, 0 if bad else 6], I32),
            np.zeros(8, I32),
        ),
        np.array([6, 3, 2, 1, 6, 3, 2, 1]),
        "integer division or remainder by zero in `divided_by_each`",
        False,
    ),
    "through_a_variable": (
        through_a_variable,
        lambda bad: (np.arange(16, dtype=F32), np.zeros(8, F32), 2 if bad else 1),
        np.arange(1, 16, 2),
        "index out of bounds in `through_a_variable`",
        False,  # the index is a variable bound inside the loop
    ),
}


@pytest.mark.parametrize("name", VECTORIZED)
def test_a_check_in_a_vectorized_loop_compiles_for_every_vector_width_and_still_stops(name):
    kernel, arguments, expected, says, stays_vectorized = VECTORIZED[name]
    guarded = guard(kernel, name)
    assert asserts_in_loops(guarded) == (0 if stays_vectorized else 1)
    assert (tirx.ForKind.VECTORIZED in loop_kinds(guarded)) == stays_vectorized
    for _, mcpu in WIDTHS:
        build(guarded, name, mcpu)
    assert run(guarded, name, *arguments(bad=False))[-1].tolist() == expected.tolist()
    with pytest.raises(RuntimeError, match=says):
        run(guarded, name, *arguments(bad=True))


@tvm.script.ir_module
class ReflectPad:
    @R.function
    def main(x: R.Tensor((3, 16), "float32")):
        return R.nn.pad(x, pad_width=[0, 0, 1, 1], pad_mode="reflect")


@pytest.mark.parametrize(("lanes", "mcpu"), WIDTHS)
def test_a_kernel_the_cpu_schedule_vectorized_compiles_with_its_guards(lanes, mcpu):
    """A reflect pad's index is not linear in the loop (TVM cannot prove it in bounds): its
    vectorized loop runs serially with the check, on every vector width."""
    legal = relax.transform.LegalizeOps()(ReflectPad)
    (kernel,) = [f for _, f in legal.functions_items() if isinstance(f, tirx.PrimFunc)]
    scheduled = cpu_schedules.elementwise_schedule_of(kernel, lanes).mod["main"]
    assert tirx.ForKind.VECTORIZED in loop_kinds(_lowered(scheduled))
    guarded = guard(scheduled, "reflect_pad")
    assert has_guards(scheduled, "reflect_pad")
    build(guarded, "reflect_pad", mcpu)
    if mcpu == "x86-64":
        x = torch.arange(48.0).reshape(3, 16)
        (_, out) = run(guarded, "reflect_pad", x.numpy(), np.zeros((3, 18), F32))
        expected = torch.nn.functional.pad(x[None], (1, 1), mode="reflect")[0]
        assert torch.equal(torch.from_numpy(out), expected)


def _lowered(func: tirx.PrimFunc) -> tirx.PrimFunc:
    from tvm_pyfunc_nb._core.build.crash_guards import LOWER_SBLOCKS

    return LOWER_SBLOCKS(tvm.IRModule({"main": func}))["main"]


# -- a module on an AVX2 CPU: the binding a check stopped is named ----------------------------
GATHER = """
@R.function
def pick(x: R.Tensor((2, 16), "float32"), i: R.Tensor((2, 16), "int64")):
    return R.gather_elements(x, i, axis=1)

@R.function
def rows(w: R.Tensor((10, 32), "float32"), i: R.Tensor((4,), "int64")):
    return R.take(w, i, axis=0, mode="fast")
"""


@pytest.fixture(scope="module")
def on_avx2():
    live = LiveModule("m", target=AVX2)
    live.run_cell(GATHER)
    yield live
    live.close()


@pytest.mark.parametrize(
    ("call", "binding"),
    [
        ("pick", "R.gather_elements(x, i, axis=1)"),  # each lane's index from data: serial
        ("rows", 'R.take(w, i, axis=0, mode="fast")'),  # one row per iteration: checked before
    ],
)
def test_a_bad_index_in_a_vectorized_kernel_raises_naming_its_binding(on_avx2, call, binding):
    x, w = torch.randn(2, 16), torch.randn(10, 32)
    if call == "pick":
        good, args = torch.randint(0, 16, (2, 16)), (x,)
        expected = torch.gather(x, 1, good)
    else:
        good, args = torch.tensor([9, 0, 3, 3]), (w,)
        expected = w[good]
    assert torch.equal(getattr(on_avx2, call)(*args, good), expected)
    bad = good.clone()
    bad.view(-1)[-1] = 16 if call == "pick" else 10
    with pytest.raises(CallError) as info:
        getattr(on_avx2, call)(*args, bad)
    assert binding in str(info.value) and "index out of bounds" in str(info.value)
    assert torch.equal(getattr(on_avx2, call)(*args, good), expected)  # it still works
