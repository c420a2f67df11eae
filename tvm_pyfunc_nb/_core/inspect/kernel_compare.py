"""`NAME.compare("fn", reference, *args, by="kernel")`: the compiled, fused module kernel by kernel.

A fault that appears only after fusion, a schedule or a tuned kernel is
invisible op by op: the op-by-op compare runs a copy of the function, which
the pipeline fuses less. Here the module's own compiled function runs once
on a VM of its own under the instrument hook (as `profile` does), and each
launch (a kernel, a PyTorch call, a pyfunc) runs on the reference's values
of what it reads: before it runs, each input that holds the value of a
binding with a reference value (the output of an earlier launch, or a view
of one) is given that value. What it then writes is set against the
reference value of the binding it computes (`Linked.sites`: the bindings
fused into each call site, the last of them its output):

- for a function from `add_torch(reference)`, the value of that binding's FX
  node in the PyTorch model;
- otherwise the value of that binding in a build with every optional pass
  off: the `default` pipeline (no fusion), no schedules, no offload.

So a kernel's check is about the error it adds, as an op's is in `compare`
(comparing.py): more than the rounding of the ops fused into it (the largest
reduction among them) is a divergence. The outputs are those of a plain call
of the function. A divergence that is a NaN says where the first non-finite
value comes from, as `trace(stop_at="nonfinite")` does.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass, field

import torch
import tvm
from tvm import relax

from ...errors import CallError
from ..build.kernel_sites import MAX_PLACES, unique_names
from ..build.linking import relax_names
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
from .tracing import NonFinite, nonfinite_count, span, trace

CALL_PY_FUNC = "vm.builtin.call_py_func"
PLAIN = "the build with every optional pass off"


@dataclass(frozen=True)
class KernelCheck:
    """One launch of the compiled function against the reference value of what it computes."""

    kernel: str  # `fused_matmul_add_relu`, `torch.linear`, a pyfunc's name
    callee: str  # what the lowered function calls it by
    bindings: tuple[str, ...]  # the bindings of the function fused into this launch
    binding: str | None  # the one whose value its output is (None: none known)
    diff: Difference | None  # None: nothing to compare with
    where: str = ""  # where in the model's code the bindings came from


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
        header = ("kernel", "bindings", "compared with", "max abs", "max rel", "")
        return header + (("where",) if any(c.where for c in self.checks) else ())

    def kernel_rows(self) -> list[tuple[str, ...]]:
        sited = any(c.where for c in self.checks)
        rows = []
        for c in self.checks:
            bindings = ", ".join(c.bindings)
            if c.diff is None:
                row = (c.kernel, bindings, "", "", "", "no reference value")
            else:
                row = (c.kernel, bindings, c.binding, *error_cells(c.diff), judged(c.diff))
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
    output: torch.Tensor | None
    # the `[min, max]` of each input when it made nan or inf from finite inputs, else None
    from_finite: tuple[str, ...] | None = None


def _launch(callee: str, output, inputs) -> _Launch:
    out = output.clone() if isinstance(output, torch.Tensor) else None
    floats = [t for t in inputs if t.dtype.is_floating_point]
    made = out is not None and out.dtype.is_floating_point and not bool(out.isfinite().all())
    if made and all(bool(t.isfinite().all()) for t in floats):
        return _Launch(callee, out, tuple(span(t) for t in floats))
    return _Launch(callee, out)


class _OnReference:
    """The instrument: each launch run on the reference's values of what it reads, and what it
    wrote, in order.

    Which binding's value a tensor holds is known by its memory: the output of a launch holds
    the value of the binding it computes (a view, `vm.builtin.reshape`, shares that memory).
    An address stays that binding's only while what is there is its reference value: a launch
    that writes there (another output of a kernel with several) ends it."""

    def __init__(self, linked, fn: str, func: relax.Function, values: dict[str, torch.Tensor]):
        self.kernels, self.skip = linked.kernels, set(relax_names(linked.lowered))
        self.sites, self.values = linked.sites.of(fn), values
        self.aliases = _bound(func)[1]
        self.held: dict[int, str | None] = {}  # address -> the binding whose value is there
        self.seen: dict[str, int] = defaultdict(int)
        self.launches: list[_Launch] = []
        self.bindings: list[tuple[str, ...]] = []  # of each launch
        self.targets: list[str | None] = []  # the binding each launch's output is compared with

    def __call__(self, func, symbol, before, ret, *args):
        symbol = str(symbol)
        if symbol in self.skip:
            return 0
        if symbol in self.kernels or symbol.startswith(PREFIX):  # the output is the last
            tensors = [to_torch(a) for a in args if isinstance(a, tvm.runtime.Tensor)]
            inputs, out = tensors[:-1], tensors[-1] if tensors else None
        elif symbol == CALL_PY_FUNC:  # (registered name, its arguments) -> its result
            symbol = str(args[0][0])
            inputs = [to_torch(a) for a in args[0][1] if isinstance(a, tvm.runtime.Tensor)]
            out = to_torch(ret) if isinstance(ret, tvm.runtime.Tensor) else None
        else:
            return 0
        if before:
            for tensor in inputs:
                self._feed(tensor)
        else:
            self._wrote(symbol, inputs, out)
        return 0

    def _feed(self, tensor: torch.Tensor) -> None:
        value = self.values.get(self.held.get(tensor.data_ptr()))
        if value is not None and value.numel() == tensor.numel() and value.dtype == tensor.dtype:
            tensor.copy_(value.reshape(tensor.shape))

    def _wrote(self, callee: str, inputs: list[torch.Tensor], out) -> None:
        for tensor in inputs:  # still the value fed? (a kernel's other outputs are not)
            value = self.values.get(self.held.get(tensor.data_ptr()))
            if value is not None and not _holds(tensor, value):
                self.held[tensor.data_ptr()] = None
        k = self.seen[callee]
        self.seen[callee] += 1
        call_sites = self.sites.get(callee, [])
        bindings = tuple(call_sites[k]) if k < len(call_sites) else ()
        target = _target(bindings, out, self.values, self.aliases)
        if out is not None:
            self.held[out.data_ptr()] = target
        self.launches.append(_launch(callee, out, inputs))
        self.bindings.append(bindings)
        self.targets.append(target)


def _holds(tensor: torch.Tensor, value: torch.Tensor) -> bool:
    return value.numel() == tensor.numel() and torch.equal(tensor, value.reshape(tensor.shape))


def _target(bindings: tuple[str, ...], out, values: dict, aliases: dict) -> str | None:
    """The binding a launch's output is the value of: the last of its bindings with a reference
    value of the output's shape that does not only name another of them (`gv = lv6`)."""
    if out is None:
        return None
    return next(
        (
            b
            for b in reversed(bindings)
            if b in values
            and tuple(values[b].shape) == tuple(out.shape)
            and aliases.get(b) not in bindings  # `gv = lv6`: lv6 is what the launch computes
        ),
        None,
    )


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
    _through_aliases(_bound(entry.func)[1], values)
    hook = _OnReference(linked, fn, entry.func, values)
    vm = linked.instrumented_vm(parts.device, hook)
    vm[fn](*to_tvm_tensor(list(own_copies(args))))
    site_of = origin.site if origin is not None else (lambda binding: None)
    checks = _checks(entry.func, hook, values, args, (rtol, atol), parts.compiler.bridge.names)
    checks = [
        dataclasses.replace(c, where=where_of(site_of(b) for b in c.bindings)) for c in checks
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
            what = nonfinite_count(launch.output)
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


def _bound(func: relax.Function) -> tuple[dict[str, relax.Expr], dict[str, str]]:
    """Each binding's value by the name trace gives the binding (`h_1` for a second `h`), and
    the bindings that only name another (`gv = lv6`: `{"gv": "lv6"}`)."""
    bindings = [b for block in func.body.blocks for b in block.bindings]
    name_of = dict(
        zip((b.var for b in bindings), unique_names(b.var for b in bindings), strict=True)
    )
    calls = {name_of[b.var]: b.value for b in bindings}
    aliases = {
        name: name_of.get(value, value.name)
        for name, value in calls.items()
        if isinstance(value, relax.Var)
    }
    return calls, aliases


def _through_aliases(aliases: dict[str, str], values: dict[str, torch.Tensor]) -> None:
    """`gv = lv6`: `gv` has the value of `lv6` (a launch may be bound to either, once a pass
    folded one into the other)."""
    for name, other in aliases.items():
        if other in values:
            values.setdefault(name, values[other])


def _checks(func, hook: _OnReference, values, args, tolerance, pyfuncs) -> list[KernelCheck]:
    """Each launch's output against the reference value of the binding it computes, within
    the rounding of the largest reduction fused into it."""
    calls = _bound(func)[0]
    shapes = {p.name: tuple(a.shape) for p, a in zip(func.params, args, strict=False)}
    shapes.update({name: tuple(v.shape) for name, v in values.items()})
    checks = []
    for launch, bindings, target in zip(hook.launches, hook.bindings, hook.targets, strict=True):
        name = pyfuncs.get(launch.callee, launch.callee.removeprefix(PREFIX))
        diff = None
        if target is not None:
            reduction = max(
                (values_summed(calls.get(b), shapes, shapes.get(b, ())) for b in bindings),
                default=1,
            )
            diff = difference(launch.output, values[target], *tolerance, reduction=reduction)
        checks.append(KernelCheck(name, launch.callee, bindings, target, diff))
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
