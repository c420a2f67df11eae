"""Parse one cell's TIR and Relax functions with TVMScript, against the rest of the module.

Only the cell's own functions are parsed. The functions of other cells enter
the parse as class-level assignments (`name = <function object>`), which
TVMScript's IR parser declares as module functions without re-parsing them;
`cls = NAME` resolves through `ModuleProxy` to the module being built, so
`cls.add_tir` finds either. The class header sits on line 1 and the cell's
functions on their own cell lines, so TVMScript's line numbers are the
notebook's; the stub assignments come after the last cell line.
"""

from __future__ import annotations

import re
import sys
import traceback
from collections.abc import Callable, Mapping

from tvm.error import DiagnosticError
from tvm.ir import BaseFunc, GlobalVar
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder.ir import IRModuleFrame
from tvm.script.parser.core.entry import parse

from ...errors import TVMScriptError, native_stderr_silenced, plain_reason, shorten
from .cells import PYFUNC, CellFragment, FunctionSource, reindent

_STUBS = "__tvmnb_stubs__"
_CELL_CLASS = "__tvmnb_cell__"
_LOCATION = re.compile(r"-->\s.*:(\d+):\d+")


class ModuleProxy:
    """What `NAME` evaluates to during a parse: the functions of the module being built
    (`cls = NAME` then `cls.f`), and its constant table (`NAME.consts.w`, as edit text writes)."""

    def __init__(self, module_name: str, consts: object):
        self._module_name = module_name
        self.consts = consts

    def __getattr__(self, name: str) -> GlobalVar:
        if not name.startswith("__"):
            for frame in IRBuilder.current().frames:
                if isinstance(frame, IRModuleFrame) and name in frame.global_vars:
                    return frame.global_vars[name]
        raise AttributeError(f"module `{self._module_name}` has no function `{name}`")


def parse_fragment(
    fragment: CellFragment,
    module_name: str,
    others: Mapping[str, BaseFunc],
    namespace: Mapping[str, object],
    pyfunc_stubs: Mapping[str, BaseFunc],
    consts: object = None,
) -> dict[str, tuple[GlobalVar, BaseFunc]]:
    """Parse the cell's TIR/Relax functions; returns `{name: (global_var, function)}`.

    `others` are the module's functions from other cells, `pyfunc_stubs` the
    `ExternFunc`s of this cell's pyfuncs; both are visible to `cls.<name>`.
    """
    wanted = [f for f in fragment.functions.values() if f.kind != PYFUNC]
    if not wanted:
        return {}
    stubs = {**others, **pyfunc_stubs}
    proxy = ModuleProxy(module_name, consts)
    extra = {**namespace, module_name: proxy, _STUBS: stubs}
    if fragment.full_class:
        extra[fragment.full_class] = proxy

    def parse_these(funcs: list[FunctionSource]):
        lines = [f"class {_CELL_CLASS}(BasePyModule):\n"] + ["\n"] * (fragment.first_line - 2)
        for func in sorted(funcs, key=lambda f: f.first_line):
            lines += ["\n"] * (func.first_line - 1 - len(lines))
            lines += reindent(func.source, 4).splitlines(keepends=True)
        lines += [f"    {name} = {_STUBS}[{name!r}]\n" for name in stubs]
        handled = sys.exc_info()[1]  # an error the caller is handling is not the parse's
        try:
            return parse("".join(lines), extra, check_well_formed=False)
        except Exception as err:
            _drop_builders(err, handled)
            raise

    try:
        parsed = parse_these(wanted)
    except DiagnosticError as err:
        raise _script_error(str(err), fragment, wanted, parse_these) from None
    except Exception as err:  # TVM raises many types from deep inside; all mean "this is wrong"
        raise TVMScriptError(f"{type(err).__name__}: {err}") from err
    return {f.name: (parsed.get_global_var(f.name), parsed[f.name]) for f in wanted}


def _script_error(
    text: str, fragment: CellFragment, wanted: list[FunctionSource], parse_these: Callable
) -> TVMScriptError:
    message = _message(text)
    match = _LOCATION.search(text)
    line = int(match.group(1)) if match else None
    owner = None
    if line is not None:
        for func in fragment.functions.values():
            if func.first_line <= line < func.first_line + func.source.count("\n"):
                owner = func.name
    if owner is None:  # TVM gave no line in a function (e.g. a parameter without annotation)
        culprit = _failing_alone(wanted, message, parse_these)
        if culprit is not None:
            owner, line = culprit.name, _def_line(culprit)
    return TVMScriptError(shorten(message), function=owner, line=line)


def _drop_builders(err: BaseException, handled: BaseException | None) -> None:
    """A failed parse leaves its IR builders in the frames of its traceback, which warn on stderr
    when they go: clear those frames now, quietly, so the builders go at once rather than at a
    later garbage collection, in whichever cell runs then. (Not `gc.collect()`: a full collection
    took 0.15 s to 1 s a failed parse in a process with torch, TVM and a test suite loaded.)"""
    seen = {id(handled)}  # the chain ends where the parse began
    chain = [err]
    with native_stderr_silenced():
        while chain:
            exc = chain.pop()
            if exc is None or id(exc) in seen:
                continue
            seen.add(id(exc))
            traceback.clear_frames(exc.__traceback__)  # frames still running are left as they are
            chain += [exc.__cause__, exc.__context__]


def _message(text: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else "TVMScript error"
    return plain_reason(first.removeprefix("error: "))


def _failing_alone(wanted: list[FunctionSource], message: str, parse_these: Callable):
    """The function that, parsed on its own, fails with the same message."""
    for func in wanted:
        try:
            parse_these([func])
        except DiagnosticError as err:
            if _message(str(err)) == message:
                return func
        except Exception:  # another failure alone: not evidence either way
            continue
    return None


def _def_line(func: FunctionSource) -> int:
    """The cell line of `def` (after the decorators)."""
    for number, line in enumerate(func.source.splitlines()):
        if line.startswith(("def ", "async def ")):
            return func.first_line + number
    return func.first_line
