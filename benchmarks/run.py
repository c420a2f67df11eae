"""`make bench`: live modules against upstream `BasePyModule`, in one run, on the same inputs.

Each section runs in its own Python process (a clean interpreter, and
upstream's habit of clearing the `R.call_py_func` registry cannot reach the
next section); every figure is a median of repeated runs. The table is
printed and written to `benchmarks/RESULTS.md`. Nothing here passes or fails:
the goals are reported, not asserted.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness import Row  # noqa: E402

SIZES = (5, 20, 80)
EDIT_REPEATS = 9
UPSTREAM_REPEATS = (5, 5, 3)
CALL_NUMBER, CALL_ROUNDS = 2000, 41
NOTEBOOK_REPEATS = 3
COST_FUNCTIONS = 8

METHOD = (HERE / "METHOD.md").read_text()


def section(script: str, *args: object) -> dict:
    """Run one section in a fresh interpreter and return its JSON figures."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(HERE / script), *map(str, args)],
        cwd=HERE,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(HERE)},
    )
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"benchmark section {script} {args} failed (exit {done.returncode})")
    print(
        f"  {script} {' '.join(map(str, args))}: {time.perf_counter() - started:.0f} s",
        file=sys.stderr,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def machine() -> list[str]:
    import IPython
    import torch
    import tvm

    import tvm_pyfunc_nb

    cpu = (
        next(
            (
                ln.split(":", 1)[1].strip()
                for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")
            ),
            platform.processor(),
        )
        if Path("/proc/cpuinfo").exists()
        else ""
    )
    return [
        f"machine: {platform.machine()}, {cpu}, {os.cpu_count()} cores, "
        f"{platform.system()} {platform.release()}",
        f"load average at start: {', '.join(f'{v:.2f}' for v in os.getloadavg())}",
        f"Python {platform.python_version()}, apache-tvm {tvm.__version__}, "
        f"torch {torch.__version__}, IPython {IPython.__version__}, "
        f"tvm_pyfunc_nb {tvm_pyfunc_nb.__version__}",
    ]


def edit_rows(edits: dict) -> list[Row]:
    compiled = edits["compiled"]
    rows = [
        Row(
            "edit",
            "pyfunc edit → result ready (20 PrimFuncs, 2 Relax, 2 pyfuncs)",
            edits["ours_pyfunc20"],
            edits["upstream_pyfunc20"],
            "no TVM compile",
            compiled["pyfunc20"] == [],
            f"ours compiled: {', '.join(compiled['pyfunc20']) or 'nothing'}",
        ),
        Row(
            "edit",
            "one PrimFunc edit → result ready (same module)",
            edits["ours_primfunc20"],
            edits["upstream_primfunc20"],
            "≥ 5×",
            edits["upstream_primfunc20"] / edits["ours_primfunc20"] >= 5,
            f"ours compiled: {', '.join(compiled['primfunc20'])}",
        ),
    ]
    first = SIZES[0]
    for n in SIZES:
        ours, upstream = edits[f"ours_primfunc{n}"], edits[f"upstream_primfunc{n}"]
        growth = ours / edits[f"ours_primfunc{first}"]
        rows.append(
            Row(
                "scaling",
                f"one PrimFunc edit → result ready, {n} PrimFuncs",
                ours,
                upstream,
                "ours flat",
                growth < 1.5,
                f"ours ×{growth:.2f} of the {first}-PrimFunc figure, upstream "
                f"×{upstream / edits[f'upstream_primfunc{first}']:.2f}",
            )
        )
    return rows


def call_rows(calls: dict) -> list[Row]:
    floor = calls["ours raw VM, tvm tensors"]
    relax = calls["ours relax"]
    callback = calls["raw VM + bare callback"]
    return [
        Row(
            "calls",
            "raw VM call, prefetched function and TVM tensors (the floor)",
            floor,
            calls["upstream raw VM, tvm tensors"],
        ),
        Row(
            "calls",
            "raw VM call, torch tensors in and out",
            calls["ours raw VM, torch tensors"],
            calls["upstream raw VM, torch tensors"],
        ),
        Row(
            "calls",
            "Relax function, torch in/out (`NAME.main_relax(x, y)`)",
            relax,
            calls["upstream relax"],
            "≤ 1.5× floor",
            relax <= 1.5 * floor,
            f"ours = {relax / floor:.2f}× the floor, "
            f"{relax / calls['ours raw VM, torch tensors']:.2f}× the raw call with torch tensors",
        ),
        Row(
            "calls",
            "pyfunc → `self.call_tir` (returns the PrimFunc's output)",
            calls["ours call_tir"],
            calls["upstream call_tir"],
            "≥ 3×",
            calls["upstream call_tir"] / calls["ours call_tir"] >= 3,
        ),
        Row(
            "calls",
            "Relax → `R.call_py_func` → pyfunc `x * 10`",
            calls["ours call_py_func scale"],
            calls["upstream call_py_func scale"],
            "≥ 3×",
            calls["upstream call_py_func scale"] / calls["ours call_py_func scale"] >= 3,
            f"floor: VM + bare callback {_time(callback)} "
            f"+ `x * 10` alone {_time(calls['torch x * 10'])}",
        ),
        Row(
            "calls",
            "Relax → `R.call_py_func` → pyfunc returning its input",
            calls["ours call_py_func ident"],
            calls["upstream call_py_func ident"],
            "≥ 3×",
            calls["upstream call_py_func ident"] / calls["ours call_py_func ident"] >= 3,
            f"floor: VM + bare callback {_time(callback)}",
        ),
    ]


def notebook_rows(nb: dict) -> list[Row]:
    cold, warm, upstream = nb["cold"], nb["warm"], nb["upstream"]
    return [
        Row(
            "notebook",
            "notebook in a fresh kernel, cold compile cache (kernel start → shut down)",
            cold["wall"],
            upstream["wall"],
            note=f"cells alone: ours {_time(cold['cells'])}, upstream {_time(upstream['cells'])}; "
            f"ours compiled {cold['stats']['tir']} PrimFuncs",
        ),
        Row(
            "notebook",
            "same notebook, fresh kernel, warm compile cache",
            warm["wall"],
            upstream["wall"],
            "compiles nothing",
            warm["stats"]["tir"] == 0,
            f"cells alone: ours {_time(warm['cells'])}; {warm['stats']['tir']} PrimFunc compiles, "
            f"{warm['stats']['hits']} cache hits; "
            f"warm is {cold['wall'] / warm['wall']:.2f}× faster than cold",
        ),
    ]


def _time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.2f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def table(rows: list[Row]) -> list[str]:
    lines = [
        "| measurement | ours | upstream | upstream ÷ ours | goal | met | notes |",
        "| --- | ---: | ---: | ---: | --- | --- | --- |",
    ]
    for row in rows:
        met = "" if row.met is None else ("yes" if row.met else "**no**")
        lines.append(
            f"| {row.what} | {_time(row.ours)} | {_time(row.upstream)} | {row.ratio:.2f}× | "
            f"{row.goal} | {met} | {row.note} |"
        )
    return lines


def cost_lines(costs: dict) -> list[str]:
    return [
        f"- compiling one small PrimFunc: {_time(costs['build'])}",
        "- exporting it to the cache (`export_library`: LLVM object code + the C compiler's "
        f"link), on the background thread: {_time(costs['export'])}; "
        f"the compiling call itself only pays {_time(costs['store_call'])} to hand it over",
        "- loading it back, verified (record checksum, TVMScript comparison, library SHA-256, "
        f"private copy, `load_module`): {_time(costs['load'])}",
    ]


def main() -> None:
    started = time.perf_counter()
    header = machine()
    print("\n".join(header), file=sys.stderr)
    edits = section(
        "edit_loop.py",
        ",".join(map(str, SIZES)),
        EDIT_REPEATS,
        ",".join(map(str, UPSTREAM_REPEATS)),
    )
    calls = section("call_paths.py", CALL_NUMBER, CALL_ROUNDS)
    nb = section("notebook.py", NOTEBOOK_REPEATS)
    costs = section("cache_costs.py", COST_FUNCTIONS)
    rows = edit_rows(edits) + call_rows(calls) + notebook_rows(nb)
    titles = {
        "edit": "Edit → result ready (a real IPython shell)",
        "calls": "Call paths (5-element tensors)",
        "notebook": "Fresh kernel: a generated notebook run start to finish",
        "scaling": "Scaling: edit one PrimFunc in modules of 5, 20 and 80 PrimFuncs",
    }
    body = []
    for key, title in titles.items():
        body += ["", f"## {title}", "", *table([r for r in rows if r.table == key])]
    body += ["", "## Compile cache, per PrimFunc", "", *cost_lines(costs)]
    elapsed = time.perf_counter() - started
    text = "\n".join(
        [
            "# Benchmark results",
            "",
            *[f"- {line}" for line in header],
            f"- `make bench` took {elapsed:.0f} s",
            *body,
            "",
            METHOD,
        ]
    )
    print(text)
    (HERE / "RESULTS.md").write_text(text)


if __name__ == "__main__":
    main()
