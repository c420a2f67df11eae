"""`NAME.compare("fn", reference, *args)`: where TVM's numbers leave PyTorch's.

Always per output: the largest absolute and relative error, and whether it
is within `rtol`/`atol` (as `torch.allclose` judges) plus what float rounding
explains. Outputs are matched by field (a `ModelOutput`, a dict) or by
position (tuples, lists), as `torch.utils._pytree` flattens them; an input
that either side writes into (`x.add_(1)`) is compared as it is after the
call. Each side runs on its own copy of the inputs.

When `fn` came from `NAME.add_torch(reference, ...)`, also op by op, and an
op's check is about the error that op adds, not the error it inherits: each
binding is run on PyTorch's own values of the bindings it reads (replaying.py,
one compiled run for all of them) and set against the value of the FX node
it came from (captured with `torch.fx.Interpreter` on the exported graph).
The first binding that diverges is named with the PyTorch op behind it. A
binding with no FX node of its own (the matmul inside an `addmm`, a binding
a cell added) is listed as such, never matched by guess; it is computed from
the reference values behind it.

What rounding explains:
- for an op: a few units in the last place of its dtype, times the square
  root of the reduction behind each value (a matmul's inner dimension, a
  convolution's window, a softmax's or a norm's axis), in proportion to the
  largest of its values. Its inputs are PyTorch's, so nothing is inherited:
  a correct conv net shows no divergence however deep it is, and an error of
  one part in a thousand in one op is flagged at that op and at no other.
- for an output: that, plus a few times the error PyTorch's own float32 run
  carries against the same graph run in float64 (the rounding of the whole
  chain of ops behind the output, which another CPU's or TVM's order of the
  same sums changes by as much).

An error no larger than rounding explains (zero included) shows as
`≤ rounding`, not as digits: its last bits differ from one CPU to the next
(vector widths change the order of a sum, in PyTorch's kernels and in TVM's),
so its digits say nothing about the function.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch.utils import _pytree as pytree
from tvm import relax

from ..live.cells import PRIMFUNC, RELAX
from ..models.importing import NodeRef, TorchOrigin, runnable
from ..module_parts import ModuleParts
from ..run.tensors import own_copies
from ..tables import text_table
from .replaying import replayed
from .tracing import NonFinite, inputs_of, op_of, trace, unique_names

# Units in the last place one op may be off by on its own (before its reduction's sqrt(n)).
ROUNDING_ULPS = 8
# How many times the rounding PyTorch's float32 outputs carry (against float64) the function's
# may carry: the same sums in another order (TVM's kernels, another CPU's vectors). Measured:
# a correct ResNet-18 compiled for AVX-512 carries 3.4 times PyTorch's; an error of one part in
# a thousand in one op is hundreds of times more than either.
CARRIED_SPREAD = 16
# A result shows the op rows around its first divergence (every row: `Comparison.full()`).
ROWS_BEFORE, ROWS_AFTER = 2, 3
WITHIN_ROUNDING = "≤ rounding"  # what a table shows for an error rounding explains


@dataclass(frozen=True)
class Difference:
    """How far `actual` is from `expected`: largest absolute and relative error, and the verdict."""

    max_abs: float
    max_rel: float
    passed: bool
    note: str = ""  # why they could not be compared element by element
    scale: float = 0.0  # the largest finite |expected|: what the error is in proportion to
    within_rounding: bool = False  # a float error that rounding explains (or none)


def rounding(dtype: torch.dtype) -> float:
    """The relative rounding error of one op in `dtype` (0 for exact dtypes)."""
    return ROUNDING_ULPS * torch.finfo(dtype).eps if dtype.is_floating_point else 0.0


def difference(
    actual: Any, expected: Any, rtol: float, atol: float, *, reduction: int = 1, carried=0.0
) -> Difference:
    """`actual` against `expected`, within `atol + rtol·|expected|` plus what rounding explains:
    one op's (`reduction` values summed into each), times the largest |expected|, and `carried`
    (the absolute error PyTorch's own float32 value carries against float64) `CARRIED_SPREAD`
    times over."""
    if not isinstance(actual, torch.Tensor) or not isinstance(expected, torch.Tensor):
        same = actual == expected
        return Difference(
            0.0 if same else float("inf"),
            0.0,
            bool(same),
            "" if same else f"{type(actual).__name__} vs {type(expected).__name__}",
        )
    if actual.shape != expected.shape:
        return Difference(
            float("inf"),
            float("inf"),
            False,
            f"shape {list(actual.shape)} vs {list(expected.shape)}",
        )
    a = actual.detach().to(torch.float64)
    b = expected.detach().to(torch.float64)
    if a.numel() == 0:
        return Difference(0.0, 0.0, True)
    finite = b[b.isfinite()].abs()
    scale = float(finite.max()) if finite.numel() else 0.0
    slack = scale * rounding(expected.dtype) * math.sqrt(reduction) + CARRIED_SPREAD * carried
    same = (a == b) | (a.isnan() & b.isnan())  # equal infinities are no error
    gap = torch.where(same, 0.0, (a - b).abs())
    nonzero = b.abs() > atol
    max_rel = float((gap[nonzero] / b.abs()[nonzero]).max()) if bool(nonzero.any()) else 0.0
    passed = bool((same | (gap <= atol + slack + rtol * b.abs())).all())
    lost = int((a.isnan() & ~b.isnan()).sum())
    note = f"{lost} NaN where PyTorch has numbers" if lost else ""
    max_abs = float(gap.max())
    within = expected.dtype.is_floating_point and max_abs <= slack
    return Difference(max_abs, max_rel, passed, note, scale, within)


def carried_rounding(value: Any, precise: Any) -> float:
    """The largest error float rounding left in PyTorch's `value` against the `precise` one
    (the same graph in float64); 0 where there is nothing to measure it by."""
    if not isinstance(value, torch.Tensor) or not isinstance(precise, torch.Tensor):
        return 0.0
    if not value.is_floating_point() or value.shape != precise.shape or value.numel() == 0:
        return 0.0
    gap = (value.to(torch.float64) - precise).abs()
    gap = gap[gap.isfinite()]
    return float(gap.max()) if gap.numel() else 0.0


@dataclass(frozen=True)
class OpCheck:
    """One binding against the PyTorch value it came from (or why it has none)."""

    binding: str
    op: str  # the Relax op or callee
    node: NodeRef | None
    diff: Difference | None  # None: nothing to compare with


@dataclass
class Comparison:
    """The result of `NAME.compare`: outputs, and op by op when the function came from PyTorch."""

    module: str
    function: str
    rtol: float
    atol: float
    outputs: list[Difference]
    ops: list[OpCheck] | None = None  # None: not compared op by op
    why_not_op_by_op: str = ""
    output_names: list[str] = field(default_factory=list)  # `logits`, `0`, `1.0`: PyTorch's
    show_all: bool = False  # show every op row (`full()`), not only those around a divergence
    nonfinite: NonFinite | None = None  # where the first divergence's NaN comes from
    written: list[tuple[str, Difference]] = field(default_factory=list)  # inputs written into

    def nonfinite_text(self) -> str:
        """What the verdict adds when the first divergence is a NaN: where it starts."""
        return f"; the first non-finite value: {self.nonfinite}" if self.nonfinite else ""

    @property
    def passed(self) -> bool:
        return all(d.passed for d in self.outputs) and all(d.passed for _, d in self.written)

    @property
    def first_divergence(self) -> OpCheck | None:
        """The first binding whose error is more than rounding and its inputs' error explain."""
        for check in self.ops or ():
            if check.diff is not None and not check.diff.passed:
                return check
        return None

    def output_rows(self) -> list[tuple[str, str, str, str]]:
        names = self.output_names or [str(i) for i in range(len(self.outputs))]
        return [
            (f"output {which}", *error_cells(d), judged(d))
            for which, d in zip(names, self.outputs, strict=True)
        ] + [(f"input {which}, written", *error_cells(d), judged(d)) for which, d in self.written]

    def op_rows(self) -> list[tuple[str, str, str, str, str, str]]:
        """A row per binding: its op, the PyTorch node, the errors and the verdict."""
        rows = []
        for check in self.ops or ():
            node = check.node
            torch_op = f"{node.node} ({node.op})" if node else "no PyTorch counterpart"
            if check.diff is None:
                verdict = f"part of {node.node}, no value of its own" if node else "not compared"
                rows.append((check.binding, check.op, torch_op, "", "", verdict))
            else:
                d = check.diff
                rows.append((check.binding, check.op, torch_op, *error_cells(d), judged(d)))
        return rows

    def _sited(self) -> bool:
        return any(c.node is not None and c.node.site is not None for c in self.ops or ())

    def op_header(self) -> tuple[str, ...]:
        """The op table's columns: `op_rows()`'s, and `where` when the nodes say it."""
        header = ("binding", "op", "PyTorch", "max abs", "max rel", "")
        return header + (("where",) if self._sited() else ())

    def op_table_rows(self) -> list[tuple[str, ...]]:
        """`op_rows()`, each with where in the model's code its node was made."""
        if not self._sited():
            return self.op_rows()
        return [
            (*row, c.node.site.short() if c.node is not None and c.node.site else "")
            for row, c in zip(self.op_rows(), self.ops, strict=True)
        ]

    def full(self) -> Comparison:
        """The same result shown with every binding's row (the default shows the rows around the
        first divergence, and none when every binding passes)."""
        return replace(self, show_all=True)

    def shown_ops(self) -> range:
        """The indices of the op rows shown: every one with `full()`, else the first divergence
        with the rows just before and after it (none when no binding diverges)."""
        count = len(self.ops or ())
        if self.show_all:
            return range(count)
        first = self.first_divergence
        if first is None:
            return range(0)
        at = self.ops.index(first)
        return range(max(0, at - ROWS_BEFORE), min(count, at + 1 + ROWS_AFTER))

    def op_summary(self) -> str:
        """`op by op, each on PyTorch's values of its inputs: 172 of 191 bindings have a PyTorch
        value, 1 outside the tolerance`, and which rows follow."""
        ops = self.ops or []
        compared = sum(c.diff is not None for c in ops)
        failed = sum(c.diff is not None and not c.diff.passed for c in ops)
        line = (
            f"op by op, each on PyTorch's values of its inputs: {compared} of {len(ops)} "
            f"bindings have a PyTorch value, {failed} outside the tolerance"
        )
        shown = self.shown_ops()
        if len(shown) == len(ops):
            return line
        if not shown:
            return f"{line}; every row: .full()"
        return f"{line}; rows {shown.start + 1} to {shown.stop} below, every row: .full()"

    def verdict(self) -> str:
        """One line that agrees with the tables: whether the outputs match, and where the
        numbers diverge first (with how to open that function)."""
        first = self.first_divergence
        if first is not None:
            site = f" at {first.node.site}" if first.node.site else ""
            which = (
                f"`{first.binding}` = {first.op}, from PyTorch's {first.node.op} "
                f"(node `{first.node.node}`){site}"
            )
            error = (
                f"max abs error {short_number(first.diff.max_abs)}"
                f"{f' ({first.diff.note})' if first.diff.note else ''}; "
                f"open it with {self.module}.edit({self.function!r})"
            )
            error += self.nonfinite_text()
            if self.passed:
                return f"{self._within()}, but {which} diverges: {error}"
            return f"first divergence: {which}: {error}"
        if self.passed:
            return self._within()
        if self.ops is None:  # why not op by op is the line after the outputs
            return f"{self.function} does not match"
        return f"{self.function} does not match; no op diverges alone"

    def _within(self) -> str:
        return (
            f"{self.function} matches within rtol={self.rtol}, atol={self.atol} "
            "and the dtype's rounding"
        )

    def __repr__(self) -> str:
        lines = [
            f"compare {self.function}: {self.verdict()}",
            text_table(("output", "max abs", "max rel", ""), self.output_rows()),
        ]
        if self.ops is not None:
            lines += ["", self.op_summary()]
            shown = self.shown_ops()
            if shown:
                rows = self.op_table_rows()
                lines.append(text_table(self.op_header(), [rows[i] for i in shown]))
        elif self.why_not_op_by_op:
            lines.append(self.why_not_op_by_op)
        return "\n".join(lines)


def flat_outputs(value: Any) -> list[tuple[str, Any]]:
    """`value`'s leaves with where each is: a field (`logits`), a position (`0`, `1.0`).

    `ModelOutput`s, dicts, tuples and lists are unpacked as `torch.export` flattens them (a
    `ModelOutput` leaves out its fields that are None)."""
    leaves = pytree.tree_flatten_with_path(value)[0]
    found = [(".".join(_key(k) for k in path), leaf) for path, leaf in leaves if leaf is not None]
    return [(path or str(i), leaf) for i, (path, leaf) in enumerate(found)]


def _key(entry) -> str:
    for attr in ("key", "idx", "name"):
        if hasattr(entry, attr):
            return str(getattr(entry, attr))
    return str(entry)


def output_differences(
    actual: Any, expected: Any, rtol: float, atol: float, precise: Any = None
) -> tuple[list[str], list[Difference]]:
    """Each output against PyTorch's, named as PyTorch's: by field where both have the same
    fields, else by position (TVM returns a tuple where PyTorch returns a `ModelOutput`).
    `precise`: PyTorch's outputs computed in float64, for the rounding they carry."""
    mine, theirs = flat_outputs(actual), flat_outputs(expected)
    if len(mine) != len(theirs):
        note = f"{len(mine)} outputs vs PyTorch's {len(theirs)}"
        return ["0"], [Difference(float("inf"), float("inf"), False, note)]
    by_field = dict(mine)
    if set(by_field) != {which for which, _ in theirs}:  # by position
        by_field = {which: leaf for (which, _), (_, leaf) in zip(theirs, mine, strict=True)}
    wide = dict(flat_outputs(precise)) if precise is not None else {}
    names = [which for which, _ in theirs]
    return names, [
        difference(
            by_field[which], leaf, rtol, atol, carried=carried_rounding(leaf, wide.get(which))
        )
        for which, leaf in theirs
    ]


def written_differences(
    given: tuple, ours: tuple, theirs: tuple, names: list[str], rtol: float, atol: float
) -> list[tuple[str, Difference]]:
    """Each input that either run wrote into (`ours`, `theirs`: the copies of `given` each ran
    on) compared as it is after the call, by parameter name."""
    found = []
    for i, (before, mine, expected) in enumerate(zip(given, ours, theirs, strict=True)):
        if not isinstance(before, torch.Tensor):
            continue
        if torch.equal(mine, before) and torch.equal(expected, before):
            continue
        name = names[i] if i < len(names) else str(i)
        found.append((name, difference(mine, expected, rtol, atol)))
    return found


def op_checks(
    func: relax.Function,
    origin: TorchOrigin,
    known: Mapping[str, torch.Tensor],
    replay: Mapping[str, torch.Tensor],
    args: tuple,
    rtol: float,
    atol: float,
) -> list[OpCheck]:
    """Each tensor binding of `func`: its value run on PyTorch's values of its inputs
    (`replay`) against its FX node's value (`known`), where it has one."""
    shapes = {p.name: tuple(a.shape) for p, a in zip(func.params, args, strict=False)}
    shapes.update({name: tuple(v.shape) for name, v in known.items()})
    reductions: dict[str, int] = {}  # binding -> the largest reduction computed for its value
    checks = []
    bindings = [b for block in func.body.blocks for b in block.bindings]
    for name, binding in zip(unique_names(b.var for b in bindings), bindings, strict=True):
        value = binding.value
        behind = [reductions.get(n, 1) for n in inputs_of(value) if n not in known]
        out = shapes.get(name) or _shape_of(binding.var, shapes) or ()
        reductions[name] = max(values_summed(value, shapes, out), *behind, 1)
        if not isinstance(binding.var.ty, relax.TensorType):
            continue
        diff = None
        if name in replay:
            diff = difference(replay[name], known[name], rtol, atol, reduction=reductions[name])
        checks.append(OpCheck(name, op_of(value), origin.bindings.get(name), diff))
    return checks


def values_summed(value, shapes: Mapping[str, tuple], out: tuple) -> int:
    """How many values are summed into each of a binding's: a matmul's inner dimension, a
    convolution's window, a normalization's or softmax's axes, a reduction's or pool's ratio."""
    if not isinstance(value, relax.Call) or not value.args:
        return 1
    op = getattr(value.op, "name", "").removeprefix("relax.")
    arg_shapes = [_shape_of(arg, shapes) for arg in value.args]
    first = arg_shapes[0]
    if op == "matmul" and first:
        return first[-1]
    if op.startswith("nn.conv") and len(arg_shapes) > 1 and arg_shapes[1]:
        return math.prod(arg_shapes[1][1:])
    if op in ("nn.softmax", "nn.log_softmax") and first:
        return first[int(value.attrs.axis)]
    if op in ("nn.layer_norm", "nn.rms_norm") and first:
        return math.prod(first[int(axis)] for axis in value.attrs.axes)
    if op == "nn.attention" and first and len(arg_shapes) > 1 and arg_shapes[1]:
        return first[-1] * arg_shapes[1][1]
    if first and out and math.prod(out):  # reductions and pools: values in per value out
        return max(1, math.prod(first) // math.prod(out))
    return 1


def _shape_of(expr, shapes: Mapping[str, tuple]) -> tuple | None:
    if isinstance(expr, relax.Var) and expr.name in shapes:
        return shapes[expr.name]
    shape = getattr(getattr(expr, "ty", None), "shape", None)  # its type's (a constant's)
    try:
        return tuple(int(d) for d in shape)
    except TypeError:  # no shape, or a symbolic one
        return None


def short_number(value: float) -> str:
    """An error as compare prints it: three significant digits."""
    return f"{value:.3g}"


def error_cells(d: Difference) -> tuple[str, str]:
    """A row's max abs and max rel error: digits where they say something about the function.
    A relative error is the error over the smallest values, so its digits follow the last bits
    of those values: two of them, and above 1 (values off by more than themselves) none."""
    if d.within_rounding:
        return WITHIN_ROUNDING, WITHIN_ROUNDING
    relative = "> 1" if d.max_rel > 1 else f"{d.max_rel:.2g}"
    return short_number(d.max_abs), relative


def judged(d: Difference) -> str:
    """A row's verdict: pass or FAIL, and why where there is a note."""
    return ("pass" if d.passed else "FAIL") + (f" ({d.note})" if d.note else "")


def compare(
    parts: ModuleParts, fn: str, reference, args: tuple, rtol: float, atol: float
) -> Comparison:
    """`fn` against `reference` on `args`: per output, and op by op when `fn` was
    imported from `reference` with `add_torch`."""
    origin = parts.torch_origins.get(fn)
    by_op = origin is not None and origin.is_from(reference) and parts.entry(fn).kind == RELAX
    result = compared_outputs(parts, fn, reference, args, rtol, atol)
    if not by_op:
        result.why_not_op_by_op = (
            f"outputs only: `{fn}` was not imported with add_torch, so there is no graph to "
            "go op by op with"
            if origin is None
            else f"op by op needs the model `{fn}` was imported from with add_torch"
        )
        return result
    func = parts.entry(fn).func
    known = origin.binding_values(own_copies(args))
    replay = replayed(parts, fn, args, known)
    result.ops = op_checks(func, origin, known, replay, args, rtol, atol)
    first = result.first_divergence
    if first is not None and "NaN" in first.diff.note:
        result.nonfinite = trace(parts, fn, own_copies(args), stop_at="nonfinite").stopped
    return result


@contextmanager
def buffers_kept(model) -> Iterator[None]:
    """`model`'s buffers as they were, after running it: a model in training mode updates its
    running statistics (a batch norm's mean, variance and `num_batches_tracked`) on each call.
    compare leaves the user's model as it found it, and the values op by op are those of the
    same state as the outputs'."""
    buffers = list(model.buffers()) if isinstance(model, torch.nn.Module) else []
    kept = [b.clone() for b in buffers]
    try:
        yield
    finally:
        with torch.no_grad():
            for buffer, was in zip(buffers, kept, strict=True):
                buffer.copy_(was)


def compared_outputs(
    parts: ModuleParts, fn: str, reference, args: tuple, rtol: float, atol: float
) -> Comparison:
    """`fn`'s outputs (and the inputs it writes into) against `reference`'s, each run on its
    own copy of `args`. For a function from `add_torch(reference)`, an output's tolerance
    allows for the rounding PyTorch's own float32 run carries against float64."""
    origin = parts.torch_origins.get(fn)
    from_it = origin is not None and origin.is_from(reference)
    ours, theirs = own_copies(args), own_copies(args)
    actual = parts.function(fn)(*ours)  # compiles if needed, and checks the arguments
    model = origin.model if from_it else runnable(reference)
    with torch.no_grad(), buffers_kept(model):
        expected = model(*theirs)
    precise = origin.outputs_in_float64(own_copies(args)) if from_it else None
    names, outputs = output_differences(actual, expected, rtol, atol, precise)
    entry, written = parts.entry(fn), []
    if entry.kind != PRIMFUNC:  # a PrimFunc writes its outputs into its arguments by design
        params = [p.name for p in entry.func.params] if entry.kind == RELAX else []
        written = written_differences(args, ours, theirs, params, rtol, atol)
    return Comparison(parts.name, fn, rtol, atol, outputs, output_names=names, written=written)
