"""A notebook run in a fresh kernel: cold compile cache, warm compile cache, and upstream's version.

The notebook is generated: the benchmark module (20 PrimFuncs, 2 Relax
functions, 2 pyfuncs), one `%%tvmmodule` cell per function group, then calls
of every function;
upstream's twin defines the same module as one `@I.ir_module` class,
instantiates it and makes the same calls. Each run starts a new kernel
(`nbclient`), as reopening a notebook does.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

import nbformat
from harness import scratch
from nbclient import NotebookClient
from workload import MODULE, our_cells, upstream_class

PRIMFUNCS = 20
CALLS = """\
import torch
x, y = torch.arange(64, dtype=torch.float32), torch.linspace(1, 2, 64)
results = [{m}.main(x, y), {m}.main2(x, y), {m}.py_tir(x, y), {m}.py_relax(x, y)]
out = torch.empty(64)
for k in range({n}):  # try every kernel once, as exploring does
    getattr({m}, f"k{{k}}")(x, y, out)
[float(r.sum()) for r in results]
"""
STATS = f"""\
import json
tir = sum(len(c.functions) for c in {MODULE}.stats.compiles if c.kind == "tir")
print(json.dumps({{"tir": tir, "hits": {MODULE}.stats.cache_hits}}))
"""


def our_notebook() -> nbformat.NotebookNode:
    cells = [nbformat.v4.new_code_cell("%load_ext tvm_pyfunc_nb")]
    cells += [
        nbformat.v4.new_code_cell(f"%%tvmmodule {MODULE}\n{body.strip()}")
        for body in our_cells(PRIMFUNCS).values()
    ]
    cells += [
        nbformat.v4.new_code_cell(CALLS.format(m=MODULE, n=PRIMFUNCS)),
        nbformat.v4.new_code_cell(STATS),
    ]
    return nbformat.v4.new_notebook(cells=cells)


def upstream_notebook() -> nbformat.NotebookNode:
    cells = [
        nbformat.v4.new_code_cell("import tvm"),
        nbformat.v4.new_code_cell(upstream_class(PRIMFUNCS)),
        nbformat.v4.new_code_cell("bench_up = Bench(tvm.cpu())"),
        nbformat.v4.new_code_cell(CALLS.format(m="bench_up", n=PRIMFUNCS)),
    ]
    return nbformat.v4.new_notebook(cells=cells)


def execute(nb: nbformat.NotebookNode, cache_dir: str, workdir: str) -> dict:
    """Run `nb` in a new kernel; wall time from kernel start to shutdown, and from first cell to
    last reply.
    """
    os.environ["TVM_PYFUNC_NB_CACHE_DIR"] = cache_dir
    client = NotebookClient(
        nb, kernel_name="python3", timeout=600, resources={"metadata": {"path": workdir}}
    )
    start = time.perf_counter()
    client.execute()
    wall = time.perf_counter() - start
    times = [c.metadata["execution"] for c in nb.cells]
    first = datetime.fromisoformat(times[0]["iopub.execute_input"].replace("Z", "+00:00"))
    last = datetime.fromisoformat(times[-1]["shell.execute_reply"].replace("Z", "+00:00"))
    stats = None
    for output in nb.cells[-1].get("outputs", []):
        if output.get("name") == "stdout":
            stats = json.loads(output["text"].strip().splitlines()[-1])
    return {"wall": wall, "cells": (last - first).total_seconds(), "stats": stats}


def measure(repeats: int) -> dict:
    workdir = scratch("notebooks-")
    ours, upstream = our_notebook(), upstream_notebook()
    nbformat.write(ours, Path(workdir) / "ours.ipynb")
    nbformat.write(upstream, Path(workdir) / "upstream.ipynb")
    warm_dir = scratch("warm-cache-")
    runs: dict[str, list[dict]] = {"cold": [], "warm": [], "upstream": []}
    execute(nbformat.from_dict(ours), warm_dir, workdir)  # fills the warm cache
    for _ in range(repeats):
        runs["cold"].append(execute(nbformat.from_dict(ours), scratch("cold-cache-"), workdir))
        runs["warm"].append(execute(nbformat.from_dict(ours), warm_dir, workdir))
        runs["upstream"].append(execute(nbformat.from_dict(upstream), warm_dir, workdir))
    summary = {
        kind: {
            "wall": statistics.median(r["wall"] for r in rs),
            "cells": statistics.median(r["cells"] for r in rs),
            "stats": rs[-1]["stats"],
        }
        for kind, rs in runs.items()
    }
    return summary


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]))))
