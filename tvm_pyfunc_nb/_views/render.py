"""What a view shows, as text and as HTML: pure rendering, no widgets and no registry.

A view is one of the ipywidgets in `widgets.py`; they are containers of the
HTML fragments made here. The same fragments make the `text/html` of a view's
mimebundle, for front ends without widgets (nbconvert, plain renderers), and
`text/plain` is deterministic — functions, kinds, notices and shapes, never
timings, values, ids or addresses — so saved notebooks diff cleanly and nbval
can compare it. Everything a user wrote or a call produced is escaped:
`escape` for text, Pygments (`highlight_html`) for code, with inline styles
(as in `tvm/script/highlight.py`) so a view looks the same in any page.
"""

from __future__ import annotations

import html
import inspect
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

from .._core.build.stats import CompileRecord
from .._core.inspect.timing import duration
from .._core.inspect.tracing import mean_text
from .._core.live.assembly import Markup, notice_lines, notices_text
from .._core.live.cells import PRIMFUNC, PYFUNC, RELAX
from .._core.live.live_module import LiveModule, UpdateResult
from .._core.live.printer import member_sources, module_script
from .._core.run.call_table import CallRecord
from .._core.run.tensors import describe, to_torch
from ..errors import TVMModuleError

MAX_VALUES = 6  # values of a tensor shown in a results pane
MAX_REPR = 80  # characters of a non-tensor value shown
MAX_CODE_LINES = 2000  # lines of lowered IR or generated code a pane shows


def escape(text: object) -> str:
    """`text` made safe for HTML content and attribute values."""
    return html.escape(str(text), quote=True)


def highlight_html(code: str, style: str = "default") -> str:
    """`code` highlighted as Python in a `<div><pre>`, with inline styles.

    Inline styles (as in `tvm/script/highlight.py`) keep the colours the same
    in any page and leak nothing into it. Pygments escapes the code.
    """
    # `white-space: pre`: long lines scroll rather than wrap, even where the page styles `pre` to
    # wrap
    formatter = HtmlFormatter(noclasses=True, style=style, prestyles="white-space: pre")
    return highlight(code, PythonLexer(), formatter)


# -- scripts ---------------------------------------------------------------------------
def scripts(live: LiveModule) -> tuple[str, dict[str, str]]:
    """The module's TVMScript, and each function's as `printer.function_script` gives it.

    The module is printed once for all its functions rather than once per function.
    """
    script = module_script(live.name, live.ir_mod)
    return script, member_sources(script)


def script_html(code: str) -> str:
    return f'<div style="{_CODE}">{highlight_html(code)}</div>'


# -- one function's latest call ------------------------------------------------------------
@dataclass(frozen=True)
class ValueSummary:
    """One argument or output of a call, as a results pane shows it."""

    label: str  # parameter name, "out", "out 1"
    kind: str  # "float32[4]" for a tensor, else the type name
    values: str  # the first few values, or a short repr
    stats: str  # "min 0 · max 3 · mean 1.5" for a numeric tensor, else ""


def summarize(label: str, value: Any) -> ValueSummary:
    value = to_torch(value)
    if not isinstance(value, torch.Tensor):
        text = repr(value)
        short = text if len(text) <= MAX_REPR else text[:MAX_REPR] + "…"
        return ValueSummary(label, type(value).__name__, short, "")
    flat = value.detach().reshape(-1)
    shown = ", ".join(_number(v) for v in flat[:MAX_VALUES].cpu().tolist())
    more = ", …" if flat.numel() > MAX_VALUES else ""
    return ValueSummary(label, describe(value), f"[{shown}{more}]", _stats(flat))


def _stats(flat: torch.Tensor) -> str:
    if flat.numel() == 0 or flat.dtype.is_complex:
        return ""
    if flat.dtype == torch.bool:
        return f"{int(flat.sum())} of {flat.numel()} true"
    low, high = flat.min().item(), flat.max().item()
    mean = flat.mean(dtype=torch.float64).item()
    largest = max(abs(low), abs(high))
    return f"min {_number(low)} · max {_number(high)} · mean {mean_text(mean, flat.dtype, largest)}"


