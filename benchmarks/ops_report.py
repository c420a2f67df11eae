"""`make ops`: every op of TVM's PyTorch importer through plain TVM and through a live module.

    python benchmarks/ops_report.py [CASE ...] [--targets native,v3] [--jobs 2]

The corpus is `tests/op_corpus.py`: a small model for each entry of the installed
`ExportedProgramImporter`'s convert map, and the variants users write. Each case runs under
each target (this CPU's `llvm`, and `x86-64-v3`: AVX2, 8 floats to a vector where this CPU may
have 16), both ways, against PyTorch on its own copy of the inputs:

- plain TVM: `torch.export.export`, `from_exported_program`, `tvm.compile`, a VM call;
- ours: `add_torch` into a `LiveModule` (crash guards on, the default), a call, and `compare`
  against the model, whose verdict must agree with the numbers. A call a crash guard stopped
  runs again `--unchecked`: a guard must never stop a kernel that gives PyTorch's numbers.

A cell says `ok`, `wrong: why` (numbers, shapes or dtypes that are not PyTorch's) or `fails:
why` (with the stage: export, import, compile, call). Cases run in worker processes at the
priority they were started with (`make ops` starts them at nice 10), one job (case x target) at a
time each: a crash (a signal) or a job over `--timeout` seconds ends its worker and is that
cell's result, and a new worker takes the next job. The table is printed and written to
`benchmarks/OPS.md` (only for every case). `--json FILE` keeps the results (a run of some cases
updates theirs) and `--from-json FILE` makes the table of them again without running anything.
Nothing here asserts: `tests/test_op_corpus.py` does, on a slice.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import queue
import re
import select
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

TARGETS = {"native": "llvm", "v3": '{"kind": "llvm", "mcpu": "x86-64-v3"}'}
OK, WRONG, FAILS = "ok", "wrong", "fails"


# -- one job, in a worker ----------------------------------------------------------------------
def reason(error: BaseException) -> str:
    """The first line of why, short enough for a table cell."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = re.sub(r"\s+", " ", f"{type(error).__name__}: {lines[0] if lines else ''}")
    return text if len(text) <= 200 else text[:197] + "..."


def copies(args: tuple) -> tuple:
    """Each side's own inputs: a model that writes into an input changes only its copy."""
    return tuple(a.clone() if hasattr(a, "clone") else a for a in args)


def expected_of(op_case):
    import torch

    model, args = op_case.build()
    with torch.no_grad():
        return model(*copies(args))


def judged(stage: str, run) -> dict:
    """`run()` gives (ours, expected, random); the cell it makes: ok, wrong, or fails at `stage`."""
    from op_corpus import same

    try:
        actual, expected, random = run()
    except Exception as error:  # a row says what failed; the next job runs
        return {"status": FAILS, "why": f"{stage}: {reason(error)}"}
    why = same(actual, expected, random=random)
    return {"status": WRONG if why else OK, "why": why}


def plain_tvm(op_case, target: str) -> dict:
    """The case through plain TVM: export, import, `tvm.compile`, a VM call. `ops`: the ops of
    the graph TVM translates (torch.export's, decomposed as `from_exported_program` does)."""
    import torch
    import tvm
    from op_corpus import graph_ops
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    stage, ops = ["export"], []

    def run():
        model, args = op_case.build()
        exported = torch.export.export(model, copies(args), dynamic_shapes=op_case.dynamic_shapes())
        ops.extend(graph_ops(exported.run_decompositions()))
        stage[0] = "import"
        mod = from_exported_program(exported)
        stage[0] = "compile"
        executable = tvm.compile(mod, target=tvm.target.Target(_target(target)))
        stage[0] = "call"
        vm = relax.VirtualMachine(executable, tvm.cpu())
        inputs = [tvm.runtime.from_dlpack(a.contiguous()) for a in copies(args)]
        return to_torch(vm["main"](*inputs)), expected_of(op_case), op_case.random

    result = judged("", run)
    if result["status"] == FAILS:
        result["why"] = stage[0] + result["why"]
    return {**result, "ops": ops}


