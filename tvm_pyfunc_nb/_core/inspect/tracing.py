"""`NAME.trace("fn", *args)`: every intermediate value of one run of a Relax function, by binding.

The user's function is never touched: a copy, lowered out of its dataflow
blocks (`ToNonDataflow`), returns its own output together with every
tensor-typed binding, and is compiled and run like any other Relax function
(the build keeps it, so tracing again compiles nothing). With a fusing
pipeline the taps keep the bindings apart, so a traced run may fuse less
than the plain one; the values are those of the same ops.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import torch
import tvm
from tvm import relax

from ...errors import CallError
from ..build.kernel_sites import unique_names
from ..live.cells import PYFUNC, RELAX
from ..live.relax_rewrite import relax_closure, sub_module
from ..models.source_sites import SourceSite
from ..module_parts import ModuleParts
from ..run.tensors import own_copies, to_torch
from ..tables import text_table

STOPS = ("nonfinite",)  # what `trace(..., stop_at=)` can stop at

# A mean within this many units in the last place of a tensor's largest value shows as `~0`.
MEAN_NOISE_ULPS = 8


@dataclass(frozen=True)
class Tap:
    """One binding of the traced function: its name and what computes it."""

    name: str
    op: str


def tapped(func: relax.Function) -> tuple[relax.Function, list[Tap]]:
    """A copy of `func` returning `(its output, (every tensor-typed binding, ...))`."""
    plain = relax.transform.ToNonDataflow()(tvm.IRModule({"f": func}))["f"]
    blocks = list(plain.body.blocks)
    bindings = [
        b for block in blocks for b in block.bindings if isinstance(b.var.ty, relax.TensorType)
    ]
    body = relax.SeqExpr(
        blocks, relax.Tuple([plain.body.body, relax.Tuple([b.var for b in bindings])])
    )
    body = relax.BlockBuilder().normalize(body)
    copy = relax.Function(plain.params, body, None, plain.is_pure, plain.attrs)
    names = unique_names(b.var for b in bindings)
    return copy, [Tap(name, op_of(b.value)) for name, b in zip(names, bindings, strict=True)]


def op_of(value) -> str:
    """What computes a binding: `matmul`, `nn.relu`, `call_tir add_tir`, `call_py_func scale`..."""
    if isinstance(value, relax.Call):
        op = value.op
        if isinstance(op, tvm.ir.Op):
            name = op.name.removeprefix("relax.")
            if name in ("call_tir", "call_tir_with_grad", "call_tir_inplace"):
                return f"{name} {value.args[0].name_hint}"
            if name in ("call_py_func", "call_dps_packed") and hasattr(value.args[0], "value"):
                return f"{name} {value.args[0].value}"
            if name == "call_dps_packed":
                return f"{name} {getattr(value.args[0], 'global_symbol', '?')}"
            return name
        if isinstance(op, tvm.ir.GlobalVar):
            return f"call {op.name_hint}"
        return type(op).__name__
    return type(value).__name__


@dataclass(frozen=True)
class TracedValue:
    """One intermediate of a run: the binding, its op, and its value."""

    name: str
    op: str
    value: torch.Tensor


def inputs_of(value) -> list[str]:
    """The bindings and parameters a binding's value reads, by name."""
    return [var.name for var in input_vars(value)]


def input_vars(value) -> list[relax.Var]:
    """The bindings and parameters a binding's value reads."""
    if isinstance(value, relax.Call):
        return [var for arg in value.args for var in input_vars(arg)]
    if isinstance(value, relax.Tuple):
        return [var for item in value.fields for var in input_vars(item)]
    if isinstance(value, relax.TupleGetItem):
        return input_vars(value.tuple_value)
    return [value] if isinstance(value, relax.Var) else []


@dataclass(frozen=True)
class NonFinite:
    """The first binding whose value holds nan or inf while every input it reads is finite."""

    binding: str
    op: str
    what: str  # "3 nan", "1 inf, 2 nan"
    inputs: tuple[tuple[str, str], ...]  # (input, "[min, max]") for each tensor it reads
    site: SourceSite | None = None

    def __str__(self) -> str:
        ranges = "; ".join(f"{name} in {span}" for name, span in self.inputs) or "no tensor inputs"
        where = f" at {self.site}" if self.site else ""
        return (
            f"`{self.binding}` = {self.op} makes {self.what} from finite inputs ({ranges}){where}"
        )


