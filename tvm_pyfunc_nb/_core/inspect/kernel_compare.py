"""`NAME.compare("fn", reference, *args, by="kernel")`: the compiled, fused module kernel by kernel.

A fault that appears only after fusion, a schedule or a tuned kernel is
invisible op by op: the op-by-op compare runs a copy of the function, which
the pipeline fuses less. Here the module's own compiled function runs once
on a VM of its own under the instrument hook (as `profile` does), and each
launch (a kernel, a PyTorch call, a pyfunc) runs on the reference's values
of what it reads: before it runs, each input that holds the value of a
binding with a reference value (the output of an earlier launch, or a view
of one) is given that value. Each output it then writes is set against the
reference value of the binding it holds (`Linked.sites`: the bindings fused
into each call site; the last of them is a kernel's one output, and a kernel
with several, a split or a fused group, gives each binding the rest of the
function reads, in order):

- for a function from `add_torch(reference)`, the value of that binding's FX
  node in the PyTorch model;
- otherwise the value of that binding in a build with every optional pass
  off: the `default` pipeline (no fusion), no schedules, no offload.

So a kernel's check is about the error it adds, as an op's is in `compare`
(comparing.py): more than the rounding of the ops fused into it (the largest
reduction among them) is a divergence. Rows name the bindings and PyTorch ops
fused into each launch as `profile`'s rows do. The outputs are those of a plain call
of the function. A divergence that is a NaN says where the first non-finite
value comes from, as `trace(stop_at="nonfinite")` does.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass, field

import torch
import tvm
import tvm_ffi
from tvm import relax

from ...errors import CallError
from ..build.kernel_sites import MAX_PLACES, unique_names
from ..build.linking import prim_funcs, relax_names
from ..build.offload import PREFIX
from ..feature_checks import check_comparison
from ..live.cells import RELAX
from ..models.source_sites import where_of
from ..module_parts import ModuleParts
from ..run.tensors import own_copies, to_torch, to_tvm_tensor
from ..tables import text_table
from . import comparing
from .comparing import (
    Comparison,
    Difference,
    compared_outputs,
    difference,
    error_cells,
    judged,
    short_number,
    values_summed,
)
from .profiling import listed, torch_ops
from .tracing import NonFinite, input_vars, nonfinite_count, span, trace

CALL_PY_FUNC = "vm.builtin.call_py_func"
PLAIN = "the build with every optional pass off"


@dataclass(frozen=True)
class KernelCheck:
    """One launch of the compiled function against the reference values of what it computes:
    each of its outputs (a split's, a top-k's, a fused group's several) against the value of
    the binding it holds."""

    kernel: str  # `fused_matmul_add_relu`, `torch.linear`, a pyfunc's name
    callee: str  # what the lowered function calls it by
    bindings: tuple[str, ...]  # the bindings of the function fused into this launch
    outputs: tuple[tuple[str, Difference], ...] = ()  # (binding, error) of each output compared
    where: str = ""  # where in the model's code the bindings came from
    ops: tuple[str, ...] = ()  # the PyTorch ops fused into it, each once (from add_torch)

    @property
    def binding(self) -> str | None:
        """The binding compared: the first whose output diverges, else the first (None: no
        output has a reference value)."""
        failed = [b for b, d in self.outputs if not d.passed]
        return next(iter(failed or [b for b, _ in self.outputs]), None)

    @property
    def diff(self) -> Difference | None:
        """The launch's error: its outputs' largest, passed where every output passes (None:
        nothing to compare with)."""
        diffs = [d for _, d in self.outputs]
        if len(diffs) <= 1:
            return diffs[0] if diffs else None
        return Difference(
            max(d.max_abs for d in diffs),
            max(d.max_rel for d in diffs),
            all(d.passed for d in diffs),
            "; ".join(f"{b}: {d.note}" for b, d in self.outputs if d.note),
            max(d.scale for d in diffs),
            all(d.within_rounding for d in diffs),
        )


@dataclass
class KernelComparison(Comparison):
    """`compare(..., by="kernel")`: outputs, and each kernel launch against its reference."""

    checks: list[KernelCheck] = field(default_factory=list)
    reference_of_bindings: str = "PyTorch"  # or `PLAIN`
    named: str = ""  # the first divergence's kernel, described with its bindings and lines

    @property
    def first_divergence(self) -> KernelCheck | None:  # type: ignore[override]
        for check in self.checks:
            if check.diff is not None and not check.diff.passed:
                return check
        return None

    def kernel_header(self) -> tuple[str, ...]:
        """`kernel_rows()`'s columns: as `profile`'s, the bindings fused into each launch and
        (from add_torch) their PyTorch ops; what it was compared with, the errors, and where."""
        ops = ("PyTorch ops",) if any(c.ops for c in self.checks) else ()
        header = ("kernel", "bindings", *ops, "compared with", "max abs", "max rel", "")
        return header + (("where",) if any(c.where for c in self.checks) else ())

    def kernel_rows(self) -> list[tuple[str, ...]]:
        """A row per launch; where the text cuts a list short it says how many it left out
        (`.checks` keeps them all)."""
        sited, with_ops = any(c.where for c in self.checks), any(c.ops for c in self.checks)
        rows = []
        for c in self.checks:
            row = (c.kernel, listed(c.bindings)) + ((listed(c.ops),) if with_ops else ())
            if c.diff is None:
                row += ("", "", "", "no reference value")
            else:
                compared = listed(tuple(b for b, _ in c.outputs))
                row += (compared, *error_cells(c.diff), judged(c.diff))
            rows.append(row + ((c.where,) if sited else ()))
        return rows

    def verdict(self) -> str:
        first = self.first_divergence
        if first is None:
            if self.passed:
                return self._within() + ", kernel by kernel"
            return f"{self.function} does not match; no kernel diverges alone"
        note = f" ({first.diff.note})" if first.diff.note else ""
        line = (
            f"first divergence: {self.named or first.kernel}: "
            f"max abs error {short_number(first.diff.max_abs)}{note}"
        )
        return line + self.nonfinite_text()

    def __repr__(self) -> str:
        compared = sum(c.diff is not None for c in self.checks)
        return "\n".join(
            [
                f"compare {self.function} by kernel: {self.verdict()}",
                text_table(("output", "max abs", "max rel", ""), self.output_rows()),
                "",
                f"kernel by kernel: {compared} of {len(self.checks)} launches compared with "
                f"{self.reference_of_bindings}",
                text_table(self.kernel_header(), self.kernel_rows()),
            ]
        )


@dataclass
class _Launch:
    callee: str  # what the lowered function calls it by (kernel_sites' key)
    outputs: list[torch.Tensor]  # what it wrote, as it wrote it
    # the `[min, max]` of each input when it made nan or inf from finite inputs, else None
    from_finite: tuple[str, ...] | None = None

    def nonfinite(self) -> str:
        """`3 nan` (an output's), `1 inf; 2 nan` (two outputs')."""
        return "; ".join(nonfinite_count(out) for out in self.outputs if _nonfinite(out))


def _nonfinite(value: torch.Tensor) -> bool:
    return value.dtype.is_floating_point and not bool(value.isfinite().all())


def _launch(callee: str, outputs: list[torch.Tensor], inputs) -> _Launch:
    outs = [out.clone() for out in outputs]
    floats = [t for t in inputs if t.dtype.is_floating_point]
    if any(_nonfinite(out) for out in outs) and not any(_nonfinite(t) for t in floats):
        return _Launch(callee, outs, tuple(span(t) for t in floats))
    return _Launch(callee, outs)


def written_params(mod: tvm.IRModule) -> dict[str, list[int]]:
    """Each PrimFunc of `mod` -> the positions of the parameters it writes: its outputs."""
    found = {}
    for gv, func in prim_funcs(mod):
        stored: list = []  # the buffers a store writes (a parameter is its buffer)
        tvm_ffi.structural_walk(
            func.body,
            [(tvm.tirx.BufferStore, lambda store, seen=stored: seen.append(store.buffer))],
        )
        found[gv.name_hint] = [
            i for i, param in enumerate(func.params) if any(param.same_as(b) for b in stored)
        ]
    return found


class _OnReference:
    """The instrument: each launch run on the reference's values of what it reads, and what it
    wrote, in order.

    Which binding's value a tensor holds is known by its memory: each output of a launch holds
    the value of the binding it computes (a view, `vm.builtin.reshape`, shares that memory),
    until a launch writes there again. A kernel's outputs are the parameters its PrimFunc
    writes (several for a split; an input for a kernel that works in place); a PyTorch
    call's, its last argument; a pyfunc's, what it returns."""

    def __init__(self, linked, fn: str, func: relax.Function, values: dict[str, torch.Tensor]):
        self.kernels, self.skip = linked.kernels, set(relax_names(linked.lowered))
        self.written = written_params(linked.lowered)
        self.sites, self.values = linked.sites.of(fn), values
        self.outputs = _Outputs(func)
        self.held: dict[int, str | None] = {}  # address -> the binding whose value is there
        self.seen: dict[str, int] = defaultdict(int)
        self.launches: list[_Launch] = []
        self.bindings: list[tuple[str, ...]] = []  # of each launch
        self.targets: list[list[str | None]] = []  # the binding each output is compared with

    def __call__(self, func, symbol, before, ret, *args):
        symbol = str(symbol)
        if symbol in self.skip:
            return 0
        if symbol in self.kernels or symbol.startswith(PREFIX):
            tensors = {
                i: to_torch(a) for i, a in enumerate(args) if isinstance(a, tvm.runtime.Tensor)
            }
            written = self.written.get(symbol) or self._last(symbol, list(tensors))
            inputs = [t for i, t in tensors.items() if i not in written]
            outs = [tensors[i] for i in written]
            fed = list(tensors.values())  # an output a kernel writes in place is read too
        elif symbol == CALL_PY_FUNC:  # (registered name, its arguments) -> its result
            symbol = str(args[0][0])
            fed = inputs = [to_torch(a) for a in args[0][1] if isinstance(a, tvm.runtime.Tensor)]
            outs = [to_torch(ret)] if isinstance(ret, tvm.runtime.Tensor) else []
        else:
            return 0
        if before:
            for tensor in fed:
                self._feed(tensor)
        else:
            self._wrote(symbol, inputs, outs)
        return 0

    def _feed(self, tensor: torch.Tensor) -> None:
        value = self.values.get(self.held.get(tensor.data_ptr()))
        if value is not None and value.numel() == tensor.numel() and value.dtype == tensor.dtype:
            tensor.copy_(value.reshape(tensor.shape))

    def _call_site(self, callee: str) -> tuple[str, ...]:
        """The bindings of the launch of `callee` under way."""
        call_sites, k = self.sites.get(callee, []), self.seen[callee]
        return tuple(call_sites[k]) if k < len(call_sites) else ()

    def _last(self, callee: str, positions: list[int]) -> list[int]:
        """The outputs of a launch whose PrimFunc writes through a call (`tvm.contrib.sort.topk`)
        or of a PyTorch call: the last arguments, one per field of what it computes."""
        return positions[-self.outputs.count(self._call_site(callee)) :]

    def _wrote(self, callee: str, inputs: list[torch.Tensor], outs: list[torch.Tensor]) -> None:
        bindings = self._call_site(callee)
        self.seen[callee] += 1
        targets = self.outputs.targets(bindings, outs, self.values)
        for out, target in zip(outs, targets, strict=True):
            self.held[out.data_ptr()] = target
        self.launches.append(_launch(callee, outs, inputs))
        self.bindings.append(bindings)
        self.targets.append(targets)


class _Outputs:
    """Which bindings of `func` the outputs of a launch hold."""

    def __init__(self, func: relax.Function):
        bindings, name = _by_name(func)
        self.calls = {name(b.var): b.value for b in bindings}
        self.readers: dict[str, set[str]] = defaultdict(set)  # binding -> the bindings reading it
        self.items: dict[str, dict[int, str]] = defaultdict(dict)  # tuple -> {index: its item}
        self.fields: dict[str, int] = {}  # tuple binding -> how many fields
        for b in bindings:
            for var in input_vars(b.value):
                self.readers[name(var)].add(name(b.var))
            value = b.value
            if isinstance(value, relax.TupleGetItem) and isinstance(value.tuple_value, relax.Var):
                self.items[name(value.tuple_value)].setdefault(value.index, name(b.var))
            if isinstance(b.var.ty, relax.TupleType):
                self.fields[name(b.var)] = len(b.var.ty.fields)
        self.name = name
        self.result = {name(var) for var in input_vars(func.body.body)}

    def targets(self, bindings: tuple[str, ...], outs: list, values: dict) -> list[str | None]:
        """The binding each of `outs` is the value of (None: none with a reference value). One
        output: the last of the launch's bindings with a reference value of its shape that does
        not only name another of them (`gv = lv6`). Several: the bindings the launch gives the
        rest of the function, in order (a split's tuple by its items)."""
        if len(outs) == 1:
            return [self._last(bindings, outs[0], values)]
        given = self._given(bindings)
        if len(given) != len(outs):
            return [None] * len(outs)
        return [
            b if b in values and tuple(values[b].shape) == tuple(out.shape) else None
            for b, out in zip(given, outs, strict=True)
        ]

    def count(self, bindings: tuple[str, ...]) -> int:
        """How many values a launch computes: the fields of a tuple (a top-k's values and
        indices) where its last binding is one, else one."""
        return self.fields.get(bindings[-1], 1) if bindings else 1

    def _last(self, bindings: tuple[str, ...], out, values: dict) -> str | None:
        return next(
            (
                b
                for b in reversed(bindings)
                if b in values
                and tuple(values[b].shape) == tuple(out.shape)
                and not self._alias_within(self.calls.get(b), bindings)
            ),
            None,
        )

    def _alias_within(self, value, bindings: tuple[str, ...]) -> bool:
        """Whether a binding only names another of the same launch (`gv = lv6`): the other is
        what the launch computes."""
        return isinstance(value, relax.Var) and self.name(value) in bindings

    def _given(self, bindings: tuple[str, ...]) -> list[str | None]:
        """Each of `bindings` that a later binding reads (or the function returns), a tuple as
        its items (None for an item nothing reads)."""
        found: list[str | None] = []
        for b in bindings:
            if b in self.fields:
                found.extend(self.items[b].get(i) for i in range(self.fields[b]))
            elif b in self.result or self.readers[b] - set(bindings):
                found.append(b)
        return found


def _by_name(func: relax.Function):
    """`func`'s bindings, and the name of a variable as trace and the script give it (`h_1`
    for the second binding of `h`; a parameter by its name)."""
    bindings = [b for block in func.body.blocks for b in block.bindings]
    names = dict(zip((b.var for b in bindings), unique_names(b.var for b in bindings), strict=True))
    return bindings, lambda var: names.get(var, var.name)


def compare_kernels(
    parts: ModuleParts, fn: str, reference, args: tuple, rtol: float, atol: float
) -> KernelComparison:
    """Run the compiled `fn` once, each launch on its inputs' reference values, its output
    against its binding's reference."""
    entry = parts.entry(fn, kind=RELAX, needed_by='compare(by="kernel")')
    outputs = compared_outputs(parts, fn, reference, args, rtol, atol)  # compiles if needed
    linked = parts.compiler.linked_for(parts.state, fn)
    origin = parts.torch_origins.get(fn)
    from_torch = origin is not None and origin.is_from(reference)
    values = (
        origin.binding_values(own_copies(args))
        if from_torch
        else dict(trace(parts, fn, own_copies(args), build=parts.build.reference()))
    )
    _through_aliases(entry.func, values)
    hook = _OnReference(linked, fn, entry.func, values)
    vm = linked.instrumented_vm(parts.device, hook)
    vm[fn](*to_tvm_tensor(list(own_copies(args))))
    site_of = origin.site if origin is not None else (lambda binding: None)
    checks = _checks(entry.func, hook, values, args, (rtol, atol), parts.compiler.bridge.names)
    checks = [
        dataclasses.replace(
            c, where=where_of(site_of(b) for b in c.bindings), ops=torch_ops(origin, c.bindings)
        )
        for c in checks
    ]
    result = KernelComparison(
        **{f.name: getattr(outputs, f.name) for f in dataclasses.fields(Comparison)},
        checks=checks,
        reference_of_bindings="PyTorch" if from_torch else PLAIN,
    )
    first = result.first_divergence
    if first is not None:
        result.named = _named(first, fn, site_of)
        if "NaN" in first.diff.note:
            result.nonfinite = _first_nonfinite(checks, hook.launches, site_of)
    return result


def _first_nonfinite(checks: list[KernelCheck], launches: list[_Launch], site_of):
    """The first launch that made nan or inf from finite inputs, as `trace` names a binding."""
    for check, launch in zip(checks, launches, strict=True):
        if launch.from_finite is not None:
            inputs = tuple((f"input {i}", s) for i, s in enumerate(launch.from_finite, 1))
            binding = check.binding or (check.bindings[-1] if check.bindings else "?")
            what = launch.nonfinite()
            return NonFinite(binding, f"kernel {check.kernel}", what, inputs, site_of(binding))
    return None


def _named(check: KernelCheck, fn: str, site_of) -> str:
    """`kernel `fused_matmul_add` (bindings lv3, lv4 of `main`, from fc1 (Linear), net.py:12:
    h = self.fc1(x))`: the launch and the places in the model's code its bindings came from."""
    if not check.bindings:
        return f"kernel `{check.kernel}`"
    many = len(check.bindings) > 1
    which = f"binding{'s' * many} {', '.join(check.bindings)} of `{fn}`"
    places = list(dict.fromkeys(str(s) for b in check.bindings if (s := site_of(b))))
    where = f", from {'; '.join(places[:MAX_PLACES])}" if places else ""
    return f"kernel `{check.kernel}` ({which}{where})"


def _through_aliases(func: relax.Function, values: dict[str, torch.Tensor]) -> None:
    """`gv = lv6`: `gv` has the value of `lv6` (a launch may be bound to either, once a pass
    folded one into the other)."""
    bindings, name = _by_name(func)
    for binding in bindings:
        value = binding.value
        if isinstance(value, relax.Var) and name(value) in values:
            values.setdefault(name(binding.var), values[name(value)])


def _checks(func, hook: _OnReference, values, args, tolerance, pyfuncs) -> list[KernelCheck]:
    """Each launch's output against the reference value of the binding it computes, within
    the rounding of the largest reduction fused into it."""
    bindings, name = _by_name(func)
    calls = {name(b.var): b.value for b in bindings}
    shapes = {p.name: tuple(a.shape) for p, a in zip(func.params, args, strict=False)}
    shapes.update({name: tuple(v.shape) for name, v in values.items()})
    checks = []
    for launch, bindings, targets in zip(hook.launches, hook.bindings, hook.targets, strict=True):
        name = pyfuncs.get(launch.callee, launch.callee.removeprefix(PREFIX))
        reduction = max(
            (values_summed(calls.get(b), shapes, shapes.get(b, ())) for b in bindings), default=1
        )
        outputs = tuple(
            (target, difference(out, values[target], *tolerance, reduction=reduction))
            for out, target in zip(launch.outputs, targets, strict=True)
            if target is not None
        )
        checks.append(KernelCheck(name, launch.callee, bindings, outputs))
    return checks


BY = ("binding", "kernel")  # how `compare` goes through the function


def compare(
    parts: ModuleParts, fn: str, reference, args: tuple, rtol: float, atol: float, by: str
) -> Comparison:
    """`compare(..., by=...)`: op by op (comparing.py) or kernel by kernel."""
    check_comparison("compare", fn, reference, args, rtol, atol)
    if by not in BY:
        raise CallError(
            f"compare: by must be one of {', '.join(map(repr, BY))}, not {by!r}", function=fn
        )
    if by == "binding":
        return comparing.compare(parts, fn, reference, args, rtol, atol)
    return compare_kernels(parts, fn, reference, args, rtol, atol)
