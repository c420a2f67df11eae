"""A cut of a Relax function: some of its bindings, as a function of their own.

`minimize` shrinks a function by keeping fewer and fewer of its bindings. A
cut keeps a set of them, in their order and in their blocks (a dataflow
block stays one: the passes that rewrite dataflow see what they saw), and
makes the rest disappear:
- a value a kept binding reads that no kept binding makes *enters* the cut:
  it becomes a parameter (the function's own parameters stay parameters), so
  the caller gives it its value, the reference run's (`Cut.entering`). Not a
  constant: `FoldConstant` would compute the cut away;
- a value that is not a tensor (a tuple a `split` made, a shape) cannot be
  given from outside, nor one computed from weights alone (a constant to
  the build, which `FoldConstant` folds), nor one the reference run has no
  value of: the binding that makes it is kept with the one that reads it
  (`DataflowCut.closed`);
- what no kept binding reads is returned (`Cut.outputs`): one value as it
  is, more as a tuple. A value that a dataflow block returns becomes an
  output variable of the block;
- weights are constants inside the bindings: they come along with them.

The cut's function keeps the original's name, purity and attributes (but
`num_input`, which counted the original's parameters).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import tvm
from tvm import relax

from ..inspect.tracing import unique_names
from ..live.relax_rewrite import relax_closure, sub_module

PARAM, BINDING = "param", "binding"  # where a value that enters a cut comes from


@dataclass(frozen=True)
class Cut:
    """A cut's function, and where its parameters' values come from."""

    function: relax.Function
    entering: tuple[tuple[str, int], ...]  # where each parameter's value comes from: the
    # original's parameter `(PARAM, i)` or binding `(BINDING, i)`
    reads: tuple[relax.Var, ...]  # the original's variables that the parameters stand for
    outputs: tuple[int, ...]  # the bindings it returns, in order
    kept: frozenset[int]  # the indices of the bindings it keeps

    @property
    def size(self) -> int:
        return len(self.kept)


class DataflowCut:
    """The bindings of Relax function `func`, numbered in order across its blocks, and the cut
    that keeps any set of them."""

    def __init__(self, func: relax.Function):
        self.func = func
        self.bindings: list[relax.Binding] = []
        self.block_of: list[int] = []
        for number, block in enumerate(func.body.blocks):
            self.bindings += list(block.bindings)
            self.block_of += [number] * len(block.bindings)
        self.names = unique_names(b.var for b in self.bindings)
        made = {b.var: i for i, b in enumerate(self.bindings)}
        self.params = {p: i for i, p in enumerate(func.params)}
        self.reads = [
            [v for v in relax.analysis.free_vars(b.value) if v in made or v in self.params]
            for b in self.bindings
        ]
        self._made = made
        # the bindings whose values can enter a cut: tensors that are not constants (what the
        # build computes from weights alone stays so: FoldConstant sees what it saw), narrowed
        # to those the reference run gives (`valued &= ...`)
        constant = set(relax.analysis.computable_at_compile_time(func))
        self.valued = {
            i for i, b in enumerate(self.bindings) if enters(b.var) and b.var not in constant
        }

    def __len__(self) -> int:
        return len(self.bindings)

    def producer(self, var: relax.Var) -> int | None:
        """The index of the binding that makes `var` (None: a parameter)."""
        return self._made.get(var)

    def closed(self, kept: Iterable[int]) -> frozenset[int]:
        """`kept` with the bindings that make the values they read that cannot enter a cut (not
        tensors, or without a value), and those those read, and so on."""
        found, todo = set(kept), list(kept)
        while todo:
            for var in self.reads[todo.pop()]:
                i = self.producer(var)
                if i is not None and i not in found and i not in self.valued:
                    found.add(i)
                    todo.append(i)
        return frozenset(found)

    def prefix(self, end: int) -> frozenset[int]:
        return self.closed(range(end + 1))

    def window(self, start: int, end: int) -> frozenset[int]:
        return self.closed(range(start, end + 1))

    def name_of(self, var: relax.Var) -> str:
        i = self.producer(var)
        return var.name if i is None else self.names[i]

    def source_name(self, source: tuple[str, int]) -> str:
        kind, index = source
        return self.func.params[index].name if kind == PARAM else self.names[index]

    def leaves(self, index: int) -> list[tuple[str, int] | None]:
        """Where each tensor of binding `index`'s value comes from, flat: itself, or for a tuple
        it makes, its fields' bindings (None for a tensor no binding or parameter holds alone:
        a field of a tuple an op returns)."""
        var, value = self.bindings[index].var, self.bindings[index].value
        if enters(var):
            return [(BINDING, index)]
        if not isinstance(value, relax.Tuple):
            return [None] * _leaf_count(var.ty)
        found: list[tuple[str, int] | None] = []
        for field in value.fields:
            if isinstance(field, relax.Var) and self.producer(field) is not None:
                found += self.leaves(self.producer(field))
            elif isinstance(field, relax.Var) and field in self.params:
                found.append((PARAM, self.params[field]))
            else:
                found += [None] * _leaf_count(field.ty)
        return found

    def source(self, var: relax.Var) -> tuple[str, int]:
        """Where `var`'s value comes from: `(PARAM, i)` or `(BINDING, i)`."""
        i = self.producer(var)
        return (PARAM, self.params[var]) if i is None else (BINDING, i)

    def cut(self, kept: Iterable[int]) -> Cut:
        """The function of the bindings `kept` (see the module's docstring)."""
        kept = self.closed(kept)
        order = sorted(kept)
        read_by_kept = {v for i in order for v in self.reads[i]}
        sinks = [
            i
            for i in order
            if self.bindings[i].var not in read_by_kept and returnable(self.bindings[i].var.ty)
        ]
        reads = tuple(
            dict.fromkeys(
                var for i in order for var in self.reads[i] if self.producer(var) not in kept
            )
        )
        # a parameter must not be a DataflowVar, and a value a dataflow block returns must not
        # either; every other variable stays itself, so the types that name it stay right
        remap = {old: relax.Var(old.name, old.ty) for old in reads if _inner(old)}
        params = [remap.get(old, old) for old in reads]
        blocks = self._blocks(order, set(sinks), remap)
        outputs = [remap.get(self.bindings[i].var, self.bindings[i].var) for i in sinks]
        result = outputs[0] if len(outputs) == 1 else relax.Tuple(outputs)  # () for none
        attrs = {k: v for k, v in (self.func.attrs or {}).items() if k != "num_input"}
        body = relax.BlockBuilder().normalize(relax.SeqExpr(blocks, result))
        function = relax.Function(
            params,
            body,
            None,
            self.func.is_pure,
            tvm.ir.make_node("ir.DictAttrs", **attrs) if attrs else None,
        )
        function = relax.utils.copy_with_new_vars(function)  # none shared with the original
        return Cut(function, tuple(map(self.source, reads)), reads, tuple(sinks), kept)

    def _blocks(self, order: list[int], sinks: set[int], remap: dict) -> list:
        """The kept bindings in their blocks, reading the cut's parameters (`remap`, to which
        each dataflow variable that leaves its block is added as it is made)."""
        blocks: list = []
        for number, block in enumerate(self.func.body.blocks):
            mine = [i for i in order if self.block_of[i] == number]
            if not mine:
                continue
            made = []
            for i in mine:
                binding = self.bindings[i]
                var = binding.var
                if i in sinks and _inner(var):
                    remap[var] = relax.Var(var.name, var.ty)
                    var = remap[var]
                value = _Renamed(remap).visit_expr(binding.value) if remap else binding.value
                if isinstance(binding, relax.MatchCast):
                    made.append(relax.MatchCast(var, value, binding.ty))
                else:
                    made.append(relax.VarBinding(var, value))
            dataflow = isinstance(block, relax.DataflowBlock)
            blocks.append(relax.DataflowBlock(made) if dataflow else relax.BindingBlock(made))
        return blocks


