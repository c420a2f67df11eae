"""A function as cell text that parses back to it, weights included: what `NAME.edit` puts below.

TVM prints a tensor constant as `metadata["ir.GenericConst"][i]`, which does
not parse back in a cell (and so a scalar of a dtype it does not print
inline: bfloat16, float8, unsigned). Here each one is named in the module's constant
table (`NAME.consts`: an imported weight by its parameter's name, others
`<function>_c<k>`), and the text refers to it as `NAME.consts.<name>`: the
Relax parser takes a Python value that is a constant, so the function parses
back structurally equal, the very same weights in it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from ...errors import CallError
from .printer import member_sources, module_script

_MARKER = "__tvmnb_const_"
_MARKER_DECLARATION = re.compile(rf"^\s*{_MARKER}\d+: .*\n", re.MULTILINE)
_MARKER_USE = re.compile(rf"\b{_MARKER}(\d+)\b")
# The scalar dtypes TVM 0.27 prints as `R.const(value, dtype)` (measured); others go to metadata.
_PRINTED_INLINE = frozenset(
    {"bool", "int8", "int16", "int32", "int64", "float16", "float32", "float64"}
)
_TYPE_VARS = re.compile(r'^((\w+) = TypeVar\("\w+"\))$', re.MULTILINE)


class ConstantTable:
    """`NAME.consts`: the module's tensor constants (weights) by name, as edit text refers to them.

    `NAME.consts.fc1_weight` is the constant itself (a `tvm.ir.Constant`);
    `NAME.consts.numpy("fc1_weight")` its value. Names follow the module: a
    constant no function uses any more leaves the table.
    """

    def __init__(self) -> None:
        self._by_name: dict[str, Any] = {}
        self._names: dict[Any, str] = {}  # TVM objects hash by what they wrap

    def name(self, constant, preferred: str) -> str:
        """The name of `constant`, giving it `preferred` (made unique) the first time."""
        known = self._names.get(constant)
        if known is not None:
            return known
        name, k = preferred, 1
        while name in self._by_name:
            name, k = f"{preferred}_{k}", k + 1
        self._by_name[name], self._names[constant] = constant, name
        return name

    def keep_only(self, constants) -> None:
        """Forget the constants not in `constants` (those the module still uses)."""
        alive = set(constants)
        for constant in [c for c in self._names if c not in alive]:
            del self._by_name[self._names.pop(constant)]

    def numpy(self, name: str):
        return self[name].value.numpy()

    def __getitem__(self, name: str):
        try:
            return self._by_name[name]
        except KeyError:
            known = ", ".join(sorted(self._by_name)) or "none"
            raise CallError(f"no constant named `{name}` (known: {known})") from None

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return self[name]

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._by_name))

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)

    def __repr__(self) -> str:
        if not self._by_name:
            return "no constants"
        return "\n".join(f"{name}: {describe(c)}" for name, c in self._by_name.items())


def describe(constant) -> str:
    value = constant.value
    return f"{value.dtype}{list(value.shape)}"


def tensor_constants(func) -> list:
    """The constants of a Relax function that TVM prints as metadata, in order: tensors, and
    scalars of a dtype it does not print inline."""
    found: list = []

    def visit(expr) -> None:
        is_tensor = isinstance(expr, tvm.ir.GenericConst) and (
            len(expr.value.shape) > 0 or expr.value.dtype not in _PRINTED_INLINE
        )
        if is_tensor and not any(c.same_as(expr) for c in found):
            found.append(expr)

    if isinstance(func, relax.Function):
        relax.analysis.post_order_visit(func.body, visit)
    return found


def module_text(
    module_name: str,
    ir_mod: tvm.IRModule,
    consts: ConstantTable,
    preferred: Mapping[Any, str],
    prefix: str,
    *,
    py_module: bool = False,
) -> str:
    """`module_script`, each tensor constant written `<prefix><name>` (e.g. `demo.consts.w1`)."""
    marked, names = _marked(ir_mod, consts, preferred)
    text = _MARKER_DECLARATION.sub("", module_script(module_name, marked, py_module=py_module))
    return _MARKER_USE.sub(lambda m: f"{prefix}{names[int(m.group(1))]}", text)


def function_text(
    module_name: str,
    ir_mod: tvm.IRModule,
    fn: str,
    consts: ConstantTable,
    preferred: Mapping[Any, str],
) -> str:
    """`fn` as `module_script` shows it, with `NAME.consts.<name>` for each tensor constant, and
    the `TypeVar` lines of the symbolic sizes it uses, so that it runs as a cell on its own."""
    text = module_text(module_name, ir_mod, consts, preferred, f"{module_name}.consts.")
    function = member_sources(text)[fn]
    sizes = [line for line, name in _TYPE_VARS.findall(text) if re.search(rf"\b{name}\b", function)]
    if not sizes:
        return function
    return "from typing import TypeVar\n" + "\n".join(sizes) + "\n\n" + function


def name_constants(ir_mod: tvm.IRModule, consts: ConstantTable, preferred: Mapping[Any, str]):
    """Every tensor constant of `ir_mod`, in order, each named in `consts` (its `preferred` name,
    e.g. the model parameter it holds, else `<function>_c<k>`); the table forgets the others."""
    constants: list = []
    for gv, func in ir_mod.functions_items():
        owned = [c for c in tensor_constants(func) if not any(c.same_as(k) for k in constants)]
        constants += owned
        for k, constant in enumerate(owned):
            consts.name(constant, preferred.get(constant, f"{gv.name_hint}_c{k}"))
    consts.keep_only(constants)
    return constants


def _marked(ir_mod: tvm.IRModule, consts: ConstantTable, preferred: Mapping[Any, str]):
    """A copy of `ir_mod` whose tensor constants are free variables `__tvmnb_const_<k>`, and
    the name in `consts` of constant k."""
    constants = name_constants(ir_mod, consts, preferred)
    functions = {
        gv: _ConstantMarker(constants).visit_expr(func) if tensor_constants(func) else func
        for gv, func in ir_mod.functions_items()
    }
    names = [consts.name(c, "") for c in constants]
    return tvm.IRModule(functions, attrs=ir_mod.attrs), names


@mutator
class _ConstantMarker(PyExprMutator):
    """Each tensor constant replaced by a free variable `__tvmnb_const_<k>` of its type."""

    def __init__(self, constants: list):
        super().__init__()
        self.constants = constants
        self.markers: dict[int, relax.Var] = {}

    def visit_generic_const_(self, op):
        for k, constant in enumerate(self.constants):
            if constant.same_as(op):
                if k not in self.markers:
                    self.markers[k] = relax.Var(f"{_MARKER}{k}", op.ty)
                return self.markers[k]
        return op
