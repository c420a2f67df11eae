"""The crash guards' asserts taken out of vectorized loops, which TVM cannot compile with them in.

TVM's `VectorizeLoop` turns every expression of a vectorized loop's body into
a vector of its lanes, and has no rule for an assert: its condition becomes
`<8 x i1>`, and LLVM refuses the module ("Branch condition is not 'i1' type").
A loop is vectorized when a schedule says so (`cpu_schedules` does, for the
kernels a pipeline makes, when the loop has at least as many elements as the
CPU's vectors hold, so which kernels fail depends on the CPU) or when its
author wrote `T.vectorized`.

A check that holds for the whole loop if it holds at its first and last lane
is made once, before the loop, and the loop stays vectorized: a condition
that does not depend on the loop variable (the row an embedding's `take`
copies, read from data once), or a comparison whose sides differ by an
expression linear in the loop variable (an affine index against a buffer's
size). Every other check (an index each lane reads from data, one that
depends on a variable bound inside the loop or on data the loop writes, an
assert under a condition) keeps its place, and its loop runs serially: the
check matters more than the vectors.
"""

from __future__ import annotations

import functools
import re

import tvm
import tvm_ffi
from tvm import tirx
from tvm.sym import Analyzer, detect_linear_equation

_COMPARISONS = (tirx.LT, tirx.LE, tirx.GT, tirx.GE)
_INTEGER = re.compile(r"(u?)int(\d+)")  # a scalar integer dtype: signedness, bits
# statements that bind a variable their loop's body may use
_BINDERS = {tirx.For: "loop_var", tirx.Bind: "var", tirx.LetStmt: "var"}


