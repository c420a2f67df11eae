"""`NAME.as_torch(fn)` runs: for each op, the text it writes without a flag, executed, gives the
compiled function's numbers; what it cannot write faithfully is flagged, never silently wrong.

One live module holds a small Relax function per case, so it compiles once for each CPU the
numbers are checked on: this machine's and an AVX2 one.
"""

from __future__ import annotations

import pytest
import torch
from tvm import relax

from tvm_pyfunc_nb import LiveModule
from tvm_pyfunc_nb._core.models.torch_source import FAITHFUL_OPS, _attrs
from tvm_pyfunc_nb.testing import AVX2_TARGET, second_run_here


def t(*shape, dtype: str = "float32") -> str:
    return f'R.Tensor({shape!r}, "{dtype}")'


X, Y = f"x: {t(3, 4)}", f"y: {t(3, 4)}"
I32, B = f"x: {t(3, 4, dtype='int32')}", f"x: {t(3, 4, dtype='bool')}"
IMG, IMG1, IMG3 = f"x: {t(1, 2, 5, 5)}", f"x: {t(1, 2, 6)}", f"x: {t(1, 2, 4, 4, 4)}"

UNARY = [
    *("abs", "acos", "acosh", "asin", "asinh", "atan", "atanh", "ceil", "cos", "cosh", "erf"),
    *("exp", "floor", "isfinite", "isinf", "isnan", "log", "negative", "round", "rsqrt"),
    *("sigmoid", "sign", "sin", "sinh", "sqrt", "square", "tan", "tanh", "trunc"),
    *("nn.relu", "nn.gelu", "nn.gelu_tanh", "nn.silu", "nn.selu"),
]
BINARY = [
    *("add", "subtract", "multiply", "divide", "floor_divide", "floor_mod", "mod", "power"),
    *("maximum", "minimum", "log_add_exp", "greater", "greater_equal", "less", "less_equal"),
]
LOGICAL = ["logical_and", "logical_or", "logical_xor"]
INT_BINARY = [
    *("add", "subtract", "multiply", "divide", "floor_divide", "floor_mod", "mod", "equal"),
    *("not_equal", "maximum", "minimum", "bitwise_and", "bitwise_or", "bitwise_xor"),
]

