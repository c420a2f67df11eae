"""Checks in front of the TVM paths that kill the process instead of raising.

TVM trusts its input in a few places: given these, it does not raise but
aborts or segfaults, and a notebook kernel dies with every live module in it.
Each check turns one such input into an ordinary error of this package
before TVM sees it.

- A PrimFunc that provably reads or writes outside a buffer: `out_of_bounds`
  runs TVM's own static `OOBChecker` when the cell runs.
- A PrimFunc whose accesses depend on run-time values (a loop over `n` into
  a buffer of size `m`, an index read from data): `guard_bounds` asserts
  each access TVM cannot prove in bounds, before a CPU compile. TVM has no
  working run-time bound checks of its own for these functions.
- A PrimFunc calling an external symbol this process does not have: LLVM's
  JIT reports "Symbols not found" and still hands back an address that
  segfaults when called (`missing_symbols`, before a CPU compile).
- Integer division or remainder by a value known only at run time: the CPU
  traps on zero (SIGFPE). `guard_division` puts an assert in front of each
  statement that divides, so the call raises like any failed TVM assert.
- Complex tensors: TVM aborts while formatting its own dtype error (see
  `tensors.to_tvm_arg`).

A read in a branch of `T.if_then_else` (or of an `if`) is checked only where the
branch is taken, as the kernel reads it; a `T.Select` that would read out of bounds
in the value it does not select reads lazily instead (`guard_bounds`).

`guard` applies both run-time checks. Kernels written with `T.sblock`s (what
Relax legalization makes of an imported model's ops) are checked in their
lowered form, and built as they are when they need no check: an `R.take`
whose indices come from data is guarded, an elementwise add or a matmul is not.
"""

from __future__ import annotations

import ctypes
import functools
import re

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.sym import Analyzer

from .vectorized_checks import out_of_vector_loops

# Part of the compile cache's key: a library built under other guards is another library.
GUARDS_VERSION = 4

_EXTERN_CALLS = {"tirx.call_extern", "tirx.call_pure_extern", "tirx.call_cpacked"}
_DIVISIONS = (tirx.Div, tirx.Mod, tirx.FloorDiv, tirx.FloorMod)
_IF_THEN_ELSE = tvm.ir.Op.get("prim.if_then_else")
# The expressions a statement evaluates itself (not those of the statements it contains).
_OWN_EXPRESSIONS = {
    tirx.BufferStore: ("value", "indices"),
    tirx.Bind: ("value",),
    tirx.LetStmt: ("value",),
    tirx.Evaluate: ("value",),
    tirx.IfThenElse: ("condition",),
    tirx.For: ("min", "extent"),
}
_OOB_MESSAGE = re.compile(r"Out of bounds memory access on (.*?)\.?\s*$", re.MULTILINE)
_OOB_PATH = re.compile(r"Access path: <root>\.functions\[[^\]]*\](\S*)")
_PATH_STEP = re.compile(r"\.(\w+)|\[(\d+)\]")


# What tirx.build does first to a kernel with `T.sblock`s (on a CPU): what is left is plain
# loops and buffer accesses, which the guards check as they check written ones.
LOWER_SBLOCKS = tvm.transform.Sequential(
    [
        s_tir.transform.LowerInitBlock(),
        s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
        s_tir.transform.ConvertBlocksToOpaque(),
        s_tir.transform.CompactBufferAllocation(),
        s_tir.transform.LowerMatchBuffer(),
        s_tir.transform.LowerOpaqueBlock(),
    ]
)


def guard(func: tirx.PrimFunc, name: str) -> tirx.PrimFunc:
    """`func` with the run-time checks it needs (`guard_division`, `guard_bounds`), or `func`
    itself when it needs none. A kernel with `T.sblock`s is checked in its lowered form."""
    plain = func
    if _has_sblocks(func):
        plain = LOWER_SBLOCKS(tvm.IRModule({name: func}))[name]
    guarded = guard_bounds(guard_division(plain, name), name)
    return func if tvm_ffi.structural_equal(guarded, plain) else guarded


def has_guards(func: tirx.PrimFunc, name: str) -> bool:
    """Whether the guards put any check into `func` (a kernel whose bounds TVM proves gets none)."""
    return not guard(func, name).same_as(func)


# -- reads and writes outside a buffer ---------------------------------------------------
def out_of_bounds(func: tirx.PrimFunc) -> tuple[str, int | None] | None:
    """`(what, line)` when TVM can prove that `func` touches memory outside a buffer, else None.

    `line` is the line of the offending statement in the source `func` was
    parsed from (cell lines, for functions parsed from a cell), if known.
    """
    try:
        tvm.s_tir.analysis.OOBChecker()(tvm.IRModule({"main": func}))
    except Exception as err:  # OOBChecker reports through a ScheduleError carrying the IR
        text = str(err)
        found = _OOB_MESSAGE.search(text)
        if found is None:
            return None
        return f"reads or writes outside a buffer: {found.group(1)}", _line_of_path(func, text)
    return None


