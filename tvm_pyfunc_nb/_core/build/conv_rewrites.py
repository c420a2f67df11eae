"""Relax rewrites that make a model's convolutions cheaper on a CPU, whoever computes them.

- `fold_batch_norms`: a batch norm with running statistics after a convolution of constant
  weights (every conv + BN of a model in `eval()`) is a scale and a shift per output channel, so
  it folds into the convolution: the weights scaled, the shift a bias added after it. What was a
  convolution and four element-wise ops is a convolution and one add, which TVM fuses into the
  convolution's tile or PyTorch takes as the convolution's bias (`--offload torch`).
- `conv_weights_hwio`: a convolution's constant weights stored HWIO, so that a row of output
  channels is one vector load (the CPU schedule's tile of output pixels × vectors of output
  channels reads them so: cpu_schedules.py); the transpose is folded at compile time.

Both change only constants and the ops around them: the numbers are the same up to float
rounding (a folded weight is rounded once, as the batch norm's product was).
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax.dpl import is_const, is_op, is_tuple_get_item, rewrite_call, wildcard

_data, _weight = wildcard(), is_const()
_conv = is_op("relax.nn.conv2d")(_data, _weight)
_bias = is_const()  # as the importer writes it: reshaped to (1, C, 1, 1)
_biased = is_op("relax.add")(_conv, _bias | is_op("relax.reshape")(_bias, wildcard()))
_gamma, _beta, _mean, _var = is_const(), is_const(), is_const(), is_const()
_norm = is_op("relax.nn.batch_norm")(_biased | _conv, _gamma, _beta, _mean, _var)
_normalized = is_tuple_get_item(_norm, 0)


def _nchw_oihw(conv: relax.Call) -> bool:
    attrs = conv.attrs
    layouts = (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout))
    return layouts == ("NCHW", "OIHW", "NCHW")


def _folded(item: relax.TupleGetItem, matched: dict) -> relax.Expr:
    """`batch_norm(conv2d(x, w) [+ bias], ...)[0]` as `conv2d(x, w * scale) + shift`."""
    conv, norm = matched[_conv], matched[_norm]
    attrs = norm.attrs
    dtype = str(conv.ty.dtype)
    if not _nchw_oihw(conv) or int(attrs.axis) not in (1, -3) or not dtype.startswith("float"):
        return item

    def array(pattern):
        return matched[pattern].value.numpy().astype(np.float64)

    scale = 1 / np.sqrt(array(_var) + float(attrs.epsilon))
    if attrs.scale:
        scale = scale * array(_gamma)
    mean = array(_mean)
    if _bias in matched:  # the conv's own bias, one per channel, goes through the norm too
        bias = array(_bias)
        if bias.size != mean.size:
            return item
        mean = mean - bias.reshape(-1)
    shift = -mean * scale + (array(_beta) if attrs.center else 0)
    weight = array(_weight) * scale.reshape(-1, 1, 1, 1)
    folded = relax.Call(conv.op, [matched[_data], relax.const(weight.astype(dtype))], conv.attrs)
    return relax.op.add(folded, relax.const(shift.reshape(1, -1, 1, 1).astype(dtype)))


def _hwio(call: relax.Call, matched: dict) -> relax.Expr:
    """A conv2d of NCHW data and constant OIHW weights, one group, as the same conv2d of HWIO
    weights (their transpose, which `FoldConstant` computes once)."""
    attrs = call.attrs
    if not _nchw_oihw(call) or int(attrs.groups) != 1:
        return call
    return relax.op.nn.conv2d(
        matched[_data],
        relax.op.permute_dims(matched[_weight], [2, 3, 1, 0]),
        strides=attrs.strides,
        padding=attrs.padding,
        dilation=attrs.dilation,
        groups=1,
        data_layout="NCHW",
        kernel_layout="HWIO",
        out_layout="NCHW",
        out_dtype=attrs.out_dtype,
    )


def _rewriting(pattern, rewriter, name: str) -> tvm.transform.Pass:
    """A module pass that rewrites what `pattern` matches in every Relax function."""

    @tvm.transform.module_pass(opt_level=0, name=name)
    def rewrite(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        changed = {}
        for gv, func in mod.functions_items():
            if isinstance(func, relax.Function):
                new = rewrite_call(pattern, rewriter, func)
                if not new.same_as(func):
                    changed[gv] = new
        if not changed:
            return mod
        mod = mod.clone()
        for gv, func in changed.items():
            mod[gv] = func
        return mod

    return rewrite


fold_batch_norms = _rewriting(_normalized, _folded, "FoldBatchNormIntoConv2d")
conv_weights_hwio = _rewriting(_conv, _hwio, "ConvWeightsHWIO")
