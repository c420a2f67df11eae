"""Where in its cell a function goes wrong: the line of the statement or call at fault.

A cell's functions are parsed at their own cell lines, so the spans TVM keeps on Relax calls
are cell lines. What TVMScript folds away leaves no span (a `T.match_buffer` becomes a
parameter), so a fault named by a string the user wrote (a storage scope, an extern symbol, a
thread tag) is found where that string stands in the function's source. TIR statements keep
their lines too: an intrinsic that does not compile is found in the statement that calls it.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable

import tvm
import tvm_ffi
from tvm import relax, tirx
from tvm.ir import GlobalVar

from .cells import FunctionSource

_CALL_PY_FUNC = tvm.ir.Op.get("relax.call_py_func")


def string_line(source: FunctionSource, texts: Iterable[str]) -> int | None:
    """The cell line of the first string literal in `source` that is one of `texts`."""
    wanted = set(texts)
    if not wanted:
        return None
    try:
        tree = ast.parse(source.source)
    except SyntaxError:  # an edit text TVM printed may not be Python; then there is no line
        return None
    lines = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in wanted
    ]
    return source.first_line + min(lines) - 1 if lines else None


def call_line(func: relax.Function, matches: Callable[[relax.Call], bool]) -> int | None:
    """The line of the first call in `func` (by line) for which `matches` holds."""
    lines: list[int] = []

    def visit(expr) -> None:
        if isinstance(expr, relax.Call) and matches(expr):
            span = expr.span
            if span is not None and span.line > 0:
                lines.append(span.line)

    relax.analysis.post_order_visit(func.body, visit)
    return min(lines) if lines else None


def refers_to(gvar_name: str) -> Callable[[relax.Call], bool]:
    """A call that calls, or passes on (`R.call_tir(cls.k, ...)`), function `gvar_name`."""

    def matches(call: relax.Call) -> bool:
        return any(
            isinstance(node, GlobalVar) and node.name_hint == gvar_name
            for node in [call.op, *call.args]
        )

    return matches


def calls_py_func(pyname: str) -> Callable[[relax.Call], bool]:
    """An `R.call_py_func("pyname", ...)`."""

    def matches(call: relax.Call) -> bool:
        return call.op.same_as(_CALL_PY_FUNC) and call.args[0].value == pyname

    return matches


def tir_call_line(func: tirx.PrimFunc, op_names: Iterable[str]) -> int | None:
    """The line of the innermost statement of `func` that calls an op named `op_names`
    (`exp` finds `T.exp`: TVM names the op `tirx.exp`, LLVM's intrinsic `llvm.exp`)."""
    wanted = set(op_names)
    lines: list[int] = []

    def calls_one(node) -> bool:
        found = []

        def visit(call) -> None:
            if isinstance(call.op, tvm.ir.Op) and call.op.name.rsplit(".", 1)[-1] in wanted:
                found.append(call)

        tvm_ffi.structural_walk(node, [(tvm.ir.Call, visit)])
        return bool(found)

    def visit_statement(stmt) -> None:
        span = stmt.span
        if span is not None and span.line > 0 and calls_one(stmt):
            lines.append(span.line)

    if wanted:
        tvm_ffi.structural_walk(func.body, [(tirx.Stmt, visit_statement)])
    return max(lines) if lines else None