# name -> (parameters, body: an expression, or statements ending in `return`)
CASES: dict[str, tuple[str, str]] = {
    **{op.removeprefix("nn."): (X, f"R.{op}(x)") for op in UNARY},
    **{op: (f"{X}, y: {t(4)}", f"R.{op}(x, y)") for op in BINARY},  # y broadcasts
    **{f"{op}_int": (f"{I32}, d: {t(3, 4, dtype='int32')}", f"R.{op}(x, d)") for op in INT_BINARY},
    **{f"{op}_int": (I32, f"R.{op}(x)") for op in ("abs", "negative", "sign", "bitwise_not")},
    **{op: (f"{B}, y: {t(3, 4, dtype='bool')}", f"R.{op}(x, y)") for op in LOGICAL},
    "logical_not": (B, "R.logical_not(x)"),
    "left_shift": (f"{I32}, idx: {t(3, 4, dtype='int32')}", "R.left_shift(x, idx)"),
    "right_shift": (f"{I32}, idx: {t(3, 4, dtype='int32')}", "R.right_shift(x, idx)"),
    "subtract_outer_broadcast": (f"x: {t(3, 1)}, y: {t(1, 4)}", "R.subtract(x, y)"),
    "where": (f"c: {t(3, 4, dtype='bool')}, {X}, y: {t(4)}", "R.where(c, x, y)"),
    "clip": (X, "R.clip(x, -0.5, 0.5)"),
    "clip_int": (I32, "R.clip(x, -2, 2)"),
    "clip_int_float_bounds": (I32, "R.clip(x, -2.5, 2.5)"),
    "matmul": (f"{X}, y: {t(4, 5)}", "R.matmul(x, y)"),
    "matmul_batched": (f"x: {t(2, 3, 4)}, y: {t(2, 4, 5)}", "R.matmul(x, y)"),
    "matmul_broadcast": (f"x: {t(2, 3, 4)}, y: {t(4, 5)}", "R.matmul(x, y)"),
    "matmul_vector": (f"x: {t(4)}, y: {t(2, 4, 5)}", "R.matmul(x, y)"),
    "matmul_out_dtype": (f"{X}, y: {t(4, 5)}", 'R.matmul(x, y, out_dtype="float64")'),
    "sum": (X, "R.sum(x)"),
    "sum_axis_keepdims": (f"x: {t(2, 3, 4)}", "R.sum(x, axis=[0, 2], keepdims=True)"),
    "sum_int": (I32, "R.sum(x, axis=[1])"),
    "prod": (X, "R.prod(x, axis=[1])"),
    "prod_two_axes": (f"x: {t(2, 3, 4)}", "R.prod(x, axis=[0, 2])"),
    "mean": (X, "R.mean(x)"),
    "mean_axis": (f"x: {t(2, 3, 4)}", "R.mean(x, axis=[-1], keepdims=True)"),
    "mean_int": (I32, "R.mean(x)"),
    "variance": (X, "R.variance(x, axis=[1], keepdims=True)"),
    "std": (X, "R.std(x)"),
    "max": (X, "R.max(x)"),
    "max_axis": (X, "R.max(x, axis=[1])"),
    "min_axis_keepdims": (X, "R.min(x, axis=[0], keepdims=True)"),
    "max_int": (I32, "R.max(x, axis=[-1])"),
    "argmax": (X, "R.argmax(x, axis=1)"),
    "argmax_all_keepdims": (X, "R.argmax(x, keepdims=True)"),
    "argmin": (X, "R.argmin(x, axis=0, keepdims=True)"),
    "softmax": (X, "R.nn.softmax(x)"),
    "softmax_axis": (X, "R.nn.softmax(x, axis=0)"),
    "log_softmax": (X, "R.nn.log_softmax(x, axis=1)"),
    "softplus": (X, "R.nn.softplus(x, beta=2.0, threshold=1.0)"),
    "leakyrelu": (X, "R.nn.leakyrelu(x, alpha=0.2)"),
    "prelu": (f"x: {t(2, 3, 4)}, a: {t(3)}", "R.nn.prelu(x, a)"),
    "reshape": (X, "R.reshape(x, (2, 6))"),
    "reshape_symbolic": (
        f"x: {t('n', 4)}",
        "n = T.int64()\n    return R.reshape(x, (n * 2, 2))",
    ),
    "permute_dims": (f"x: {t(2, 3, 4)}", "R.permute_dims(x, [1, 0, 2])"),
    "permute_dims_reverse": (f"x: {t(2, 3, 4)}", "R.permute_dims(x)"),
    "expand_dims": (X, "R.expand_dims(x, axis=[3, -3])"),
    "squeeze": (f"x: {t(3, 1, 4, 1)}", "R.squeeze(x, axis=[1])"),
    "squeeze_all": (f"x: {t(3, 1, 4, 1)}", "R.squeeze(x)"),
    "flatten": (f"x: {t(2, 3, 4)}", "R.flatten(x)"),
    "concat": (f"{X}, y: {t(3, 2)}", "R.concat((x, y), axis=1)"),
    "stack": (f"{X}, {Y}", "R.stack((x, y), axis=-1)"),
    "split_sections": (f"x: {t(3, 6)}", "R.split(x, 3, axis=1)"),
    "split_indices": (f"x: {t(3, 6)}", "R.split(x, [1, 4], axis=-1)"),
    "split_unequal": (f"x: {t(3, 5)}", "R.split(x, 2, axis=1)"),
    "strided_slice": (X, "R.strided_slice(x, axes=[1], begin=[1], end=[3])"),
    "strided_slice_strides": (
        f"x: {t(4, 6, 5)}",
        "R.strided_slice(x, axes=[0, 2], begin=[1, -4], end=[100, 5], strides=[2, 3])",
    ),
    "strided_slice_negative_stride": (
        X,
        "R.strided_slice(x, axes=[1], begin=[3], end=[0], strides=[-1])",
    ),
    "take": (f"{X}, idx: {t(2, dtype='int64')}", "R.take(x, idx, axis=1)"),
    "take_2d_int32": (f"{X}, idx: {t(2, 2, dtype='int32')}", "R.take(x, idx, axis=0)"),
    "take_1d": (f"x: {t(6)}, idx: {t(5, dtype='int64')}", "R.take(x, idx)"),
    "take_clip": (f"{X}, idx: {t(2, dtype='int64')}", 'R.take(x, idx, axis=1, mode="clip")'),
    "astype_int": (X, 'R.astype(x, "int32")'),
    "astype_half": (X, 'R.astype(x, "float16")'),
    "astype_float": (I32, 'R.astype(x, "float32")'),
    "cumsum": (X, "R.cumsum(x, axis=1)"),
    "cumsum_flat": (X, "R.cumsum(x)"),
    "cumsum_int": (I32, "R.cumsum(x, axis=0)"),
    "cumprod": (X, "R.cumprod(x, axis=0)"),
    "cumsum_exclusive": (X, "R.cumsum(x, axis=1, exclusive=True)"),
    "cumsum_exclusive_negative_axis": (f"x: {t(2, 3, 4)}", "R.cumsum(x, axis=-2, exclusive=True)"),
    "cumsum_exclusive_flat_int": (I32, "R.cumsum(x, exclusive=True)"),
    "cumprod_exclusive": (X, "R.cumprod(x, axis=0, exclusive=True)"),
    "cumsum_dtype": (I32, 'R.cumsum(x, axis=1, dtype="float32")'),
    "broadcast_to": (f"x: {t(4)}", "R.broadcast_to(x, (3, 4))"),
    "tril": (X, "R.tril(x, 1)"),
    "triu": (X, "R.triu(x, -1)"),
    "outer": (f"x: {t(3)}, y: {t(4)}", "R.outer(x, y)"),
    "flip": (X, "R.flip(x, axis=1)"),
    "repeat": (X, "R.repeat(x, 2, axis=0)"),
    "repeat_flat": (X, "R.repeat(x, 2)"),
    "tile": (X, "R.tile(x, [2, 1, 3])"),
    "sort": (I32, "R.sort(x, axis=1, descending=True)"),
    "argsort": (f"x: {t(2, 20, dtype='int32')}", "R.argsort(x, axis=1)"),  # with ties
    "argsort_descending": (
        f"x: {t(20, 2, dtype='int32')}",
        'R.argsort(x, axis=0, descending=True, dtype="int64")',
    ),
    "einsum": (f"{X}, y: {t(4, 5)}", 'R.einsum((x, y), "ij,jk->ik")'),
    "gather_elements": (f"{X}, idx: {t(3, 2, dtype='int32')}", "R.gather_elements(x, idx, 1)"),
    "zeros": (X, 'R.add(x, R.zeros((3, 4), "float32"))'),
    "ones": ("", 'R.ones((2, 3), "int32")'),
    "zeros_like": (X, 'R.zeros_like(x, "int64")'),
    "ones_like": (X, "R.ones_like(x)"),
    "arange": ("", 'R.arange(1, 10, 2, "float32")'),
    "layer_norm": (f"{X}, g: {t(4)}, b: {t(4)}", "R.nn.layer_norm(x, g, b, axes=[-1])"),
    "layer_norm_two_axes": (
        f"x: {t(2, 3, 4)}, g: {t(3, 4)}, b: {t(3, 4)}",
        "R.nn.layer_norm(x, g, b, axes=[1, 2], epsilon=1e-3)",
    ),
    "layer_norm_no_center": (
        f"{X}, g: {t(4)}, b: {t(4)}",
        "R.nn.layer_norm(x, g, b, [-1], center=False)",
    ),
    "layer_norm_leading_axis": (
        f"x: {t(2, 3, 4)}, g: {t(2)}, b: {t(2)}",
        "R.nn.layer_norm(x, g, b, axes=[0])",
    ),
    "rms_norm": (f"{X}, g: {t(4)}", "R.nn.rms_norm(x, g, axes=[-1])"),
    "group_norm": (
        f"x: {t(2, 4, 3, 3)}, g: {t(4)}, b: {t(4)}",
        "R.nn.group_norm(x, g, b, num_groups=2, channel_axis=1, axes=[2, 3])",
    ),
    "instance_norm": (
        f"x: {t(2, 4, 3, 3)}, g: {t(4)}, b: {t(4)}",
        "R.nn.instance_norm(x, g, b, channel_axis=1, axes=[2, 3])",
    ),
    "batch_norm": (
        f"x: {t(2, 3, 4)}, g: {t(3)}, b: {t(3)}, m: {t(3)}, v: {t(3)}",
        "R.nn.batch_norm(x, g, b, m, v, axis=1, training=False)",
    ),
    "batch_norm_training": (
        f"x: {t(2, 3, 4)}, g: {t(3)}, b: {t(3)}, m: {t(3)}, v: {t(3)}",
        "R.nn.batch_norm(x, g, b, m, v, axis=1)",
    ),
    "conv1d": (f"{IMG1}, w: {t(4, 2, 3)}", "R.nn.conv1d(x, w, strides=2, padding=1)"),
    "conv2d": (
        f"{IMG}, w: {t(4, 1, 3, 3)}",
        "R.nn.conv2d(x, w, strides=[1, 2], padding=[1, 0], dilation=[2, 1], groups=2)",
    ),
    "conv2d_asymmetric_padding": (
        f"{IMG}, w: {t(3, 2, 3, 3)}",
        "R.nn.conv2d(x, w, padding=[0, 1, 1, 0])",
    ),
    "conv2d_nhwc": (
        f"x: {t(1, 5, 5, 2)}, w: {t(3, 2, 3, 3)}",
        'R.nn.conv2d(x, w, data_layout="NHWC", out_layout="NHWC")',
    ),
    "conv3d": (f"{IMG3}, w: {t(3, 2, 3, 3, 3)}", "R.nn.conv3d(x, w, padding=1)"),
    "conv1d_transpose": (
        f"{IMG1}, w: {t(2, 3, 3)}",
        "R.nn.conv1d_transpose(x, w, strides=2, padding=1, output_padding=1)",
    ),
    "conv2d_transpose": (
        f"{IMG}, w: {t(2, 3, 3, 3)}",
        "R.nn.conv2d_transpose(x, w, strides=[2, 2], padding=[1, 1])",
    ),
    "conv3d_transpose": (f"{IMG3}, w: {t(2, 3, 2, 2, 2)}", "R.nn.conv3d_transpose(x, w)"),
    "max_pool1d": (IMG1, "R.nn.max_pool1d(x, pool_size=[2], strides=[2])"),
    "max_pool2d": (IMG, "R.nn.max_pool2d(x, pool_size=[2, 2], strides=[2, 2])"),
    "max_pool2d_padded_ceil": (
        IMG,
        "R.nn.max_pool2d(x, pool_size=[3, 3], strides=[2, 2], padding=[1, 1], ceil_mode=True)",
    ),
    "max_pool3d": (IMG3, "R.nn.max_pool3d(x, pool_size=[2, 2, 2], dilation=[1, 2, 1])"),
    "avg_pool1d": (IMG1, "R.nn.avg_pool1d(x, pool_size=[3], strides=[2], padding=[1])"),
    "avg_pool2d": (
        IMG,
        "R.nn.avg_pool2d(x, pool_size=[3, 3], strides=[2, 2], padding=[1, 1])",
    ),
    "avg_pool2d_count_pad_ceil": (
        IMG,
        "R.nn.avg_pool2d(x, pool_size=[2, 2], strides=[2, 2], padding=[1, 1], ceil_mode=True, "
        "count_include_pad=True)",
    ),
    "avg_pool3d": (IMG3, "R.nn.avg_pool3d(x, pool_size=[2, 2, 2], strides=[2, 2, 2])"),
    "adaptive_avg_pool1d": (IMG1, "R.nn.adaptive_avg_pool1d(x, 4)"),
    "adaptive_avg_pool2d": (IMG, "R.nn.adaptive_avg_pool2d(x, (3, 2))"),
    "adaptive_avg_pool3d": (IMG3, "R.nn.adaptive_avg_pool3d(x, (3, 2, 1))"),
    "pad": (X, "R.nn.pad(x, [1, 0, 2, 3], pad_value=1.5)"),
    "pad_reflect": (X, 'R.nn.pad(x, [0, 0, 1, 1], "reflect")'),
    "dropout": (X, "R.nn.dropout(x, 0.5)"),
    "topk": (X, "R.topk(x, 2, axis=1)"),
    "one_hot": (
        f"idx: {t(3, dtype='int64')}",
        "R.one_hot(idx, R.prim_value(1.0), R.prim_value(0.0), 4)",
    ),
}
# case -> what its flag says: these have no faithful PyTorch text
FLAGGED = {
    "mean_int": "an int32 input is not translated",
    "clip_int_float_bounds": "float bounds of an int32 tensor",
    "prod_two_axes": "a product over several axes",
    "matmul_out_dtype": "out_dtype=float64",
    "split_unequal": "2 unequal sections",
    "strided_slice_negative_stride": "a negative stride",
    "take_clip": "mode='clip'",
    "layer_norm_leading_axis": "not the last ones",
    "layer_norm_no_center": "center=False",
    "batch_norm_training": "training=True",
    "conv2d_asymmetric_padding": "asymmetric padding",
    "conv2d_nhwc": "data_layout='NHWC'",
    "pad_reflect": "pad_mode='reflect'",
    **dict.fromkeys(["dropout", "topk", "one_hot"], "may not match TVM"),
}
# float inputs in [low, high) where the op has a domain; default standard normal
DOMAIN = {
    **dict.fromkeys(["acos", "asin", "atanh"], (-0.9, 0.9)),
    **dict.fromkeys(["log", "sqrt", "rsqrt", "power"], (0.1, 3.0)),
    "acosh": (1.1, 4.0),
    "tan": (-1.2, 1.2),
    "astype_int": (-6.0, 6.0),
    **dict.fromkeys(["cumprod", "cumprod_exclusive"], (0.5, 1.5)),
    "batch_norm": (0.5, 1.5),
}
CELL = "".join(
    f"@R.function\ndef op_{name}({params}):\n    {body if 'return' in body else f'return {body}'}\n"
    for name, (params, body) in CASES.items()
)


