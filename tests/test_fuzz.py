"""Fuzzing: valid cells, mutated, either make a working module or raise the package's error.

Each example takes one valid cell of a live module, mutates it (drops or
duplicates lines, swaps tokens or lines, changes dtypes, shapes, numbers,
indices, loop ranges and indentation) and runs it as an edit of that cell.
Whatever comes out must be a module whose functions can be called — each
call returning or raising the package's error — or a `TVMModuleError` that
leaves the module as it was.
Anything else fails the test; a crash ends the process and fails the run.
"""

from __future__ import annotations

import inspect
import re
import time

import pytest
import torch
import tvm
import tvm_ffi
from cells import (
    ADD_TIR,
    MAIN_PYFUNC,
    MAIN_RELAX,
    RELAX_CALLS_BOTH,
    SCALE_PYFUNC,
    elementwise_kernel,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tvm_pyfunc_nb import LiveModule, TVMModuleError

EXAMPLES = 300
FIXED_KERNEL = """
@T.prim_func
def double(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
    for i in range(4):
        B[i] = A[i] * T.float32(2)
"""
RELAX_OPS = """
@R.function
def ops(x: R.Tensor((4,), "float32"), y: R.Tensor((4,), "float32")) -> R.Tensor((), "float32"):
    with R.dataflow():
        z = R.multiply(x, y)
        w = R.sum(z, axis=0)
        R.output(w)
    return w
"""
GATHER_KERNEL = elementwise_kernel("gather", "A[B[i]] + A[i // 2]", b_dtype="int32")
SEED = {
    "tir": ADD_TIR,
    "main": MAIN_PYFUNC,
    "relax": MAIN_RELAX,
    "scale": SCALE_PYFUNC,
    "pipeline": RELAX_CALLS_BOTH,
    "double": FIXED_KERNEL,
    "ops": RELAX_OPS,
    "gather": GATHER_KERNEL,
}
DTYPES = ["float32", "float16", "float64", "int32", "int64", "bool", "uint8", "floaty", ""]
NUMBERS = ["0", "1", "3", "4", "8", "-1", "100000", "2147483648"]
SHAPES = ["(n,)", "(n, n)", "()", "(4,)", "(m,)", "(1,)", "(0,)", "(n + 1,)", "(-1,)"]
INDICES = [
    "[i + 1]",
    "[i * 2]",
    "[i - 1]",
    "[0]",
    "[n]",
    "[4]",
    "[B[i]]",
    "[i, i]",
    "[i // 0]",
    "[i % n]",
]
RANGES = ["range(n + 1)", "range(n * 2)", "range(-1)", "range(5)", "range(0)", "range(100000)"]
EXTRA_LINES = [
    "    pass",
    "    return None",
    "    x = 1",
    "@R.function",
    "@I.pyfunc",
    "@T.prim_func",
    "    return x",
    "        A[i] = B[i]",
    "    n = T.int64()",
    "  y = 2",
    "import math",
]
TOKEN = re.compile(r"\w+|[^\w\s]")


@st.composite
def mutated_cell(draw):
    """`(seed cell key, its text mutated one to three times)`."""
    key = draw(st.sampled_from(sorted(SEED)))
    lines = SEED[key].strip("\n").splitlines()
    for _ in range(draw(st.integers(1, 3))):
        lines = draw(_one_mutation(lines))
    return key, "\n" + "\n".join(lines) + "\n"


# The strategies are made once, here: `st.composite` reads its function's source each time it
# decorates one, which inside `_one_mutation` took a third of the test's time.
REPLACEMENTS = [
    (r'"(float32|int32)"', [f'"{d}"' for d in DTYPES]),
    (r"\b\d+\b", NUMBERS),
    (r"\((n|4|x\.shape\[0\]),\)", SHAPES),
    (r"\[(i|B\[i\]|i // 2)\]", INDICES),
    (r"range\((n|4)\)", RANGES),
]


def _one_mutation(lines: list[str]):
    return st.one_of(
        _structural(lines),
        _swap_tokens(lines),
        *(_replace_in_line(lines, pattern, choices) for pattern, choices in REPLACEMENTS),
    )


@st.composite
def _replace_in_line(draw, lines: list[str], pattern: str, choices: list[str]):
    hits = [(i, m) for i, line in enumerate(lines) for m in re.finditer(pattern, line)]
    if not hits:
        return lines
    i, found = draw(st.sampled_from(hits))
    new = draw(st.sampled_from(choices))
    changed = lines[i][: found.start()] + new + lines[i][found.end() :]
    return [*lines[:i], changed, *lines[i + 1 :]]


@st.composite
def _swap_tokens(draw, lines: list[str]):
    i = draw(st.integers(0, len(lines) - 1))
    tokens = list(TOKEN.finditer(lines[i]))
    if len(tokens) < 2:
        return lines
    a, b = sorted(
        draw(st.lists(st.integers(0, len(tokens) - 1), min_size=2, max_size=2, unique=True))
    )
    ta, tb = tokens[a], tokens[b]
    line = lines[i]
    line = (
        line[: ta.start()]
        + tb.group()
        + line[ta.end() : tb.start()]
        + ta.group()
        + line[tb.end() :]
    )
    return [*lines[:i], line, *lines[i + 1 :]]


@st.composite
def _structural(draw, lines: list[str]):
    at = st.integers(0, len(lines) - 1)
    i, j = draw(at), draw(at)
    how = draw(st.sampled_from(["drop", "duplicate", "swap", "insert", "indent", "dedent"]))
    out = list(lines)
    if how == "drop" and len(out) > 1:
        del out[i]
    elif how == "duplicate":
        out.insert(i, out[i])
    elif how == "swap":
        out[i], out[j] = out[j], out[i]
    elif how == "insert":
        out.insert(i, draw(st.sampled_from(EXTRA_LINES)))
    elif how == "indent":
        out[i] = "    " + out[i]
    elif how == "dedent":
        out[i] = out[i][4:] if out[i].startswith("    ") else out[i]
    return out


@pytest.fixture(scope="module")
def fuzzed():
    namespace: dict = {}
    live = LiveModule("demo", namespace=namespace)
    namespace["demo"] = live
    for key, body in SEED.items():
        live.run_cell(body, key=key)
    counts = {"examples": 0, "defined": 0, "refused": 0, "calls returned": 0, "calls refused": 0}
    yield live, {**counts, "start": time.perf_counter()}
    live.close()


def arguments(live: LiveModule, name: str) -> list:
    """Arguments for `name` as its signature asks (symbolic sizes are 4).

    Integer tensors hold one index far out of range, so a kernel that indexes
    with them must be stopped, not crash.
    """
    if live.functions[name] == "pyfunc":
        params = inspect.signature(getattr(live, name)).parameters
        return [torch.arange(4, dtype=torch.float32) for _ in params]
    return [_tensor(*param) for param in parameter_types(live.ir_mod[name])]


def parameter_types(func) -> list[tuple[list, str]]:
    """`(dims, dtype)` of each parameter of a Relax function or PrimFunc (dims: ints, or None if
    symbolic).
    """
    if isinstance(func, tvm.tirx.PrimFunc):  # a parameter of a PrimFunc carries its buffer's shape
        return [
            (list(p.shape), str(p.dtype))
            if getattr(p, "shape", None) is not None
            else ([], "int32")
            for p in func.params
        ]
    types = []
    for param in func.params:
        ty = param.ty
        shape = getattr(getattr(ty, "shape", None), "values", None)
        types.append(
            (list(shape) if shape is not None else [4], str(getattr(ty, "dtype", "float32")))
        )
    return types


def _tensor(dims: list, dtype_name: str) -> torch.Tensor:
    shape = [
        int(d) if isinstance(d, (int, tvm.tirx.IntImm)) and 0 <= int(d) <= 64 else 4 for d in dims
    ]
    dtype = getattr(torch, dtype_name, torch.float32) if dtype_name != "void" else torch.float32
    values = torch.arange(max(1, torch.Size(shape).numel())) % 4
    if not dtype.is_floating_point and dtype is not torch.bool and values.numel() > 1:
        values[-1] = 100000
    return values[: torch.Size(shape).numel()].reshape(shape).to(dtype)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(mutated_cell())
def test_a_mutated_cell_makes_a_working_module_or_raises_the_package_error(fuzzed, case):
    live, counts = fuzzed
    key, body = case
    counts["examples"] += 1
    before = live.ir_mod
    try:
        result = live.run_cell(body, key=key)
    except TVMModuleError:
        counts["refused"] += 1
        assert tvm_ffi.structural_equal(live.ir_mod, before)
        return
    counts["defined"] += 1
    try:
        for name in result.defined:
            try:
                getattr(live, name)(*arguments(live, name))
                counts["calls returned"] += 1
            except TVMModuleError:
                counts["calls refused"] += 1
    finally:
        live.run_cell(SEED[key], key=key)  # back to the valid cell for the next example
    assert set(live.functions) >= {"add_tir", "main", "main_relax", "scale", "pipeline"}


def test_the_module_still_gives_the_seed_numbers_after_fuzzing(fuzzed):
    live, counts = fuzzed
    x, y = torch.arange(4, dtype=torch.float32), torch.ones(4)
    assert torch.equal(live.main(x, y), (x + y) * 2)
    assert torch.equal(live.pipeline(x, y), (x + y) * 10)
    assert torch.equal(live.ops(x, y), (x * y).sum())
    seconds = time.perf_counter() - counts.pop("start")
    print(f"\nfuzz: {counts} in {seconds:.0f} s")
    assert counts["examples"] >= EXAMPLES
