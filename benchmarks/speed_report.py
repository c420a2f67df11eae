"""The "Fast by default" section of `make bench`: `speed.py` per model and target, its tables and
goals (issue 37's targets), and the README's rows of it.

Every ratio is the one convention: × PyTorch eager's speed (eager's median time over the other
side's, above 1 is faster), both times shown.
"""

from __future__ import annotations

from speed import AVX2_TORCH, MODELS

# Which model runs for which code (`speed.py`'s TARGETS): the three models of the goals for both
GOAL_MODELS = ("mlp", "encoder", "convnet")
RUNS = [(m, t) for m in MODELS for t in (("native", "avx2") if m in GOAL_MODELS else ("native",))]
GOALS = {"none": 1.0, "offload": 1.2, "tuned": 1.5}  # × eager, at one thread and at all threads
PEAK_GOAL = 0.6  # the MLP after tune, of one core's FP32 peak
TUNE_SECONDS_GOAL = 120
COLUMNS = {
    "compile": "`torch.compile`",
    "none": "ours, no options",
    "offload": "ours, `--offload torch`",
    "tuned": "ours, after `tune`",
}
CODE = {"native": "this CPU (AVX-512)", "avx2": "AVX2 (`x86-64-v3`)"}


def speed_section(section, number: int, repeat: int, rounds: int) -> dict:
    """`speed.py` for every model and code, each in a fresh process (AVX2's PyTorch limited to
    AVX2 before it is imported)."""
    return {
        f"{model} {target}": section(
            "speed.py",
            model,
            target,
            number,
            repeat,
            rounds,
            env=AVX2_TORCH if target == "avx2" else None,
        )
        for model, target in RUNS
    }


def speed_lines(results: dict, fmt) -> list[str]:
    """The section's tables: one row per model, code and thread count."""
    header = "| model | code | threads (TVM / PyTorch) | PyTorch eager | " + " | ".join(
        COLUMNS.values()
    )
    lines = [header + " |", "|---" * (4 + len(COLUMNS)) + "|"]
    for run in results.values():
        for threads, row in run["threads"].items():
            times = row["times"]
            cells = [
                f"{speed(times['eager'], times[k])} ({fmt(times[k])})" + _mark(run, k, times)
                for k in COLUMNS
            ]
            lines.append(
                f"| {run['title']} | {CODE[run['target']]} | {threads}: {row['tvm']} / "
                f"{row['torch']} | {fmt(times['eager'])} | " + " | ".join(cells) + " |"
            )
    return lines


def _mark(run: dict, variant: str, times: dict) -> str:
    """` **(goal ≥ 1.2×)**` after a figure of a goal model that misses its goal."""
    goal = GOALS.get(variant)
    model = next(k for k, (title, _) in MODELS.items() if title == run["title"])
    if goal is None or model not in GOAL_MODELS or times["eager"] / times[variant] >= goal:
        return ""
    return f" **(goal ≥ {goal}×)**"


def speed(eager: float, ours: float) -> str:
    ratio = eager / ours
    return f"{ratio:.2f}×" if ratio >= 0.1 else f"{ratio:.2g}×"


def goal_lines(results: dict, fmt) -> list[str]:
    """Each goal of issue 37, met or by how far not, and why: the slowest variant's profile."""
    lines = []
    for run in results.values():
        model = next(k for k, (title, _) in MODELS.items() if title == run["title"])
        tune = run["tune"]
        kept = [k["kernel"] for k in tune["kernels"] if k["schedule"] == "kept"]
        tuned = [k["kernel"] for k in tune["kernels"] if k["schedule"] == "tuned"]
        slower = [
            k["kernel"]
            for k in tune["kernels"]
            if k["before"] and k["after"] and k["after"] > k["before"]
        ]
        lines.append(
            f"- {run['title']}, {CODE[run['target']]}: `tune` took {fmt(tune['seconds'])} "
            f"({tune['trials']} trials; goal under {TUNE_SECONDS_GOAL} s: "
            f"{'met' if tune['seconds'] < TUNE_SECONDS_GOAL else '**not met**'}), "
            f"{len(tuned)} kernels took a tuned schedule, {len(kept)} kept theirs; "
            f"kernels slower after tune: {', '.join(slower) or 'none'}; "
            f"`torch.compile`'s first call (its compile) {fmt(run['compile_seconds'])}; "
            f"load average {run['load'][0]:.1f} when timing began, {run['load'][3]:.1f} when it "
            "ended"
        )
        if model not in GOAL_MODELS:
            continue
        for threads, row in run["threads"].items():
            times = row["times"]
            missed = [
                f"{COLUMNS[v]} {speed(times['eager'], times[v])} (goal ≥ {g}×)"
                for v, g in GOALS.items()
                if times["eager"] / times[v] < g
            ]
            if missed:
                profile = row["profile"]
                rows = ", ".join(
                    f"{r['kernel']} ({r['kind']}) {fmt(r['total'])} {100 * r['share']:.0f}%"
                    for r in profile["rows"]
                )
                lines.append(
                    f"  - {threads} thread(s): **not met**: {'; '.join(missed)}. Profile of "
                    f"{COLUMNS[profile['variant']]}, costliest first: {rows}"
                )
    return lines


def peak_lines(results: dict, fmt) -> list[str]:
    """The MLP's FLOP rate at one thread against one core's FP32 peak, per code."""
    lines = []
    for run in results.values():
        if "peak" not in run:
            continue
        peak = run["peak"]
        seconds = run["threads"][min(run["threads"], key=int)]["times"]["tuned"]  # one thread
        rate = run["flops"] / seconds
        share = rate / peak["flops"]
        lines.append(
            f"- MLP, {CODE[run['target']]}, 1 thread, after `tune`: {run['flops'] / 1e6:.1f} "
            f"MFLOP in {fmt(seconds)} = {rate / 1e9:.1f} GFLOP/s, {100 * share:.0f}% of one "
            f"core's FP32 peak, {peak['flops'] / 1e9:.1f} GFLOP/s = {peak['clock_hz'] / 1e9:.2f} "
            f"GHz × {peak['fma_units']} FMA units × {peak['lanes']} float32 lanes × 2 (a "
            f"multiply-add is two operations); units and clock from a probe of independent "
            f"vector multiply-adds on one thread ({peak['probe'] / 1e9:.1f} GFLOP/s, which fewer "
            f"units give only above 5 GHz; the nominal clock is "
            f"{peak['nominal_hz'] / 1e9:.2f} GHz) "
            f"(goal ≥ {100 * PEAK_GOAL:.0f}%: {'met' if share >= PEAK_GOAL else '**not met**'})"
        )
    return lines


def readme_rows(results: dict, fmt) -> list[str]:
    """The README speed table's rows of this section: per goal model and code, the three of
    ours against eager at one thread and at all threads; then BERT and ResNet-18."""
    rows = []
    for run in results.values():
        for threads, row in run["threads"].items():
            times = row["times"]
            ours = " / ".join(fmt(times[v]) for v in ("none", "offload", "tuned"))
            ratios = " / ".join(
                speed(times["eager"], times[v]) for v in ("none", "offload", "tuned")
            )
            plural = "s" if int(threads) > 1 else ""
            rows.append(
                f"| {run['title']} (`add_torch`), {CODE[run['target']]}, {threads} thread{plural} "
                f"each side: no options / `--offload torch` / after `tune` | {ours} | PyTorch "
                f"eager {fmt(times['eager'])}, `torch.compile` {fmt(times['compile'])} | {ratios} |"
            )
    return rows