@pytest.fixture(scope="module")
def ops():
    """The module of every case, for what its text says (nothing compiled)."""
    module = LiveModule("ops")
    module.run_cell(CELL)
    yield module
    module.close()


@pytest.fixture(scope="module", params=["llvm", AVX2_TARGET], ids=["this-cpu", "x86-64-v3"])
def live(request):
    """The module of every case compiled, for this machine's CPU and for an AVX2 one: which
    kernels the CPU schedule vectorizes depends on the vector width (a reflect pad's did not
    compile with its crash guards for AVX2)."""
    if request.param == AVX2_TARGET and second_run_here(AVX2_TARGET):
        pytest.skip(second_run_here(AVX2_TARGET))
    module = LiveModule("ops", target=request.param)
    module.run_cell(CELL)
    module.compile()
    yield module
    module.close()


def inputs(params: list[relax.Var], case: str) -> list[torch.Tensor]:
    """Random inputs for `params`: `idx` an index into an axis of 3 or more, `d` a nonzero
    divisor, floats in the case's `DOMAIN`, symbolic sizes 3."""
    generator = torch.Generator().manual_seed(0)
    args = []
    for param in params:
        shape = [d.value if hasattr(d, "value") else 3 for d in param.ty.shape.values]
        dtype = getattr(torch, str(param.ty.dtype))
        if dtype == torch.bool:
            args.append(torch.rand(shape, generator=generator) < 0.5)
        elif param.name == "idx":
            args.append(torch.randint(0, 3, shape, generator=generator, dtype=dtype))
        elif not dtype.is_floating_point:
            value = torch.randint(-8, 9, shape, generator=generator, dtype=dtype)
            args.append(value.masked_fill(value == 0, 5) if param.name == "d" else value)
        else:
            low, high = DOMAIN.get(case, (None, None))
            value = torch.randn(shape, generator=generator)
            args.append(value if low is None else low + (high - low) * value.sigmoid())
    return args


