"""`NAME.report("fn", *args, path="report.html")`: everything an upstream report needs, in one
HTML file.

In the spirit of `tlparse`, which turns one `torch.compile` into one page to
attach to an issue. The page (report_page.py) needs no network and no server
and opens from disk. Its sections:
- the environment: versions (TVM, PyTorch, Python, numpy, this package), the
  CPU (its model, LLVM's name for it and its features), the module's options;
- `fn` as the module holds it (as imported, for a model);
- the passes of its build that changed it, each as a diff: a build in the
  build worker keeps the IR before and after each pass of the Relax pipeline
  (so a build that crashes costs the worker, and the page says where);
- the kernels it runs, each with its TIR (as scheduled, before TIR lowering);
- `compare`'s table (op by op against the PyTorch model `fn` came from, else
  kernel by kernel against the build with every optional pass off) and
  `profile`'s table; neither runs when the build crashes;
- the bisect and minimize results given, each with its repro.
Values are summarized, never dumped: tables of errors and times, code cut to
a length, the arrays in a repro longer than `MAX_ARRAY_TEXT` left to the file
`.save()` writes. The page names no path, user or host of this machine
(`report_page.scrubbed`).
"""

from __future__ import annotations

import platform
import re
from dataclasses import fields

import numpy as np
import torch
import tvm

from ..._version import __version__
from ...errors import CallError
from ..build.worker.pass_log import PIPELINE
from ..inspect import comparing, kernel_compare, lowered_views, profiling, tracing
from ..live.cells import RELAX
from ..module_parts import ModuleParts
from ..user_files import write_whole
from .bisecting import Bisection
from .cut_judging import Builds
from .minimizing import Minimized
from .report_page import Code, Section, Table, Verdict, page
from .worker_builds import ir_changes, units, worker_inputs

MAX_LINES = 400  # lines of one piece of code (a diff, a kernel) the page shows
MAX_ARRAY_TEXT = 65536  # characters of one array literal a repro keeps on the page
PROFILE_RUNS = (3, 3)  # number, repeat: a profile for the page, not a benchmark


def report(parts: ModuleParts, fn: str, args: tuple, path: str, bisect=None, minimize=None) -> str:
    """Write the report of `fn` on `args` to `path` (see the module's docstring); returns the
    path."""
    parts.entry(fn, kind=RELAX, needed_by="report")
    for name, result, kind in (("bisect", bisect, Bisection), ("minimize", minimize, Minimized)):
        if result is not None and not isinstance(result, kind):
            raise CallError(
                f"report: {name}= takes what {name} returned, not {type(result).__name__}",
                function=fn,
            )
    mod, inputs = worker_inputs(parts, fn, args, "report")
    sections = [environment(parts), imported(parts, fn)]
    passes, why_not = pass_history(parts, fn, mod, inputs)
    sections.append(passes)
    if why_not:
        sections += [Section(k, t, [f"not run: {why_not}"]) for k, t in _RUN_SECTIONS]
    else:
        sections += [kernels(parts, fn), compared(parts, fn, args), profiled(parts, fn, args)]
    if bisect is not None:
        sections.append(bisected(bisect))
    if minimize is not None:
        sections.append(minimized(minimize))
    title = f"{parts.name}.{fn}: a report for TVM {tvm.__version__}"
    return write_whole(path, page(title, sections), "the report")


_RUN_SECTIONS = (("kernels", "Kernels"), ("compare", "compare"), ("profile", "profile"))


# -- sections ------------------------------------------------------------------------------


def environment(parts: ModuleParts) -> Section:
    """Versions, the CPU, the module's options."""
    versions = [
        ("TVM", tvm.__version__),
        ("PyTorch", torch.__version__),
        ("Python", platform.python_version()),
        ("numpy", np.__version__),
        ("tvm_pyfunc_nb", __version__),
        ("LLVM", str(tvm.target.codegen.llvm_version_major())),
    ]
    target = parts.target
    cpu = [
        ("machine", platform.machine()),
        ("model", _cpu_model()),
        ("LLVM's name for it", str(target.attrs.get("mcpu", "")) or "(generic)"),
        ("features", " ".join(_features(target)) or "(none named)"),
        ("target", str(target)),
    ]
    options = [
        (f.name, _option_text(f.name, getattr(parts.options, f.name)))
        for f in fields(parts.options)
    ]
    return Section(
        "environment",
        "Environment",
        [
            Table(("", "version"), versions),
            Table(("CPU", ""), cpu),
            Table(("option", "value"), options),
        ],
    )


def imported(parts: ModuleParts, fn: str) -> Section:
    origin = parts.torch_origins.get(fn)
    how = f"imported from {type(origin.model).__name__} (add_torch)" if origin else "as written"
    text = parts.entry(fn).func.script()
    return Section("function", f"{fn}, {how}", [Code(_cut(text))])


def pass_history(parts: ModuleParts, fn: str, mod, inputs) -> tuple[Section, str]:
    """The passes of the Relax pipeline that changed `fn`'s module, each as a diff (from a build
    in the worker that keeps the IR around each); and why what runs the build cannot run ("" when
    the build builds and runs)."""
    builds = Builds(parts, fn)
    listing = builds.run(mod, inputs)
    section = Section("passes", "The passes that changed it")
    if listing.outputs is None:
        ends = "crashes" if listing.crash is not None else "fails"
        section.blocks.append(Verdict(f"The build {ends}: {listing.why}", True))
        return section, f"the build {ends} ({listing.why})"
    runs = [r for r in units(listing.passes) if r.phase == PIPELINE and "." not in r.name]
    kept = builds.run(mod, inputs, snapshots=frozenset(r.key for r in runs))
    changed = 0
    for run in runs:
        before, after = kept.snapshots.get(run.key, ("", ""))
        names, diff = ir_changes(before, after)
        if diff:
            changed += 1
            summary = f"{run.name}: changes {', '.join(names[:6])}" + (
                f" and {len(names) - 6} more" if len(names) > 6 else ""
            )
            section.blocks.append(Code(_cut(diff), summary, diff=True))
    section.blocks.insert(
        0, f"{len(runs)} passes of the Relax pipeline ran; {changed} changed the module."
    )
    return section, ""