def _target(target: str):
    return json.loads(target) if target.startswith("{") else target


def to_torch(value):
    """What the VM returns, as PyTorch tensors (tuples as lists, shapes as lists of ints)."""
    import torch
    import tvm

    if isinstance(value, tvm.runtime.Tensor):
        return torch.from_dlpack(value).clone()
    if isinstance(value, tvm.runtime.ShapeTuple):
        return list(value)
    if isinstance(value, (list, tuple)) or type(value).__name__ == "Array":
        return [to_torch(v) for v in value]
    return value


def ours(op_case, target: str, checked: bool = True) -> tuple[dict, dict]:
    """The case through a live module: `add_torch`, a call; and `compare`'s verdict against the
    numbers. Returns (the call's cell, compare's cell)."""
    from tvm_pyfunc_nb import LiveModule

    live = LiveModule(f"op_{op_case.name}", target=target, checked=checked)
    stage = ["import"]
    model, args = op_case.build()

    def run():
        live.add_torch(model, copies(args), dynamic_shapes=op_case.dynamic_shapes())
        stage[0] = "call"
        return live.main(*copies(args)), expected_of(op_case), op_case.random

    try:
        result = judged("", run)
        if result["status"] == FAILS:
            result["why"] = stage[0] + result["why"]
            result["stopped"] = stage[0] == "call" and "stopped while running" in result["why"]
        verdict = {"status": "n/a", "why": ""}
        if result["status"] != FAILS and not op_case.random and checked:
            verdict = compare_verdict(live, model, args, result["status"] == OK)
        return result, verdict
    finally:
        live.close()


def compare_verdict(live, model, args, numbers_right: bool) -> dict:
    """Whether `compare`'s verdict on the outputs agrees with what the call's numbers say; where
    it does and the numbers are right, whether it still names an op that diverges (a value the
    outputs do not show: a running statistic, memory never written)."""
    try:
        comparison = live.compare("main", model, *copies(args))
    except Exception as error:  # compare itself fails: a cell of the table
        return {"status": "fails", "why": reason(error)}
    if comparison.passed != numbers_right:
        return {"status": "disagrees", "why": comparison.verdict()[:200]}
    if numbers_right and comparison.first_divergence is not None:
        return {"status": "names an op", "why": comparison.verdict()[:200]}
    return {"status": "agrees", "why": ""}


def run_job(job: dict) -> dict:
    """One case under one target, both ways (a side already given is kept: it crashed before)."""
    from op_corpus import CASES

    op_case, target = CASES[job["case"]], TARGETS[job["target"]]
    out = dict(job)
    if "plain" not in out:
        _stage(job, "plain")
        out["plain"] = plain_tvm(op_case, target)
    if "ours" not in out:
        _stage(job, "ours")
        out["ours"], out["compare"] = ours(op_case, target)
    if out["ours"].get("stopped") and "unchecked" not in out:
        _stage(job, "unchecked")
        out["unchecked"], _ = ours(op_case, target, checked=False)
    return out


PROTOCOL = None  # the worker's channel to the parent (its stdout, before anything else writes)


def _stage(job: dict, stage: str) -> None:
    """Tell the parent which side runs now: if the worker dies, that side crashed."""
    _send({"case": job["case"], "target": job["target"], "stage": stage})


def _send(message: dict) -> None:
    PROTOCOL.write(json.dumps(message) + "\n")
    PROTOCOL.flush()


def worker() -> None:
    """Read jobs (JSON lines) from stdin, run each, answer on the original stdout. Whatever else
    writes to stdout (notices, TVM) goes to stderr."""
    global PROTOCOL
    PROTOCOL = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    warnings.simplefilter("ignore")
    import torch

    torch.set_num_threads(1)
    import op_corpus  # noqa: F401 (imported once, before the first job)

    import tvm_pyfunc_nb  # noqa: F401

    _send({"stage": "ready"})  # a job's time starts now, not while torch and TVM load
    for line in sys.stdin:
        job = json.loads(line)
        with contextlib.redirect_stdout(io.StringIO()):
            result = run_job(job)
        _send({**result, "stage": "done"})


