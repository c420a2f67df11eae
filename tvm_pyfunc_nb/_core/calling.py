"""Calling into a live module: argument checks, output allocation, pyfunc trampolines.

The happy path does as little as possible (tvm-ffi takes torch tensors as
they are); the checks that explain a bad call run only after TVM refused it,
so they cost nothing when the call is right.
"""

from __future__ import annotations

import inspect
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import torch
from tvm import relax, tirx
from tvm.relax.script.parser.entry import TensorProxy
from tvm.sym import Analyzer

from ..errors import CallError, PyFuncError, TVMModuleError, shorten
from .tensors import (
    TORCH_DTYPES,
    describe,
    device_name,
    dtype_name,
    is_tensor_like,
    to_torch_dtype,
)

# dtypes TVM takes from torch as they are (a complex tensor would make it abort)
AS_IS_DTYPES = frozenset(TORCH_DTYPES.values())


# -- expected types -----------------------------------------------------------------
@dataclass(frozen=True)
class TensorSpec:
    """What one parameter or output expects: dims (int, symbolic name, or None) and dtype."""

    name: str
    dims: tuple | None  # None: any rank
    dtype: str | None

    def __str__(self) -> str:
        dims = (
            "?" if self.dims is None else ", ".join("?" if d is None else str(d) for d in self.dims)
        )
        return f"{self.dtype or '?'}[{dims}]"


def specs_of(func) -> list[TensorSpec] | None:
    """Parameter specs of a Relax function or PrimFunc (None where a parameter is not a tensor)."""
    if isinstance(func, relax.Function):
        return [spec_from_type(p.name, p.ty) for p in func.params]
    if isinstance(func, tirx.PrimFunc):
        return [_spec_from_buffer(p) for p in func.params]
    return None


def spec_from_type(name: str, ty) -> TensorSpec:
    if not isinstance(ty, relax.TensorType):
        return TensorSpec(name, None, None)
    dtype = None if str(ty.dtype) == "void" else str(ty.dtype)
    if ty.shape is None or not isinstance(ty.shape, relax.ShapeExpr):
        return TensorSpec(name, None if ty.ndim < 0 else (None,) * ty.ndim, dtype)
    return TensorSpec(name, tuple(_dim(v) for v in ty.shape.values), dtype)


def _spec_from_buffer(param) -> TensorSpec:
    shape = getattr(param, "shape", None)
    if shape is None:
        return TensorSpec(param.name, None, None)
    return TensorSpec(param.name, tuple(_dim(v) for v in shape), str(param.dtype))


def _dim(value) -> int | str | None:
    if isinstance(value, int):
        return value
    if isinstance(value, tirx.IntImm):
        return int(value.value)
    if isinstance(value, tirx.Var):
        return value.name
    return None


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


def keywords_to_positions(
    function: str, specs: list[TensorSpec] | None, args: Sequence, kwargs: dict
) -> tuple:
    """`f(x, y=t)` for a Relax function or PrimFunc: the arguments in parameter order, or a
    `CallError`.
    """
    names = [s.name for s in specs or ()]
    unknown = sorted(set(kwargs) - set(names))
    if unknown:
        raise CallError(
            f"has no parameter {', '.join(f'`{k}`' for k in unknown)} "
            f"(parameters: {', '.join(names)})",
            function=function,
        )
    given = dict(zip(names, args, strict=False))
    twice = sorted(set(given) & set(kwargs))
    if twice:
        raise CallError(
            f"got parameter `{twice[0]}` both by position and by keyword", function=function
        )
    given.update(kwargs)
    missing = [n for n in names if n not in given]
    if missing:
        raise CallError(
            f"missing argument for parameter `{missing[0]}` (parameters: {', '.join(names)})",
            function=function,
        )
    return tuple(given[n] for n in names) + tuple(args[len(names) :])


def mismatch(spec: TensorSpec, arg: Any, bindings: dict[str, int]) -> str | None:
    if spec.dtype is None and spec.dims is None:
        return None
    if not is_tensor_like(arg):
        return f"got {describe(arg)}"
    if spec.dtype and dtype_name(arg) != spec.dtype:
        return f"got {describe(arg)} (dtype {dtype_name(arg)})"
    shape = list(arg.shape)
    if spec.dims is not None:
        if len(shape) != len(spec.dims):
            return f"got {describe(arg)} ({len(shape)} dims instead of {len(spec.dims)})"
        for dim, size in zip(spec.dims, shape, strict=False):
            if isinstance(dim, int) and dim != size:
                return f"got {describe(arg)}"
            if isinstance(dim, str) and bindings.setdefault(dim, size) != size:
                return f"got {describe(arg)} ({dim} is {bindings[dim]} from an earlier argument)"
    return None


