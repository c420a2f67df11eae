"""`make bench`: live modules against upstream `BasePyModule`, against PyTorch, and against
themselves under other settings, in one run, on the same inputs.

Each section runs in its own Python process (a clean interpreter, and
upstream's habit of clearing the `R.call_py_func` registry cannot reach the
next section); every figure is a median of repeated runs. The tables are
printed and written to `benchmarks/RESULTS.md`. Nothing here passes or fails:
the goals are reported, not asserted (a section's own correctness checks do
fail it: a wrong result is not a figure).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import readme_table  # noqa: E402
import speed_report  # noqa: E402
from harness import Row  # noqa: E402

SIZES = (5, 20, 80)
EDIT_REPEATS = 9
UPSTREAM_REPEATS = (5, 5, 3)
CALL_NUMBER, CALL_ROUNDS = 2000, 41
NOTEBOOK_REPEATS = 3
COST_FUNCTIONS = 8
MATMUL_NUMBER, MATMUL_REPEAT, MATMUL_ROUNDS, TUNE_TRIALS = 10, 3, 3, 48
GUARD_NUMBER, GUARD_ROUNDS = 20, 5
WORKER_REPEATS = 15
BISECT_REPEATS = 3
REMOTE_NUMBER, REMOTE_ROUNDS, REMOTE_TIME_NUMBER = 200, 9, 1000
MODEL_LAYERS, MODEL_REPEATS = 4, 3
SPEED_NUMBER, SPEED_REPEAT, SPEED_ROUNDS = 10, 3, 5

METHOD = (HERE / "METHOD.md").read_text()


@dataclass(frozen=True)
class Table:
    """One table of the results: its title and what its two figures are. The ratio column is
    always the second figure over the first: against upstream or PyTorch, ours as a multiple of
    its speed (above 1, ours is faster), the one convention of the package and its tutorials."""

    title: str
    first: str = "ours"
    second: str = "upstream"
    ratio: str = "× upstream's speed (upstream ÷ ours: above 1 is faster)"


PYTORCH_SPEED = "× PyTorch's speed (PyTorch ÷ ours: above 1 is faster)"

TABLES = {
    "edit": Table("Edit → result ready (a real IPython shell)"),
    "calls": Table("Call paths (5-element tensors)"),
    "notebook": Table("Fresh kernel: a generated notebook run start to finish"),
    "scaling": Table("Scaling: edit one PrimFunc in modules of 5, 20 and 80 PrimFuncs"),
    "fast": Table(
        "Make it fast: the tutorial's matmul and an MLP against PyTorch eager and `torch.compile` "
        "(this machine's CPU)",
        second="PyTorch (eager unless the row says `torch.compile`)",
        ratio=PYTORCH_SPEED,
    ),
    "guards": Table(
        "Crash guards: kernels whose bounds TVM cannot prove, with and without the guards",
        first="--unchecked",
        second="checked (default)",
        ratio="checked ÷ unchecked (the guards' cost)",
    ),
    "worker": Table(
        "Build worker: building in a child process (what `--isolate` and `bisect` use) against "
        "building here",
        first="in this process",
        second="in the worker",
        ratio="worker ÷ here",
    ),
    "remote": Table(
        "Remote: an RPC server on loopback against the same module here",
        first="local",
        second="remote",
        ratio="remote ÷ local",
    ),
    "model": Table("A model at scale: a 4-layer transformer imported with `add_torch`"),
}


def section(script: str, *args: object, env: dict | None = None) -> dict:
    """Run one section in a fresh interpreter (`env` added to its environment) and return its
    JSON figures."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(HERE / script), *map(str, args)],
        cwd=HERE,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(_paths()), **(env or {})},
    )
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"benchmark section {script} {args} failed (exit {done.returncode})")
    print(
        f"  {script} {' '.join(map(str, args))}: {time.perf_counter() - started:.0f} s",
        file=sys.stderr,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def _paths() -> list[str]:
    """The sections' import path: this folder, then the caller's (a worktree's package first)."""
    return [str(HERE), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]


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


def _compiled(records: list[str]) -> str:
    return ", ".join(records) or "nothing"


def edit_rows(edits: dict) -> list[Row]:
    compiled = edits["compiled"]
    kept = edits.get("kept", {})
    rows = [
        Row(
            "edit",
            "pyfunc edit → result ready (20 PrimFuncs, 2 Relax, 2 pyfuncs)",
            edits["ours_pyfunc20"],
            edits["upstream_pyfunc20"],
            "no TVM compile",
            compiled["pyfunc20"] == [],
            f"ours compiled: {_compiled(compiled['pyfunc20'])}",
        ),
        Row(
            "edit",
            "one PrimFunc edit → result ready (same module)",
            edits["ours_primfunc20"],
            edits["upstream_primfunc20"],
            "≥ 5×",
            edits["upstream_primfunc20"] / edits["ours_primfunc20"] >= 5,
            f"ours compiled: {_compiled(compiled['primfunc20'])}",
        ),
        Row(
            "edit",
            "revert: the PrimFunc's previous text again, same cell id → result ready",
            edits["ours_revert20"],
            edits["upstream_revert20"],
            "compiles nothing",
            compiled["revert20"] == [],
            f"ours compiled (all {EDIT_REPEATS} reverts): {_compiled(compiled['revert20'])}; "
            f"the module keeps {kept.get('kernels', '?')} compiled kernels (versions included) "
            f"and {kept.get('vms', '?')} Relax VMs; upstream re-instantiates",
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
            "≥ 2×",
            upstream["wall"] / cold["wall"] >= 2,
            f"cells alone: ours {_time(cold['cells'])}, upstream {_time(upstream['cells'])}; "
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
            f"warm runs at {cold['wall'] / warm['wall']:.2f}× cold's speed",
        ),
    ]


def fast_rows(fast: dict) -> list[Row]:
    def gflops(key: str) -> str:
        rate = {side: 2 * 256**3 / fast[key][side] / 1e9 for side in ("ours", "torch")}
        return f"; {rate['ours']:.0f} GFLOP/s against PyTorch's {rate['torch']:.0f}"

    tuned_goal = fast["tuned"]["torch"] / fast["tuned"]["ours"]
    rows = [
        Row(
            "fast",
            f"matmul 256×256 float32, {what} vs `torch.matmul(a, b, out=c)`",
            fast[key]["ours"],
            fast[key]["torch"],
            goal="≥ 0.8×" if key == "tuned" else "",
            met=(tuned_goal >= 0.8) if key == "tuned" else None,
            note=note + gflops(key),
        )
        for key, what, note in [
            ("naive", "the loops as written", "one core, no vectors"),
            (
                "scheduled",
                "scheduled by hand",
                "the tutorial's `tile`: 32×128 tiles in parallel, 16-wide vectors, "
                "a tile accumulator",
            ),
            (
                "tuned",
                f"tuned (MetaSchedule, {fast['tune_trials']} trials)",
                f"`tune` took {_time(fast['tune_seconds'])}, MetaSchedule's one-time "
                "imports included",
            ),
        ]
    ]
    compiled = fast["mlp_torch_compile"]
    best = min(("default", "zero", "target"), key=lambda p: fast[f"mlp_{p}"]["ours"])
    rows.append(
        Row(
            "fast",
            f"MLP 32×256 → 512 → 512 → 10 (ReLU), `--pipeline {best}` (the fastest here) vs "
            "`torch.compile` (inductor)",
            fast[f"mlp_{best}"]["ours"],
            compiled["median"],
            note="torch.compile's first call (its compile) took "
            f"{_time(compiled['compile_seconds'])}",
        )
    )
    for pipeline in ("default", "zero", "target"):
        figures = fast[f"mlp_{pipeline}"]
        kernels = figures["kernels"]
        rows.append(
            Row(
                "fast",
                f"MLP 32×256 → 512 → 512 → 10 (ReLU), `--pipeline {pipeline}` vs PyTorch eager",
                figures["ours"],
                figures["torch"],
                note=f"{len(kernels)} kernels: {', '.join(kernels)}",
            )
        )
    return rows


def fast_lines(fast: dict) -> list[str]:
    return [
        f'- target `{fast["target"]}`: `{{"kind": "llvm", "mcpu": "native"}}`, the CPU '
        "of this machine (code compiled so may not run on an older one); TVM's parallel loops "
        f"run on its own thread pool, PyTorch on {fast['torch_threads']} threads",
        "- no Relax pipeline schedules a matmul on a CPU; under every pipeline the MLP's matmul "
        "kernels get this package's default CPU schedule (`cpu_schedules.py`), fused or not",
    ]


RELAX_GUARDED = ("embed", "pick")  # the guards' Relax functions (the others are PrimFuncs)


def guard_rows(guards: dict) -> list[Row]:
    noted = guards["guarded"]
    rows = []
    for kernel, what in [
        ("gather", "gather `B[i] = A[idx[i]]`, 1M float32, a random permutation"),
        ("copy", "copy loop over `m` into a buffer of size `n`, 1M float32"),
        ("shift", "vectorized copy `B[i, j] = A[16i + j + off]`, 1M float32 (checked per vector)"),
        ("embed", "`R.take` of 4096 rows of 256 float32 (row checked once, copy vectorized)"),
        ("pick", "`R.gather_elements`, 1024 × 1024 float32 (checked: its loop runs serially)"),
    ]:
        rows.append(
            Row(
                "guards",
                what,
                guards[f"{kernel} unchecked"],
                guards[f"{kernel} checked"],
                note=f"`time` notes the guards: checked {_yes(noted[f'{kernel} checked'])}, "
                f"unchecked {_yes(noted[f'{kernel} unchecked'])}"
                if kernel not in RELAX_GUARDED
                else "a Relax function: `time` notes the guards of PrimFuncs only",
            )
        )
    return rows


def worker_rows(worker: dict) -> list[Row]:
    edit, link, isolated = worker["edit"], worker["link"], worker["isolate"]
    return [
        Row(
            "worker",
            "`--isolate`'s cost per compile: a cell that edits one PrimFunc, then a call of it "
            "(parse, build, load, call; no compile cache either side)",
            isolated["here"],
            isolated["isolated"],
            "≤ 1.2×",
            isolated["isolated"] / isolated["here"] <= 1.2,
        ),
        Row(
            "worker",
            "one PrimFunc edit, built and ready to call (TIR build, LLVM code; the worker's "
            "library loaded here)",
            edit["here"],
            edit["worker"],
            "≤ 1.2×",
            edit["worker"] / edit["here"] <= 1.2,
        ),
        Row(
            "worker",
            f"a Relax function lowered and linked with its {link['kernels']} kernels, nothing "
            "kept (matmul, add, relu, softmax)",
            link["here"],
            link["worker"],
            note="the worker: the pipeline and the kernels' build there, the link here",
        ),
    ]


def worker_lines(worker: dict) -> list[str]:
    start, write = worker["start"], worker["write"]
    return [
        f"- a new worker answers a job of Python alone after {_time(start['light'])}; its "
        f"first build, TVM, PyTorch and the package imported first, after "
        f"{_time(start['cold'])}; a ready worker answers a trivial job in "
        f"{_time(worker['round_trip'])}",
        f"- `bisect`'s job, the Relax function built and run there (every pass logged): "
        f"{_time(worker['link']['build_and_run'])}",
        f"- writing a kernel library: `library_files.write_library` (LLVM's assembly in "
        f"memory, the C compiler in a subprocess) {_time(write['ours'])}, TVM's "
        f"`export_library` (LLVM writes the object file itself: a full disk ends the "
        f"process) {_time(write['export_library'])}",
    ]


def bisect_lines(found: dict) -> list[str]:
    return [
        f"- `bisect` on two attention blocks (d=64, {found['bindings']} bindings) imported "
        f"with `add_torch`, a pass of the benchmark's own at fault, against the PyTorch model: "
        f"{found['passes']} optional passes, {found['builds']} builds tried; "
        f"{_time(found['warm'])} with the worker warm, {_time(found['cold'])} with one to "
        f"start (goal: under a minute on 2 cores: "
        f"{'met' if found['cold'] < 60 else '**not met**'})",
    ]


def bug_report_lines(bug: dict) -> list[str]:
    tutorial, bert, reshape = bug["tutorial"], bug["bert"], bug["reshape"]

    def met(ok: bool) -> str:
        return "met" if ok else "**not met**"

    return [
        f"- `minimize` on the same two attention blocks, against the PyTorch model: "
        f"{tutorial['original']} bindings cut to {tutorial['size']} in "
        f"{_time(tutorial['seconds'])} ({tutorial['cuts']} cuts built; goal: under two minutes: "
        f"{met(tutorial['seconds'] < 120)})",
        f"- a tiny BERT whose one `tanh` a pass of the benchmark's own turns into a sigmoid: "
        f"{bert['original']} bindings cut to {bert['size']} in {_time(bert['seconds'])} "
        f"(goal: at most 5: {met(bert['size'] <= 5)}); its `report`, the minimize result "
        f"in it: {bert['report_bytes'] / 1e6:.2f} MB in {_time(bert['report_seconds'])} "
        f"(goal: under 2 MB: {met(bert['report_bytes'] < 2e6)})",
        f"- TVM 0.27's `RewriteDataflowReshape` writing into an argument: "
        f"{reshape['original']} bindings cut to {reshape['size']} in "
        f"{_time(reshape['seconds'])} (goal: at most 3: {met(reshape['size'] <= 3)})",
    ]


def remote_rows(remote: dict) -> list[Row]:
    rows = []
    for key, what in [
        ("relax", "Relax `R.add`, 5 elements, per call (`NAME.main_relax(x, y)`)"),
        ("tir", "PrimFunc, 5 elements, per call (its output copied back)"),
    ]:
        local, far = remote[f"{key} local"], remote[f"{key} remote"]
        rows.append(
            Row("remote", what, local, far, note=f"RPC overhead {_time(far - local)} per call")
        )
    for fn, what in [("main_relax", "Relax function"), ("add_tir", "PrimFunc")]:
        rows.append(
            Row(
                "remote",
                f"`NAME.time` of the {what}: `time_evaluator` on the device",
                remote[f"time {fn} local"],
                remote[f"time {fn} remote"],
                note="no RPC in the figure: expected near-equal",
            )
        )
    return rows


def remote_lines(remote: dict) -> list[str]:
    uploads = ", ".join(f"{name} ({size / 1024:.0f} KB)" for name, size in remote["uploads"])
    return [f"- uploaded once, at the first calls: {uploads}"]


def model_rows(model: dict) -> list[Row]:
    cold, warm, edit = model["cold_compiled"], model["warm_compiled"], model["edit_compiled"]
    return [
        Row(
            "model",
            f"cold: first call compiles everything ({model['bindings']} bindings, "
            f"{model['kernels']} kernels run) vs `tvm.compile` + VM",
            model["cold"],
            model["upstream"],
            note=f"ours built {cold['tir']} PrimFuncs and the VM; then the background exports "
            f"to the compile cache took {_time(model['exports'])}; `add_torch` itself "
            f"{_time(model['import'])}",
        ),
        Row(
            "model",
            "warm: a new module, same process and cache directory, first call",
            model["warm"],
            model["upstream"],
            note=f"ours compiled {warm['tir']} PrimFuncs ({model['warm_from_disk']} from the "
            f"disk cache) and lowered and linked the VM ({_time(warm['compile_seconds'])})",
        ),
        Row(
            "model",
            "edit: `edit_text('main')` with the first GELU made SiLU, run as a cell, then call",
            model["edit"],
            model["upstream_edit"],
            note=f"cell {_time(model['edit_cell'])}, call {_time(model['edit_call'])}; ours "
            f"compiled PrimFuncs {', '.join(edit['tir_names']) or 'none'} and "
            f"{edit['vm']} VM",
        ),
    ]


def _ratio(ratio: float) -> str:
    return f"{ratio:.2f}×" if ratio >= 0.1 else f"{ratio:.2g}×"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _time(seconds: float) -> str:
    if abs(seconds) < 1e-6:
        return f"{seconds * 1e9:.1f} ns"
    if abs(seconds) < 1e-3:
        return f"{seconds * 1e6:.2f} µs"
    if abs(seconds) < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def table(rows: list[Row], spec: Table) -> list[str]:
    lines = [
        f"| measurement | {spec.first} | {spec.second} | {spec.ratio} | goal | met | notes |",
        "| --- | ---: | ---: | ---: | --- | --- | --- |",
    ]
    for row in rows:
        met = "" if row.met is None else ("yes" if row.met else "**no**")
        lines.append(
            f"| {row.what} | {_time(row.ours)} | {_time(row.upstream)} | {_ratio(row.ratio)} | "
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


def speed_text(speed: dict) -> list[str]:
    """The "Fast by default" section of RESULTS.md."""
    return [
        "",
        "## Fast by default: five models against PyTorch eager and `torch.compile`, one thread "
        "and all threads",
        "",
        "× PyTorch eager's speed (eager's median time over the other's: above 1 is faster), "
        "the time in brackets; goals (issue 37) at one thread and at all threads for the MLP, "
        "the encoder layer and the conv net: no options ≥ 1.0×, `--offload torch` ≥ 1.2×, after "
        "`tune` ≥ 1.5×; a figure that misses its goal is marked. AVX2 rows run PyTorch on its "
        "AVX2 kernels too.",
        "",
        *speed_report.speed_lines(speed, _time),
        "",
        *speed_report.goal_lines(speed, _time),
        *speed_report.peak_lines(speed, _time),
    ]


def write_readme_table(lines: list[str]) -> None:
    """The README's speed table, between its markers, replaced by `lines`."""
    readme = HERE.parent / "README.md"
    text = readme.read_text()
    start, end = text.index(README_START), text.index(README_END)
    readme.write_text(
        text[: start + len(README_START)] + "\n" + "\n".join(lines) + "\n" + text[end:]
    )


README_START = "<!-- make bench writes this table -->"
README_END = "<!-- end of the table make bench writes -->"


def main(only: str | None = None) -> None:
    """Every section, RESULTS.md and the README's speed table; `only="speed"`: the "Fast by
    default" section alone, printed (RESULTS.md and the README are left as they are)."""
    started = time.perf_counter()
    header = machine()
    print("\n".join(header), file=sys.stderr)
    speed = speed_report.speed_section(section, SPEED_NUMBER, SPEED_REPEAT, SPEED_ROUNDS)
    if only == "speed":
        print("\n".join([*header, *speed_text(speed)]))
        return
    edits = section(
        "edit_loop.py",
        ",".join(map(str, SIZES)),
        EDIT_REPEATS,
        ",".join(map(str, UPSTREAM_REPEATS)),
    )
    calls = section("call_paths.py", CALL_NUMBER, CALL_ROUNDS)
    nb = section("notebook.py", NOTEBOOK_REPEATS)
    costs = section("cache_costs.py", COST_FUNCTIONS)
    fast = section("make_fast.py", MATMUL_NUMBER, MATMUL_REPEAT, MATMUL_ROUNDS, TUNE_TRIALS)
    guards = section("guards.py", GUARD_NUMBER, GUARD_ROUNDS)
    worker = section("build_worker.py", WORKER_REPEATS)
    found = section("find_the_pass.py", BISECT_REPEATS)
    bug = section("bug_report.py")
    remote = section("remote.py", REMOTE_NUMBER, REMOTE_ROUNDS, REMOTE_TIME_NUMBER)
    model = section("model_scale.py", MODEL_LAYERS, MODEL_REPEATS)
    rows = (
        edit_rows(edits)
        + call_rows(calls)
        + notebook_rows(nb)
        + fast_rows(fast)
        + guard_rows(guards)
        + worker_rows(worker)
        + remote_rows(remote)
        + model_rows(model)
    )
    extra = {
        "worker": worker_lines(worker) + bisect_lines(found) + bug_report_lines(bug),
        "fast": fast_lines(fast),
        "remote": remote_lines(remote),
    }
    body = []
    for key, spec in TABLES.items():
        body += ["", f"## {spec.title}", "", *table([r for r in rows if r.table == key], spec)]
        if key in extra:
            body += ["", *extra[key]]
    body += speed_text(speed)
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
    write_readme_table(
        readme_table.lines(
            edits, calls, nb, fast, guards, worker, found, remote, model, speed, _time
        )
    )


if __name__ == "__main__":
    main(*sys.argv[1:2])
