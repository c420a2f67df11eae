"""Every op of TVM's PyTorch importer has a model (`tests/op_corpus.py`), and a slice of them runs
right through a live module under both CPU targets: the ops whose fixes it keeps (cosh and sinh
under the CPU schedule, reads a guard must check only where the kernel makes them, shapes only
the data decides) and a few dozen that stand for the rest.

The whole corpus, beside plain TVM, is `make ops` (`benchmarks/ops_report.py`, its table in
`benchmarks/OPS.md`): every case there that plain TVM runs right, the live module runs right.
The slice is one live module of a function per case, so it compiles once per target.
"""

from __future__ import annotations

import pytest
import torch
import tvm
from op_corpus import CASES, convert_map_entries, covering, gaps, same
from tvm import relax, tirx
from tvm.script import relax as R

from tvm_pyfunc_nb import LiveModule
from tvm_pyfunc_nb._core.build.cpu_schedules import checked_schedule_of
from tvm_pyfunc_nb.testing import AVX2_TARGET, second_run_here

FIXED = [
    *("cosh", "sinh", "cosh_sequence", "sinh_sequence"),  # vectors LLVM cannot lower
    *("slice_scatter_step", "slice_scatter_small", "pad_circular"),  # reads under a condition
    *("gather_masked", "where_condition", "pad_reflect", "pad_constant"),
    *("masked_select", "masked_select_condition", "nonzero", "unique_counts"),  # data-dependent
]
STAND_INS = [
    *("relu_inplace", "add", "div_floor_int", "remainder_int", "pow_scalar_exponent", "erf"),
    *("eq_broadcast", "logical_xor", "bitwise_and_scalar", "matmul_batched_broadcast", "linear"),
    *("conv2d_strided_dilated_grouped", "conv_transpose2d", "layer_norm", "batch_norm_eval"),
    *("softmax", "log_softmax_half", "embedding", "index_tensor_two", "index_put_accumulate"),
    *("scatter", "cumsum_bool_mask", "sdpa_causal", "max_pool2d_indices", "adaptive_avg_pool2d"),
    *("upsample_bilinear", "topk", "argmax", "any_dims", "masked_fill_broadcast", "slice"),
    *("select_negative", "split_with_sizes", "roll", "tril", "to_half", "arange_float_step"),
    *("dynamic_rows", "item_scales", "cond"),
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
        live.add_torch(model, args, name=name, dynamic_shapes=CASES[name].dynamic_shapes())
        models[name] = model, args
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
    assert same(getattr(live, name)(*copies(args)), expected) == ""
    comparison = live.compare(name, model, *copies(args))
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
    sch, why = checked_schedule_of(kernel, tvm.target.Target(_config(target)))
    assert sch is not None, why
    kinds = []
    tvm.tirx.stmt_functor.post_order_visit(
        sch.mod["main"].body, lambda n: kinds.append(n.kind) if isinstance(n, tirx.For) else None
    )
    assert (tirx.ForKind.VECTORIZED in kinds) == vectorized
    tvm.tirx.build(sch.mod, target=tvm.target.Target(_config(target)))


def _config(target: str):
    import json

    return json.loads(target) if target.startswith("{") else target
