"""`NAME.as_torch(fn)`: a Relax function as PyTorch source text, honest about what it cannot map.

The op mapping is TVM's own (`RelaxToPyFuncConverter._get_op_map`). Upstream
executes that mapping and papers over gaps: a string for an unmapped op,
zeros for a tuple item, the first argument for a call to another Relax
function. Here every binding becomes one line of code, and whatever has no
faithful PyTorch form is flagged in the text (`# NOT MAPPED`, `# REVIEW`).
"""

from __future__ import annotations

import re

import tvm
from tvm import relax, tirx
from tvm.relax.relax_to_pyfunc_converter import RelaxToPyFuncConverter

_OP_MAP = RelaxToPyFuncConverter._get_op_map()
_APPROXIMATE = {
    "relax.nn.rms_norm",
    "relax.nn.attention",
    "relax.layout_transform",
    "relax.ewise_fma",
    "relax.quantize",
    "relax.dequantize",
    "relax.nn.gelu_tanh",
    "relax.strided_slice",
    "relax.dynamic_strided_slice",
    "relax.index_tensor",
    "relax.gather_nd",
    "relax.scatter_nd",
}
_REDUCTIONS = {"sum", "mean", "max", "min", "std", "variance"}


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
        self.uses_relax = False

    def function(self, func: relax.Function) -> str:
        params = [self.var(p) for p in func.params]
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
        body = [f"    {line}" for line in self.lines]
        doc = f'    """`{self.name}` as PyTorch, op by op (TVM\'s relax-to-pyfunc op mapping)."""'
        return "\n".join([*head, f"def {self.name}(self, {', '.join(params)}):", doc, *body]) + "\n"

    # -- names ---------------------------------------------------------------------
    def var(self, var: relax.Var) -> str:
        key = var
        if key not in self.names:
            base = re.sub(r"\W", "_", var.name) or "v"
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
        if isinstance(expr, relax.Var):
            return self.var(expr)
        if isinstance(expr, relax.Tuple):
            items = [self.expr(f) for f in expr.fields]
            return f"({', '.join(items)}{',' if len(items) == 1 else ''})"
        if isinstance(expr, relax.TupleGetItem):
            return f"{self.expr(expr.tuple_value)}[{expr.index}]"
        if isinstance(expr, relax.ShapeExpr):
            values = [self.prim(v) for v in expr.values]
            return f"({', '.join(values)}{',' if len(values) == 1 else ''})"
        if isinstance(expr, tirx.IntImm | tirx.FloatImm | tirx.Var):
            return self.prim(expr)
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
            return repr(value.value)
        if isinstance(value, tirx.Var):
            return value.name
        return f"int({value})"

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
        return self.mapped_call(op, mapped, call, args)

    def mapped_call(self, op: str, mapped: str, call: relax.Call, args: list[str]) -> str:
        attrs = _attrs(call)
        if mapped in _REDUCTIONS:
            axis, keep = attrs.get("axis"), attrs.get("keepdims", False)
            torch_name = {"variance": "var"}.get(mapped, mapped)
            dim = "" if axis is None else f", dim={tuple(axis)}"
            if mapped in {"max", "min"} and axis is not None:
                return f"torch.amax({args[0]}{dim}, keepdim={keep})".replace("amax", f"a{mapped}")
            return f"torch.{torch_name}({args[0]}{dim}, keepdim={keep})"
        if mapped == "reshape":
            return f"torch.reshape({args[0]}, {args[1]})"
        if mapped == "permute_dims":
            axes = attrs.get("axes")
            order = tuple(axes) if axes is not None else f"tuple(reversed(range({args[0]}.dim())))"
            return f"{args[0]}.permute({order})"
        if mapped == "expand_dims":
            return f"{args[0]}" + "".join(f".unsqueeze({a})" for a in sorted(attrs.get("axis", [])))
        if mapped == "squeeze":
            axis = attrs.get("axis")
            return f"torch.squeeze({args[0]}{'' if axis is None else f', dim={tuple(axis)}'})"
        if op == "relax.astype":
            return f"{args[0]}.to(torch.{attrs.get('dtype')})"
        if op in {"relax.cumsum", "relax.cumprod"} and attrs.get("exclusive") in (None, False, 0):
            axis = attrs.get("axis")
            source = args[0] if axis is not None else f"{args[0]}.flatten()"
            return f"{mapped}({source}, dim={0 if axis is None else axis})"
        if mapped in {"F.softmax", "F.log_softmax"}:
            return f"{mapped}({args[0]}, dim={attrs.get('axis', -1)})"
        if mapped == "concat":
            return f"torch.cat({args[0]}, dim={attrs.get('axis', 0)})"
        text = f"{mapped}({', '.join(args)})"
        if not mapped.startswith(("torch.", "F.")):
            return self.flag(
                "NOT MAPPED", f"`{op}` maps to `{mapped}`, which needs hand translation"
            )
        if op in _APPROXIMATE:
            self.flag("REVIEW", f"`{op}` -> `{mapped}` is only an approximate mapping")
        elif attrs and op != "relax.matmul":
            self.flag("REVIEW", f"`{op}` attributes {attrs} are not passed to `{mapped}`")
        return text


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