def _line_of_path(func: tirx.PrimFunc, text: str) -> int | None:
    """Follow the access path of OOBChecker's report to the innermost node with a source line."""
    path = _OOB_PATH.search(text)
    if path is None:
        return None
    node, line = func, None
    for attr, index in _PATH_STEP.findall(path.group(1)):
        try:
            node = node[int(index)] if index else getattr(node, attr)
        except (AttributeError, IndexError, TypeError):
            continue
        span = getattr(node, "span", None)
        if span is not None and getattr(span, "line", 0) > 0:
            line = span.line
    return line


# -- external symbols ----------------------------------------------------------------------
def missing_symbols(func: tirx.PrimFunc) -> list[str]:
    """External symbols `func` calls (`T.call_extern` and kin) that this process lacks."""
    names: set[str] = set()

    def visit(call) -> None:
        if (
            getattr(call.op, "name", None) in _EXTERN_CALLS
            and call.args
            and hasattr(call.args[0], "value")
        ):
            names.add(str(call.args[0].value))

    tvm_ffi.structural_walk(func.body, [(tvm.ir.Call, visit)])
    process = ctypes.CDLL(None)
    return sorted(name for name in names if not hasattr(process, name))


# -- integer division by zero ----------------------------------------------------------------
def guard_division(func: tirx.PrimFunc, name: str) -> tirx.PrimFunc:
    """`func` with an assert `divisor != 0` before each statement dividing integers by a variable.

    Divisions in the branches of `T.if_then_else` are left alone: only the
    branch taken is evaluated, so the user may have guarded them already.
    """
    if not _divisors_in(func.body):
        return func
    what = f"integer division or remainder by zero in `{name}`"

    def guard(stmt, mutator):
        new = mutator.default_mutate(stmt)
        divisors = [
            d for field in _OWN_EXPRESSIONS[type(stmt)] for d in _divisors_in(getattr(stmt, field))
        ]
        if not divisors:
            return new
        checks = [tirx.NE(d, tirx.const(0, str(d.ty))) for d in divisors]
        return _asserted(checks, _message(what, stmt), new)

    return out_of_vector_loops(tvm_ffi.structural_mutate(func, [(tuple(_OWN_EXPRESSIONS), guard)]))


def _divisors_in(node) -> list:
    """Non-constant integer divisors evaluated by `node` (an expression, a statement, or a list of
    them).
    """

    def divisor(value):
        if (
            isinstance(value, _DIVISIONS)
            and str(value.ty).startswith(("int", "uint"))
            and not isinstance(value.b, tirx.IntImm)
        ):
            return value.b
        return None

    return [d for condition, d in _evaluated(node, divisor) if condition is None]


def _evaluated(node, pick) -> list:
    """`(condition, pick(e))` for each expression `e` that `node` evaluates, where `pick(e)` is
    not None: `condition` is what must hold for it to be evaluated (None: it always is).

    Only the branch `T.if_then_else` takes is evaluated: the expressions of its branches come
    under its condition (or its negation). `T.Select` evaluates both of its own. `Let`/`Reduce`
    bodies are skipped (they may use variables bound inside them).
    """
    found = []

    def under(condition):
        def visit(value, visitor):
            if isinstance(value, tvm.ir.Call) and value.op.same_as(_IF_THEN_ELSE):
                test, then, otherwise = value.args
                visitor.visit(test)
                for branch, taken in ((then, test), (otherwise, tirx.Not(test))):
                    both = taken if condition is None else tirx.And(condition, taken)
                    tvm_ffi.structural_visit(branch, [(object, under(both))])
                return None
            if isinstance(value, (tirx.Let, tirx.Reduce)):
                return None
            item = pick(value)
            if item is not None:
                found.append((condition, item))
            return visitor.default_visit(value)

        return visit

    tvm_ffi.structural_visit(node, [(object, under(None))])
    return found


def _message(what: str, stmt) -> list:
    """An assert's message: what stopped, and the source line of the statement, if known."""
    span = getattr(stmt, "span", None)
    line = getattr(span, "line", 0) if span is not None else 0
    return [tvm.ir.StringImm(f"{what} at line {line}" if line > 0 else what)]


def _asserted(conditions: list, message: list, stmt):
    """`stmt` preceded by an assert that all `conditions` hold."""
    condition = functools.reduce(tirx.And, conditions)
    # AssertStmt's Python constructor passes (kind, condition) to an FFI constructor
    # that takes (condition, kind): give them in the order the FFI expects.
    check = tirx.AssertStmt(condition, tvm.ir.StringImm("RuntimeError"), message)
    return tirx.SeqStmt([check, stmt])


