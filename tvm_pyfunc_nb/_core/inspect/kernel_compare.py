"""`NAME.compare("fn", reference, *args, by="kernel")`: the compiled, fused module kernel by kernel.

A fault that appears only after fusion, a schedule or a tuned kernel is
invisible op by op: the op-by-op compare runs a traced copy of the function,
which the pipeline fuses less. Here the module's own compiled function runs
once on a VM of its own under the instrument hook (as `profile` does), and
what each launch wrote (a kernel's or a PyTorch call's output argument, a
pyfunc's result) is set against the reference value of the binding it
computes (`Linked.sites`: the bindings fused into each call site, the last
of them its output):

- for a function from `add_torch(reference)`, the value of that binding's FX
  node in the PyTorch model;
- otherwise the value of that binding in a build with every optional pass
  off: the `default` pipeline (no fusion), no schedules, no offload.

An error counts as a divergence as `compare` judges a binding: more than the
rounding of the ops fused in (the largest reduction among them) and the error
its inputs already carried explain. A divergence that is a NaN says where the
first non-finite value comes from, as `trace(stop_at="nonfinite")` does.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass, field

import torch
import tvm
from tvm import relax

from ...errors import CallError
from ..build.kernel_sites import MAX_PLACES
from ..build.linking import relax_names
from ..build.offload import PREFIX
from ..live.cells import RELAX
from ..models.source_sites import where_of
from ..module_parts import ModuleParts
from ..run.tensors import to_torch, to_tvm_tensor
from ..tables import text_table
from . import comparing
from .comparing import (
    Comparison,
    Difference,
    difference,
    error_cells,
    judged,
    output_differences,
    short_number,
    values_summed,
)
from .tracing import NonFinite, inputs_of, nonfinite_count, span, trace

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
    floats = [to_torch(t) for t in inputs if isinstance(t, tvm.runtime.Tensor)]
    floats = [t for t in floats if t.dtype.is_floating_point]
    made = out is not None and out.dtype.is_floating_point and not bool(out.isfinite().all())
    if made and all(bool(t.isfinite().all()) for t in floats):
        return _Launch(callee, out, tuple(span(t) for t in floats))
    return _Launch(callee, out)


class _Outputs:
    """The instrument: what each launch wrote, in order."""

    def __init__(self, kernels, skip: set[str]):
        self.kernels, self.skip = kernels, skip
        self.launches: list[_Launch] = []

    def __call__(self, func, symbol, before, ret, *args):
        symbol = str(symbol)
        if before or symbol in self.skip:
            return 0
        if symbol in self.kernels or symbol.startswith(PREFIX):  # the output is the last
            tensors = [a for a in args if isinstance(a, tvm.runtime.Tensor)]
            out = to_torch(tensors[-1]) if tensors else None
            self.launches.append(_launch(symbol, out, tensors[:-1]))
        elif symbol == CALL_PY_FUNC:  # (registered name, its arguments) -> its result
            self.launches.append(_launch(str(args[0][0]), to_torch(ret), list(args[0][1])))
        return 0


def compare_kernels(
    parts: ModuleParts, fn: str, reference, args: tuple, rtol: float, atol: float
) -> KernelComparison:
    """Run the compiled `fn` once, each launch's output against its binding's reference."""
    entry = parts.entry(fn, kind=RELAX, needed_by='compare(by="kernel")')
    parts.function(fn)(*args)  # compiles if needed, and checks the arguments
    linked = parts.compiler.linked_for(parts.state, fn)
    with torch.no_grad():
        expected_output = reference(*args)
    hook = _Outputs(linked.kernels, set(relax_names(linked.lowered)))
    vm = linked.instrumented_vm(parts.device, hook)
    output = to_torch(vm[fn](*to_tvm_tensor(list(args))))
    names, outputs = output_differences(output, expected_output, rtol, atol)
    origin = parts.torch_origins.get(fn)
    from_torch = origin is not None and origin.model is reference
    values = (
        _fx_values(origin, args)
        if from_torch
        else dict(trace(parts, fn, args, build=parts.build.reference()))
    )
    _through_aliases(entry.func, values)
    site_of = origin.site if origin is not None else (lambda binding: None)
    pyfuncs = parts.compiler.bridge.names
    checks = _checks(
        entry.func, linked.sites.of(fn), hook.launches, values, args, (rtol, atol), pyfuncs
    )
    checks = [
        dataclasses.replace(c, where=where_of(site_of(b) for b in c.bindings)) for c in checks
    ]
    result = KernelComparison(
        parts.name,
        fn,
        rtol,
        atol,
        outputs,
        output_names=names,
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


def _through_aliases(func: relax.Function, values: dict[str, torch.Tensor]) -> None:
    """`gv = lv6`: `gv` has the value of `lv6` (a launch may be bound to either, once a pass
    folded one into the other)."""
    for block in func.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Var) and value.name in values:
                values.setdefault(binding.var.name, values[value.name])


def _fx_values(origin, args) -> dict[str, torch.Tensor]:
    """Each binding's value in the PyTorch model, where it has one of its own."""
    values, _ = origin.fx_values(args)
    found = {}
    for binding, node in origin.bindings.items():
        if node.exact:
            for name in (node.node, *node.aliases):
                if isinstance(values.get(name), torch.Tensor):
                    found[binding] = values[name]
                    break
    return found


