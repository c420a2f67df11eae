"""Turn a pyfunc's cell text into a Python function whose tracebacks show cell lines.

The code is compiled with blank lines in front so its line numbers are the
cell's, under a filename registered in `linecache` with the cell's text, so
tracebacks, `inspect` and TVMScript (which reads source through `inspect`)
all see the cell.
"""

from __future__ import annotations

import ast
import functools
import inspect
import linecache
import textwrap
import types
from collections.abc import Callable, Mapping

import torch
import tvm
from tvm.relax.base_py_module import BasePyModule
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from ...errors import CellSyntaxError
from .cells import FunctionSource


def _relax_script_accepting_out_sinfo() -> types.ModuleType:
    """`tvm.script.relax`, whose call ops also take `out_sinfo=`, TVM's name for `out_ty=` before
    0.27 (upstream's examples still write it). Everything else is the module's own."""
    compat = types.ModuleType(R.__name__, R.__doc__)
    compat.__dict__.update(vars(R))

    def accepting(op):
        @functools.wraps(op)
        def call(*args, out_sinfo=None, **kwargs):
            if out_sinfo is not None:
                kwargs.setdefault("out_ty", out_sinfo)
            return op(*args, **kwargs)

        return call

    for name in (
        "call_tir",
        "call_tir_inplace",
        "call_tir_with_grad",
        "call_dps_packed",
        "call_py_func",
    ):
        if hasattr(R, name):
            setattr(compat, name, accepting(getattr(R, name)))
    return compat


PREBOUND: dict[str, object] = {
    "I": I,
    "R": _relax_script_accepting_out_sinfo(),
    "T": T,
    "tvm": tvm,
    "torch": torch,
    "BasePyModule": BasePyModule,
}


class CellGlobals(dict):
    """Globals of cell code: the pre-bound names, then the user's namespace, looked up live."""

    def __init__(self, fallback: Mapping[str, object]):
        super().__init__(PREBOUND)
        self.fallback = fallback

    def __missing__(self, key: str):
        return self.fallback[key]


def register_cell_text(filename: str, header: str, text: str) -> None:
    """Make `filename` read as the cell: `header` (the magic line) is line 1."""
    lines = [header.rstrip("\n") + "\n", *text.splitlines(keepends=True)]
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)


def forget_cell_text(filename: str) -> None:
    """Drop a cell's source from `linecache` once no function of that cell is left."""
    linecache.cache.pop(filename, None)


def run_preamble(statements: list[tuple[str, int]], filename: str, globals_: CellGlobals) -> None:
    """Run a cell's imports (and TypeVar lines) into the namespace its functions see."""
    for statement, line in statements:
        try:
            exec(compile("\n" * (line - 1) + statement, filename, "exec"), globals_)
        except Exception as err:
            raise CellSyntaxError(f"{type(err).__name__}: {err}", line=line) from None


def load_pyfunc(source: FunctionSource, filename: str, globals_: CellGlobals) -> Callable:
    """Execute the `def` of one pyfunc and return the function object."""
    padded = "\n" * (source.first_line - 1) + source.source
    scope: dict[str, object] = {}
    try:
        exec(compile(padded, filename, "exec"), globals_, scope)
    except Exception as err:  # a decorator or a default argument raised while defining it
        raise CellSyntaxError(
            f"defining `{source.name}` raised {type(err).__name__}: {err}",
            function=source.name,
            line=source.first_line,
        ) from err
    return scope[source.name]


def runtime_pyfunc_source(name: str, func: Callable) -> str:
    """Source text for a pyfunc added at run time, shaped like a cell's: `@I.pyfunc` + `def name`.

    The function's own decorators already ran, so they are left out; a lambda
    or a function without source gets a stub that says so, so the module's
    script still parses back.
    """
    try:
        source = textwrap.dedent(inspect.getsource(func))
        tree = ast.parse(source)
        node = tree.body[0]
        if getattr(func, "__name__", "") == "<lambda>" or not isinstance(node, ast.FunctionDef):
            raise ValueError("not a def")
    except (OSError, TypeError, ValueError, SyntaxError, IndexError):
        params = _signature_text(func)
        return (
            f"@I.pyfunc\ndef {name}({params}):\n"
            f'    """Added with add_python_function; its source is not available."""\n'
            f"    raise NotImplementedError({name + ' has no source text'!r})\n"
        )
    lines = source.splitlines(keepends=True)
    body = lines[node.lineno - 1 :]
    body[0] = body[0].replace(f"def {node.name}(", f"def {name}(", 1)
    return "@I.pyfunc\n" + "".join(body).rstrip() + "\n"


def _signature_text(func: Callable) -> str:
    """The parameter list without defaults or annotations, which may have no source form."""
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return "*args, **kwargs"
    empty = inspect.Parameter.empty
    return str(inspect.Signature([p.replace(default=empty, annotation=empty) for p in params]))[
        1:-1
    ]
