"""Tensors in and out: torch <-> TVM through DLPack, zero-copy where the layout allows.

tvm-ffi accepts `torch.Tensor` arguments directly, so on the way in the only
work is for what DLPack cannot take as is (non-contiguous tensors, numpy
arrays). On the way out, TVM tensors become `torch.Tensor` views of the same
memory.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import tvm
import tvm_ffi

from ...errors import CallError

TORCH_DTYPES = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "bool": torch.bool,
}
TVM_DTYPES = {v: k for k, v in TORCH_DTYPES.items()}


def to_torch_dtype(dtype: Any) -> torch.dtype:
    """The torch dtype of a TVM dtype ("float32", `DataType`...); `CallError` if torch has none."""
    name = str(dtype)
    try:
        return TORCH_DTYPES[name]
    except KeyError:
        raise CallError(f"dtype {name} has no torch equivalent") from None


def dtype_name(value: Any) -> str:
    """TVM's name of a tensor's dtype (`float32`, `bfloat16`, ...)."""
    try:
        dtype = getattr(value, "dtype", None)
    except ValueError:  # a TVM tensor of a dtype TVM has no name for (complex)
        return "unsupported-dtype"
    if isinstance(dtype, torch.dtype):
        return TVM_DTYPES.get(dtype, str(dtype).removeprefix("torch."))
    return str(dtype)


def to_tvm_arg(value: Any) -> Any:
    """Make `value` something a compiled TVM function accepts; torch tensors pass as they are."""
    if isinstance(value, torch.Tensor):
        if (
            value.is_complex()
        ):  # TVM aborts the process while formatting its error about a complex dtype
            raise CallError(f"complex tensors ({dtype_name(value)}) are not supported by TVM")
        return value if value.is_contiguous() else value.contiguous()
    if isinstance(value, np.ndarray):
        return to_tvm_arg(torch.from_numpy(np.ascontiguousarray(value)))
    if isinstance(value, (list, tuple)):
        return type(value)(to_tvm_arg(v) for v in value)
    if isinstance(value, tvm_ffi.Tensor):
        _check_dtype_is_known(value)
    return value


def _check_dtype_is_known(tensor: tvm_ffi.Tensor) -> None:
    try:
        _ = tensor.dtype
    except ValueError as err:  # e.g. complex: TVM has no name for it, and aborts when it needs one
        raise CallError(f"a tensor of a dtype TVM does not support: {err}") from None


def to_tvm_args(args: tuple) -> list:
    """Call arguments as TVM takes them (`to_tvm_arg` for each)."""
    return [to_tvm_arg(a) for a in args]


def write_back(originals: tuple, passed: list) -> None:
    """Copy what a kernel wrote into the copies `to_tvm_args` made back into the originals.

    A PrimFunc writes its outputs in place; an output given as a view (a slice, a transpose)
    went in as a copy. Expanded tensors (a stride of 0) cannot be written and are left alone.
    """
    for original, copy in zip(originals, passed, strict=False):
        if copy is original:
            continue
        if isinstance(original, torch.Tensor) and 0 not in original.stride():
            original.copy_(copy)
        elif (
            isinstance(original, np.ndarray)
            and original.flags.writeable
            and 0 not in original.strides
        ):
            np.copyto(original, copy.numpy())


def own_copies(args: tuple) -> tuple:
    """A copy of each tensor of `args`: a run of a function that writes into its inputs
    (`x.add_(1)`) changes neither the caller's tensors nor what the next run is given."""
    return tuple(_copied(a) for a in args)


def _copied(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, tvm.runtime.Tensor):
        return value.copyto(value.device)
    if isinstance(value, (list, tuple)):
        return type(value)(_copied(v) for v in value)
    return value


def to_tvm_tensor(value: Any) -> Any:
    """A `tvm.runtime.Tensor` view of a torch/numpy tensor, for code that needs TVM's own type."""
    if isinstance(value, torch.Tensor):
        return tvm.runtime.from_dlpack(value if value.is_contiguous() else value.contiguous())
    if isinstance(value, np.ndarray):
        return tvm.runtime.tensor(value)
    if isinstance(value, (list, tuple)):
        return type(value)(to_tvm_tensor(v) for v in value)
    return value


def to_torch(value: Any) -> Any:
    """Convert what TVM returns into torch tensors (tuples stay tuples), zero-copy."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, tvm_ffi.Tensor):
        return torch.from_dlpack(value)
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    if isinstance(value, (tvm_ffi.Array, list, tuple)):
        return tuple(to_torch(v) for v in value)
    return value


def describe(value: Any) -> str:
    """`float32[2, 3]` for a tensor, the type name otherwise: for error messages."""
    if is_tensor_like(value):
        return f"{dtype_name(value)}{list(value.shape)}"
    return type(value).__name__


def is_tensor_like(value: Any) -> bool:
    """Whether `value` has a shape and a dtype (a dtype TVM cannot name counts: it is still a
    tensor).
    """
    try:
        return hasattr(value, "shape") and hasattr(value, "dtype")
    except ValueError:
        return True


def device_name(value: Any) -> str | None:
    """`cpu:0`, `cuda:1`, `meta:0`... for a tensor, None for anything else."""
    device = getattr(value, "device", None)
    if isinstance(device, torch.device):
        return f"{device.type}:{device.index or 0}"
    if isinstance(value, np.ndarray):
        return "cpu:0"
    return str(device) if isinstance(value, tvm_ffi.Tensor) else None
