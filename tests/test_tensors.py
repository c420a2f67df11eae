"""Tensors in and out of compiled code, without a module: dtypes, copies only where DLPack needs
them, writes into a view reaching the caller's tensor, TVM's results as torch views."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm

from tvm_pyfunc_nb import CallError
from tvm_pyfunc_nb._core.run.tensors import (
    describe,
    device_name,
    dtype_name,
    to_torch,
    to_torch_dtype,
    to_tvm_arg,
    to_tvm_args,
    to_tvm_tensor,
    write_back,
)


def test_dtypes_have_tvms_names_both_ways():
    assert to_torch_dtype("bfloat16") is torch.bfloat16
    assert to_torch_dtype(tvm.runtime.DataType("int8")) is torch.int8
    with pytest.raises(CallError, match="float8_e4m3fn has no torch equivalent"):
        to_torch_dtype("float8_e4m3fn")
    assert dtype_name(torch.ones(1, dtype=torch.bfloat16)) == "bfloat16"
    assert dtype_name(np.ones(1, dtype=np.float64)) == "float64"
    assert describe(torch.ones(2, 3)) == "float32[2, 3]" and describe(3) == "int"


def test_a_contiguous_tensor_passes_as_it_is_and_a_view_as_a_copy_written_back():
    x = torch.arange(6, dtype=torch.float32)
    assert to_tvm_arg(x) is x
    out = torch.zeros(3, 2)
    view = out.t()  # not contiguous: goes in as a copy
    passed = to_tvm_args((x, view))
    assert passed[0] is x and passed[1] is not view and passed[1].is_contiguous()
    passed[1].fill_(7.0)  # what a kernel would write
    write_back((x, view), passed)
    assert torch.equal(out, torch.full((3, 2), 7.0))
    arr = np.arange(4, dtype=np.float32)[::2]
    copy = to_tvm_arg(arr)
    assert isinstance(copy, torch.Tensor) and copy.tolist() == [0.0, 2.0]


def test_complex_tensors_are_a_call_error_before_tvm_sees_them():
    with pytest.raises(CallError, match="complex tensors"):
        to_tvm_arg(torch.ones(2, dtype=torch.complex64))


def test_tvm_results_become_torch_views_of_the_same_memory():
    x = torch.arange(4, dtype=torch.float32)
    tensor = to_tvm_tensor(x)
    assert isinstance(tensor, tvm.runtime.Tensor)
    back = to_torch(tensor)
    assert isinstance(back, torch.Tensor) and back.data_ptr() == x.data_ptr()
    pair = to_torch(tvm.runtime.convert([tensor, tensor]))
    assert isinstance(pair, tuple) and len(pair) == 2
    assert device_name(x) == "cpu:0" and device_name(np.ones(1)) == "cpu:0"
    assert device_name(tensor) == str(tensor.device) and device_name(3) is None
