"""`make models`: every model of the corpus through every step a user takes, as a table.

    python benchmarks/models_report.py [MODEL ...] [--options "--offload torch"]

The corpus is `tests/real_models.py`: the test zoo (ViT, BERT, GPT-2, Llama, ResNet,
MobileNet, LSTM, GRU), more `transformers` families (Qwen2, Mistral, T5, Whisper, Swin,
CLIP, ConvNeXt) and small models around an op TVM's importer cannot translate. Each model,
built from a tiny config with random weights, goes through the steps in `STEPS`, in one
process (a real IPython shell, an empty compile cache): a cell says `ok`, or `failed: ` and
the first line of why; a step after a failed import is `skipped`. The `export()` files run
at the end, in one plain Python. The table is printed and written to `benchmarks/MODELS.md`
(`--options` to `MODELS-<options>.md`). Nothing here asserts: the tests do.

A step is one entry of `STEPS`, a function of the `Run`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

import torch  # noqa: E402
import tvm  # noqa: E402
import tvm_ffi  # noqa: E402
from harness import notebook_shell  # noqa: E402
from real_models import FAMILIES, UNSUPPORTED, ZOO, flat  # noqa: E402

import tvm_pyfunc_nb  # noqa: E402

CORPUS = {**ZOO, **FAMILIES, **UNSUPPORTED}
TOL = {"rtol": 1e-5, "atol": 1e-5}  # float32, tiny models
NOT_YET = "n/a"


@dataclass
class Run:
    """One model going through the steps: its live module, model, inputs, what PyTorch gives."""

    name: str
    shell: object
    live: object
    model: torch.nn.Module
    args: tuple
    expected: list
    workdir: str
    exported: dict[str, str] = field(default_factory=dict)


class Failed(Exception):
    """A step that ran but did not give what a user expects."""


def same(ours, expected: list, **tol) -> None:
    ours = flat(ours)
    if len(ours) != len(expected):
        raise Failed(f"{len(ours)} outputs, PyTorch gives {len(expected)}")
    for i, (a, b) in enumerate(zip(ours, expected, strict=True)):
        try:
            if tol:
                torch.testing.assert_close(a, b.to(a.dtype) if a.dtype != b.dtype else b, **tol)
            elif not torch.equal(a, b):
                raise Failed(f"output {i} changed")
        except AssertionError as error:
            raise Failed(f"output {i}: {str(error).splitlines()[0]}") from None


def call(run: Run) -> None:
    same(run.live.main(*run.args), run.expected, **TOL)


def compare(run: Run) -> None:
    comparison = run.live.compare("main", run.model, *run.args)
    if comparison.ops is None:
        raise Failed(f"not op by op: {comparison.why_not_op_by_op}")
    if not comparison.passed or comparison.first_divergence is not None:
        raise Failed(comparison.verdict())


def trace(run: Run) -> None:
    traced = run.live.trace("main", *run.args)
    if not len(traced):
        raise Failed("no intermediates")
    same(traced.output, flat(run.live.main(*run.args)), **TOL)  # a traced run may fuse less


def edit(run: Run) -> None:
    """`edit_text` run as a cell: the same function, the same numbers."""
    before, ours = run.live.ir_mod["main"], flat(run.live.main(*run.args))
    with contextlib.redirect_stdout(io.StringIO()):
        run.shell.run(run.live.edit_text("main"), cell_id=f"edit-{run.name}")
    if not tvm_ffi.structural_equal(before, run.live.ir_mod["main"]):
        raise Failed("the edit text parses to another function")
    same(run.live.main(*run.args), ours)


def export(run: Run) -> None:
    """`export()` writes the file; it runs with plain Python after every model (`run_exports`)."""
    path = os.path.join(run.workdir, f"{run.name}_module.py")
    run.live.export(path, example=("main", run.args))
    run.exported[run.name] = path


def profile(run: Run) -> None:
    """`profile()` times every launch: a row for each, what the function launches in it."""
    found = run.live.profile("main", *run.args, number=2, repeat=2)
    launched = {r.kernel for r in found.kernels}
    if not launched or found.total <= 0:
        raise Failed(f"no kernel timed ({len(found.rows)} rows)")
    missing = set(run.live.kernels("main")) - launched
    if missing:
        raise Failed(f"no row for {', '.join(sorted(missing))}")


STEPS: dict[str, Callable[[Run], None] | None] = {
    "import": None,  # add_torch, in `measure`
    "call": call,
    "compare": compare,
    "trace": trace,
    "edit": edit,
    "export": export,
    "profile": profile,
}


def reason(error: BaseException) -> str:
    """The first line of why, short enough for a table cell."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = f"{type(error).__name__}: {lines[0] if lines else ''}"
    text = re.sub(r"\s+", " ", text).replace("|", "\\|")
    return text if len(text) <= 160 else text[:157] + "..."