# -- the parent: workers, crashes, timeouts ------------------------------------------------------
def worker_process(log) -> subprocess.Popen:
    env = {**os.environ, "TVM_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, __file__, "--worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        env=env,
    )


def serve(jobs: queue.Queue, results: list, timeout: float, log, lock: threading.Lock) -> None:
    """One worker slot: send jobs one at a time; a worker that dies or overruns is replaced, and
    the side it was running is recorded as what happened to it."""
    process = None
    while True:
        try:
            job = jobs.get_nowait()
        except queue.Empty:
            break
        if process is None or process.poll() is not None:
            process = worker_process(log)
            process.stdout.readline()  # "ready"
        process.stdin.write(json.dumps(job) + "\n")
        process.stdin.flush()
        result, stage, deadline = None, "plain", time.monotonic() + timeout
        while result is None:
            ready, _, _ = select.select(
                [process.stdout], [], [], max(0.0, deadline - time.monotonic())
            )
            line = process.stdout.readline() if ready else ""
            if line:
                message = json.loads(line)
                stage = message["stage"]
                result = message if stage == "done" else None
                continue
            if ready:  # end of file: the worker died
                code = process.wait()
                why = f"crashed ({_signal_name(code)})"
            else:
                process.kill()
                process.wait()
                why = f"timed out after {timeout:.0f} s"
            process = None
            job[stage] = {"status": FAILS, "why": f"{stage}: {why}"}
            if stage == "ours":
                job["compare"] = {"status": "n/a", "why": ""}
            jobs.put(job)  # the rest of the job runs in a new worker
            break
        if result is not None:
            with lock:
                results.append(result)
                print(row_text(result), flush=True)
    if process is not None:
        process.stdin.close()
        process.wait()


def _signal_name(code: int) -> str:
    return signal.Signals(-code).name if code < 0 else f"exit {code}"