def _number(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def call_summaries(
    live: LiveModule, name: str, record: CallRecord
) -> tuple[list[ValueSummary], list[ValueSummary]]:
    """The arguments and the outputs of a call; a PrimFunc writes its outputs into its arguments."""
    params = _param_names(live, name)
    args = [
        summarize(params[i] if i < len(params) else f"arg {i}", arg)
        for i, arg in enumerate(record.args)
    ]
    if record.error is not None or (record.result is None and live.functions.get(name) == PRIMFUNC):
        return args, []
    result = to_torch(record.result)
    outputs = result if isinstance(result, tuple) else (result,)
    labels = ["out"] if len(outputs) == 1 else [f"out {i}" for i in range(len(outputs))]
    return args, [summarize(label, out) for label, out in zip(labels, outputs, strict=False)]


def _param_names(live: LiveModule, name: str) -> list[str]:
    return list(inspect.signature(live.get_function(name)).parameters)


def compiles_during(live: LiveModule, record: CallRecord) -> list[CompileRecord]:
    """What a call compiled: its own `compiled`, else the compiles that ran while it did.

    A PrimFunc or Relax call carries the compiles it needed; a pyfunc's record
    has none of its own, but its body may have compiled what it calls.
    """
    if record.compiled:
        return list(record.compiled)
    start = record.end - record.seconds - record.compile_seconds
    during = []
    for compile_ in reversed(live.stats.compiles):
        if compile_.end < start:
            break
        if compile_.end <= record.end:
            during.append(compile_)
    return during[::-1]


def results_html(live: LiveModule, name: str, record: CallRecord | None) -> str:
    """The results pane: the latest call of `name` — values, time, compiles, error."""
    kind = live.functions.get(name, "?")
    title = f"<b>{escape(name)}</b> {_badge(kind)}"
    if record is None:
        return f'<div style="{_PANE}"><div>{title}</div>{_muted("not called yet", "div")}</div>'
    when = time.strftime("%H:%M:%S", time.localtime(record.when))
    head = f'<div style="margin-bottom:4px">{title} '
    spent = f"{_duration(record.seconds)} run"
    if record.compile_seconds or record.compiled:
        compiled = record.compile_seconds or sum(c.seconds for c in record.compiled)
        spent += f" + {_duration(compiled)} compile"
    head += _muted(f"latest call {when} · {spent}") + "</div>"
    args, outputs = call_summaries(live, name, record)
    first = "args" if kind == PRIMFUNC else "in"  # a PrimFunc's arguments include its outputs
    rows = [_value_row(first if i == 0 else "", v) for i, v in enumerate(args)]
    rows += [_value_row("out" if i == 0 else "", v) for i, v in enumerate(outputs)]
    table = f'<table style="{_TABLE}">{"".join(rows)}</table>' if rows else ""
    error = ""
    if record.error is not None:
        error = f'<pre style="{_ERROR}">{escape(_error_text(record.error))}</pre>'
    compiled = ", ".join(escape(c) for c in compiles_during(live, record)) or "nothing"
    facts = _muted(
        f"compiled on this call: {compiled}<br>"
        f"cache hits (module, so far): {live.stats.cache_hits}",
        "div",
    )
    return f'<div style="{_PANE}">{head}{table}{error}{facts}</div>'


def replaced_html(live: LiveModule, name: str) -> str:
    """The pane of a function a later cell redefined or removed: it no longer updates."""
    if name in live.functions:
        now = "is now defined by a later cell"
    else:
        now = f"is no longer in module {live.name}"
    note = _muted(f"{escape(now)}; this pane no longer updates", "div")
    return f'<div style="{_PANE}"><b>{escape(name)}</b> {note}</div>'


def _value_row(section: str, value: ValueSummary) -> str:
    values = f"<code>{escape(value.values)}</code>"
    if value.stats:
        values += "<br>" + _muted(escape(value.stats))
    cells = [
        _muted(section),
        f"<b>{escape(value.label)}</b>",
        f"<code>{escape(value.kind)}</code>",
        values,
    ]
    return "<tr>" + "".join(f'<td style="{_CELL}">{c}</td>' for c in cells) + "</tr>"


def _error_text(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _duration(seconds: float) -> str:
    return duration(seconds, digits=1)


def muted_html(text: str) -> str:
    return _muted(escape(text), "div")


def code_view_html(make: Callable[[], str]) -> str:
    """The highlighted text `make()` returns (its first lines, if long), or the error it raised."""
    try:
        text = make()
    except TVMModuleError as err:
        return f'<pre style="{_ERROR}">{escape(_error_text(err))}</pre>'
    lines = text.splitlines()
    if len(lines) > MAX_CODE_LINES:
        more = f"... {len(lines) - MAX_CODE_LINES} more lines (the method returns all of them)"
        text = "\n".join([*lines[:MAX_CODE_LINES], more])
    return script_html(text)


def _badge(kind: str) -> str:
    colour = _KIND_COLOURS.get(kind, "#666")
    return f'<span style="{_BADGE}background:{colour}">{escape(kind)}</span>'


def _muted(html: str, tag: str = "span") -> str:
    return f'<{tag} style="{_MUTED}">{html}</{tag}>'


def function_row_html(script: str, results: str) -> str:
    """Script left, results right: the static twin of a widget's function pane."""
    return (
        f'<div style="display:flex;gap:12px;align-items:flex-start;margin:4px 0">'
        f'<div style="flex:3 1 0;min-width:0;overflow:auto">{script}</div>'
        f'<div style="flex:2 1 0;min-width:14em">{results}</div></div>'
    )


def compile_progress_html(compiling: list[tuple[str, tuple[str, ...], float]]) -> str:
    """`[(kind, names, seconds so far)]` of the compiles running now."""
    parts = [
        f"{escape(kind)} {escape(', '.join(names))} ({seconds:.1f} s)"
        for kind, names, seconds in compiling
    ]
    return f'<div style="{_PROGRESS}">⏳ compiling {" · ".join(parts)}…</div>'


# -- a cell ----------------------------------------------------------------------------
def cell_text(result: UpdateResult, by: str | None = "this cell") -> str:
    return notices_text(result, by)


class _HtmlMarkup(Markup):
    def name(self, name: str) -> str:
        return f"<code>{escape(name)}</code>"

    def text(self, text: str) -> str:
        return escape(text)

    def kind(self, kind: str) -> str:
        return _badge(kind)

    def module(self, module: str) -> str:
        return f"<b>{escape(module)}</b>"


def notices_html(result: UpdateResult, by: str | None = "this cell") -> str:
    """The notices of a change as HTML: the lines of `notices_text`, names in code."""
    lines = notice_lines(result, by, _HtmlMarkup())
    return f'<div style="{_NOTICES}">' + "<br>".join(lines) + "</div>"


def cell_html(result: UpdateResult, scripts: dict[str, str], results: dict[str, str]) -> str:
    """A cell's view as static HTML: each function's script beside its `results` pane (HTML)."""
    rows = [function_row_html(script_html(scripts[name]), results[name]) for name in result.defined]
    return f'<div style="{_VIEW}">{notices_html(result)}{"".join(rows)}</div>'


# -- a module --------------------------------------------------------------------------
def module_text(live: LiveModule) -> str:
    kinds = live.functions
    width = max((len(n) for n in kinds), default=0)
    lines = [repr(live)]
    for name, kind in kinds.items():
        call = _call_text(live, name, live.last_calls.get(name))
        lines.append(f"  {name:<{width}}  {kind:<6}  {call}")
    return "\n".join(lines)


def _call_text(live: LiveModule, name: str, record: CallRecord | None) -> str:
    if record is None:
        return "not called yet"
    if record.error is not None:
        return f"latest call failed ({type(record.error).__name__})"
    args, outputs = call_summaries(live, name, record)
    signature = ", ".join(v.kind for v in args)
    returned = f" -> {', '.join(v.kind for v in outputs)}" if outputs else ""
    return f"latest call ({signature}){returned}"


def torch_sources(live: LiveModule) -> dict[str, str] | None:
    """`NAME.as_torch(fn)` of each Relax function; None without Relax functions or `as_torch`."""
    if not hasattr(type(live), "as_torch"):
        return None
    sources = {}
    for name, kind in live.functions.items():
        if kind == RELAX:
            try:
                sources[name] = live.as_torch(name)
            except TVMModuleError as err:
                sources[name] = f"# {name} has no PyTorch form: {err}\n"
    return sources or None


def torch_html(sources: dict[str, str]) -> str:
    return "".join(
        f"<div><b>{escape(name)}</b></div>{script_html(code)}" for name, code in sources.items()
    )


def module_html(live: LiveModule) -> str:
    """The module view as static HTML: its tabs become `<details>` sections."""
    script, members = scripts(live)
    sections = []
    for name, kind in live.functions.items():
        row = function_row_html(
            script_html(members[name]), results_html(live, name, live.last_calls.get(name))
        )
        sections.append(_details(f"{escape(name)} {_badge(kind)}", row, opened=not sections))
    sections.append(_details("module script", script_html(script)))
    torch_code = torch_sources(live)
    if torch_code:
        sections.append(_details("PyTorch", torch_html(torch_code)))
    return f'<div style="{_VIEW}">{_muted(escape(repr(live)), "div")}{"".join(sections)}</div>'


def _details(summary: str, body: str, opened: bool = False) -> str:
    return f"<details{' open' if opened else ''}><summary>{summary}</summary>{body}</details>"


# -- %tvmmodules -----------------------------------------------------------------------
class ModuleList:
    """`%tvmmodules`: each live module with its functions by kind, compiled or stale."""

    def __init__(self, modules: list[LiveModule]):
        self.modules = modules

    def __repr__(self) -> str:
        if not self.modules:
            return "no live modules"
        return "\n".join(self._line(m) for m in self.modules)

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(repr(self))

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        return {"text/plain": repr(self), "text/html": self._html()}

    @staticmethod
    def _line(live: LiveModule) -> str:
        kinds = ", ".join(
            f"{len(names)} {kind}" + (f" ({', '.join(names)})" if names else "")
            for kind, names in _by_kind(live).items()
        )
        return f"{live.name}: {kinds}; {_state(live)}; target {live.target}"

    def _html(self) -> str:
        if not self.modules:
            return _muted("no live modules", "div")
        columns = ("module", PYFUNC, PRIMFUNC, RELAX, "state", "target")
        head = "".join(f'<th style="{_CELL}">{column}</th>' for column in columns)
        rows = []
        for live in self.modules:
            names = [", ".join(escape(n) for n in names) for names in _by_kind(live).values()]
            cells = [f"<b>{escape(live.name)}</b>", *names, _state(live), escape(live.target)]
            rows.append("<tr>" + "".join(f'<td style="{_CELL}">{c}</td>' for c in cells) + "</tr>")
        return f'<table style="{_FONT}{_TABLE}"><tr>{head}</tr>{"".join(rows)}</table>'


def _by_kind(live: LiveModule) -> dict[str, list[str]]:
    kinds = live.functions
    return {kind: [n for n, k in kinds.items() if k == kind] for kind in (PYFUNC, PRIMFUNC, RELAX)}


def _state(live: LiveModule) -> str:
    return "stale" if live.is_stale else "compiled"


# -- styles (inline, so a view looks the same in any page and leaks nothing into it) ------
_FONT = "font-family:var(--jp-ui-font-family,system-ui,sans-serif);font-size:12px;line-height:1.4;"
_VIEW = _FONT + "display:flex;flex-direction:column;gap:6px;"
_NOTICES = _FONT + "padding:4px 8px;border-left:3px solid #4a7bd0;background:rgba(74,123,208,0.08);"
_PANE = _FONT + "padding:6px 8px;border:1px solid rgba(128,128,128,0.35);border-radius:4px;"
# `width:0;min-width:100%`: as wide as its pane, however long its lines (they scroll)
_CODE = (
    "font-size:12px;line-height:1.35;border:1px solid rgba(128,128,128,0.35);"
    "border-radius:4px;overflow:auto;max-height:32em;background:#f8f8f8;padding:4px 8px;"
    "box-sizing:border-box;width:0;min-width:100%;"
)
_MUTED = "opacity:0.75;"
_TABLE = "border-collapse:collapse;margin:2px 0 4px 0;font-size:inherit;"
_CELL = "padding:2px 10px 2px 0;text-align:left;vertical-align:top;white-space:nowrap;"
_ERROR = (
    "white-space:pre-wrap;color:#b00020;background:rgba(176,0,32,0.06);margin:4px 0;"
    "padding:4px;font-size:12px;"
)
_PROGRESS = _FONT + "padding:2px 8px;color:#8a5a00;background:rgba(255,176,0,0.12);"
_BADGE = "color:white;border-radius:3px;padding:0 5px;font-size:11px;"
_KIND_COLOURS = {PYFUNC: "#3572a5", PRIMFUNC: "#b0601a", RELAX: "#2e7d32"}


# -- results of looking inside: trace, compare, time, stats --------------------------------
def table_html(header: tuple[str, ...], rows: list[tuple], marked: int | None = None) -> str:
    """A plain table; row `marked` (an index) is highlighted."""
    head = "".join(f'<th style="{_CELL}">{escape(h)}</th>' for h in header)
    body = []
    for i, row in enumerate(rows):
        style = _MARKED if i == marked else ""
        cells = "".join(f'<td style="{_CELL}">{escape(c)}</td>' for c in row)
        body.append(f'<tr style="{style}">{cells}</tr>')
    return f'<table style="{_FONT}{_TABLE}"><tr>{head}</tr>{"".join(body)}</table>'


def _titled(title: str, *parts: str) -> str:
    return f'<div style="{_VIEW}"><div><b>{escape(title)}</b></div>{"".join(parts)}</div>'


def trace_html(trace) -> str:
    marked = len(trace) - 1 if trace.stopped is not None else None
    return _titled(trace.title(), table_html(trace.header(), trace.table_rows(), marked))


def comparison_html(comparison) -> str:
    verdict_style = (
        _PASSED if comparison.passed and comparison.first_divergence is None else _FAILED
    )
    parts = [
        f'<div style="{verdict_style}">{escape(comparison.verdict())}</div>',
        table_html(("output", "max abs", "max rel", ""), comparison.output_rows()),
    ]
    if comparison.ops is not None:
        first = comparison.first_divergence
        shown = comparison.shown_ops()
        marked = comparison.ops.index(first) - shown.start if first is not None else None
        parts.append(_muted(escape(comparison.op_summary()), "div"))
        if shown:
            rows = comparison.op_table_rows()
            parts.append(table_html(comparison.op_header(), [rows[i] for i in shown], marked))
    elif comparison.why_not_op_by_op:
        parts.append(_muted(escape(comparison.why_not_op_by_op), "div"))
    return _titled(f"compare {comparison.function}", *parts)


def kernel_comparison_html(comparison) -> str:
    first = comparison.first_divergence
    verdict_style = _PASSED if comparison.passed and first is None else _FAILED
    marked = comparison.checks.index(first) if first is not None else None
    parts = [
        f'<div style="{verdict_style}">{escape(comparison.verdict())}</div>',
        table_html(("output", "max abs", "max rel", ""), comparison.output_rows()),
        _muted(f"kernel by kernel: each launch against {comparison.reference_of_bindings}", "div"),
        table_html(comparison.kernel_header(), comparison.kernel_rows(), marked),
    ]
    return _titled(f"compare {comparison.function} by kernel", *parts)


def bisection_html(bisection) -> str:
    """The pass at fault (or why none is), the builds tried, the diff it made (folded)."""
    style = _FAILED if bisection.outcome != "same" else _PASSED
    marked = next(
        (i for i, t in enumerate(bisection.tried) if t.on == bisection.position),
        None,
    )
    parts = [
        f'<div style="{style}">{escape(bisection.verdict())}</div>',
        _muted(escape(bisection.searched()), "div"),
        table_html(("on", "last pass on", "outcome", ""), bisection.rows(), marked),
    ]
    if bisection.diff:
        head = f"{', '.join(bisection.changed)} before and after {bisection.culprit.name}"
        parts.append(_details(escape(head), script_html(bisection.diff), opened=True))
    return _titled(f"bisect {bisection.function}", *parts)


def minimized_html(minimized) -> str:
    """The verdict, the cut as TVMScript (open), the cuts built (folded)."""
    style = _FAILED if minimized.found else _PASSED
    parts = [
        f'<div style="{style}">{escape(minimized.verdict())}</div>',
        _muted(
            escape(
                f"{len(minimized.steps)} cuts built; the values entering a cut: {minimized.values}"
            ),
            "div",
        ),
    ]
    if minimized.script:
        parts.append(_details("the cut", script_html(minimized.script), opened=True))
    if minimized.steps:
        steps = table_html(("bindings", "outcome", ""), minimized.rows())
        parts.append(_details(f"{len(minimized.steps)} cuts built", steps))
    return _titled(f"minimize {minimized.function}", *parts)


def kernels_html(kernels) -> str:
    title = f"{kernels.function} runs {kernels.count_text()}"
    return _titled(title, table_html(kernels.header, kernels.rows()))


def timing_html(timing) -> str:
    parts = [table_html(("", "mean", "median", "std", "measured by"), timing.rows())]
    if timing.note:
        parts.append(_muted(escape(timing.note), "div"))
    return _titled(timing.verdict(), *parts)


def profile_html(profile) -> str:
    """The profile's table, a bar in each row for its share of the total."""
    header = profile.table_header()
    head = "".join(f'<th style="{_CELL}">{escape(h)}</th>' for h in ("", *header))
    body = []
    for row, cells in zip(profile.rows, profile.table_rows(), strict=True):
        width = round(100 * row.share)
        colour = _PROFILE_COLOURS.get(row.kind, "#888")
        bar = (
            f'<span style="display:inline-block;width:8em;height:0.7em;vertical-align:middle">'
            f'<span style="display:block;height:100%;width:{width}%;background:{colour}">'
            "</span></span>"
        )
        tds = "".join(f'<td style="{_CELL}">{escape(c)}</td>' for c in cells)
        body.append(f'<tr><td style="{_CELL}">{bar}</td>{tds}</tr>')
    table = f'<table style="{_FONT}{_TABLE}"><tr>{head}</tr>{"".join(body)}</table>'
    return _titled(profile.summary(), table)


def stats_html(stats) -> str:
    header = ("function", "compiles", "compile time", "from memory", "from disk")
    return _titled(stats.summary(), table_html(header, stats.rows()))


def update_html(result: UpdateResult) -> str:
    return notices_html(result, by=None)


def opened_bundle(text: str) -> dict[str, str]:
    """What `edit` opened in a new cell below, in the output of the cell that called it: a line
    saying so, and the text: all of it in a section that opens on a click (HTML), its first
    `OPENED_LINES` as plain text (the new cell has the rest)."""
    lines = text.splitlines()
    header = lines[0] if lines else ""
    defined = re.search(r"^(?:async )?def (\w+)", text, re.MULTILINE)
    what = f"`{defined.group(1)}` " if defined else ""
    head = f"opened {what}in a new cell below ({len(lines)} lines, {header})"
    html = _details(escape(head), script_html(text))
    plain = [head, *lines[:OPENED_LINES]]
    if len(lines) > OPENED_LINES:
        plain.append(f"… {len(lines) - OPENED_LINES} more lines, in the new cell")
    return {"text/plain": "\n".join(plain), "text/html": f'<div style="{_VIEW}">{html}</div>'}


OPENED_LINES = 12  # of what `edit` opened, shown as plain text


def work_progress_text(title: str, done: int, total: int, note: str, unit: str = "") -> str:
    """A line for long work in progress: `tuning k: 5 of 16 trials · best 0.7 ms`.

    The work may do a few steps more than planned (MetaSchedule measures whole rounds):
    the total then grows with it."""
    total = max(total, done)
    detail = f" · {note}" if note else ""
    return f"{title}: {done} of {total}{' ' + unit if unit else ''}{detail}"


def work_progress_html(title: str, done: int, total: int, note: str, unit: str = "") -> str:
    """`work_progress_text` with a bar."""
    total = max(total, done)
    width = int(100 * done / total) if total else 0
    bar = (
        f'<span style="display:inline-block;width:10em;height:0.7em;border:1px solid #8a5a00;'
        f'vertical-align:middle"><span style="display:block;height:100%;width:{width}%;'
        f'background:#e0a030"></span></span>'
    )
    detail = f" · {escape(note)}" if note else ""
    counted = f"{done} of {total}{' ' + escape(unit) if unit else ''}"
    return f'<div style="{_PROGRESS}">{escape(title)}: {bar} {counted}{detail}</div>'


def tuning_html(report) -> str:
    return _titled(report.summary(), table_html(report.HEADER, report.table_rows()))


_MARKED = "background:rgba(176,0,32,0.10);"
_PROFILE_COLOURS = {
    "kernel": _KIND_COLOURS[PRIMFUNC],
    "PyTorch call": "#ee4c2c",
    "pyfunc": _KIND_COLOURS[PYFUNC],
    "VM": "#888",
}
_PASSED = _FONT + "color:#2e7d32;font-weight:bold;"
_FAILED = _FONT + "color:#b00020;font-weight:bold;"
