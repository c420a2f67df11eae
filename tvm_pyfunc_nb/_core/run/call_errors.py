"""The errors of a call: why TVM refused it, a pyfunc that raised, an unknown function.

Each builder returns the package's own error (errors.py) for one way a call
goes wrong; they run only after the call failed, so they cost a right call
nothing.
"""

from __future__ import annotations

import inspect
import re
import threading
from collections.abc import Callable, Sequence
from types import TracebackType

from ...errors import CallError, PyFuncError, TVMModuleError, UnknownFunctionError, shorten
from .arguments import TensorSpec, mismatch
from .tensors import describe, device_name

# What the crash guards' asserts say (see crash_guards.guard_division / guard_bounds)
RUNTIME_GUARD = re.compile(
    r"((?:integer division or remainder by zero|index out of bounds) in `[^`]+`)(?: at line (\d+))?"
)


def explain_bad_call(
    function: str,
    specs: list[TensorSpec] | None,
    args: Sequence,
    err: BaseException,
    device=None,
    cell_lines: bool = False,
) -> CallError:
    """The clearest message for a call TVM refused: count, device, dtype, shape, else TVM's own
    reason. `cell_lines`: the function's source lines are cell lines (a run-time check names one).
    """
    if specs is not None:
        if len(args) != len(specs):
            return CallError(
                f"takes {len(specs)} argument(s) ({', '.join(s.name for s in specs)}), "
                f"got {len(args)}",
                function=function,
            )
        bindings: dict[str, int] = {}
        for spec, arg in zip(specs, args, strict=False):
            on = device_name(arg)
            if device is not None and on is not None and on != str(device):
                return CallError(
                    f"parameter `{spec.name}` expects {spec} on {device}, "
                    f"got {describe(arg)} on {on}",
                    function=function,
                )
            problem = mismatch(spec, arg, bindings)
            if problem:
                return CallError(
                    f"parameter `{spec.name}` expects {spec}, {problem}", function=function
                )
    reason = shorten(str(err), 4) or type(err).__name__
    stopped = RUNTIME_GUARD.search(str(err))
    if stopped:  # the arguments were fine; a kernel's own run-time check failed
        line = int(stopped.group(2)) if stopped.group(2) and cell_lines else None
        return CallError(f"stopped while running: {stopped.group(1)}", function=function, line=line)
    return CallError(f"TVM refused the call: {reason}", function=function)


def refused(
    name: str, specs, args: tuple, err: Exception, device, cell_lines: bool = False
) -> TVMModuleError:
    """The package's error for a compiled call TVM refused (or a pyfunc it called that raised),
    to raise where `err` was caught. A pyfunc's error keeps its traceback and its cause: it
    ends in the pyfunc's frame (see `raised_in_pyfunc`).
    """
    error = take_pending_error(err) or explain_bad_call(name, specs, args, err, device, cell_lines)
    if not isinstance(error, TVMModuleError):
        error = pyfunc_error(getattr(error, "function", name), None, error)
    if error.__cause__ is None:
        error.__cause__ = err
    return error


def wrong_kind(entry, kind: str, needed_by: str) -> CallError:
    """`needed_by` (e.g. "trace") needs a function of `kind`, and `entry` is of another."""
    wanted = {"tir": "a PrimFunc", "relax": "a Relax function", "pyfunc": "a pyfunc"}[kind]
    return CallError(
        f"{needed_by} needs {wanted}, but `{entry.name}` is a {entry.kind}", function=entry.name
    )


def unknown_function(module: str, known, name: str) -> CallError:
    names = ", ".join(sorted(known)) or "none yet"
    return UnknownFunctionError(
        f"module `{module}` has no function `{name}` (it has: {names})", function=name
    )


# -- pyfuncs --------------------------------------------------------------------------
# The package error on its way across TVM, which passes on only an error's text: the compiled
# call on the other side raises this one, with its traceback (see `take_pending_error`).
pending_error = threading.local()
CELL_FILES = "<tvmmodule "  # how the filename of code compiled from a cell begins


def pyfunc_error(function: str, line: int | None, err: BaseException) -> TVMModuleError:
    """`err`, raised by pyfunc `function`, as a `PyFuncError` at the deepest line of the pyfunc's
    own cell.
    """
    if isinstance(err, TVMModuleError):
        return err
    tb_line = _deepest_line(err, function)
    message = f"{type(err).__name__}: {err}"
    wrapped = PyFuncError(message, function=function, line=tb_line or line)
    wrapped.__cause__ = err
    return wrapped


def _deepest_line(err: BaseException, function: str) -> int | None:
    tb, line = err.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_name == function and tb.tb_frame.f_code.co_filename.startswith(
            CELL_FILES
        ):
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def bad_pyfunc_arguments(
    function: str,
    func: Callable,
    takes_self: bool,
    args: Sequence,
    kwargs: dict,
    err: BaseException,
) -> CallError | None:
    """A `CallError` when `err` is Python refusing these arguments for pyfunc `func`, else None."""
    if not isinstance(err, TypeError):
        return None
    try:
        signature = inspect.signature(func)
        signature.bind(*((None,) if takes_self else ()), *args, **kwargs)
    except TypeError as refused:
        params = list(signature.parameters)[1 if takes_self else 0 :]
        return CallError(
            f"takes ({', '.join(params)}), got {len(args)} argument(s)"
            f"{f' and keywords {sorted(kwargs)}' if kwargs else ''}: {refused}",
            function=function,
        )
    except ValueError:  # no signature to compare with
        return None
    return None


def raised_in_pyfunc(error: BaseException, err: BaseException, code) -> BaseException:
    """`error`, the package's error for `err` that a pyfunc raised, ready to raise from the
    pyfunc's handle, which caught `err`: caused by `err`, and with a traceback that ends in the
    pyfunc's frame.

    That frame is the deepest of `err`'s traceback whose code is a cell's or the pyfunc's own
    (`code`), so `%debug` stops there, among the pyfunc's locals, and a traceback's last line
    is the cell's, however deep the pyfunc was reached. The package's frames below it (those of
    a `self.call_tir` it made, say) are left out; `err`, kept as the cause, has them all.
    """
    if error is not err:
        error.__cause__ = err
    return error.with_traceback(_through_pyfunc_frame(err.__traceback__.tb_next, code))


def _through_pyfunc_frame(tb: TracebackType | None, code) -> TracebackType | None:
    """`tb` up to its deepest frame of pyfunc code (a copy: `tb` stays whole); all of it if none."""
    entries, deepest = [], 0
    while tb is not None:
        entries.append(tb)
        frame_code = tb.tb_frame.f_code
        if frame_code is code or frame_code.co_filename.startswith(CELL_FILES):
            deepest = len(entries)
        tb = tb.tb_next
    if not deepest:
        return entries[0] if entries else None
    copy = None
    for entry in reversed(entries[:deepest]):
        copy = TracebackType(copy, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return copy


def take_pending_error(raised: BaseException) -> BaseException | None:
    """The package error that `raised`, TVM's re-wrap of it after it crossed TVM, stands for:
    the error itself, with its traceback. An error left pending by a call that did not cross
    TVM (a pyfunc's, caught by its caller) does not stand for another one.
    """
    err = getattr(pending_error, "error", None)
    pending_error.error = None
    return err if err is not None and str(err).strip() in str(raised) else None