def out_of_vector_loops(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """`func` with no assert left inside a vectorized loop (`func` itself when it has none)."""

    def loop(stmt, mutator):
        new = mutator.default_mutate(stmt)
        if new.kind != tirx.ForKind.VECTORIZED or not _asserts_in(new.body):
            return new
        hoisted = _hoisted(new)
        if hoisted is None:
            return _with(new, kind=tirx.ForKind.SERIAL)
        checks, body = hoisted
        return tirx.SeqStmt([*checks, _with(new, body=body)])

    return tvm_ffi.structural_mutate(func, [(tirx.For, loop)])


def _hoisted(loop: tirx.For):
    """`(checks before the loop, its body without asserts)`, or None if a check of its body
    cannot be made before it (then the loop runs serially, its checks in place)."""
    asserts = _unconditional_asserts(loop.body)
    if asserts is None or not _steps_through(loop):
        return None
    inside = _bound_in(loop.body)
    written = _written_in(loop.body)
    first, last = loop.min, loop.min + loop.extent - 1
    analyzer = Analyzer()
    checks = []
    for check in asserts:
        if _uses(check.condition, lambda v: v in inside) or _reads(check.condition) & written:
            return None
        conditions = []
        for condition in _conjuncts(check.condition):
            ends = _at_ends(condition, loop.loop_var, first, last)
            if ends is None:
                return None
            conditions += [analyzer.simplify(c) for c in ends]
        condition = functools.reduce(tirx.And, conditions)
        checks.append(tirx.AssertStmt(condition, check.error_kind, check.message_parts))
    return checks, _without_asserts(loop.body)


def _steps_through(loop: tirx.For) -> bool:
    """Whether `loop` runs from its first to its last value one by one, at least once: then
    `min` and `min + extent - 1` are its first and last lanes."""
    one_by_one = loop.step is None or (isinstance(loop.step, tirx.IntImm) and loop.step.value == 1)
    return one_by_one and isinstance(loop.extent, tirx.IntImm) and loop.extent.value >= 1


def _at_ends(condition, var, first, last) -> list | None:
    """Conditions before the loop that hold iff `condition` holds for every value of `var` from
    `first` to `last`, or None if there are none so simple."""
    if not _uses(condition, var.same_as):
        return [condition]
    slope = _slope(condition.a - condition.b, var) if isinstance(condition, _COMPARISONS) else None
    if slope is None:
        return None
    ends = [first, last]
    if isinstance(slope, tirx.IntImm):  # one end decides: where `a - b` is least, or greatest
        greatest = isinstance(condition, (tirx.LT, tirx.LE))
        ends = [last if (slope.value >= 0) == greatest else first]
    return [_substitute(condition, var, end) for end in ends]


def _slope(expr, var):
    """How much `expr` grows from one value of `var` to the next (a constant, or an expression
    whose sign is not known), if it is linear in `var`, else None; a widening cast of `var`
    counts as `var` itself (an int32 loop indexing a buffer of int64 sizes:
    `i * 16 + T.Cast("int64", j)`)."""
    widened: dict[str, tirx.Var] = {}

    def widen(cast, mutator):
        if not (cast.value.same_as(var) and _widens(cast)):
            return mutator.default_mutate(cast)
        return widened.setdefault(str(cast.ty), tirx.Var(f"{var.name}_wide", str(cast.ty)))

    plain = tvm_ffi.structural_mutate(expr, [(tirx.Cast, widen)])
    coefficients = detect_linear_equation(plain, [var, *widened.values()])
    if not coefficients:
        return None
    slopes = [Analyzer().simplify(c) for c in list(coefficients)[:-1]]
    unknown = [c for c in slopes if not isinstance(c, tirx.IntImm)]
    return unknown[0] if unknown else tirx.const(sum(c.value for c in slopes), "int64")


def _widens(cast) -> bool:
    """Whether `cast` turns an integer into an integer type at least as wide (changing no value)."""
    to, source = _INTEGER.fullmatch(str(cast.ty)), _INTEGER.fullmatch(str(cast.value.ty))
    if to is None or source is None:
        return False
    return to[1] == source[1] and int(to[2]) >= int(source[2])


def _unconditional_asserts(stmt) -> list | None:
    """The asserts `stmt` runs each time it runs (at its top or in its sequences), or None if it
    holds another (under a condition, in an inner loop, in a let's scope)."""
    if isinstance(stmt, tirx.AssertStmt):
        return [stmt]
    if isinstance(stmt, tirx.SeqStmt):
        found = [_unconditional_asserts(s) for s in stmt.seq]
        return None if None in found else [a for part in found for a in part]
    return None if _asserts_in(stmt) else []


def _without_asserts(stmt):
    """`stmt` without the asserts `_unconditional_asserts` found in it."""
    if not isinstance(stmt, tirx.SeqStmt):
        return stmt
    kept = [_without_asserts(s) for s in stmt.seq if not isinstance(s, tirx.AssertStmt)]
    return kept[0] if len(kept) == 1 else tirx.SeqStmt(kept)


def _asserts_in(stmt) -> bool:
    found = []
    tvm_ffi.structural_walk(stmt, [(tirx.AssertStmt, found.append)])
    return bool(found)


def _bound_in(stmt) -> set:
    """The variables that statements inside `stmt` bind."""
    found = set()

    def binder(node) -> None:
        found.add(getattr(node, _BINDERS[type(node)]))

    tvm_ffi.structural_walk(stmt, [(tuple(_BINDERS), binder)])
    return found


def _uses(expr, which) -> bool:
    found = []
    tvm_ffi.structural_walk(expr, [(tirx.Var, lambda v: which(v) and found.append(v))])
    return bool(found)


def _reads(expr) -> set:
    """The buffers `expr` reads."""
    found = set()
    tvm_ffi.structural_walk(expr, [(tvm.ir.TensorLoad, lambda load: found.add(load.source))])
    return found


def _written_in(stmt) -> set:
    """The buffers `stmt` writes."""
    found = set()
    tvm_ffi.structural_walk(stmt, [(tirx.BufferStore, lambda store: found.add(store.buffer))])
    return found


def _conjuncts(condition) -> list:
    if isinstance(condition, tirx.And):
        return _conjuncts(condition.a) + _conjuncts(condition.b)
    return [condition]


def _substitute(expr, var, value):
    def replace(v, _mutator):
        return value if v.same_as(var) else v

    return tvm_ffi.structural_mutate(expr, [(tirx.Var, replace)])


def _with(loop: tirx.For, **changes) -> tirx.For:
    fields = {"kind": loop.kind, "body": loop.body, **changes}
    return tirx.For(
        loop.loop_var,
        loop.min,
        loop.extent,
        fields["kind"],
        fields["body"],
        annotations=loop.annotations,
        step=loop.step,
        span=loop.span,
    )
