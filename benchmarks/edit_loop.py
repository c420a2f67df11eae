"""Edit → result ready in a real IPython shell: re-run the edited cell and call, against upstream's
(re-run the whole `@I.ir_module` class cell, re-instantiate, call).

Modules of several sizes live side by side in one shell and their edits are
interleaved, so a busy moment on the machine falls on all sizes alike. In the
module of `PYFUNC_EDIT_SIZE` PrimFuncs, every timed PrimFunc edit is followed by
a timed revert: the cell's previous text run again under the same cell id,
which the module's kept kernel versions and Relax VMs serve without a compile.
"""

from __future__ import annotations

import json
import statistics
import sys

import torch
from harness import module_cell, notebook_shell, timed
from workload import EDITED_PRIMFUNC, expected_main, our_cells, primfunc, pyfunc_tir, upstream_class

X = torch.arange(64, dtype=torch.float32)
Y = torch.linspace(1, 2, 64)
PYFUNC_EDIT_SIZE = 20  # also the size at which reverts are timed


def measure(sizes: list[int], repeats: int, upstream_repeats: dict[int, int]) -> dict:
    shell = notebook_shell()
    shell.run("import tvm", store_history=False)
    shell.ns.update(x_=X, y_=Y)
    modules = {}
    for n in sizes:
        for cell_id, body in our_cells(n, f"bench{n}").items():
            module_cell(shell, f"bench{n}", cell_id, body)
        live = modules[n] = shell.ns[f"bench{n}"]
        for call in (live.main, live.main2, live.py_tir, live.py_relax):
            call(X, Y)  # everything compiled once
    shell.flush_cache()
    k3 = {n: 3.0 for n in sizes}  # the constant k3 adds now, per module
    before = {n: 3.0 for n in sizes}  # the constant of k3's previous text, per module
    compiled: dict[str, list[str]] = {}

    def since(live, mark: int) -> list[str]:
        return [f"{c.kind}:{','.join(c.functions)}" for c in live.stats.since(mark)]

    def set_k3(n: int, constant: float) -> float:
        """Run k3's cell with `constant` and call `main`; the seconds that took."""
        live = modules[n]
        out, seconds = timed(
            lambda: (
                module_cell(shell, f"bench{n}", EDITED_PRIMFUNC, primfunc(3, constant)),
                live.main(X, Y),
            )[1]
        )
        assert torch.allclose(out, expected_main(X, Y, constant))
        before[n], k3[n] = k3[n], constant
        return seconds

    def ours_primfunc(n: int, i: int) -> float:
        live = modules[n]
        mark = len(live.stats.compiles)
        seconds = set_k3(n, 1000.0 * n + i)  # new to every cache, this module's and the others'
        compiled[f"primfunc{n}"] = since(live, mark)
        shell.flush_cache()
        return seconds

    def ours_revert(n: int) -> float:
        live = modules[n]
        mark = len(live.stats.compiles)
        seconds = set_k3(n, before[n])  # the text the cell had before the last edit
        compiled.setdefault(f"revert{n}", []).extend(since(live, mark))  # every revert's
        shell.flush_cache()
        return seconds

    def ours_pyfunc(n: int, i: int) -> float:
        scale, live = 3.0 + i, modules[n]
        mark = len(live.stats.compiles)
        out, seconds = timed(
            lambda: (
                module_cell(shell, f"bench{n}", "py_tir", pyfunc_tir(scale)),
                live.py_tir(X, Y),
            )[1]
        )
        assert torch.allclose(out, (X + Y + k3[n]) * scale)
        compiled[f"pyfunc{n}"] = since(live, mark)
        return seconds

    def upstream(n: int, edit: str, i: int) -> float:
        if edit in ("primfunc", "revert"):
            # a revert runs the class cell as it was before the last edit: upstream keeps nothing
            constant = 2000.0 + i - (edit == "revert")
            code = upstream_class(n, edited={EDITED_PRIMFUNC: primfunc(3, constant)})
            call = "_out = bench_up.main(x_, y_)"
        else:
            code = upstream_class(n, edited={"py_tir": pyfunc_tir(5.0 + i)})
            call = "_out = bench_up.py_tir(x_, y_)"
        _, seconds = timed(
            lambda: shell.run(f"{code}\nbench_up = Bench(tvm.cpu())\n{call}\n", store_history=False)
        )
        if edit != "pyfunc":
            assert torch.allclose(shell.ns["_out"], expected_main(X, Y, constant))
        return seconds

    # TVMScript's and LLVM's first use, as ours had when building
    upstream(min(sizes), "primfunc", -1)
    samples: dict[str, list[float]] = {}
    for i in range(repeats):
        for n in sizes:
            samples.setdefault(f"ours_primfunc{n}", []).append(ours_primfunc(n, i))
            if n == PYFUNC_EDIT_SIZE:
                samples.setdefault(f"ours_revert{n}", []).append(ours_revert(n))
                samples.setdefault(f"ours_pyfunc{n}", []).append(ours_pyfunc(n, i))
    for i in range(max(upstream_repeats.values())):
        for n in sizes:
            if i < upstream_repeats[n]:
                samples.setdefault(f"upstream_primfunc{n}", []).append(upstream(n, "primfunc", i))
                if n == PYFUNC_EDIT_SIZE:
                    samples.setdefault(f"upstream_revert{n}", []).append(upstream(n, "revert", i))
                    samples.setdefault(f"upstream_pyfunc{n}", []).append(upstream(n, "pyfunc", i))
    figures = {key: statistics.median(values) for key, values in samples.items()}
    figures["compiled"] = compiled
    figures["kept"] = modules[PYFUNC_EDIT_SIZE].kept if PYFUNC_EDIT_SIZE in modules else {}
    return figures


if __name__ == "__main__":
    sizes = [int(n) for n in sys.argv[1].split(",")]
    upstream_repeats = [int(n) for n in sys.argv[3].split(",")]
    print(
        json.dumps(
            measure(sizes, int(sys.argv[2]), dict(zip(sizes, upstream_repeats, strict=True)))
        )
    )
