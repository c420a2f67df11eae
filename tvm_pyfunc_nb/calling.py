"""Calling into a live module: argument checks, output allocation, pyfunc trampolines.

The happy path does as little as possible (tvm-ffi takes torch tensors as
they are); the checks that explain a bad call run only after TVM refused it,
so they cost nothing when the call is right.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import tvm
from tvm import relax, tirx
from tvm.sym import Analyzer

from .errors import CallError, PyFuncError, TVMModuleError
from .tensors import describe, dtype_name, to_torch, to_torch_dtype, to_tvm_arg, to_tvm_tensor


@dataclass(frozen=True)
class CallRecord:
    """The latest call of one function, for the results pane."""

    args: tuple
    result: Any
    seconds: float
    compiled: tuple  # CompileRecords this call triggered
    error: BaseException | None = None
    when: float = 0.0


# -- expected types -----------------------------------------------------------------
@dataclass(frozen=True)
class TensorSpec:
    """What one parameter or output expects: dims (int, symbolic name, or None) and dtype."""

    name: str
    dims: tuple | None  # None: any rank
    dtype: str | None

    def __str__(self) -> str:
        dims = "?" if self.dims is None else ", ".join("?" if d is None else str(d) for d in self.dims)
        return f"{self.dtype or '?'}[{dims}]"


def specs_of(func) -> list[TensorSpec] | None:
    """Parameter specs of a Relax function or PrimFunc (None where a parameter is not a tensor)."""
    if isinstance(func, relax.Function):
        return [_spec_from_type(p.name, p.ty) for p in func.params]
    if isinstance(func, tirx.PrimFunc):
        return [_spec_from_buffer(p) for p in func.params]
    return None


def _spec_from_type(name: str, ty) -> TensorSpec:
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


def explain_bad_call(function: str, specs: list[TensorSpec] | None, args: Sequence, err: BaseException) -> CallError:
    """The clearest message for a call TVM refused: count, then dtype, then shape, else TVM's own reason."""
    if specs is not None:
        if len(args) != len(specs):
            return CallError(
                f"takes {len(specs)} argument(s) ({', '.join(s.name for s in specs)}), got {len(args)}",
                function=function,
            )
        bindings: dict[str, int] = {}
        for spec, arg in zip(specs, args):
            problem = _mismatch(spec, arg, bindings)
            if problem:
                return CallError(f"parameter `{spec.name}` expects {spec}, {problem}", function=function)
    reason = str(err).strip().splitlines()
    return CallError(f"TVM refused the call: {reason[-1] if reason else type(err).__name__}", function=function)


def _mismatch(spec: TensorSpec, arg: Any, bindings: dict[str, int]) -> str | None:
    if spec.dtype is None and spec.dims is None:
        return None
    if not hasattr(arg, "shape") or not hasattr(arg, "dtype"):
        return f"got {describe(arg)}"
    if spec.dtype and dtype_name(arg) != spec.dtype:
        return f"got {describe(arg)} (dtype {dtype_name(arg)})"
    shape = list(arg.shape)
    if spec.dims is not None:
        if len(shape) != len(spec.dims):
            return f"got {describe(arg)} ({len(shape)} dims instead of {len(spec.dims)})"
        for dim, size in zip(spec.dims, shape):
            if isinstance(dim, int) and dim != size:
                return f"got {describe(arg)}"
            if isinstance(dim, str) and bindings.setdefault(dim, size) != size:
                return f"got {describe(arg)} ({dim} is {bindings[dim]} from an earlier argument)"
    return None


# -- output allocation (call_tir from Python) -----------------------------------------
def output_specs(out_ty) -> list[tuple[list, str]]:
    """Normalise an `out_ty` into `[(dims, dtype)]`: `R.Tensor(...)`, a TensorType, a shape tuple, or a list of those."""
    if isinstance(out_ty, list):
        return [spec for ty in out_ty for spec in output_specs(ty)]
    if isinstance(out_ty, tuple) and all(isinstance(d, int) for d in out_ty):
        return [(list(out_ty), "float32")]
    if isinstance(out_ty, relax.TensorType):
        if not isinstance(out_ty.shape, relax.ShapeExpr):
            raise CallError(f"out_ty {out_ty} has no shape to allocate")
        return [(list(out_ty.shape.values), str(out_ty.dtype))]
    if hasattr(out_ty, "shape") and hasattr(out_ty, "dtype"):  # R.Tensor(...) evaluated outside a parse
        return [(list(out_ty.shape), str(out_ty.dtype))]
    raise CallError(f"out_ty must be R.Tensor(shape, dtype), a shape tuple or a list of them; got {out_ty!r}")


