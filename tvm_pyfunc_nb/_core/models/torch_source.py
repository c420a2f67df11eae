"""`NAME.as_torch(fn)`: a Relax function as PyTorch source text, honest about what it cannot map.

The op mapping is TVM's own (`RelaxToPyFuncConverter._get_op_map`); the rest
of TVM 0.27's converter is no help here. It writes no source: it executes
that mapping, attributes mostly ignored, and papers over gaps (a string for
an unmapped op, zeros for a tuple item, the first argument for a call to
another Relax function). On the 189 cases of tests/test_as_torch_runs.py it
gives the compiled numbers for 106 (element-wise ops, mostly), other numbers
for 26 (argmax, conv1d, batch_norm...) and raises for 57. Here every binding
becomes one line of code, and whatever has no faithful PyTorch form is
flagged in the text (`# NOT MAPPED`, `# REVIEW`).

An op is written without a flag only by a rule in `_RULES`, which translates
its attributes and dtypes too, or gives up on them; tests/test_as_torch_runs.py
runs every rule's text against the compiled function. Any other op is TVM's
own call, flagged `# REVIEW` (or `# NOT MAPPED` when that is no PyTorch call).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import torch
import tvm
from tvm import relax, tirx
from tvm.relax.relax_to_pyfunc_converter import RelaxToPyFuncConverter

_OP_MAP = RelaxToPyFuncConverter._get_op_map()
_PRIM_OPERATORS = {tirx.Add: "+", tirx.Sub: "-", tirx.Mul: "*", tirx.FloorDiv: "//"}


def relax_to_torch_source(name: str, func: relax.Function) -> str:
    """PyTorch source for Relax function `func`, one line per binding, gaps flagged."""
    return _Writer(name).function(func)


class _Writer:
    def __init__(self, name: str):
        self.name = name
        self.lines: list[str] = []
        self.flags: list[str] = []
        self.line_notes: list[str] = []
        self.names: dict[object, str] = {}
        self.sizes: dict[str, str] = {}  # symbolic size -> the parameter dimension that binds it
        self.bound_sizes: dict[str, str] = {}
        self.uses_relax = False

    def function(self, func: relax.Function) -> str:
        params = [self.var(p) for p in func.params]
        for param, text in zip(func.params, params, strict=True):
            for i, dim in enumerate(_dims(param.ty)):
                if isinstance(dim, tirx.Var):
                    self.sizes.setdefault(dim.name, f"{text}.shape[{i}]")
        self.emit(f"return {self.expr(func.body)}")
        head = ["import torch", "import torch.nn.functional as F"]
        if self.uses_relax:
            head.append("from tvm.script import relax as R")
        head.append("")
        if self.flags:
            head.append(
                f"# {len(self.flags)} step(s) need attention before this is a faithful "
                "PyTorch version:"
            )
            head += [f"#   - {flag}" for flag in self.flags]
            head.append("")
        sizes = [f"{name} = {source}" for name, source in self.bound_sizes.items()]
        body = [f"    {line}" for line in [*sizes, *self.lines]]
        doc = f'    """`{self.name}` as PyTorch, op by op (TVM\'s relax-to-pyfunc op mapping)."""'
        return "\n".join([*head, f"def {self.name}(self, {', '.join(params)}):", doc, *body]) + "\n"

    # -- names ---------------------------------------------------------------------
    def var(self, var: relax.Var) -> str:
        return self.unique(var, var.name)

    def unique(self, key: object, name: str) -> str:
        if key not in self.names:
            base = re.sub(r"\W", "_", name) or "v"
            base = base if base[0].isalpha() or base[0] == "_" else f"v_{base}"
            taken = set(self.names.values())
            candidate, k = base, 1
            while candidate in taken:
                candidate, k = f"{base}_{k}", k + 1
            self.names[key] = candidate
        return self.names[key]

    def flag(self, kind: str, text: str) -> str:
        """Record what the text cannot show faithfully; it becomes a comment on the current line."""
        self.flags.append(text)
        self.line_notes.append(f"{kind}: {text}")
        return "None"

    def emit(self, line: str) -> None:
        if self.line_notes:
            line += "  # " + "; ".join(self.line_notes)
            self.line_notes = []
        self.lines.append(line)

    # -- expressions ---------------------------------------------------------------
    def expr(self, expr) -> str:
        if isinstance(expr, relax.SeqExpr):
            for block in expr.blocks:
                for binding in block.bindings:
                    self.binding(binding)
            return self.expr(expr.body)
        if isinstance(expr, relax.Var) and expr in self.names:  # a parameter, a binding
            return self.names[expr]
        if isinstance(getattr(expr, "ty", None), tvm.ir.PrimType):  # a symbolic size, a literal
            return self.prim(expr)
        if isinstance(expr, relax.Var):
            return self.var(expr)
        if isinstance(expr, relax.Tuple):
            return _tuple([self.expr(f) for f in expr.fields])
        if isinstance(expr, relax.TupleGetItem):
            return f"{self.expr(expr.tuple_value)}[{expr.index}]"
        if isinstance(expr, relax.ShapeExpr):
            return _tuple([self.prim(v) for v in expr.values])
        if isinstance(expr, tvm.ir.StringImm):
            return repr(expr.value)
        if isinstance(expr, tvm.ir.Constant | tvm.ir.GenericConst):
            return self.flag(
                "NOT MAPPED", "a Relax constant has no literal form here; pass it as an argument"
            )
        if isinstance(expr, relax.Call):
            return self.call(expr)
        if isinstance(expr, relax.GlobalVar):
            return f"self.{expr.name_hint}"
        return self.flag("NOT MAPPED", f"{type(expr).__name__} expressions are not converted")

    def prim(self, value) -> str:
        if isinstance(value, tirx.IntImm | tirx.FloatImm):
            return _literal(value.value)
        if isinstance(value, tirx.Var):
            if value.name not in self.sizes:
                return self.flag(
                    "NOT MAPPED", f"size `{value.name}` is not a dimension of a parameter"
                )
            name = self.unique(("size", value.name), value.name)
            self.bound_sizes.setdefault(name, self.sizes[value.name])
            return name
        operator = _PRIM_OPERATORS.get(type(value))
        if operator is None:
            return self.flag("NOT MAPPED", f"size expression `{value}` is not converted")
        return f"({self.prim(value.a)} {operator} {self.prim(value.b)})"

    def binding(self, binding) -> None:
        target = self.var(binding.var)
        if isinstance(binding, relax.MatchCast):
            self.emit(f"{target} = {self.expr(binding.value)}  # match_cast to {binding.ty}")
            return
        value = binding.value
        if isinstance(value, relax.If):
            self.emit(
                f"{target} = "
                f"{self.flag('NOT MAPPED', f'`{target}`: an if-expression is not converted')}"
            )
            return
        self.emit(f"{target} = {self.expr(value)}")

    def call(self, call: relax.Call) -> str:
        if isinstance(call.op, relax.GlobalVar):
            return f"self.{call.op.name_hint}({', '.join(self.expr(a) for a in call.args)})"
        if isinstance(call.op, relax.ExternFunc):
            return self.flag(
                "NOT MAPPED", f"extern function `{call.op.global_symbol}` has no PyTorch form"
            )
        op = call.op.name
        if op == "relax.call_tir":
            args = ", ".join(self.expr(a) for a in call.args[1].fields)
            self.uses_relax = True
            return f"self.call_tir(self.{call.args[0].name_hint}, [{args}], out_ty={_out_ty(call)})"
        if op == "relax.call_py_func":
            args = [self.expr(a) for a in call.args[1].fields]
            return f"self.call_py_func({call.args[0].value!r}, [{', '.join(args)}])"
        args = [self.expr(a) for a in call.args]
        mapped = _OP_MAP.get(op)
        if mapped is None:
            return self.flag(
                "NOT MAPPED",
                f"`{op}` has no PyTorch mapping in TVM's converter (inputs: {', '.join(args)})",
            )
        rule = _RULES.get(op)
        if rule is None:
            attrs = _attrs(call)
            return self.unchecked(
                op,
                mapped,
                args,
                f"attributes {attrs} are not passed" if attrs else "no rule checks it",
            )
        found = _Op(call, args)
        try:
            text = rule(found)
        except _Unfaithful as why:
            attrs = _attrs(call)  # all of them: the line below passes none
            left_out = f"; this call passes none of its attributes: {attrs}" if attrs else ""
            return self.unchecked(op, mapped, args, f"{why}{left_out}")
        unread = sorted(found.attrs.keys() - found.attrs.read)
        if unread:  # an attribute the rule does not know of, say from a newer TVM
            self.flag("REVIEW", f"`{op}` attributes {unread} are not translated")
        return text

    def unchecked(self, op: str, mapped: str, args: list[str], why: str) -> str:
        """TVM's own mapping of `op`, flagged: `# REVIEW` if it is a PyTorch call, else
        `# NOT MAPPED`."""
        if not _is_torch(mapped):
            return self.flag("NOT MAPPED", f"`{op}` -> `{mapped}` needs hand translation ({why})")
        self.flag("REVIEW", f"`{op}` -> `{mapped}` may not match TVM ({why})")
        return f"{mapped}({', '.join(args)})"


class _Unfaithful(Exception):
    """What of a call a rule does not translate, as "<what> is not translated"."""


class _Attrs(dict):
    """A call's attributes, remembering which ones a rule has read."""

    def __init__(self, call: relax.Call):
        super().__init__(_attrs(call))
        self.read: set[str] = set()

    def __getitem__(self, key: str):
        self.read.add(key)
        return super().__getitem__(key)


class _Op:
    """One Relax call as a rule sees it: argument texts, attributes, input and output types."""

    def __init__(self, call: relax.Call, args: list[str]):
        self.call = call
        self.args = args
        self.attrs = _Attrs(call)

    def ndim(self, i: int = 0) -> int:
        ndim = self.call.args[i].ty.ndim
        if ndim < 0:
            raise _Unfaithful("an input of unknown rank is not translated")
        return ndim

    def dtype(self, i: int = 0) -> str:
        return str(self.call.args[i].ty.dtype)

    def out_dtype(self) -> str:
        return str(self.call.ty.dtype)

    def axis(self) -> int:
        return self.attrs["axis"] % self.ndim()

    def axes(self, key: str = "axis") -> tuple[int, ...]:
        """Attribute `key`, a list of axes (None: all of them), made non-negative."""
        axes = self.attrs[key]
        return tuple(range(self.ndim())) if axes is None else tuple(a % self.ndim() for a in axes)

    def size(self, axis: int) -> int:
        dims = _dims(self.call.args[0].ty)
        if not (dims and isinstance(dims[axis], tirx.IntImm)):
            raise _Unfaithful(f"a symbolic size of axis {axis} is not translated")
        return dims[axis].value

    def ignore(self, key: str) -> None:
        """Attribute `key` does not change what this call computes."""
        self.attrs.read.add(key)

    def require(self, **expected) -> None:
        for key, value in expected.items():
            if self.attrs[key] != value:
                raise _Unfaithful(f"{key}={self.attrs[key]!r} is not translated")

    def ints(self, i: int) -> list[int]:
        fields = self.call.args[i].fields
        if not all(isinstance(f, tirx.IntImm) for f in fields):
            raise _Unfaithful("a non-constant begin, end or stride is not translated")
        return [f.value for f in fields]


# -- rules: one per op, each checked against TVM by tests/test_as_torch_runs.py ------------
def _same(torch_name: str) -> Callable[[_Op], str]:
    """The op is `torch_name` with the same arguments, whatever the dtype."""
    return lambda op: f"{torch_name}({', '.join(op.args)})"


def _reduce(op: _Op) -> str:
    name = op.call.op.name.removeprefix("relax.")
    x, dims, keep = op.args[0], op.axes(), op.attrs["keepdims"]
    extra = ""
    if name in {"sum", "prod"} and not _is_float(op.dtype()):
        extra = f", dtype={_dtype(op.out_dtype())}"  # PyTorch would widen to int64
    if name == "prod":
        if len(dims) != 1:
            raise _Unfaithful("a product over several axes is not translated")
        return f"torch.prod({x}, dim={dims[0]}, keepdim={keep}{extra})"
    if name in {"mean", "std", "variance"}:
        if not _is_float(op.dtype()):
            raise _Unfaithful(f"an {op.dtype()} input is not translated")
        extra = "" if name == "mean" else ", correction=0"
    torch_name = {"max": "amax", "min": "amin", "variance": "var"}.get(name, name)
    return f"torch.{torch_name}({x}, dim={dims}, keepdim={keep}{extra})"


def _arg_reduce(op: _Op) -> str:
    torch_name = op.call.op.name.replace("relax.", "torch.")
    return f"{torch_name}({op.args[0]}, dim={op.attrs['axis']}, keepdim={op.attrs['keepdims']})"


def _scan(op: _Op) -> str:
    axis, torch_name = op.attrs["axis"], op.call.op.name.replace("relax.", "torch.")
    x = op.args[0] if axis is not None else f"{op.args[0]}.flatten()"
    dim, ndim = (0, 1) if axis is None else (op.axis(), op.ndim())
    same_dtype = op.attrs["dtype"] is None and _is_float(op.dtype())  # else PyTorch may widen
    dtype = "" if same_dtype else f", dtype={_dtype(op.out_dtype())}"
    scan = f"{torch_name}({x}, dim={dim}{dtype})"
    if not op.attrs["exclusive"]:
        return scan
    # exclusive: each entry leaves itself out, so the scan moves one along `dim`, starting from
    # nothing summed (0) or multiplied (1); PyTorch has no such option
    pad = (0, 0) * (ndim - 1 - dim) + (1, 0)
    start = 0 if torch_name == "torch.cumsum" else 1
    return f"F.pad({scan}, {pad}, value={start}).narrow({dim}, 0, {x}.shape[{dim}])"


def _divide(op: _Op) -> str:
    trunc = "" if _is_float(op.dtype()) else ", rounding_mode='trunc'"
    return f"torch.div({op.args[0]}, {op.args[1]}{trunc})"


def _clip(op: _Op) -> str:
    if not _is_float(op.dtype()) and any(isinstance(b, tirx.FloatImm) for b in op.call.args[1:]):
        raise _Unfaithful(f"float bounds of an {op.dtype()} tensor are not translated")
    return f"torch.clamp({', '.join(op.args)})"


def _matmul(op: _Op) -> str:
    if op.attrs["out_dtype"] not in (None, op.dtype()):
        raise _Unfaithful(f"out_dtype={op.attrs['out_dtype']} is not translated")
    return f"torch.matmul({op.args[0]}, {op.args[1]})"


def _permute_dims(op: _Op) -> str:
    axes = op.attrs["axes"]
    order = tuple(reversed(range(op.ndim()))) if axes is None else tuple(axes)
    return f"{op.args[0]}.permute({order})"


def _expand_dims(op: _Op) -> str:
    out_ndim = op.ndim() + len(op.attrs["axis"])
    axes = sorted(a % out_ndim for a in op.attrs["axis"])
    return op.args[0] + "".join(f".unsqueeze({a})" for a in axes)


def _squeeze(op: _Op) -> str:
    axis = op.attrs["axis"]
    return f"torch.squeeze({op.args[0]}{'' if axis is None else f', dim={tuple(axis)}'})"


def _join(torch_name: str) -> Callable[[_Op], str]:
    def rule(op: _Op) -> str:
        if op.attrs["axis"] is None:
            raise _Unfaithful("axis=None is not translated")
        return f"{torch_name}({op.args[0]}, dim={op.attrs['axis']})"

    return rule


def _split(op: _Op) -> str:
    sections, axis = op.attrs["indices_or_sections"], op.axis()
    if isinstance(sections, int) and op.size(axis) % sections:
        raise _Unfaithful(f"{sections} unequal sections of {op.size(axis)} are not translated")
    return f"torch.tensor_split({op.args[0]}, {sections}, dim={axis})"


def _strided_slice(op: _Op) -> str:
    op.ignore("assume_inbound")  # Python slicing clamps out-of-bounds indices, as TVM does
    axes, begin, end = op.ints(1), op.ints(2), op.ints(3)
    strides = op.ints(4) if len(op.call.args) > 4 else [1] * len(axes)
    if any(s <= 0 for s in strides):
        raise _Unfaithful("a negative stride is not translated")
    index = [":"] * op.ndim()
    for axis, b, e, s in zip(axes, begin, end, strides, strict=True):
        index[axis % op.ndim()] = f"{b}:{e}" + ("" if s == 1 else f":{s}")
    while len(index) > 1 and index[-1] == ":":
        index.pop()
    return f"{op.args[0]}[{', '.join(index)}]"


def _take(op: _Op) -> str:
    op.require(mode="fast")
    x, indices = op.args
    axis = 0 if op.attrs["axis"] is None else op.axis()  # no axis: `x` is 1-D
    return f"{x}[{':, ' * axis}{indices}]"


def _astype(op: _Op) -> str:
    return f"{op.args[0]}.to({_dtype(op.attrs['dtype'])})"


def _softmax(torch_name: str) -> Callable[[_Op], str]:
    return lambda op: f"{torch_name}({op.args[0]}, dim={op.attrs['axis']})"


def _prelu(op: _Op) -> str:
    if op.axis() != 1:
        raise _Unfaithful(f"axis={op.attrs['axis']} is not translated")
    return f"F.prelu({op.args[0]}, {op.args[1]})"


def _affine(op: _Op, gamma: str, beta: str) -> str:
    """`weight=gamma, bias=beta`: TVM's compiled norms apply both, whatever `scale` and `center`
    say, so the text only claims the case where they agree."""
    if not (op.attrs["scale"] and op.attrs["center"]):
        raise _Unfaithful(
            "scale=False or center=False (ignored by TVM's compiled code) is not translated"
        )
    return f"weight={gamma}, bias={beta}"


def _trailing(op: _Op) -> int:
    """How many trailing axes a norm normalizes over (its `axes` must be exactly those)."""
    axes = sorted(op.axes("axes"))
    if axes != list(range(op.ndim() - len(axes), op.ndim())):
        raise _Unfaithful(f"axes={op.attrs['axes']}, not the last ones, are not translated")
    return len(axes)


def _layer_norm(op: _Op) -> str:
    x, gamma, beta = op.args
    shape = f"{x}.shape[-{_trailing(op)}:]"
    return f"F.layer_norm({x}, {shape}, {_affine(op, gamma, beta)}, eps={op.attrs['epsilon']})"


def _rms_norm(op: _Op) -> str:
    x, weight = op.args
    return f"F.rms_norm({x}, {x}.shape[-{_trailing(op)}:], {weight}, eps={op.attrs['epsilon']})"


def _spatial_norm(op: _Op) -> None:
    op.require(channel_axis=1)
    if sorted(op.axes("axes")) != list(range(2, op.ndim())):
        raise _Unfaithful(f"axes={op.attrs['axes']}, not the spatial ones, are not translated")


def _group_norm(op: _Op) -> str:
    _spatial_norm(op)
    x, gamma, beta = op.args
    groups, eps = op.attrs["num_groups"], op.attrs["epsilon"]
    return f"F.group_norm({x}, {groups}, {_affine(op, gamma, beta)}, eps={eps})"


def _instance_norm(op: _Op) -> str:
    _spatial_norm(op)
    x, gamma, beta = op.args
    return f"F.instance_norm({x}, {_affine(op, gamma, beta)}, eps={op.attrs['epsilon']})"


def _batch_norm(op: _Op) -> str:
    op.require(axis=1, training=False)
    op.ignore("momentum")  # it only updates the running statistics in training
    x, gamma, beta, mean, var = op.args
    norm = (
        f"F.batch_norm({x}, {mean}, {var}, {_affine(op, gamma, beta)}, eps={op.attrs['epsilon']})"
    )
    return f"({norm}, {mean}, {var})"


def _layout(op: _Op, key: str, channels: str) -> None:
    """Attribute `key` must be PyTorch's layout: `channels` ("NC", "OI", "IO") then the spatial
    axes."""
    spatial = op.ndim() - 2
    op.require(**{key: channels + "DHW"[3 - spatial :]})


def _padding(op: _Op, key: str = "padding") -> tuple[int, ...]:
    """Symmetric padding per spatial axis (Relax lists the befores, then the afters)."""
    pads = op.attrs[key]
    before, after = pads[: len(pads) // 2], pads[len(pads) // 2 :]
    if before != after:
        raise _Unfaithful(f"asymmetric {key}={pads} is not translated")
    return tuple(before)


def _conv(op: _Op) -> str:
    _layout(op, "data_layout", "NC")
    _layout(op, "out_layout", "NC")
    transpose = "transpose" in op.call.op.name
    _layout(op, "kernel_layout", "IO" if transpose else "OI")
    if op.attrs["out_dtype"] not in (None, op.dtype()):
        raise _Unfaithful(f"out_dtype={op.attrs['out_dtype']} is not translated")
    spatial = op.ndim() - 2
    name = f"F.conv_transpose{spatial}d" if transpose else f"F.conv{spatial}d"
    output_padding = f"output_padding={tuple(op.attrs['output_padding'])}, " if transpose else ""
    return (
        f"{name}({op.args[0]}, {op.args[1]}, stride={tuple(op.attrs['strides'])}, "
        f"padding={_padding(op)}, {output_padding}dilation={tuple(op.attrs['dilation'])}, "
        f"groups={op.attrs['groups']})"
    )


def _pool(op: _Op) -> str:
    _layout(op, "layout", "NC")
    _layout(op, "out_layout", "NC")
    size, padding = tuple(op.attrs["pool_size"]), _padding(op)
    if any(2 * p > k for p, k in zip(padding, size, strict=True)):
        raise _Unfaithful("padding over half the window (PyTorch refuses it) is not translated")
    spatial = op.ndim() - 2
    window = f"kernel_size={size}, stride={tuple(op.attrs['strides'])}, padding={padding}"
    if "max_pool" in op.call.op.name:
        op.ignore("count_include_pad")  # a maximum counts nothing
        extra = f"dilation={tuple(op.attrs['dilation'])}"
        name = f"F.max_pool{spatial}d"
    else:
        op.require(dilation=[1] * spatial)
        extra = f"count_include_pad={op.attrs['count_include_pad']}"
        name = f"F.avg_pool{spatial}d"
    return f"{name}({op.args[0]}, {window}, {extra}, ceil_mode={op.attrs['ceil_mode']})"


def _adaptive_pool(op: _Op) -> str:
    _layout(op, "layout", "NC")
    _layout(op, "out_layout", "NC")
    size = op.attrs["output_size"]
    size = f"{op.args[0]}.shape[2:]" if size is None else tuple(size)
    return f"F.adaptive_avg_pool{op.ndim() - 2}d({op.args[0]}, {size})"


def _pad(op: _Op) -> str:
    op.require(pad_mode="constant")
    widths = op.attrs["pad_width"]
    pairs = [widths[i : i + 2] for i in range(0, len(widths), 2)]
    torch_pad = tuple(w for pair in reversed(pairs) for w in pair)
    return f"F.pad({op.args[0]}, {torch_pad}, value={op.attrs['pad_value']})"


def _sort(op: _Op) -> str:
    return (
        f"torch.sort({op.args[0]}, dim={op.attrs['axis']}, "
        f"descending={op.attrs['descending']}, stable=True).values"
    )


def _argsort(op: _Op) -> str:
    return (
        f"torch.argsort({op.args[0]}, dim={op.attrs['axis']}, "
        f"descending={op.attrs['descending']}, stable=True).to({_dtype(op.attrs['dtype'])})"
    )


def _repeat(op: _Op) -> str:
    axis = op.attrs["axis"]
    dim = "" if axis is None else f", dim={axis}"
    return f"torch.repeat_interleave({op.args[0]}, {op.attrs['repeats']}{dim})"


def _gather_elements(op: _Op) -> str:
    x, indices = op.args
    indices = indices if op.dtype(1) == "int64" else f"{indices}.long()"
    return f"torch.gather({x}, {op.attrs['axis']}, {indices})"


def _init(torch_name: str) -> Callable[[_Op], str]:
    """`zeros`, `ones`, `arange` and the `_like`s (whose dtype None is the input's): TVM's call,
    dtype explicit."""
    return lambda op: (
        f"{torch_name}({', '.join(op.args)}, dtype={_dtype(op.attrs['dtype'] or op.out_dtype())})"
    )


_SAME_CALL = [
    # unary, float or integer as TVM accepts them
    *("abs", "acos", "acosh", "asin", "asinh", "atan", "atanh", "ceil", "cos", "cosh", "erf"),
    *("exp", "floor", "isfinite", "isinf", "isnan", "log", "negative", "round", "rsqrt"),
    *("sigmoid", "sign", "sin", "sinh", "sqrt", "square", "tan", "tanh", "trunc"),
    *("bitwise_not", "logical_not", "nn.relu", "nn.gelu", "nn.silu", "nn.selu"),
    # binary, broadcasting as NumPy does
    *("add", "subtract", "multiply", "floor_divide", "floor_mod", "mod", "power", "maximum"),
    *("minimum", "equal", "not_equal", "greater", "greater_equal", "less", "less_equal"),
    *("logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor"),
    *("log_add_exp", "where", "broadcast_to", "flatten", "outer", "tril", "triu"),
]
_RULES: dict[str, Callable[[_Op], str]] = {
    **{f"relax.{op}": _same(_OP_MAP[f"relax.{op}"]) for op in _SAME_CALL},
    "relax.reshape": _same("torch.reshape"),
    "relax.left_shift": _same("torch.bitwise_left_shift"),
    "relax.right_shift": _same("torch.bitwise_right_shift"),
    **dict.fromkeys(
        ["relax.sum", "relax.prod", "relax.mean", "relax.std", "relax.variance"], _reduce
    ),
    **dict.fromkeys(["relax.max", "relax.min"], _reduce),
    **dict.fromkeys(["relax.argmax", "relax.argmin"], _arg_reduce),
    **dict.fromkeys(["relax.cumsum", "relax.cumprod"], _scan),
    "relax.divide": _divide,
    "relax.clip": _clip,
    "relax.matmul": _matmul,
    "relax.permute_dims": _permute_dims,
    "relax.expand_dims": _expand_dims,
    "relax.squeeze": _squeeze,
    "relax.concat": _join("torch.cat"),
    "relax.stack": _join("torch.stack"),
    "relax.split": _split,
    "relax.strided_slice": _strided_slice,
    "relax.take": _take,
    "relax.astype": _astype,
    "relax.flip": lambda op: f"torch.flip({op.args[0]}, dims=({op.attrs['axis']},))",
    "relax.repeat": _repeat,
    "relax.tile": lambda op: f"torch.tile({op.args[0]}, {tuple(op.attrs['repeats'])})",
    "relax.sort": _sort,
    "relax.argsort": _argsort,
    "relax.einsum": lambda op: f"torch.einsum({op.attrs['subscripts']!r}, {op.args[0]})",
    "relax.gather_elements": _gather_elements,
    "relax.zeros": _init("torch.zeros"),
    "relax.ones": _init("torch.ones"),
    "relax.zeros_like": _init("torch.zeros_like"),
    "relax.ones_like": _init("torch.ones_like"),
    "relax.arange": _init("torch.arange"),
    "relax.nn.softmax": _softmax("F.softmax"),
    "relax.nn.log_softmax": _softmax("F.log_softmax"),
    "relax.nn.gelu_tanh": lambda op: f"F.gelu({op.args[0]}, approximate='tanh')",
    "relax.nn.softplus": lambda op: (
        f"F.softplus({op.args[0]}, beta={op.attrs['beta']}, threshold={op.attrs['threshold']})"
    ),
    "relax.nn.leakyrelu": lambda op: f"F.leaky_relu({op.args[0]}, {op.attrs['alpha']})",
    "relax.nn.prelu": _prelu,
    "relax.nn.layer_norm": _layer_norm,
    "relax.nn.rms_norm": _rms_norm,
    "relax.nn.group_norm": _group_norm,
    "relax.nn.instance_norm": _instance_norm,
    "relax.nn.batch_norm": _batch_norm,
    **dict.fromkeys(
        [f"relax.nn.conv{d}d{t}" for d in (1, 2, 3) for t in ("", "_transpose")], _conv
    ),
    **dict.fromkeys([f"relax.nn.{k}_pool{d}d" for d in (1, 2, 3) for k in ("max", "avg")], _pool),
    **dict.fromkeys([f"relax.nn.adaptive_avg_pool{d}d" for d in (1, 2, 3)], _adaptive_pool),
    "relax.nn.pad": _pad,
}
FAITHFUL_OPS = frozenset(_RULES)
"""The Relax ops `as_torch` can write without a flag (for some or all of their attributes)."""


def _is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def _dtype(name: str) -> str:
    if not isinstance(getattr(torch, str(name), None), torch.dtype):
        raise _Unfaithful(f"dtype {name}, which PyTorch lacks, is not translated")
    return f"torch.{name}"


def _is_torch(name: str) -> bool:
    module, _, attr = name.partition(".")
    return hasattr({"torch": torch, "F": torch.nn.functional}.get(module), attr)


def _literal(value: float) -> str:
    return repr(value) if math.isfinite(value) else f"float('{value}')"


def _tuple(items: list[str]) -> str:
    return f"({', '.join(items)}{',' if len(items) == 1 else ''})"


def _dims(ty) -> list:
    shape = getattr(ty, "shape", None)
    return list(shape.values) if isinstance(shape, relax.ShapeExpr) else []


def _attrs(call: relax.Call) -> dict:
    if call.attrs is None:
        return {}
    found = {}
    for key in dir(call.attrs):
        if key.startswith("_") or key in {
            "same_as",
            "handle",
            "get_fields",
            "keys",
            "get",
            "id_",
            "is_",
        }:
            continue
        try:
            value = getattr(call.attrs, key)
        except Exception:
            continue
        if callable(value):
            continue
        found[key] = _plain(value)
    return found


def _plain(value):
    if isinstance(value, tirx.IntImm | tirx.FloatImm):
        return value.value
    if hasattr(value, "__iter__") and not isinstance(value, str):
        try:
            return [_plain(v) for v in value]
        except TypeError:
            return str(value)
    return value if isinstance(value, int | float | bool | str | type(None)) else str(value)


def _out_ty(call: relax.Call) -> str:
    """`R.Tensor(("n",), "float32")`: symbolic sizes by name, which `call_tir` binds from the
    inputs.
    """
    texts = []
    for ty in call.ty_args:
        dims = ", ".join(
            repr(d.name) if isinstance(d, tirx.Var) else str(d.value) for d in ty.shape.values
        )
        texts.append(
            f"R.Tensor(({dims}{',' if len(ty.shape.values) == 1 else ''}), {str(ty.dtype)!r})"
        )
    return texts[0] if len(texts) == 1 else f"[{', '.join(texts)}]"