def first_nonfinite(
    func: relax.Function, values: Mapping[str, torch.Tensor], params: Mapping[str, object], where
) -> NonFinite | None:
    """The first binding of `func` with a non-finite value (`values`, by binding) whose inputs
    (`values` and the call's `params`) are all finite; `where(binding)` its `SourceSite`."""
    known = {**params, **values}
    for block in func.body.blocks:
        for binding in block.bindings:
            name = binding.var.name
            value = values.get(name)
            if not _floating(value) or bool(value.isfinite().all()):
                continue
            inputs = [(n, known[n]) for n in dict.fromkeys(inputs_of(binding.value)) if n in known]
            tensors = [(n, v) for n, v in inputs if isinstance(v, torch.Tensor)]
            if all(bool(v.isfinite().all()) for n, v in tensors if _floating(v)):
                return NonFinite(
                    name,
                    op_of(binding.value),
                    nonfinite_count(value),
                    tuple((n, span(v)) for n, v in tensors),
                    where(name),
                )
    return None


def _floating(value) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype.is_floating_point


def nonfinite_count(value: torch.Tensor) -> str:
    nan, inf = int(value.isnan().sum()), int(value.isinf().sum())
    return ", ".join(f"{k} {what}" for k, what in ((nan, "nan"), (inf, "inf")) if k)


def span(value: torch.Tensor) -> str:
    """`[min, max]` of a tensor (its true-count for booleans)."""
    if value.numel() == 0:
        return "empty"
    if value.dtype == torch.bool or value.is_complex():
        return summary(value)
    return f"[{value.min().item():.4g}, {value.max().item():.4g}]"


class Trace(Mapping[str, torch.Tensor]):
    """The intermediates of one run of `function`, in order: `trace["lv1"]` is a `torch.Tensor`.

    `trace.output` is what the function returned; `trace.intermediates` the
    `TracedValue`s (binding, op, value); `trace.where` the `SourceSite` of each
    binding a PyTorch model's code made (for a function from `add_torch`);
    shown as a table of binding, op, shape, dtype, min/max/mean (and where).
    """

    def __init__(
        self,
        function: str,
        intermediates: list[TracedValue],
        output,
        where: Mapping[str, SourceSite] | None = None,
        module: str = "",
    ):
        self.module = module  # the live module's name
        self.function = function
        self.intermediates = intermediates
        self.output = output
        self.where = dict(where or {})
        self._by_name = {v.name: v.value for v in intermediates}
        self.stop_at: str | None = None  # what the trace was asked to stop at
        self.stopped: NonFinite | None = None  # where it stopped (None: it ran to the end)

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._by_name[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)

    def rows(self) -> list[tuple[str, str, str, str, str]]:
        """`(binding, op, shape, dtype, "min / max / mean")` for each intermediate."""
        return [
            (v.name, v.op, str(list(v.value.shape)), _dtype(v.value), summary(v.value))
            for v in self.intermediates
        ]

    def header(self) -> tuple[str, ...]:
        """The table's columns: `rows()`'s, and `where` for a function from `add_torch`."""
        return ("binding", "op", "shape", "dtype", "min / max / mean") + (
            ("where",) if self.where else ()
        )

    def table_rows(self) -> list[tuple[str, ...]]:
        """`rows()`, each with where its binding came from in the model's code
        (`layer.0.attention.self.query · modeling_bert.py:312`) for a function from `add_torch`."""
        if not self.where:
            return self.rows()
        return [
            (*row, site.short() if (site := self.where.get(row[0])) else "") for row in self.rows()
        ]

    def stopped_at(self, found: NonFinite) -> None:
        """Keep the intermediates up to `found`'s binding, where the trace stops."""
        self.stopped = found
        names = [v.name for v in self.intermediates]
        self.intermediates = self.intermediates[: names.index(found.binding) + 1]
        self._by_name = {v.name: v.value for v in self.intermediates}

    def title(self) -> str:
        """`trace of f: 12 intermediates`, and where it stopped when asked to stop."""
        head = f"trace of {self.function}: {len(self)} intermediates"
        if self.stopped is not None:
            return f"{head}, stopped at the first non-finite value: {self.stopped}"
        if self.stop_at is not None:
            return f"{head}; no binding makes nan or inf from finite inputs"
        return head

    def __repr__(self) -> str:
        return f"{self.title()}\n" + text_table(self.header(), self.table_rows())


