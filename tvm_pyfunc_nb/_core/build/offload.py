"""`--offload torch`: the heavy ops of Relax functions run as PyTorch calls, the rest is TVM's.

A compile-time transform, applied by the build before the module's Relax
pipeline (the module itself, its `script()` and `edit` text, never change):

- matmul (`R.matmul`: `torch.matmul`, or `torch.addmm` with the bias add that
  follows it folded in; with the weight transposed by `R.permute_dims`, as
  `nn.Linear` imports, `torch.linear`, the bias folded in too);
  `R.nn.conv2d` (NCHW), its bias add folded in; `R.nn.attention` — each
  becomes `R.call_dps_packed("tvm_pyfunc_nb.torch.<op>", ...)`, a call of a
  PyTorch function on the VM's own tensors. tvm-ffi hands them over as
  `torch.Tensor` views of the same memory (DLPack), and the result is written
  into the output TVM allocated (`out=` where PyTorch has it, one `copy_`
  where it does not);
- what is left (norms, activations, reshapes, element-wise ops) is legalized
  and fused by TVM (`FuseOps`), then lowered by the module's pipeline.

The patterns are Relax's own (`relax.dpl`), matched across bindings as
TVM's cuBLAS and cutlass backends match theirs. A traced copy of a function
(`trace`, `compare`) goes through the same transform, so every binding still
has its value.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
import tvm
import tvm_ffi
from tvm import relax
from tvm.relax.dpl import is_op, rewrite_call, wildcard

from ...errors import TVMModuleError

NONE, TORCH = "none", "torch"
OFFLOADS = (NONE, TORCH)
PREFIX = "tvm_pyfunc_nb."  # registered names: tvm_pyfunc_nb.torch.linear ...
FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})


def check_offload(offload: str, target: tvm.target.Target, remote: bool) -> str:
    """`offload` if this module can use it; a `TVMModuleError` naming the option otherwise."""
    if offload not in OFFLOADS:
        raise TVMModuleError(f"--offload must be one of {', '.join(OFFLOADS)}, not `{offload}`")
    if offload == TORCH and remote:
        raise TVMModuleError(
            "--offload torch runs PyTorch in this process, on its memory, and a module with "
            "--rpc runs its code on the remote device: use one or the other"
        )
    if offload == TORCH and target.kind.name != "llvm":
        raise TVMModuleError(
            f"--offload torch calls PyTorch on the CPU; target `{target.kind.name}` "
            "runs elsewhere: use a CPU (llvm) target, or --offload none"
        )
    if offload == TORCH:
        _register_torch_functions()
    return offload


def offload_to_torch(mod: tvm.IRModule) -> tvm.IRModule:
    """`mod` with its matmuls, linears, conv2ds and attentions as PyTorch calls, and the rest
    legalized and fused."""
    functions = {}
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            for pattern, rewriter in _REWRITES:
                func = rewrite_call(pattern, rewriter, func)
        functions[gv] = func
    mod = tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos)
    entries = [gv.name_hint for gv, f in mod.functions_items() if isinstance(f, relax.Function)]
    return tvm.transform.Sequential(
        [
            relax.transform.DeadCodeElimination(entries),  # what a folded bias left behind
            relax.transform.LegalizeOps(),
            relax.transform.AnnotateTIROpPattern(),
            relax.transform.FoldConstant(),
            relax.transform.FuseOps(),
            relax.transform.FuseTIR(),
        ]
    )(mod)


def torch_calls(func: relax.Function) -> list[str]:
    """The PyTorch calls of a lowered Relax function, in order: `torch.linear`, `torch.conv2d`..."""
    found: list[str] = []

    def visit(node) -> None:
        if isinstance(node, relax.ExternFunc) and node.global_symbol.startswith(PREFIX):
            found.append(node.global_symbol.removeprefix(PREFIX))

    relax.analysis.post_order_visit(func, visit)
    return found


# -- patterns ------------------------------------------------------------------------------------
def _float(*exprs) -> bool:
    """Whether the expressions are tensors of one floating-point dtype (what PyTorch's CPU
    kernels take)."""
    dtypes = {str(e.ty.dtype) if isinstance(e.ty, relax.TensorType) else "" for e in exprs}
    return len(dtypes) == 1 and dtypes <= FLOATS


def _shape(expr) -> list | None:
    """The static shape of a tensor expression, None where it is symbolic or unknown."""
    shape = getattr(expr.ty, "shape", None)
    if not isinstance(shape, relax.ShapeExpr):
        return None
    return [int(d) if isinstance(d, tvm.tirx.IntImm) else None for d in shape.values]


def _call(name: str, args: list, like: relax.Expr) -> relax.Call:
    return relax.call_dps_packed(f"{PREFIX}torch.{name}", args, out_ty=like.ty)


def _row_bias(bias, out) -> bool:
    """Whether `bias` is added along the last axis of `out`, as `torch.addmm` takes it: shape
    (N,) or (1, N)."""
    shape, columns = _shape(bias), (_shape(out) or [None])[-1]
    return (
        shape is not None
        and columns is not None
        and shape[-1] == columns
        and (shape[:-1] in ([], [1]))
    )


def _no_out_dtype(call) -> bool:
    """Whether the op's result has its inputs' dtype (no `out_dtype`, or the same one)."""
    out_dtype = call.attrs.out_dtype if call.attrs is not None else None
    return out_dtype is None or str(out_dtype) in ("", "void", "None", str(call.ty.dtype))


def _two_d(expr) -> bool:
    return isinstance(expr.ty, relax.TensorType) and expr.ty.ndim == 2


x, w, bias = wildcard(), wildcard(), wildcard()
_transposed = is_op("relax.permute_dims")(w)
_linear = is_op("relax.matmul")(x, _transposed)
_matmul = is_op("relax.matmul")(x, w)


def _swaps_last_two(permute) -> bool:
    axes = permute.attrs.axes
    return axes is None or [int(a) for a in axes] == [1, 0]


def _matmul_args(matched, call) -> list | None:
    """`[name, x, w]` of the PyTorch call that computes this matmul (`linear` if `w` is the
    transpose of a 2-D weight), or None if PyTorch cannot take it."""
    matmul = matched[_linear] if _linear in matched else matched[_matmul]
    if not _no_out_dtype(matmul) or not _float(matched[x], matmul):
        return None
    if _linear in matched and _two_d(matched[w]) and _swaps_last_two(matched[_transposed]):
        return ["linear", matched[x], matched[w]]
    rhs = matmul.args[1]
    if matched[x].ty.ndim >= 2 and rhs.ty.ndim >= 2:
        return ["matmul", matched[x], rhs]
    return None


def _with_bias(pattern):
    return is_op("relax.add")(pattern, bias) | is_op("relax.add")(bias, pattern)


def _rewrite_matmul_bias(call, matched):
    found = _matmul_args(matched, call)
    if found is None or not _row_bias(matched[bias], call) or not _float(matched[bias], call):
        return call
    name, lhs, rhs = found
    if name == "matmul" and not _two_d(rhs):
        return call
    return _call("addmm" if name == "matmul" else name, [lhs, rhs, matched[bias]], call)


def _rewrite_matmul(call, matched):
    found = _matmul_args(matched, call)
    if found is None:
        return call
    name, lhs, rhs = found
    return _call(name, [lhs, rhs], call)


conv_x, conv_w = wildcard(), wildcard()
_conv = is_op("relax.nn.conv2d")(conv_x, conv_w)


def _conv_attrs(conv) -> list | None:
    """stride, padding, dilation and groups of an NCHW/OIHW conv2d PyTorch computes the same."""
    a = conv.attrs
    layouts = (str(a.data_layout), str(a.kernel_layout), str(a.out_layout))
    top, left, bottom, right = (int(p) for p in a.padding)
    if layouts != ("NCHW", "OIHW", "NCHW") or (top, left) != (bottom, right):
        return None
    if not _no_out_dtype(conv) or not _float(conv.args[0], conv.args[1], conv):
        return None
    return [*(int(s) for s in a.strides), top, left, *(int(d) for d in a.dilation), int(a.groups)]


def _rewrite_conv_bias(call, matched):
    conv = matched[_conv]
    attrs = _conv_attrs(conv)
    shape = _shape(matched[bias])
    channels = (_shape(conv) or [None, None])[1]
    per_channel = shape is not None and len(shape) in (3, 4) and shape[-3:] == [channels, 1, 1]
    if attrs is None or not per_channel or not _float(matched[bias], conv):
        return call
    args = [matched[conv_x], matched[conv_w], matched[bias], relax.ShapeExpr(attrs)]
    return _call("conv2d", args, call)


def _rewrite_conv(call, matched):
    attrs = _conv_attrs(call)
    if attrs is None:
        return call
    return _call("conv2d", [matched[conv_x], matched[conv_w], relax.ShapeExpr(attrs)], call)


_attention = is_op("relax.nn.attention")(wildcard(), wildcard(), wildcard()) | is_op(
    "relax.nn.attention_bias"
)(wildcard(), wildcard(), wildcard(), wildcard())


def _rewrite_attention(call, matched):
    a = call.attrs
    q = call.args[0]
    causal = str(a.causal_mask) if a.causal_mask is not None else ""
    if getattr(a, "window_size", None) is not None or causal not in ("", "TopLeft"):
        return call
    if not _float(*call.args, call) or q.ty.ndim != 4 or _shape(q) is None:
        return call
    scale = float(a.scale) if a.scale is not None else 1 / math.sqrt(_shape(q)[-1])
    # the scale as a 0-d tensor: the VM passes integer values, not floating-point ones
    flags = [relax.const(scale, "float64"), relax.prim_value(int(bool(causal)))]
    return _call("attention", [*call.args, *flags], call)


_REWRITES = [
    (_with_bias(_linear | _matmul), _rewrite_matmul_bias),
    (_linear | _matmul, _rewrite_matmul),
    (_with_bias(_conv), _rewrite_conv_bias),
    (_conv, _rewrite_conv),
    (_attention, _rewrite_attention),
]


# -- the PyTorch side ----------------------------------------------------------------------------
def _linear_torch(x, weight, *rest) -> None:
    """`x @ weight.T (+ bias)` into `out`: what `torch.nn.functional.linear` computes."""
    _mm(x, weight.t(), *rest)


def _matmul_torch(a, b, out) -> None:
    """`a @ b` into `out` (batched, broadcast as NumPy does, as Relax's matmul)."""
    torch.matmul(a, b, out=out)


def _addmm_torch(a, b, bias, out) -> None:
    """`bias + a @ b` into `out`, `b` a matrix, the rows of `a` however many axes hold them."""
    _mm(a, b, bias, out)


def _mm(a, b, *rest) -> None:
    out = rest[-1]
    if a.dim() != 2:  # the leading axes of `a` and `out` as rows: views, the memory is contiguous
        a, out = a.view(-1, a.shape[-1]), out.view(-1, out.shape[-1])
    if len(rest) == 2:
        torch.addmm(rest[0], a, b, out=out)  # the bias, (N,) or (1, N), broadcasts
    else:
        torch.mm(a, b, out=out)


def _conv2d_torch(x, weight, *rest) -> None:
    *bias, attrs, out = rest
    stride, padding, dilation, groups = attrs[0:2], attrs[2:4], attrs[4:6], attrs[6]
    out.copy_(
        F.conv2d(
            x, weight, bias[0].reshape(-1) if bias else None, stride, padding, dilation, groups
        )
    )


def _attention_torch(q, k, v, *rest) -> None:
    """Relax's attention (batch, sequence, heads, features) as PyTorch's (heads second)."""
    *bias, scale, causal, out = rest
    result = F.scaled_dot_product_attention(
        q.transpose(1, 2),
        k.transpose(1, 2),
        v.transpose(1, 2),
        attn_mask=bias[0] if bias else None,
        is_causal=bool(causal),
        scale=scale.item(),
    )
    out.copy_(result.transpose(1, 2))


_TORCH_FUNCTIONS = {
    "linear": _linear_torch,
    "matmul": _matmul_torch,
    "addmm": _addmm_torch,
    "conv2d": _conv2d_torch,
    "attention": _attention_torch,
}
_registered = False


def _register_torch_functions() -> None:
    """Make the PyTorch functions global TVM functions (once a process); they take their tensor
    arguments as `torch.Tensor`s, converted by tvm-ffi without a copy."""
    global _registered
    if _registered:
        return
    for name, function in _TORCH_FUNCTIONS.items():
        tvm_ffi.register_global_func(
            f"{PREFIX}torch.{name}",
            tvm_ffi.convert_func(function, tensor_cls=torch.Tensor),
            override=True,
        )
    _registered = True
