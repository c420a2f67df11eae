"""The README's speed table, from one `make bench` run's figures (`run.py` writes it between the
README's markers): each row a figure of RESULTS.md in the one convention, × the other side's
speed, above 1 is faster, both times shown."""

from __future__ import annotations

import speed_report


def _x(other: float, ours: float) -> str:
    ratio = other / ours
    return f"{ratio:.2f}×" if ratio < 10 else f"{ratio:.0f}×"


def lines(edits, calls, nb, fast, guards, worker, found, remote, model, speed, fmt) -> list[str]:
    """The table's lines: header, then every row."""

    def against(what: str, ours: float, theirs: float, who: str = "upstream") -> tuple:
        """A row of one figure of ours against one of `who`'s."""
        return (what, fmt(ours), f"{who} {fmt(theirs)}", _x(theirs, ours))

    sizes = (5, 20, 80)
    ours_sizes = " / ".join(fmt(edits[f"ours_primfunc{n}"]) for n in sizes)
    upstream_sizes = " / ".join(fmt(edits[f"upstream_primfunc{n}"]) for n in sizes)
    size_ratios = " / ".join(
        _x(edits[f"upstream_primfunc{n}"], edits[f"ours_primfunc{n}"]) for n in sizes
    )
    floor, relax = calls["ours raw VM, tvm tensors"], calls["ours relax"]
    py_ours = sorted((calls["ours call_py_func ident"], calls["ours call_py_func scale"]))
    py_theirs = sorted((calls["upstream call_py_func ident"], calls["upstream call_py_func scale"]))
    cold, warm, up = nb["cold"]["wall"], nb["warm"]["wall"], nb["upstream"]["wall"]
    isolated = worker["isolate"]
    rows = [
        against(
            "edit a pyfunc, re-run the cell, get the result (20 PrimFuncs, 2 Relax, 2 pyfuncs)",
            edits["ours_pyfunc20"],
            edits["upstream_pyfunc20"],
        ),
        against(
            "edit one PrimFunc, re-run, get the result (same module)",
            edits["ours_primfunc20"],
            edits["upstream_primfunc20"],
        ),
        (
            "the same with 5 / 20 / 80 PrimFuncs",
            ours_sizes,
            f"upstream {upstream_sizes}",
            size_ratios,
        ),
        (
            "revert an edit (the cell's previous text again)",
            f"{fmt(edits['ours_revert20'])}, compiles nothing"
            if edits["compiled"]["revert20"] == []
            else fmt(edits["ours_revert20"]),
            f"upstream {fmt(edits['upstream_revert20'])}",
            _x(edits["upstream_revert20"], edits["ours_revert20"]),
        ),
        (
            "call a Relax function with torch tensors",
            fmt(relax),
            f"upstream {fmt(calls['upstream relax'])}",
            f"{_x(calls['upstream relax'], relax)} (ours takes {relax / floor:.2f} times the raw "
            "VM call's floor)",
        ),
        against("pyfunc → `self.call_tir`", calls["ours call_tir"], calls["upstream call_tir"]),
        (
            "Relax → `R.call_py_func` → torch",
            f"{fmt(py_ours[0])}–{fmt(py_ours[1])}",
            f"upstream {fmt(py_theirs[0])}–{fmt(py_theirs[1])}",
            f"{_x(calls['upstream call_py_func ident'], calls['ours call_py_func ident'])}–"
            f"{_x(calls['upstream call_py_func scale'], calls['ours call_py_func scale'])}",
        ),
        (
            "a generated notebook in a fresh kernel, empty / warm compile cache",
            f"{fmt(cold)} / {fmt(warm)}",
            f"upstream {fmt(up)}",
            f"{_x(up, cold)} / {_x(up, warm)}",
        ),
        (
            "a 4-layer transformer from `add_torch`: first call, cold / warm cache",
            f"{fmt(model['cold'])} / {fmt(model['warm'])}",
            f"`tvm.compile` + VM {fmt(model['upstream'])}",
            f"{_x(model['upstream'], model['cold'])} / {_x(model['upstream'], model['warm'])}",
        ),
        against(
            "the same model, one op edited with `edit_text`, run, called",
            model["edit"],
            model["upstream_edit"],
            "`tvm.compile`",
        ),
        (
            f"tutorial 08's matmul 256×256: as written / scheduled by hand / tuned "
            f"({fast['tune_trials']} trials here, {fmt(fast['tune_seconds'])})",
            " / ".join(fmt(fast[k]["ours"]) for k in ("naive", "scheduled", "tuned")),
            "`torch.matmul` "
            + " / ".join(fmt(fast[k]["torch"]) for k in ("naive", "scheduled", "tuned")),
            " / ".join(
                _x(fast[k]["torch"], fast[k]["ours"]) for k in ("naive", "scheduled", "tuned")
            ),
        ),
        (
            "crash guards on kernels whose bounds TVM cannot prove (gather, copy), checked",
            f"{fmt(guards['gather checked'])} / {fmt(guards['copy checked'])}",
            f"`--unchecked` {fmt(guards['gather unchecked'])} / {fmt(guards['copy unchecked'])}",
            f"{_x(guards['gather unchecked'], guards['gather checked'])} / "
            f"{_x(guards['copy unchecked'], guards['copy checked'])}",
        ),
        (
            f"`bisect` on two attention blocks from `add_torch` ({found['passes']} optional "
            f"passes, {found['builds']} builds in the build worker), worker warm / starting",
            f"{fmt(found['warm'])} / {fmt(found['cold'])}",
            "the goal, under a minute",
            "—",
        ),
        against(
            "edit one PrimFunc, re-run, call it, with `--isolate` (the compile in the build "
            "worker)",
            isolated["isolated"],
            isolated["here"],
            "the same without `--isolate`,",
        ),
        (
            "a call through an RPC server on loopback (Relax, 5 elements)",
            fmt(remote["relax remote"]),
            f"the same module here, {fmt(remote['relax local'])}",
            f"{fmt(remote['relax remote'] - remote['relax local'])} of RPC per call",
        ),
    ]
    table = [
        "| what | ours | against | × its speed (above 1 is faster) |",
        "|---|---|---|---|",
        *(f"| {what} | {ours} | {against} | {ratio} |" for what, ours, against, ratio in rows),
    ]
    return table + speed_report.readme_rows(speed, fmt)