def measure(name: str, shell, options: str, workdir: str, exported: dict) -> dict[str, str]:
    """One row: each step's `ok`, `failed: why`, `skipped` or `n/a`; the seconds it all took."""
    start = time.perf_counter()
    live = shell.ip.run_line_magic("tvmmodule", f"{name} --quiet {options}")
    row = {"model": name}
    model, args, expected = None, (), []
    try:
        model, args = CORPUS[name].build()
        with torch.no_grad():
            expected = flat(model(*args))
        with contextlib.redirect_stdout(io.StringIO()):
            live.add_torch(model, args)
        row["import"] = "ok"
    except Exception as error:  # the row says what failed, and the next model runs
        row["import"] = f"failed: {reason(error)}"
    run = Run(name, shell, live, model, args, expected, workdir, exported)
    for step, action in STEPS.items():
        if step == "import":
            continue
        if action is None:
            row[step] = NOT_YET
        elif row["import"] != "ok":
            row[step] = "skipped"
        else:
            try:
                action(run)
                row[step] = "ok"
            except Exception as error:  # a step that fails is a cell of the table
                row[step] = f"failed: {reason(error)}"
    row["seconds"] = f"{time.perf_counter() - start:.1f}"
    return row


RUN_EACH = """
import runpy, sys, traceback
for path in sys.argv[1:]:
    print(f"== {path}", flush=True)
    print(f"== {path}", file=sys.stderr, flush=True)
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as exit:
        if exit.code not in (None, 0):
            print(f"!! exited {exit.code}", flush=True)
    except BaseException as error:
        print(f"!! {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")
"""


def run_exports(exported: dict[str, str], rows: list[dict]) -> None:
    """Run every export file in one plain Python: a file that does not check out fails its
    model's `export` cell."""
    if not exported:
        return
    done = subprocess.run(
        [sys.executable, "-c", RUN_EACH, *exported.values()],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    said = dict(zip(exported.values(), done.stdout.split("== ")[1:], strict=False))
    warned = dict(zip(exported.values(), done.stderr.split("== ")[1:], strict=False))
    for row in rows:
        path = exported.get(row["model"])
        if path is None or row.get("export") != "ok":
            continue
        out = said.get(path, "")
        if f"{row['model']}.main: gives the numbers of the live module" not in out:
            last = [line for line in out.splitlines() if line.strip()][-1:] or ["did not run"]
            row["export"] = f"failed: the file {last[0].removeprefix('!! ')}"
        elif "Warning" in warned.get(path, ""):
            row["export"] = "failed: the file prints warnings"


COLUMNS = ("model", *STEPS, "seconds")


def markdown(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row.get(c, "") for c in COLUMNS) + " |" for row in rows]
    return "\n".join(lines)


def report(rows: list[dict], options: str, seconds: float, load: str) -> str:
    ok = sum(all(row.get(s) in ("ok", NOT_YET) for s in STEPS) for row in rows)
    cells = [row.get(s, "") for row in rows for s in STEPS]
    return "\n".join(
        [
            "# The model corpus, step by step (`make models`)",
            "",
            f"- {platform.machine()}, Python {platform.python_version()}, apache-tvm "
            f"{tvm.__version__}, torch {torch.__version__}, "
            f"tvm_pyfunc_nb {tvm_pyfunc_nb.__version__}; {os.cpu_count()} cores, load average "
            f"{load} at start (the seconds are wall time, each model's steps together)",
            f"- options: `{options or 'none'}`; {len(rows)} models, {ok} through every step; "
            f"{sum(c.startswith('failed') for c in cells)} failed steps; {seconds:.0f} s",
            "- each model from a tiny config with random weights (`tests/real_models.py`); "
            "`n/a`: the step does not exist yet",
            "",
            markdown(rows),
            "",
        ]
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help=f"some of: {', '.join(CORPUS)}")
    parser.add_argument(
        "--options", default="", help='`%%tvmmodule` options, e.g. "--offload torch"'
    )
    given = parser.parse_args(argv)
    unknown = [m for m in given.models if m not in CORPUS]
    if unknown:
        parser.error(f"unknown models {unknown}; known: {', '.join(CORPUS)}")
    start, load = time.perf_counter(), ", ".join(f"{x:.2f}" for x in os.getloadavg())
    shell = notebook_shell()
    rows: list[dict] = []
    exported: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="models-report-") as workdir:
        for name in given.models or CORPUS:
            rows.append(measure(name, shell, given.options, workdir, exported))
            print(markdown(rows[-1:]).splitlines()[-1], flush=True)
        run_exports(exported, rows)
    text = report(rows, given.options, time.perf_counter() - start, load)
    print()
    print(text)
    if not given.models:  # a partial run does not replace the corpus's table
        suffix = re.sub(r"\W+", "-", given.options.strip()).strip("-")
        (HERE / (f"MODELS-{suffix}.md" if suffix else "MODELS.md")).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
