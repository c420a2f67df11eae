"""`add_torch(..., dynamic_shapes=...)`: a dynamic dimension TVM can compile, or why not.

TVM's importer knows the bounds `torch.export` was given (`Dim("seq",
max=32)`) but does not use them while it translates. A slice up to a dynamic
length, such as BERT's `position_ids[:, :seq]` of a 64-long buffer, then
gets the shape `min(seq, 64)`, which is not `seq`; the add that follows gets
a shape TVM does not know, and nothing after it can be lowered. With the
bounds, `seq <= 32 < 64` is proven and the slice has the shape `seq`.

What still has a shape TVM cannot tell stops the import, naming the binding
and the dimension, rather than the first call.
"""

from __future__ import annotations

import math
import sys

import numpy as np
import sympy
import torch
import tvm
import tvm.sym
from tvm import relax
from tvm.relax.frontend.torch.exported_program_translator import ExportedProgramImporter

from ...errors import ModelImportError
from ..build.failed_bindings import describe


def bounds_of(exported) -> dict[str, tuple[int | None, int | None]]:
    """Each dynamic dimension's name (`s70`) -> its lower and upper bound (None: unbounded; a
    number read from data, `x.item()`, may have neither)."""

    def bound(value) -> int | None:
        # torch's unbounded limit (`int_oo`, which a view's sizes get) says it is finite
        return None if math.isinf(float(value)) else int(value)

    return {
        str(symbol): (bound(values.lower), bound(values.upper))
        for symbol, values in exported.range_constraints.items()
    }


def bounded_slices(exported) -> dict:
    """A translation of `aten.slice` for TVM's importer that uses the dynamic dimensions' bounds
    (a custom convert map entry); {} for a model without dynamic dimensions."""
    bounds = bounds_of(exported)
    if not bounds:
        return {}

    def slice_within_bounds(node, importer: ExportedProgramImporter):
        args = [importer.env[a] if isinstance(a, torch.fx.Node) else a for a in node.args]
        x, dim = args[0], args[1] if len(args) > 1 else 0
        start, end = (args[2] if len(args) > 2 else None), (args[3] if len(args) > 3 else None)
        step = args[4] if len(args) > 4 else 1
        to_the_end = end is None or (isinstance(end, int) and end >= sys.maxsize)
        shape = importer.shape_of(x)
        if shape is not None and step == 1 and not (start in (None, 0) and to_the_end):
            extent = shape[dim % len(shape)]
            start = 0 if start is None else start
            if to_the_end:
                end = extent
            elif isinstance(end, int) and end < 0:
                end = extent + end
            if all(_proven(c, bounds) for c in (start >= 0, start <= end, end <= extent)):
                return importer.block_builder.emit(
                    relax.op.strided_slice(x, [dim], [start], [end], [1], assume_inbound=True)
                )
        return ExportedProgramImporter._slice(importer, node)  # TVM's own, bounds unused

    return {"slice.Tensor": slice_within_bounds}


def data_dependent_ops() -> dict:
    """Translations of the ATen ops whose output size only the data decides and which TVM's
    Relax has (`R.nonzero`, `R.unique`) though its importer has no entry for them (custom
    convert map entries). As the importer writes `masked_select`: the op, then its value given
    a shape by `R.match_cast`, the size a variable named as torch.export names it (`u0`)."""
    return {"nonzero.default": _nonzero, "_unique2.default": _unique}


def _nonzero(node, importer: ExportedProgramImporter):
    """`torch.nonzero(x)`: the indices of the nonzero elements, one row each."""
    x = importer.env[node.args[0]]
    rows = _size(node.meta["val"].shape[0])
    found = importer.block_builder.emit(relax.op.nonzero(x))  # one row per dimension
    found = importer.block_builder.match_cast(
        found, relax.TensorType([len(importer.shape_of(x)), rows], "int64")
    )
    return importer.block_builder.emit(relax.op.permute_dims(found, [1, 0]))