def _checks(func, sites, launches, values, args, tolerance, pyfuncs) -> list[KernelCheck]:
    """Each launch against the reference of its output binding: the last of its call site's
    bindings with a reference value of the output's shape."""
    calls = {b.var.name: b.value for block in func.body.blocks for b in block.bindings}
    shapes = {p.name: tuple(a.shape) for p, a in zip(func.params, args, strict=False)}
    shapes.update({name: tuple(v.shape) for name, v in values.items()})
    error: dict[str, float] = {}  # binding -> its error in proportion to its values' size
    seen: dict[str, int] = defaultdict(int)
    checks = []
    for launch in launches:
        k = seen[launch.callee]
        seen[launch.callee] += 1
        site_list = sites.get(launch.callee, [])
        bindings = tuple(site_list[k]) if k < len(site_list) else ()
        name = pyfuncs.get(launch.callee, launch.callee.removeprefix(PREFIX))
        out = launch.output
        target = next(
            (
                b
                for b in reversed(bindings)
                if b in values
                and out is not None
                and tuple(values[b].shape) == tuple(out.shape)
                and not _alias_within(calls.get(b), bindings)
            ),
            None,
        )
        inherited = _inherited(bindings, calls, error)
        diff = None
        if target is not None:
            reduction = max(
                (values_summed(calls.get(b), shapes, shapes.get(b, ())) for b in bindings),
                default=1,
            )
            diff = difference(
                out, values[target], *tolerance, reduction=reduction, inherited=inherited
            )
        for b in bindings:
            error[b] = max(inherited, diff.relative_to_scale if diff else 0.0)
        checks.append(KernelCheck(name, launch.callee, bindings, target, diff))
    return checks


def _alias_within(value, bindings: tuple[str, ...]) -> bool:
    """Whether a binding only names another of the same launch (`gv = lv6`): the other is
    what the launch computes."""
    return isinstance(value, relax.Var) and value.name in bindings


def _inherited(bindings: tuple[str, ...], calls: dict, error: dict[str, float]) -> float:
    """The largest error the inputs of a launch's bindings carry (through views and other
    bindings no kernel computes, which pass on the error of what they read)."""
    own, found, stack, seen = set(bindings), 0.0, list(bindings), set()
    while stack:
        name = stack.pop()
        for source in inputs_of(calls.get(name)):
            if source in seen or source in own:
                continue
            seen.add(source)
            if source in error:
                found = max(found, error[source])
            elif source in calls:
                stack.append(source)
    return found


BY = ("binding", "kernel")  # how `compare` goes through the function


def compare(
    parts: ModuleParts, fn: str, reference, args: tuple, rtol: float, atol: float, by: str
) -> Comparison:
    """`compare(..., by=...)`: op by op (comparing.py) or kernel by kernel."""
    if by not in BY:
        raise CallError(
            f"compare: by must be one of {', '.join(map(repr, BY))}, not {by!r}", function=fn
        )
    if by == "binding":
        return comparing.compare(parts, fn, reference, args, rtol, atol)
    return compare_kernels(parts, fn, reference, args, rtol, atol)
