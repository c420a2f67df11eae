"""The models people bring, measured: `python benchmarks/real_models.py [MODEL ...]`.

For each model of the test zoo (`tests/real_models.py`: Hugging Face ViT, BERT,
GPT-2, Llama, ResNet and MobileNet from tiny configs, `torch.nn` LSTM and GRU),
in one process with an empty compile cache:

- import: `add_torch` (torch.export and TVM's importer);
- first call: the first `main(...)`, which compiles it;
- max error: the largest absolute difference from PyTorch over every output;
- compare: `compare`'s verdict line;
- round trip: `edit_text` and `script()` run as cells give the same function and numbers, and
  the `export()` file runs with plain Python and checks its example;
- guard cost: the median call of the default module over that of an `--unchecked` one (both by
  `NAME.time`, TVM's time_evaluator, in alternation);
- ours, PyTorch, × PyTorch's speed: the median call of each (`time(..., against=model)`), and
  PyTorch eager's over ours: above 1, ours is faster.

Both sides run on one thread (`TVM_NUM_THREADS=1`, `torch.set_num_threads(1)`), so the machine's
other load touches them alike. A step that fails is shown as the error's class in its column; the
errors are printed in full below the table. Nothing here asserts: the tests do.
"""

from __future__ import annotations

import os

os.environ.setdefault("TVM_NUM_THREADS", "1")  # before TVM starts its thread pool

import contextlib
import io
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

import torch  # noqa: E402
import tvm_ffi  # noqa: E402
from harness import notebook_shell  # noqa: E402
from real_models import ZOO, flat  # noqa: E402

NUMBER, REPEAT, ROUNDS = 10, 3, 3  # calls per measurement, measurements per round, rounds


class Failed(Exception):
    """A step that did not give its figure (the cause is on __cause__)."""


def step(errors: list[str], model: str, what: str, fn):
    """`fn()`, or the error's class name (and the error in `errors`) if it raises."""
    try:
        return fn()
    except Exception as error:  # a benchmark reports what fails, and goes on
        errors.append(f"{model}, {what}: {type(error).__name__}: {error}".splitlines()[0])
        traceback.print_exc(limit=0, file=sys.stderr)
        return f"{type(error).__name__}"


def round_trip(shell, live, name: str, args, workdir: str) -> str:
    expected = flat(live.main(*args))
    for what, text in (
        ("edit_text", live.edit_text("main")),
        ("script", f"%%tvmmodule {name} --quiet\n{live.script()}"),
    ):
        before = live.ir_mod
        with contextlib.redirect_stdout(io.StringIO()):  # the cell's own summary
            shell.run(text, cell_id=f"{what}-{name}")
        if not tvm_ffi.structural_equal(before, live.ir_mod):
            raise Failed(f"{what} parses to another module")
        again = flat(live.main(*args))
        if not all(torch.equal(a, b) for a, b in zip(again, expected, strict=True)):
            raise Failed(f"{what} gives other numbers")
    path = os.path.join(workdir, f"{name}_module.py")
    live.export(path, example=("main", args))
    done = subprocess.run([sys.executable, path], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise Failed(f"export: {(done.stdout + done.stderr).strip().splitlines()[-1]}")
    return "ok"


def guard_cost(checked, unchecked, args) -> float:
    """Checked over unchecked median call time, the two timed in alternation."""
    ratios = []
    for _ in range(ROUNDS):
        a = checked.time("main", *args, number=NUMBER, repeat=REPEAT).median
        b = unchecked.time("main", *args, number=NUMBER, repeat=REPEAT).median
        ratios.append(a / b)
    return sorted(ratios)[len(ratios) // 2]


def measure(name: str, shell, workdir: str, errors: list[str]) -> dict:
    model, args = ZOO[name].build()
    with torch.no_grad():
        expected = flat(model(*args))
    row = {"model": name}
    live = shell.ip.run_line_magic("tvmmodule", f"{name} --quiet")
    start = time.perf_counter()
    live.add_torch(model, args)
    row["import"] = time.perf_counter() - start

    start = time.perf_counter()
    ours = step(errors, name, "first call", lambda: flat(live.main(*args)))
    if isinstance(ours, str):
        return {**row, "first call": ours}
    row["first call"] = time.perf_counter() - start
    if len(ours) == len(expected):
        pairs = zip(ours, expected, strict=True)
        row["max error"] = max(float((a - b).abs().max()) for a, b in pairs)
    else:
        row["max error"] = f"{len(ours)} outputs, PyTorch {len(expected)}"
    row["compare"] = step(errors, name, "compare", lambda: verdict(live, model, args))
    row["round trip"] = step(
        errors, name, "round trip", lambda: round_trip(shell, live, name, args, workdir)
    )

    def guards() -> float:
        unchecked = shell.ip.run_line_magic("tvmmodule", f"{name}_unchecked --unchecked --quiet")
        unchecked.add_torch(model, args)
        unchecked.main(*args)
        return guard_cost(live, unchecked, args)

    row["guard cost"] = step(errors, name, "guard cost", guards)

    def against_pytorch() -> float:
        timing = live.time("main", *args, number=NUMBER, repeat=REPEAT * ROUNDS, against=model)
        row["ours"], row["PyTorch"] = timing.median, timing.against.median
        return timing.speed

    row[SPEED] = step(errors, name, "time against PyTorch", against_pytorch)
    return row


def verdict(live, model, args) -> str:
    """`compare`'s verdict, short: pass, or the first binding that diverges."""
    comparison = live.compare("main", model, *args)
    first = comparison.first_divergence
    if comparison.passed and first is None:
        return "pass"
    if first is not None:
        return f"FAIL at `{first.binding}` ({first.op})"
    return "FAIL, no op alone"


SPEED = "× PyTorch's speed"  # PyTorch's median over ours: above 1, ours is faster
COLUMNS = ("model", "import", "first call", "max error", "compare", "round trip")
COLUMNS += ("guard cost", "ours", "PyTorch", SPEED)


def cell(column: str, value) -> str:
    if isinstance(value, str) or value is None:
        return "" if value is None else value
    if column in ("import", "first call"):
        return f"{value:.2f} s"
    if column in ("ours", "PyTorch"):
        return f"{value * 1e6:.0f} µs"
    if column == "max error":
        return f"{value:.2g}"
    return f"{value:.2f}×"


def table(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(c, row.get(c)) for c in COLUMNS) + " |" for row in rows]
    return "\n".join(lines)


def main(names: list[str]) -> int:
    torch.set_num_threads(1)
    shell = notebook_shell()
    rows, errors = [], []
    with tempfile.TemporaryDirectory(prefix="real-models-") as workdir:
        for name in names or ZOO:
            rows.append(measure(name, shell, workdir, errors))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    print()
    print(f"torch {torch.__version__}, one thread each side")
    print(table(rows))
    if errors:
        print("\nWhat failed:")
        print("\n".join(f"- {e}" for e in errors))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