def run_all(names: list[str], targets: list[str], workers: int, timeout: float) -> list[dict]:
    jobs: queue.Queue = queue.Queue()
    for name in names:
        for target in targets:
            jobs.put({"case": name, "target": target})
    results: list[dict] = []
    lock = threading.Lock()
    log_path = HERE.parent / "build" / "ops-workers.log"
    log_path.parent.mkdir(exist_ok=True)
    with open(log_path, "w") as log:
        threads = [
            threading.Thread(target=serve, args=(jobs, results, timeout, log, lock))
            for _ in range(workers)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    return results


# -- the table ----------------------------------------------------------------------------------
def cell(side: dict | None) -> str:
    if not side:
        return ""
    text = side["status"] + (f": {side['why']}" if side.get("why") else "")
    return text.replace("|", "\\|")


def row_text(result: dict) -> str:
    return (
        f"{result['case']} [{result['target']}]  plain {cell(result['plain'])}  ours "
        f"{cell(result['ours'])}  compare {cell(result.get('compare'))}"
        + (f"  unchecked {cell(result['unchecked'])}" if "unchecked" in result else "")
    )


def regression(result: dict) -> bool:
    """Plain TVM right, the live module not."""
    return result["plain"]["status"] == OK and result["ours"]["status"] != OK


def guard_stopped_right(result: dict) -> bool:
    """A crash guard stopped a call that `--unchecked` runs right."""
    return result.get("unchecked", {}).get("status") == OK


def ours_versus_plain(result: dict) -> str:
    """Where plain TVM is not right: what the live module does instead."""
    plain, mine = result["plain"]["status"], result["ours"]["status"]
    if plain == OK:
        return "" if mine == OK else "WORSE"
    if mine == OK:
        return "better"
    if mine == FAILS:
        return "fails with its own error" if _own_error(result) else "fails"
    return "wrong too"


def _own_error(result: dict) -> bool:
    from tvm_pyfunc_nb import errors

    own = {name for name in dir(errors) if name.endswith("Error")}
    found = re.match(r"\w+: (\w+):", result["ours"]["why"])
    return bool(found) and found.group(1) in own


def markdown(results: list[dict], names: list[str], targets: list[str]) -> str:
    from op_corpus import CASES

    by = {(r["case"], r["target"]): r for r in results}
    header = ["case", "written for"]
    for target in targets:
        header += [f"plain TVM ({target})", f"ours ({target})", f"compare ({target})"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name in names:
        row = [f"`{name}`", ", ".join(f"`{op}`" for op in CASES[name].ops) or "(not in the map)"]
        for target in targets:
            result = by.get((name, target))
            if result is None:
                row += ["", "", ""]
                continue
            mine = cell(result["ours"])
            if "unchecked" in result:
                mine += f" (--unchecked: {cell(result['unchecked'])})"
            versus = ours_versus_plain(result)
            row += [
                cell(result["plain"]),
                mine + (f" [{versus}]" if versus else ""),
                cell(result.get("compare")),
            ]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def coverage_table(reached: dict[str, list[str]]) -> str:
    """Each convert-map entry: the cases written for it, and whether the graph TVM translates
    holds it (torch.export's decompositions turn many ops into others first)."""
    from op_corpus import covering

    lines = ["| convert-map entry | cases | in the translated graph |", "|---|---|---|"]
    for entry, names in covering().items():
        cases = ", ".join(f"`{n}`" for n in names) or "**none: a gap**"
        found = reached.get(entry)
        count = f"{len(found)} case{'s' if len(found) > 1 else ''}" if found else ""
        held = f"yes ({count})" if found else "no: decomposed before translation"
        lines.append(f"| `{entry}` | {cases} | {held} |")
    return "\n".join(lines)


def reached_entries(results: list[dict]) -> dict[str, list[str]]:
    """Convert-map entry -> the cases whose exported, decomposed graph holds it."""
    found: dict[str, list[str]] = {}
    for result in results:
        for op in result["plain"].get("ops", ()):
            found.setdefault(op, [])
            if result["case"] not in found[op]:
                found[op].append(result["case"])
    return found


def totals(results: list[dict], targets: list[str]) -> list[str]:
    lines = []
    for target in targets:
        mine = [r for r in results if r["target"] == target]
        plain = Counter(r["plain"]["status"] for r in mine)
        ours_count = Counter(r["ours"]["status"] for r in mine)
        verdicts = Counter(r.get("compare", {}).get("status", "n/a") for r in mine)
        versus = Counter(ours_versus_plain(r) for r in mine if r["plain"]["status"] != OK)
        lines.append(
            f"- `{target}` ({TARGETS[target]}): {len(mine)} cases. Plain TVM {plain[OK]} ok, "
            f"{plain[WRONG]} wrong, {plain[FAILS]} fail. Ours {ours_count[OK]} ok, "
            f"{ours_count[WRONG]} wrong, {ours_count[FAILS]} fail. Right in plain TVM and not "
            f"in ours: {sum(map(regression, mine))}. Where plain TVM is not right, ours is "
            + ", ".join(f"{n} {k}" for k, n in sorted(versus.items()))
            + f". compare agrees with the numbers on {verdicts['agrees'] + verdicts['names an op']}"
            f" (of them, {verdicts['names an op']} name an op that diverges while the outputs "
            f"match), disagrees on {verdicts['disagrees']}, fails on {verdicts['fails']} "
            f"({verdicts['n/a']} n/a). "
            f"Guards stopped {sum(map(guard_stopped_right, mine))} calls that --unchecked runs "
            "right."
        )
    return lines


def _compare_says(results: list[dict], status: str) -> list[str]:
    return sorted({r["case"] for r in results if r.get("compare", {}).get("status") == status})


def report(results, names, targets, minutes: float, load: str) -> str:
    import torch
    import tvm
    from op_corpus import convert_map_entries, gaps

    import tvm_pyfunc_nb

    entries = convert_map_entries()
    reached = reached_entries(results)
    held = sum(1 for e in entries if reached.get(e))
    disagreeing, naming = _compare_says(results, "disagrees"), _compare_says(results, "names an op")
    return "\n".join(
        [
            "# Every op of TVM's PyTorch importer, plain TVM and the live module (`make ops`)",
            "",
            f"- {platform.machine()}, Python {platform.python_version()}, apache-tvm "
            f"{tvm.__version__}, torch {torch.__version__}, tvm_pyfunc_nb "
            f"{tvm_pyfunc_nb.__version__}; {os.cpu_count()} cores, load average {load} at start; "
            f"{minutes:.0f} min (the whole run, at nice 10 beside other work)",
            f"- {len(entries)} convert-map entries (`ExportedProgramImporter`), {len(gaps())} "
            f"without a case; {held} of them are in the graph TVM translates for some case, the "
            "others torch.export decomposes into other ops first (both sides translate the "
            "decomposed graph, as `from_exported_program` does by default)",
            f"- {len(names)} cases (`tests/op_corpus.py`), each against PyTorch on its own copy "
            "of the inputs",
            *totals(results, targets),
            "- compare's verdict disagrees with the numbers on: "
            + (", ".join(f"`{n}`" for n in disagreeing) or "none"),
            "- compare names an op that diverges while the outputs match on: "
            + (", ".join(f"`{n}`" for n in naming) or "none"),
            "",
            "`ok`: PyTorch's numbers (floats within the dtype's rounding), shapes and dtypes; "
            "`wrong`: what differs; `fails`: the stage and the error. In brackets, where plain "
            "TVM is not right, what ours does instead (`better`, `wrong too`, `fails`), and "
            "`WORSE` where plain TVM is right and ours is not.",
            "",
            "## By case",
            "",
            markdown(results, names, targets),
            "",
            "## The convert map, entry by entry",
            "",
            coverage_table(reached),
            "",
        ]
    )


def main(argv: list[str]) -> int:
    if argv[:1] == ["--worker"]:
        sys.path.insert(0, str(HERE))
        worker()
        return 0
    from op_corpus import CASES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", help="some cases of tests/op_corpus.py (default: all)")
    parser.add_argument("--targets", default="native,v3", help="native, v3 or both")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--timeout", type=float, default=600, help="seconds a job may take")
    parser.add_argument(
        "--json", help="also keep the results in this file (a run of some cases updates theirs)"
    )
    parser.add_argument("--from-json", help="run nothing: the report of the results in this file")
    given = parser.parse_args(argv)
    unknown = [c for c in given.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown cases {unknown}")
    targets = given.targets.split(",")
    names = given.cases or list(CASES)
    if given.from_json:
        run = json.loads(Path(given.from_json).read_text())
    else:
        start, load = time.perf_counter(), ", ".join(f"{x:.2f}" for x in os.getloadavg())
        results = run_all(names, targets, given.jobs, given.timeout)
        run = {"load": load, "minutes": (time.perf_counter() - start) / 60, "results": results}
        if given.json:
            run = _saved(Path(given.json), run, whole=not given.cases)
    order = {(n, t): i for i, (n, t) in enumerate((n, t) for n in names for t in targets)}
    results = sorted(
        (r for r in run["results"] if (r["case"], r["target"]) in order),
        key=lambda r: order[(r["case"], r["target"])],
    )
    text = report(results, names, targets, run["minutes"], run["load"])
    print()
    print(text)
    if not given.cases and len(targets) == len(TARGETS):
        (HERE / "OPS.md").write_text(text)
    return 0


def _saved(path: Path, run: dict, whole: bool) -> dict:
    """`run` written to `path`: replacing what is there for a whole run, else updating the
    results of its cases (the load and minutes stay the whole run's)."""
    if not whole and path.exists():
        kept = json.loads(path.read_text())
        done = {(r["case"], r["target"]) for r in run["results"]}
        others = [r for r in kept["results"] if (r["case"], r["target"]) not in done]
        run = {**kept, "results": others + run["results"]}
    path.write_text(json.dumps(run, indent=1))
    return run


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
