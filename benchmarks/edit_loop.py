"""Edit → result ready in a real IPython shell: re-run the edited cell and call, against upstream's
(re-run the whole `@I.ir_module` class cell, re-instantiate, call).

Modules of several sizes live side by side in one shell and their edits are
interleaved, so a busy moment on the machine falls on all sizes alike.
"""

from __future__ import annotations

import json
import statistics
import sys

import torch
from harness import Cells, timed
from workload import EDITED_PRIMFUNC, expected_main, our_cells, primfunc, pyfunc_tir, upstream_class

X = torch.arange(64, dtype=torch.float32)
Y = torch.linspace(1, 2, 64)
PYFUNC_EDIT_SIZE = 20


def measure(sizes: list[int], repeats: int, upstream_repeats: dict[int, int]) -> dict:
    cells = Cells()
    cells.run("import tvm")
    cells.ns.update(x_=X, y_=Y)
    modules = {}
    for n in sizes:
        for cell_id, body in our_cells(n, f"bench{n}").items():
            cells.tvmmodule(f"bench{n}", cell_id, body)
        live = modules[n] = cells.ns[f"bench{n}"]
        (
            live.main(X, Y),
            live.main2(X, Y),
            live.py_tir(X, Y),
            live.py_relax(X, Y),
        )  # everything compiled once
    cells.flush_cache()
    k3 = {n: 3.0 for n in sizes}  # the constant k3 adds now, per module
    compiled: dict[str, list[str]] = {}

    def ours_primfunc(n: int, i: int) -> float:
        constant, live = (
            1000.0 * n + i,
            modules[n],
        )  # new to every cache, this module's and the others'
        mark = len(live.stats.compiles)
        out, seconds = timed(
            lambda: (
                cells.tvmmodule(f"bench{n}", EDITED_PRIMFUNC, primfunc(3, constant)),
                live.main(X, Y),
            )[1]
        )
        assert torch.allclose(out, expected_main(X, Y, constant))
        k3[n] = constant
        compiled[f"primfunc{n}"] = [
            f"{c.kind}:{','.join(c.functions)}" for c in live.stats.since(mark)
        ]
        cells.flush_cache()
        return seconds

    def ours_pyfunc(n: int, i: int) -> float:
        scale, live = 3.0 + i, modules[n]
        mark = len(live.stats.compiles)
        out, seconds = timed(
            lambda: (cells.tvmmodule(f"bench{n}", "py_tir", pyfunc_tir(scale)), live.py_tir(X, Y))[
                1
            ]
        )
        assert torch.allclose(out, (X + Y + k3[n]) * scale)
        compiled[f"pyfunc{n}"] = [
            f"{c.kind}:{','.join(c.functions)}" for c in live.stats.since(mark)
        ]
        return seconds

    def upstream(n: int, edit: str, i: int) -> float:
        if edit == "primfunc":
            constant = 2000.0 + i
            code = upstream_class(n, edited={EDITED_PRIMFUNC: primfunc(3, constant)})
            call = "_out = bench_up.main(x_, y_)"
        else:
            code = upstream_class(n, edited={"py_tir": pyfunc_tir(5.0 + i)})
            call = "_out = bench_up.py_tir(x_, y_)"
        _, seconds = timed(lambda: cells.run(f"{code}\nbench_up = Bench(tvm.cpu())\n{call}\n"))
        if edit == "primfunc":
            assert torch.allclose(cells.ns["_out"], expected_main(X, Y, constant))
        return seconds

    upstream(
        min(sizes), "primfunc", -1
    )  # TVMScript's and LLVM's first use, as ours had when building
    samples: dict[str, list[float]] = {}
    for i in range(repeats):
        for n in sizes:
            samples.setdefault(f"ours_primfunc{n}", []).append(ours_primfunc(n, i))
            if n == PYFUNC_EDIT_SIZE:
                samples.setdefault(f"ours_pyfunc{n}", []).append(ours_pyfunc(n, i))
    for i in range(max(upstream_repeats.values())):
        for n in sizes:
            if i < upstream_repeats[n]:
                samples.setdefault(f"upstream_primfunc{n}", []).append(upstream(n, "primfunc", i))
                if n == PYFUNC_EDIT_SIZE:
                    samples.setdefault(f"upstream_pyfunc{n}", []).append(upstream(n, "pyfunc", i))
    figures = {key: statistics.median(values) for key, values in samples.items()}
    figures["compiled"] = compiled
    return figures


if __name__ == "__main__":
    sizes = [int(n) for n in sys.argv[1].split(",")]
    upstream_repeats = [int(n) for n in sys.argv[3].split(",")]
    print(
        json.dumps(
            measure(sizes, int(sys.argv[2]), dict(zip(sizes, upstream_repeats, strict=True)))
        )
    )