# -- reads and writes whose bounds depend on run-time values -----------------------------------
def guard_bounds(func: tirx.PrimFunc, name: str) -> tirx.PrimFunc:
    """`func` with an assert before each statement whose buffer accesses TVM cannot prove in bounds.

    Loop ranges and bound values are known to the prover, so the accesses of a kernel
    whose sizes agree need no assert and cost nothing. A read that runs only under a condition
    (a branch of `T.if_then_else`, of an `if`) is checked only where that condition holds,
    and proved under it where it can be (padding reads `x[i - 1]` only where `i >= 1`). A
    `T.Select`, which reads both of its values, reads lazily (becomes a `T.if_then_else`)
    where a read in one of them needs a check: TVM's `slice_scatter` gathers from its source
    at places outside it and then selects the input there. Functions with `T.sblock`s are
    left as they are (`guard` lowers them first).
    """
    if _has_sblocks(func):
        return func
    analyzer = Analyzer()
    what = f"index out of bounds in `{name}`"

    def scope(stmt, mutator):
        if isinstance(stmt, tirx.For):
            analyzer.bind(
                stmt.loop_var,
                tvm.ir.Range.from_min_extent(stmt.min, stmt.extent),
                allow_override=True,
            )
        elif isinstance(stmt, (tirx.Bind, tirx.LetStmt)):
            analyzer.bind(stmt.var, stmt.value, allow_override=True)
        new = _branches(stmt, mutator, analyzer)
        if new is None:
            new = _lazy_selects(mutator.default_mutate(stmt), analyzer)
        accesses = [(None, (new.buffer, new.indices))] if isinstance(new, tirx.BufferStore) else []
        for field in _OWN_EXPRESSIONS[type(new)]:
            accesses += _loads_in(getattr(new, field))
        checks = [
            check
            for condition, (buffer, indices) in accesses
            if (check := _bounds_check(analyzer, condition, buffer, indices)) is not None
        ]
        return _asserted(checks, _message(what, stmt), new) if checks else new

    return out_of_vector_loops(tvm_ffi.structural_mutate(func, [(tuple(_OWN_EXPRESSIONS), scope)]))


def _branches(stmt, mutator, analyzer: Analyzer):
    """An `if` with each branch guarded knowing which way the condition went (None for any
    other statement)."""
    if not isinstance(stmt, tirx.IfThenElse):
        return None
    with analyzer.constraint_scope(stmt.condition):
        then = mutator.mutate(stmt.then_case)
    otherwise = stmt.else_case
    if otherwise is not None:
        with analyzer.constraint_scope(tirx.Not(stmt.condition)):
            otherwise = mutator.mutate(otherwise)
    return tirx.IfThenElse(stmt.condition, then, otherwise, span=stmt.span)


def _lazy_selects(stmt, analyzer: Analyzer):
    """`stmt` with each `T.Select` of its own expressions that reads where TVM cannot prove it
    in bounds made a `T.if_then_else`, which reads only the value it selects."""

    def select(value, mutator):
        value = mutator.default_mutate(value)
        doubtful = any(
            _bounds_check(analyzer, condition, *access) is not None
            for branch in (value.true_value, value.false_value)
            for condition, access in _loads_in(branch)
        )
        if not doubtful:
            return value
        return tirx.if_then_else(value.condition, value.true_value, value.false_value)

    def own(node, mutator):  # its nested statements are their own scopes
        return mutator.default_mutate(node) if node.same_as(stmt) else node

    return tvm_ffi.structural_mutate(stmt, [(tirx.Select, select), (tirx.Stmt, own)])


def _bounds_check(analyzer: Analyzer, condition, buffer, indices):
    """What must hold for a read (or write) of `buffer` at `indices`, evaluated where
    `condition` holds (None: always), to be in bounds, as far as TVM cannot prove it; None if
    it can."""
    bounds = _bounds(buffer, indices)
    if condition is None:
        doubtful = [c for c in bounds if not analyzer.can_prove(c)]
    else:
        with analyzer.constraint_scope(condition):
            doubtful = [c for c in bounds if not analyzer.can_prove(c)]
    if not doubtful:
        return None
    check = functools.reduce(tirx.And, doubtful)
    return check if condition is None else tirx.Or(tirx.Not(condition), check)


def _bounds(buffer, indices) -> list:
    conditions = []
    for index, size in zip(indices, buffer.shape, strict=False):
        if "x" in str(index.ty):  # a vector of indices (T.ramp): left to the static check
            continue
        zero = tirx.const(0, str(index.ty))
        conditions += [tirx.GE(index, zero), tirx.LT(index, tirx.Cast(str(index.ty), size))]
    return conditions


def _loads_in(node) -> list:
    """`(condition, (buffer, indices))` of the buffer reads `node` evaluates, each with what
    must hold for it to be evaluated (None: always)."""

    def load(value):
        if isinstance(value, tvm.ir.TensorLoad) and isinstance(value.source, tirx.Buffer):
            return value.source, value.indices
        return None

    return _evaluated(node, load)


def _has_sblocks(func: tirx.PrimFunc) -> bool:
    found = []
    tvm_ffi.structural_walk(func.body, [((s_tir.SBlock, s_tir.SBlockRealize), found.append)])
    return bool(found)