def _inner(var: relax.Var) -> bool:
    return isinstance(var, relax.DataflowVar)


def module_of(mod: tvm.IRModule, fn: str, cut: Cut) -> tvm.IRModule | None:
    """`mod` with `fn` replaced by `cut`'s function, and only what it calls; None when that is
    not a well-formed module (TVM refuses it as it is: never a data point)."""
    whole = tvm.IRModule(
        {gv: cut.function if gv.name_hint == fn else f for gv, f in mod.functions_items()},
        attrs=mod.attrs,
    )
    reduced = sub_module(whole, relax_closure([fn], whole))
    try:
        relax.analysis.well_formed(reduced)
    except Exception:  # TVM says why in many types; none makes the cut usable
        return None
    return reduced


def _leaf_count(ty) -> int:
    return sum(_leaf_count(f) for f in ty.fields) if isinstance(ty, relax.TupleType) else 1


def returnable(ty) -> bool:
    """Whether a value of type `ty` can be returned and compared: a tensor, a tuple of them."""
    if isinstance(ty, relax.TupleType):
        return all(returnable(field) for field in ty.fields)
    return isinstance(ty, relax.TensorType)


def enters(var: relax.Var) -> bool:
    """Whether a value can enter a cut from outside: a tensor can, as a parameter."""
    return isinstance(var.ty, relax.TensorType)


@relax.expr_functor.mutator
class _Renamed(relax.PyExprMutator):
    """An expression reading the cut's variables in place of the original's."""

    def __init__(self, remap: dict):
        super().__init__()
        self.remap = remap

    def visit_var_(self, op):
        return self.remap.get(op, op)

    def visit_dataflow_var_(self, op):
        return self.remap.get(op, op)