# -- output allocation (call_tir from Python) -----------------------------------------
def output_specs(out_ty) -> list[tuple[list, str]]:
    """Normalise an `out_ty` into `[(dims, dtype)]`: `R.Tensor(...)`, a TensorType, a shape tuple,
    or a list of those.
    """
    if (
        out_ty.__class__ is TensorProxy and out_ty.shape is not None
    ):  # `R.Tensor(...)` in a pyfunc: the usual
        return [(out_ty.shape, out_ty.dtype)]
    if isinstance(out_ty, list):
        return [spec for ty in out_ty for spec in output_specs(ty)]
    if isinstance(out_ty, tuple) and all(isinstance(d, int) for d in out_ty):
        return [(list(out_ty), "float32")]
    if isinstance(out_ty, relax.TensorType):
        if not isinstance(out_ty.shape, relax.ShapeExpr):
            raise CallError(f"out_ty {out_ty} has no shape to allocate")
        return [(list(out_ty.shape.values), str(out_ty.dtype))]
    if hasattr(out_ty, "shape") and hasattr(
        out_ty, "dtype"
    ):  # R.Tensor(...) evaluated outside a parse
        return [(list(out_ty.shape), str(out_ty.dtype))]
    raise CallError(
        f"out_ty must be R.Tensor(shape, dtype), a shape tuple or a list of them; got {out_ty!r}"
    )


def allocate_outputs(
    prim_func: tirx.PrimFunc | None, function: str, args: Sequence, out_ty
) -> list[torch.Tensor]:
    """Empty outputs of the declared dtype.

    A symbolic size is bound by name from the kernel's parameters (`n` of `A: T.Buffer((n,))`),
    else by position, as upstream does: from the first input of the output's rank.
    """
    bindings: dict[str, int] | None = None  # worked out only for an output with a symbolic size
    outputs = []
    for index, (dims, dtype) in enumerate(output_specs(out_ty)):
        shape = _static_shape(dims)
        if shape is None:
            bindings = _input_sizes(prim_func, args) if bindings is None else bindings
            shape = _by_position(
                dims, [_concrete(d, bindings, function) for d in dims], args, index, function
            )
        if shape and min(shape) < 0:
            raise CallError(
                f"out_ty asks for an output of negative size {shape}", function=function
            )
        try:
            # sizes as separate arguments: torch takes them faster than a list
            torch_dtype = to_torch_dtype(dtype)
            outputs.append(
                torch.empty(*shape, dtype=torch_dtype)
                if shape
                else torch.empty((), dtype=torch_dtype)
            )
        except RuntimeError as err:  # out of memory
            raise CallError(
                f"cannot allocate an output {dtype}{shape}: {shorten(str(err), 1)}",
                function=function,
            ) from None
    return outputs


def _static_shape(dims) -> list[int] | None:
    """`dims` as numbers when none is symbolic, else None."""
    shape = []
    for dim in dims:
        if dim.__class__ is int:
            shape.append(dim)
        elif isinstance(dim, tirx.IntImm):
            shape.append(int(dim.value))
        else:
            return None
    return shape


def _input_sizes(prim_func: tirx.PrimFunc | None, args: Sequence) -> dict[str, int]:
    """The value of each symbolic size in `prim_func`'s parameters, as the inputs `args` give it."""
    bindings: dict[str, int] = {}
    for param, arg in zip(prim_func.params if prim_func else (), args, strict=False):
        for dim, size in zip(getattr(param, "shape", ()), getattr(arg, "shape", ()), strict=False):
            if isinstance(dim, tirx.Var):
                bindings.setdefault(dim.name, int(size))
    return bindings


def _by_position(dims, shape: list, args: Sequence, index: int, function: str) -> list[int]:
    """Sizes no name told (None), from the first input of the output's rank, by position."""
    unknown = [axis for axis, size in enumerate(shape) if size is None]
    if not unknown:
        return shape
    for arg in args:
        arg_shape = getattr(arg, "shape", None)
        if arg_shape is not None and len(arg_shape) == len(dims):
            return [
                int(arg_shape[axis]) if size is None else size for axis, size in enumerate(shape)
            ]
    axis = unknown[0]
    name = _name_of_size(dims[axis])
    raise CallError(
        f"cannot tell size {name} (axis {axis} of output {index}) from the inputs: no input has "
        f"{len(dims)} dimensions to take it from by position; give out_ty a number there",
        function=function,
    )


def _name_of_size(dim) -> str:
    if isinstance(dim, str):
        return f"`{dim}`"
    names = [v.name for v in _vars_of(dim)] if not isinstance(dim, int) else []
    return f"`{names[0]}`" if names and names[0] else f"`{dim}`"


def _concrete(dim, bindings: dict[str, int], function: str) -> int | None:
    """A size as a number, or None if it names a size no input's parameter has."""
    if isinstance(dim, int):
        return dim
    if isinstance(dim, str):  # R.Tensor(("n",), ...) outside a parse: the size is known by name
        return bindings.get(dim)
    analyzer = Analyzer()
    for var in _vars_of(dim):
        if var.name not in bindings:
            return None
        analyzer.bind(var, tirx.IntImm(str(var.ty), bindings[var.name]))
    value = analyzer.simplify(dim)
    if not isinstance(value, tirx.IntImm):
        raise CallError(f"output size {dim} does not reduce to a number", function=function)
    return int(value.value)


def _vars_of(expr) -> list[tirx.Var]:
    return list(tirx.analysis.undefined_vars(expr))


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
