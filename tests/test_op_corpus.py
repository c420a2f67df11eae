"""Every op of TVM's PyTorch importer has a model (`tests/op_corpus.py`), and a slice of them runs
right through a live module under both CPU targets: the ops whose fixes it keeps (cosh and sinh
under the CPU schedule, reads a guard must check only where the kernel makes them, shapes only
the data decides, ops TVM's importer translates wrong or fails on) and a few dozen that stand
for the rest.

The whole corpus, beside plain TVM, is `make ops` (`benchmarks/ops_report.py`, its table in
`benchmarks/OPS.md`): every case there that plain TVM runs right, the live module runs right.
The slice is one live module of a function per case, so it compiles once per target.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import tvm
import tvm_ffi
from op_corpus import CASES, convert_map_entries, covering, gaps, same
from tvm import relax, tirx
from tvm.script import relax as R

from tvm_pyfunc_nb import LiveModule, ModelImportError, ScheduleWarning
from tvm_pyfunc_nb._core.build.cpu_schedules import checked_schedule_of
from tvm_pyfunc_nb._core.models.dynamic_shapes import bounds_of
from tvm_pyfunc_nb.testing import AVX2_TARGET, second_run_here

FIXED = [
    *("cosh", "sinh", "cosh_sequence"),  # vectors LLVM cannot lower
    *("slice_scatter_step", "slice_scatter_small", "pad_circular", "setitem_slice"),
    *("gather_masked", "where_condition"),  # reads under a condition
    *("masked_select", "nonzero", "unique_counts"),  # sizes the data decides
    *("cond", "empty"),  # torch.cond's branches; memory never written is not compared
    *("selu", "add_alpha", "div_int_true", "max_pool2d_indices"),  # TVM translates them wrong
    *("mul_bool", "index_put"),  # TVM fails on them
]
STAND_INS = [
    *("relu_inplace", "add", "div_floor_int", "remainder_int", "pow_scalar_exponent", "erf"),
    *("eq_broadcast", "logical_xor", "bitwise_and_scalar", "matmul_batched_broadcast", "linear"),
    *("conv2d_strided_dilated_grouped", "conv_transpose2d", "layer_norm", "batch_norm_eval"),
    *("softmax", "log_softmax_half", "embedding", "index_tensor_two", "scatter"),
    *("cumsum_bool_mask", "sdpa_causal", "adaptive_avg_pool2d", "upsample_bilinear", "topk"),
    *("argmax", "any_dims", "masked_fill_broadcast", "slice", "select_negative"),
    *("split_with_sizes", "roll", "tril", "to_half", "arange_float_step", "dynamic_rows"),
]
SLICE = FIXED + STAND_INS


def test_every_entry_of_the_importers_convert_map_has_a_model():
    assert gaps() == [], f"convert-map entries without a case in tests/op_corpus.py: {gaps()}"
    unknown = set(covering()) - set(convert_map_entries())
    assert not unknown, f"cases written for entries the importer does not have: {unknown}"
    assert set(SLICE) <= set(CASES)


@pytest.fixture(scope="module", params=["llvm", AVX2_TARGET], ids=["this-cpu", "x86-64-v3"])
def ops(request):
    """The slice in one live module (crash guards on, as by default), compiled for this CPU and
    for an AVX2 one (which kernels the CPU schedule vectorizes depends on the vector width)."""
    if request.param == AVX2_TARGET and second_run_here(AVX2_TARGET):
        pytest.skip(second_run_here(AVX2_TARGET))
    live = LiveModule("ops", target=request.param)
    models = {}
    for name in SLICE:
        model, args = CASES[name].build()
        live.add_torch(model, args, name=f"op_{name}", dynamic_shapes=CASES[name].dynamic_shapes())
        models[name] = model, args
    with warnings.catch_warnings():  # the CPU schedule fails on none of their kernels
        warnings.simplefilter("error", ScheduleWarning)
        live.compile()
    yield live, models
    live.close()


def copies(args: tuple) -> tuple:
    return tuple(a.clone() for a in args)


@pytest.mark.parametrize("name", SLICE)
def test_the_live_module_gives_pytorchs_numbers_and_compare_says_so(ops, name):
    live, models = ops
    model, args = models[name]
    with torch.no_grad():
        expected = model(*copies(args))
    assert same(getattr(live, f"op_{name}")(*copies(args)), expected) == ""
    comparison = live.compare(f"op_{name}", model, *copies(args))
    assert comparison.passed and comparison.first_divergence is None, comparison


@pytest.mark.parametrize("target", ["llvm", AVX2_TARGET])
@pytest.mark.parametrize(("op", "vectorized"), [("cosh", False), ("sinh", False), ("exp", True)])
def test_the_cpu_schedule_leaves_in_scalars_what_llvm_cannot_lower_as_vectors(
    target, op, vectorized
):
    """TVM marks `cosh` and `sinh` vectorizable but lowers them for LLVM to libm's scalar calls
    only: in vectors they stayed "unknown intrinsic"s that did not compile."""
    x = relax.Var("x", R.Tensor((4, 32), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        bb.emit_func_output(bb.emit(getattr(relax.op, op)(x)))
    legal = relax.transform.LegalizeOps()(bb.get())
    (kernel,) = [f for _, f in legal.functions_items() if isinstance(f, tirx.PrimFunc)]
    cpu = tvm.target.Target(_config(target))
    sch, why = checked_schedule_of(kernel, cpu)
    assert why == ""
    scheduled = sch.mod["main"] if sch is not None else kernel  # None: TVM's own loops
    kinds = []
    tvm_ffi.structural_walk(scheduled.body, [(tirx.For, lambda loop: kinds.append(loop.kind))])
    assert (tirx.ForKind.VECTORIZED in kinds) == vectorized
    tvm.tirx.build(tvm.IRModule({"k": scheduled.with_attr("global_symbol", "k")}), target=cpu)


def _config(target: str) -> dict:
    """The LLVM target of this CPU (as a live module resolves `llvm`), or the one `target` is."""
    import json

    from tvm.target.codegen import llvm_get_system_cpu

    if target.startswith("{"):
        return json.loads(target)
    return {"kind": "llvm", "mcpu": llvm_get_system_cpu()}


def test_a_number_read_from_data_is_a_size_without_bounds_and_fails_with_the_packages_error():
    """`x * s.max().item()`: torch.export bounds the number by neither end (it raised
    AttributeError from sympy's infinity); TVM's importer refuses the product, which cannot be
    a PyTorch call either (a number is not a tensor): the error is TVM's, at the node."""
    model, args = CASES["item_scales"].build()
    exported = torch.export.export(model, args).run_decompositions()
    assert set(bounds_of(exported).values()) == {(None, None)}
    live = LiveModule("m")
    with pytest.raises(ModelImportError, match="could not translate Fn: Binary operators") as info:
        live.add_torch(model, args)
    assert "at node `mul` (aten.mul.Tensor)" in str(info.value)
    live.close()