def allocate_outputs(prim_func: tirx.PrimFunc, function: str, args: Sequence, out_ty) -> list[torch.Tensor]:
    """Empty outputs of the declared dtype; symbolic dims are bound from the inputs' shapes."""
    bindings: dict[str, int] = {}
    for param, arg in zip(prim_func.params, args):
        for dim, size in zip(getattr(param, "shape", ()), getattr(arg, "shape", ())):
            if isinstance(dim, tirx.Var):
                bindings.setdefault(dim.name, int(size))
    outputs = []
    for dims, dtype in output_specs(out_ty):
        shape = [_concrete(d, bindings, function) for d in dims]
        outputs.append(torch.empty(shape, dtype=to_torch_dtype(dtype)))
    return outputs


def _concrete(dim, bindings: dict[str, int], function: str) -> int:
    if isinstance(dim, int):
        return dim
    if isinstance(dim, str):
        dim = tirx.Var(dim, "int64")
    analyzer = Analyzer()
    for var in _vars_of(dim):
        if var.name not in bindings:
            raise CallError(
                f"cannot tell the size `{var.name}` of an output from the inputs; "
                f"known sizes: {bindings or 'none'}", function=function,
            )
        analyzer.bind(var, tirx.IntImm(var.dtype, bindings[var.name]))
    value = analyzer.simplify(dim)
    if not isinstance(value, tirx.IntImm):
        raise CallError(f"output size {dim} does not reduce to a number", function=function)
    return int(value.value)


def _vars_of(expr) -> list[tirx.Var]:
    return list(tirx.analysis.undefined_vars(expr))


# -- pyfuncs --------------------------------------------------------------------------
_pending = threading.local()


def pyfunc_error(function: str, line: int | None, err: BaseException) -> TVMModuleError:
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
        if tb.tb_frame.f_code.co_name == function and tb.tb_frame.f_code.co_filename.startswith("<tvmmodule"):
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def take_pending_error() -> BaseException | None:
    """The pyfunc error a Relax call raised through TVM, if any (TVM re-wraps exceptions)."""
    err = getattr(_pending, "error", None)
    _pending.error = None
    return err


class PyFuncTrampoline:
    """What `R.call_py_func` really calls: the live module's *current* pyfunc, checked against `out_ty`.

    It holds the module weakly, so the registry never keeps a dropped module alive.
    """

    def __init__(self, live, pyfunc: str, out_ty: list):
        self.live_ref = weakref.ref(live)
        self.pyfunc = pyfunc
        if len(out_ty) == 1 and isinstance(out_ty[0], relax.TupleType):
            out_ty = list(out_ty[0].fields)
        self.expected = [_spec_from_type(f"output {i}", ty) for i, ty in enumerate(out_ty)]

    def __call__(self, *args):
        live = self.live_ref()
        try:
            if live is None:
                raise CallError(f"the module that defined pyfunc `{self.pyfunc}` was dropped")
            result = live.call_py_func(self.pyfunc, [to_torch(a) for a in args])
            outputs = result if isinstance(result, (tuple, list)) else (result,)
            self._check(outputs)
            converted = [to_tvm_tensor(to_tvm_arg(o)) for o in outputs]
            return converted[0] if len(converted) == 1 else converted
        except BaseException as err:
            _pending.error = err
            raise

    def _check(self, outputs: Sequence) -> None:
        if len(outputs) != len(self.expected):
            raise PyFuncError(
                f"returned {len(outputs)} value(s) but R.call_py_func declares {len(self.expected)} in out_ty",
                function=self.pyfunc,
            )
        bindings: dict[str, int] = {}
        for spec, out in zip(self.expected, outputs):
            problem = _mismatch(spec, out, bindings)
            if problem:
                raise PyFuncError(
                    f"returned a value that does not match out_ty: expected {spec}, {problem}",
                    function=self.pyfunc,
                )


def timed(func: Callable, *args) -> tuple[Any, float]:
    start = time.perf_counter()
    out = func(*args)
    return out, time.perf_counter() - start
