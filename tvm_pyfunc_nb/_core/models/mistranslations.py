"""ATen nodes TVM 0.27's PyTorch importer translates into the wrong numbers, shape or dtype.

Each entry is an op and when its translation goes wrong, found by running every op of the
importer's convert map against PyTorch (`make ops`, `benchmarks/OPS.md`). Such a node runs as a
PyTorch call (`torch_fallback`), like an op the importer has no translation for, and the import
says so: the numbers are PyTorch's. What is right most of the time stays TVM's: a `torch.add`
with `alpha` is a PyTorch call, a plain one is not.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def mistranslation(node) -> str | None:
    """Why TVM's importer translates FX node `node` wrong (a few words), or None if it does not."""
    name = getattr(node.target, "__name__", "")
    check = _CHECKS.get(name)
    return check(node) if check is not None else None


def _arg(node, position: int, keyword: str, default=None):
    if len(node.args) > position:
        return node.args[position]
    return node.kwargs.get(keyword, default)


def _alpha(node) -> str | None:
    alpha = node.kwargs.get("alpha", 1)
    return f"it drops alpha={alpha}" if alpha != 1 else None


def _elu(node) -> str | None:
    scales = [_arg(node, 2, "scale", 1), _arg(node, 3, "input_scale", 1)]
    return "it drops elu's scale and input_scale (selu's)" if scales != [1, 1] else None


def _value(node) -> torch.Tensor | None:
    value = node.meta.get("val") if hasattr(node, "meta") else None
    return value if isinstance(value, torch.Tensor) else None


def _true_division(node) -> str | None:
    """`int / int` gives floats in PyTorch; TVM divides the integers."""
    out = _value(node)
    inputs = [_value(a) for a in node.args[:2] if isinstance(a, torch.fx.Node)]
    if out is None or not out.dtype.is_floating_point:
        return None
    if inputs and all(v is not None and not v.dtype.is_floating_point for v in inputs):
        return "it divides integers as integers, where PyTorch gives floats"
    return None


def _used_outputs(node) -> set[int]:
    return {u.args[1] for u in node.users if getattr(u.target, "__name__", "") == "getitem"}


def _pool_indices(node) -> str | None:
    return "its indices come out as floats" if 1 in _used_outputs(node) else None


def _norm_statistics(node) -> str | None:
    """A normalization's outputs after the first: the batch's mean and rstd (and, in training,
    the running statistics after it), none of them PyTorch's."""
    if _used_outputs(node) & {1, 2, 3, 4}:
        return "its mean, rstd and running statistics are not PyTorch's"
    return None


def _resized(node) -> tuple[list[int], list[int]] | None:
    """(input's spatial sizes, output's) of a resize node."""
    data, out = _value(node.args[0]), _value(node)
    if data is None or out is None:
        return None
    return list(data.shape[2:]), list(out.shape[2:])


def _nearest(node) -> str | None:
    sizes = _resized(node)
    if sizes is None or all(o % i == 0 for i, o in zip(*sizes, strict=True)):
        return None
    return "it rounds to a nearer pixel than PyTorch where a size is no multiple of the input's"


def _antialias(node) -> str | None:
    sizes = _resized(node)
    if sizes is None or all(o >= i for i, o in zip(*sizes, strict=True)):
        return None
    return "it ignores antialias, which changes the numbers where the image shrinks"


def _any(node) -> str | None:
    data = _value(node.args[0])
    if data is not None and data.dtype != torch.bool:
        return "its result keeps the input's dtype, where PyTorch gives bools"
    return None


_CHECKS: dict[str, Callable] = {
    "add.Tensor": _alpha,
    "sub.Tensor": _alpha,
    "elu.default": _elu,
    "div.Tensor": _true_division,
    "max_pool2d_with_indices.default": _pool_indices,
    "max_pool3d_with_indices.default": _pool_indices,
    "native_layer_norm.default": _norm_statistics,
    "native_group_norm.default": _norm_statistics,
    "_native_batch_norm_legit.no_stats": _norm_statistics,
    "_native_batch_norm_legit_functional.default": _norm_statistics,
    "upsample_nearest2d.vec": _nearest,
    "_upsample_bilinear2d_aa.default": _antialias,
    "grid_sampler_2d.default": lambda node: "it reads the grid as another layout (wrong shape)",
    "any.dim": _any,
    "any.dims": _any,
}
