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

from .errors import CallError

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
    name = str(dtype)
    try:
        return TORCH_DTYPES[name]
    except KeyError:
        raise CallError(f"dtype {name} has no torch equivalent") from None


def dtype_name(value: Any) -> str:
    """TVM's name of a tensor's dtype (`float32`, `bfloat16`, ...)."""
    dtype = getattr(value, "dtype", None)
    if isinstance(dtype, torch.dtype):
        return TVM_DTYPES.get(dtype, str(dtype).removeprefix("torch."))
    return str(dtype)


def to_tvm_arg(value: Any) -> Any:
    """Make `value` something a compiled TVM function accepts; torch tensors pass as they are."""
    if isinstance(value, torch.Tensor):
        return value if value.is_contiguous() else value.contiguous()
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, (list, tuple)):
        return type(value)(to_tvm_arg(v) for v in value)
    return value


def to_tvm_args(args: tuple) -> list:
    return [to_tvm_arg(a) for a in args]


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
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"{dtype_name(value)}{list(value.shape)}"
    return type(value).__name__
