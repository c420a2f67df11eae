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
rounding (a folded weight is rounded once, as the batch norm's product was). Both keep the
function's binding names: a folded convolution is named as the one it replaces, a binding that
stays keeps its name, and a new name never reuses one of the function's (kernel compare,
profile and the graph name a kernel by the bindings of the user's function fused into it, and
take their reference values by those names).
"""

from __future__ import annotations

import numpy as np
import tvm
import tvm_ffi
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


def _folded(item: relax.TupleGetItem, matched: dict, names: list) -> relax.Expr:
    """`batch_norm(conv2d(x, w) [+ bias], ...)[0]` as `conv2d(x, w * scale) + shift`, the new
    convolution put in `names` with the one it replaces."""
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
    names.append((folded, conv))
    return relax.op.add(folded, relax.const(shift.reshape(1, -1, 1, 1).astype(dtype)))


def _hwio(call: relax.Call, matched: dict, _names: list) -> relax.Expr:
    """A conv2d of NCHW data and constant OIHW weights, one group, as the same conv2d of HWIO
    weights (their transpose, computed here once)."""
    attrs = call.attrs
    if not _nchw_oihw(call) or int(attrs.groups) != 1:
        return call
    weight = matched[_weight].value.numpy()
    return relax.op.nn.conv2d(
        matched[_data],
        relax.const(np.ascontiguousarray(weight.transpose(2, 3, 1, 0))),
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
                names: list = []  # (a new call, the call whose binding's name it takes)
                new = rewrite_call(pattern, lambda e, m, names=names: rewriter(e, m, names), func)
                if not new.same_as(func):
                    changed[gv] = _named_as_before(func, new, names)
        if not changed:
            return mod
        mod = mod.clone()
        for gv, func in changed.items():
            mod[gv] = func
        return mod

    return rewrite


def _bound(func: relax.Function) -> list[relax.Binding]:
    return [b for block in func.body.blocks for b in block.bindings]


def _named_as_before(before: relax.Function, after: relax.Function, names: list):
    """`after` with each call of `names` bound to the name of the binding of the call it
    replaces (`rewrite_call` keeps the names of the bindings it rewrites, and gives a call it
    adds a name of its own making, which may be one `before` uses for another binding)."""
    kept = [(b.var.name, b.value) for b in _bound(before)]
    renames: dict[relax.Var, str] = {}
    for b in _bound(after):
        for new, was in names:  # a new convolution is known by its weights, made for it alone
            if isinstance(b.value, relax.Call) and _same_weights(b.value, new):
                renames[b.var] = next(n for n, v in kept if v.same_as(was))
    return _Renamer(renames).visit_expr(after) if renames else after


def _same_weights(call: relax.Call, conv: relax.Call) -> bool:
    return (
        call.op.same_as(conv.op)
        and len(call.args) > 1
        and tvm_ffi.structural_equal(call.args[1], conv.args[1])
    )


@relax.expr_functor.mutator
class _Renamer(relax.PyExprMutator):
    """A function whose bindings of `renames` (a var -> its new name) are named anew."""

    def __init__(self, renames: dict):
        super().__init__()
        self.renames = renames

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        name = self.renames.get(binding.var)
        if name is None:
            super().visit_var_binding_(binding)
            return
        value = self.visit_expr(binding.value)
        if self.builder_.current_block_is_dataflow() and not isinstance(
            binding.var, relax.DataflowVar
        ):
            var = self.builder_.emit_output(value, name_hint=name)
        else:  # a dataflow variable, or any binding of a block without dataflow
            var = self.builder_.emit(value, name_hint=name)
        self.set_var_remap(binding.var, var)


fold_batch_norms = _rewriting(_normalized, _folded, "FoldBatchNormIntoConv2d")
conv_weights_hwio = _rewriting(_conv, _hwio, "ConvWeightsHWIO")
