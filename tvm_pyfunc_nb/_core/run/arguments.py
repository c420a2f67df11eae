"""Arguments of a call: the types a function expects, keywords, output allocation.

The happy path does as little as possible (tvm-ffi takes torch tensors as
they are); `mismatch` and the specs serve the checks that explain a bad call
(call_errors.py), which run only after TVM refused it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tvm import relax, tirx
from tvm.relax.script.parser.entry import TensorProxy
from tvm.sym import Analyzer

from ...errors import CallError, shorten
from .tensors import TORCH_DTYPES, describe, dtype_name, is_tensor_like, to_torch_dtype

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


def out_ty_of(out_ty, out_sinfo, what: str, name: str):
    """`out_ty`, or `out_sinfo` (TVM's name for it before 0.27): one of them, not both."""
    if out_ty is not None and out_sinfo is not None:
        raise CallError(
            f"{what}: give out_ty or out_sinfo (its older name), not both", function=name
        )
    if out_ty is None and out_sinfo is None:
        raise CallError(
            f"{what}: out_ty is missing (the outputs' R.Tensor(shape, dtype))", function=name
        )
    return out_ty if out_ty is not None else out_sinfo


def function_name(func) -> str:
    """The name of a function given by name or as a function (a GlobalVar, a Python function)."""
    if isinstance(func, str):
        return func
    for attr in ("name_hint", "__name__", "name"):
        value = getattr(func, attr, None)
        if isinstance(value, str):
            return value
    raise CallError(f"expected a function name or a function, got {type(func).__name__}")