def kernels(parts: ModuleParts, fn: str) -> Section:
    listed = lowered_views.kernels(parts, fn)
    linked = parts.compiler.linked_for(parts.state, fn)
    section = Section("kernels", f"Kernels: {fn} runs {listed.count_text()}")
    section.blocks.append(Table(listed.header, listed.rows()))
    for name in lowered_views.kernels_of(linked, fn):
        section.blocks.append(Code(_cut(linked.lowered[name].script()), f"kernel {name}"))
    return section


def compared(parts: ModuleParts, fn: str, args: tuple) -> Section:
    """`compare` op by op against the model `fn` came from; else kernel by kernel against the
    build with every optional pass off."""
    origin = parts.torch_origins.get(fn)
    section = Section("compare", "compare")
    if origin is not None:
        result = comparing.compare(parts, fn, origin.model, args, 1e-5, 1e-6)
        section.blocks += [
            Verdict(result.verdict(), not result.passed or result.first_divergence is not None),
            Table(("output", "max abs", "max rel", ""), result.output_rows()),
        ]
        if result.ops is not None:
            shown = result.shown_ops() if len(result.ops) > MAX_LINES else range(len(result.ops))
            rows = result.op_table_rows()
            section.blocks += [
                result.op_summary(),
                Table(result.op_header(), [rows[i] for i in shown], _marked(result, shown)),
            ]
        return section
    plain = parts.build.reference()

    def reference(*given):
        return tracing.trace(parts, fn, given, build=plain).output

    result = kernel_compare.compare_kernels(parts, fn, reference, args, 1e-5, 1e-6)
    section.blocks += [
        Verdict(result.verdict(), not result.passed or result.first_divergence is not None),
        Table(("output", "max abs", "max rel", ""), result.output_rows()),
        f"kernel by kernel, each launch against {result.reference_of_bindings}",
        Table(result.kernel_header(), result.kernel_rows()),
    ]
    return section


def profiled(parts: ModuleParts, fn: str, args: tuple) -> Section:
    result = profiling.profile(parts, fn, args, *PROFILE_RUNS)
    return Section(
        "profile",
        "profile",
        [result.summary(), Table(result.table_header(), result.table_rows())],
    )


def bisected(result: Bisection) -> Section:
    section = Section("bisect", f"bisect {result.function}")
    section.blocks += [
        Verdict(result.verdict(), result.found),
        result.searched(),
        Table(("on", "last pass on", "outcome", ""), result.rows()),
    ]
    if result.diff:
        head = f"{', '.join(result.changed)} before and after {result.culprit.name}"
        section.blocks.append(Code(_cut(result.diff), head, diff=True, opened=True))
    section.blocks.append(_repro_block(result.repro, "bisect"))
    return section


def minimized(result: Minimized) -> Section:
    section = Section("minimize", f"minimize {result.function}")
    section.blocks += [
        Verdict(result.verdict(), result.found),
        f"{len(result.steps)} cuts built; the values entering a cut: {result.values}",
        Table(("bindings", "outcome", ""), result.rows()),
    ]
    if result.script:
        section.blocks.append(Code(result.script, "the cut", opened=True))
    section.blocks.append(_repro_block(result.repro, "minimize"))
    return section


# -- pieces --------------------------------------------------------------------------------


def _repro_block(repro, feature: str):
    if repro is None:
        return f"{feature} found no fault: no repro"
    if repro.missing:
        return f"no repro: {repro.missing}"
    return Code(summarized(repro.text), f"the repro ({feature}'s .save() writes it)")


def summarized(text: str) -> str:
    """A repro's text, each array literal longer than `MAX_ARRAY_TEXT` replaced by a note."""

    def short(match: re.Match) -> str:
        size = len(match.group(1))
        return f'"… {size // 1024} KB of base64 .npz: in the file .save() writes"'

    return re.sub(rf'"([A-Za-z0-9+/=]{{{MAX_ARRAY_TEXT},}})"', short, text)


def _cut(text: str) -> str:
    lines = text.splitlines()
    if len(lines) <= MAX_LINES:
        return text
    return "\n".join([*lines[:MAX_LINES], f"… {len(lines) - MAX_LINES} more lines"])


def _marked(result, shown: range) -> int | None:
    first = result.first_divergence
    return result.ops.index(first) - shown.start if first is not None else None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _features(target: tvm.target.Target) -> list[str]:
    """The CPU features LLVM builds for, for the target's CPU."""
    if target.kind.name != "llvm":
        return []
    return sorted(tvm.target.codegen.llvm_get_cpu_features(target))


def _option_text(name: str, value) -> str:
    """An option as the page shows it: an address or a path of this machine, only whether it
    is set."""
    if name == "rpc":
        return "a remote device" if value else "(here)"
    if name == "cross_compiler" and value:
        return str(value).rsplit("/", 1)[-1]
    return str(value)