def traced_values(taps: list[Tap], outputs) -> list[TracedValue]:
    return [
        TracedValue(tap.name, tap.op, to_torch(value))
        for tap, value in zip(taps, outputs, strict=True)
    ]


def summary(value: torch.Tensor) -> str:
    """`min / max / mean` of a tensor's values (its true-count for booleans)."""
    if value.numel() == 0:
        return "empty"
    if value.dtype == torch.bool:
        return f"{int(value.sum())} of {value.numel()} true"
    if value.is_complex():
        return ""
    flat = value.detach().reshape(-1)
    low, high = flat.min().item(), flat.max().item()
    mean = flat.to(torch.float64).mean().item()
    return f"{low:.4g} / {high:.4g} / {mean_text(mean, value.dtype, max(abs(low), abs(high)))}"


def mean_text(mean: float, dtype: torch.dtype, largest: float) -> str:
    """A mean, or `~0` for one within a few units in the last place of the largest value (a
    normalized tensor's): what is left there is rounding, whose bits vary from CPU to CPU."""
    noise = MEAN_NOISE_ULPS * torch.finfo(dtype).eps * largest if dtype.is_floating_point else 0
    return "~0" if noise > 0 and abs(mean) <= noise else f"{mean:.4g}"


def _dtype(value: torch.Tensor) -> str:
    return str(value.dtype).removeprefix("torch.")


def trace(
    parts: ModuleParts, fn: str, args: tuple, build=None, stop_at: str | None = None
) -> Trace:
    """Run Relax function `fn` once on copies of `args` (a function that writes into its inputs
    leaves the caller's be), every intermediate kept by binding (compiled by `build`, the
    module's own by default); `stop_at="nonfinite"` keeps them up to the first
    binding that makes nan or inf from finite inputs."""
    if stop_at is not None and stop_at not in STOPS:
        raise CallError(
            f"trace: stop_at must be one of {', '.join(map(repr, STOPS))} or None, not {stop_at!r}",
            function=fn,
        )
    entry = parts.entry(fn, kind=RELAX, needed_by="trace")
    copy, taps = tapped(entry.func)
    linked = linked_copy(parts, fn, copy, build)
    output, values = parts.runner.run_relax(fn, linked, entry, own_copies(args))
    origin = parts.torch_origins.get(fn)
    where = {t.name: origin.site(t.name) for t in taps} if origin is not None else {}
    sites = {b: s for b, s in where.items() if s}
    traced = Trace(fn, traced_values(taps, values), output, sites, module=parts.name)
    if stop_at is not None:
        stop(traced, entry.func, args, stop_at)
    return traced


def linked_copy(parts: ModuleParts, fn: str, copy: relax.Function, build=None):
    """The module's Relax function `fn`, and what it calls, linked with `copy` in its place, by
    `build` (the module's own by default), which keeps it: running it again compiles nothing."""
    state = parts.state
    names = [n for n in relax_closure([fn], state.ir_mod) if state.entries[n].kind != PYFUNC]
    mod = sub_module(state.ir_mod, names)
    mod = tvm.IRModule(
        {gv: copy if gv.name_hint == fn else f for gv, f in mod.functions_items()},
        attrs=mod.attrs,
    )
    compiler = parts.compiler
    return (build or compiler.build).link(compiler.bridge.vm_module(mod))


def stop(traced: Trace, func: relax.Function, args: tuple, stop_at: str) -> None:
    """Cut `traced` after the first binding that makes nan or inf from finite inputs."""
    traced.stop_at = stop_at
    params = {p.name: a for p, a in zip(func.params, args, strict=False)}
    found = first_nonfinite(func, traced, params, traced.where.get)
    if found is None:
        return
    traced.stopped_at(found)