def _unique(node, importer: ExportedProgramImporter):
    """`torch.unique(x, sorted, return_inverse, return_counts)` (ATen's `_unique2`): the values,
    the inverse indices and the counts, an empty tensor for each not asked for."""
    x = importer.env[node.args[0]]
    given = dict(zip(("sorted", "return_inverse", "return_counts"), node.args[1:], strict=False))
    given.update(node.kwargs)
    inverse, counts = given.get("return_inverse", False), given.get("return_counts", False)
    bb = importer.block_builder
    found = bb.emit(relax.op.unique(x, given.get("sorted", True), False, inverse, counts, None))
    items = (
        [found]
        if not (inverse or counts)
        else [bb.emit(relax.TupleGetItem(found, i)) for i in range(1 + inverse + counts)]
    )
    size = _size(node.meta["val"][0].shape[0])
    values = bb.match_cast(items[0], relax.TensorType([size], x.ty.dtype))
    nothing = relax.const(np.zeros((0,), "int64"))
    outputs = [values, nothing, nothing]
    if inverse:
        outputs[1] = bb.emit(relax.op.reshape(items[1], importer.shape_of(x)))
    if counts:
        outputs[2] = bb.match_cast(items[-1], relax.TensorType([size], "int64"))
    return bb.emit(relax.Tuple(outputs))


def _size(size):
    """A size of a fake tensor as Relax writes it: a number, or a variable of its name."""
    return size if isinstance(size, int) else tvm.tirx.Var(str(size), "int64")


def _proven(claim, bounds: dict[str, tuple[int, int | None]]) -> bool:
    """Whether `claim` holds for every value its dynamic dimensions may take."""
    if isinstance(claim, bool):
        return claim
    analyzer = tvm.sym.Analyzer()
    for var in tvm.tirx.analysis.undefined_vars(claim):
        lower, upper = bounds.get(var.name, (0, None))
        if lower is not None and upper is not None:
            analyzer.bind(var, tvm.ir.Range(lower, upper + 1))
    return analyzer.can_prove(claim)


def check_known_shapes(func: relax.Function, exported, model: str) -> None:
    """Raise `ModelImportError` at the first binding whose shape TVM cannot tell (nothing from
    there on could be lowered), naming it and the dynamic dimensions its operands have.

    A value whose shape only the data decides is no such binding when it is given a shape at
    once, by `R.match_cast` alone (TVM's importer writes `R.nonzero` so, in a masked_select: the
    size is read when it runs, as a new variable)."""
    bounds = bounds_of(exported)
    if not bounds:
        return
    cast = _recast_only(func)
    for block in func.body.blocks:
        for binding in block.bindings:
            ty = binding.var.ty
            if isinstance(ty, relax.TensorType) and ty.shape is None and binding.var not in cast:
                dims = _dynamic_dims(binding.value, exported)
                raise ModelImportError(
                    f"{model} cannot be dynamic in {dims or 'these dimensions'}: TVM cannot tell "
                    f"the shape of {describe(binding)}, so it cannot compile it; give "
                    "dynamic_shapes only for dimensions the model can vary, or none"
                )


def _recast_only(func: relax.Function) -> set:
    """The variables of `func` that nothing reads but an `R.match_cast`."""
    cast, read = set(), set()
    for block in func.body.blocks:
        for binding in block.bindings:
            if isinstance(binding, relax.MatchCast) and isinstance(binding.value, relax.Var):
                cast.add(binding.value)
            else:
                read.update(relax.analysis.free_vars(binding.value))
    read.update(relax.analysis.free_vars(func.body.body))
    return cast - read


def _dynamic_dims(value, exported) -> str:
    """`s70 (input_ids.shape[1])` for each dynamic dimension in `value`'s operands' shapes."""
    names = set()
    for arg in getattr(value, "args", ()):
        shape = getattr(getattr(arg, "ty", None), "shape", None)
        for dim in getattr(shape, "values", None) or ():
            names.update(v.name for v in tvm.tirx.analysis.undefined_vars(dim))
    where = {}
    for node in exported.graph.nodes:
        val = node.meta.get("val") if node.op == "placeholder" else None
        for i, size in enumerate(getattr(val, "shape", ())):
            for symbol in getattr(getattr(size, "node", None), "expr", sympy.S.Zero).free_symbols:
                where.setdefault(str(symbol), f"{node.name}.shape[{i}]")
    return ", ".join(f"`{n}` ({where[n]})" if n in where else f"`{n}`" for n in sorted(names))