@pytest.mark.parametrize("case", list(CASES))
def test_text_without_flags_gives_the_compiled_numbers(live, case):
    name = f"op_{case}"
    source = live.as_torch(name)
    flagged = "# NOT MAPPED" in source or "# REVIEW" in source
    assert flagged == (case in FLAGGED), source
    if flagged:
        assert FLAGGED[case] in source, source
        return
    args = inputs(live.ir_mod[name].params, case)
    scope: dict = {}
    exec(compile(source, f"<as_torch {name}>", "exec"), scope)
    got, expected = scope[name](live, *args), getattr(live, name)(*args)
    if isinstance(expected, list | tuple):
        got, expected = tuple(got), tuple(expected)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5, msg=lambda m: f"{m}\n{source}")


def test_every_op_written_without_a_flag_is_checked_above(ops):
    checked = set()
    for case in CASES.keys() - FLAGGED.keys():
        relax.analysis.post_order_visit(
            ops.ir_mod[f"op_{case}"],
            lambda e: checked.add(e.op.name) if isinstance(e, relax.Call) else None,
        )
    assert sorted(FAITHFUL_OPS - checked) == []


@pytest.mark.parametrize("case", sorted(FLAGGED))
def test_a_flagged_line_names_every_attribute_it_leaves_out(ops, case):
    """A flagged line is TVM's own mapping called with the inputs alone: its flag says so and
    names every attribute of the Relax call, so a reader sees what is missing (`axis=1`)."""
    name = f"op_{case}"
    (flagged,) = [line for line in ops.as_torch(name).splitlines() if "  # " in line]
    calls: list = []
    relax.analysis.post_order_visit(
        ops.ir_mod[name], lambda e: calls.append(e) if isinstance(e, relax.Call) else None
    )
    (call,) = calls
    keys = list(_attrs(call))
    if keys:
        assert "passes none of its attributes" in flagged or "are not passed" in flagged, flagged
    for key in keys:
        assert f"'{key}': " in flagged, flagged
