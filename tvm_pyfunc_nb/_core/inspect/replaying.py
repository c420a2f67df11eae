"""Each op of a Relax function run on the reference's own values of its inputs, all in one run.

`compare` judges the error an op adds, not the error it inherits: an op given
inputs that float rounding already moved may move them further in a way no
tolerance can tell from a fault (a deep conv net on a CPU with wider vectors),
and an op that adds a real error of one part in a thousand may hide it under
what its inputs carried. So each binding is computed again from the
reference's values of the bindings it reads (PyTorch's, by FX node) instead
of from the function's own.

One function does it for every binding at once: a copy of the user's
function whose each binding reads, for every variable with a reference
value, a parameter holding that value (its own value otherwise: a binding
with no reference of its own, such as the matmul inside an `addmm`, is
computed from the reference values behind it), and which returns every
binding. It is compiled and run once, like `trace`'s copy, by the module's
own build (kept: comparing again compiles nothing).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import torch
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from ..module_parts import ModuleParts
from ..run.tensors import own_copies, to_torch
from .tracing import held_apart, linked_copy, unique_names


@dataclass(frozen=True)
class Replay:
    """The copy of a function that runs each binding on reference values: its parameters are
    the function's own, then one per variable whose reference value it reads (`fed`); it
    returns the bindings `taps` names, in that order."""

    func: relax.Function
    fed: list[str]
    taps: list[str]


def replay_of(func: relax.Function, known: Mapping[str, torch.Tensor]) -> Replay:
    """The `Replay` of `func` where each variable named in `known` (of the same shape and
    dtype) is read as that value."""
    plain = relax.transform.ToNonDataflow()(tvm.IRModule({"f": func}))["f"]
    bindings = [b for block in plain.body.blocks for b in block.bindings]
    names = dict(zip((b.var for b in bindings), unique_names(b.var for b in bindings), strict=True))
    fed: dict = {}  # variable -> what holds its reference value (a parameter, or its cast)
    params: list = []  # the parameters of `fed`
    own: dict = {}  # variable -> the replayed binding (no reference value of its own)
    substitute = _Substitute(lambda var: fed.get(var, own.get(var)))
    defined = {v for p in plain.params for v in relax.analysis.definable_tir_vars_in_type(p.ty)}
    rebound, taps, tapped = [], [], []
    for binding in bindings:
        for var in _read(binding.value):
            if var not in fed and var in names and _fits(var, known.get(names[var])):
                fed[var], cast = _fed(var, defined)
                params.append(cast.value if cast else fed[var])
                rebound.extend([cast] if cast else [])
        value = substitute.visit_expr(binding.value)
        var = relax.Var(binding.var.name, binding.var.ty)
        if isinstance(binding, relax.MatchCast):
            rebound.append(relax.MatchCast(var, value, binding.ty))
        else:
            rebound.append(relax.VarBinding(var, value))
        own[binding.var] = var
        if names[binding.var] in known and isinstance(binding.var.ty, relax.TensorType):
            taps.append(names[binding.var])
            tapped.append(var)
    rebound, tapped = held_apart(plain, rebound, tapped)  # values a later write leaves be
    body = relax.SeqExpr([relax.BindingBlock(rebound)], relax.Tuple(tapped))
    body = relax.BlockBuilder().normalize(body)
    copy = relax.Function([*plain.params, *params], body, None, plain.is_pure, plain.attrs)
    return Replay(copy, [names[v] for v in fed], taps)


def _fed(var, defined: set) -> tuple[relax.Var, relax.MatchCast | None]:
    """The variable that holds `var`'s reference value, and the cast that makes it, if any. A
    parameter's shape is checked on entry, so one whose shape uses a size the body computes
    (`T.min(n, 8)`, `n` from an `.item()`) is a parameter of `var`'s rank, cast to `var`'s shape
    where it is first read (the size known by then)."""
    ty = var.ty
    if set(relax.analysis.tir_vars_in_type(ty)) <= defined:
        return relax.Var(var.name, ty), None
    param = relax.Var(var.name, relax.TensorType(dtype=ty.dtype, ndim=ty.ndim))
    held = relax.Var(var.name, ty)
    return held, relax.MatchCast(held, param, ty)


def _read(value) -> list:
    """The variables a binding's value reads, each once, in order."""
    found: list = []
    relax.analysis.post_order_visit(
        value, lambda e: found.append(e) if isinstance(e, relax.Var) and e not in found else None
    )
    return found


def _fits(var, value) -> bool:
    """Whether `value` (a reference) can stand for variable `var`: a tensor of its dtype and
    (where it is known) shape."""
    ty = var.ty
    if not isinstance(value, torch.Tensor) or not isinstance(ty, relax.TensorType):
        return False
    if str(value.dtype).removeprefix("torch.") != str(ty.dtype):
        return False
    shape = getattr(ty, "shape", None)
    if shape is None or not isinstance(shape, relax.ShapeExpr):
        return True
    return (
        all(
            not isinstance(d, tvm.tirx.IntImm) or int(d) == n
            for d, n in zip(shape.values, value.shape, strict=False)
        )
        and len(shape.values) == value.dim()
    )


@mutator
class _Substitute(PyExprMutator):
    def __init__(self, instead):
        super().__init__()
        self.instead = instead

    def visit_var_(self, op):
        found = self.instead(op)
        return op if found is None else found

    def visit_dataflow_var_(self, op):
        return self.visit_var_(op)


def replayed(
    parts: ModuleParts, fn: str, args: tuple, known: Mapping[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """Each binding of Relax function `fn` (with a reference value in `known`) computed from
    the reference values of what it reads, in one run on `args` (copies are run)."""
    entry = parts.entry(fn)
    replay = replay_of(entry.func, known)
    linked = linked_copy(parts, fn, replay.func)
    fed = own_copies(tuple(known[name] for name in replay.fed))
    values = parts.runner.run_relax(
        fn, linked, replace(entry, func=replay.func), (*own_copies(args), *fed)
    )
    return {name: to_torch(v) for name, v in zip(replay.taps, values, strict=True)}
