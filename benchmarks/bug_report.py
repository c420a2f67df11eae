"""`minimize` and `report`, measured against their goals:
- a tutorial-sized model (two attention blocks, d=64, 16 tokens, imported with
  `add_torch`) whose pipeline turns every add into a subtract: `minimize` against
  the PyTorch model ends in under two minutes;
- a tiny BERT (tests/real_models.py) whose pipeline turns its one `tanh` (the
  pooler's) into a sigmoid, a fault in one op of hundreds of bindings: cut to at
  most 5 bindings;
- TVM 0.27's own `RewriteDataflowReshape` fault (a reshape of an argument made a
  view, then written in place): cut to at most 3 bindings;
- that BERT's `report`, with its minimize result: under 2 MB.
Each figure is one run (a minimization is a search: its time is its builds').
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
from tvm import relax

from tvm_pyfunc_nb import LiveModule, testing

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from cells import RESHAPE_THEN_IN_PLACE
from find_the_pass import planted
from real_models import ZOO


def tanh_becomes_sigmoid():
    """A pipeline of one pass that turns every `R.tanh` into `R.sigmoid`."""
    return testing.op_swapped("relax.tanh", "sigmoid", "TanhBecomesSigmoid")


def timed(make) -> tuple:
    start = time.perf_counter()
    result = make()
    return result, time.perf_counter() - start


def tutorial_model() -> dict:
    live, x = planted()
    cut, seconds = timed(lambda: live.minimize("main", x))
    assert cut.found, cut
    return {"seconds": seconds, "original": cut.original, "size": cut.size, "cuts": len(cut.steps)}


def bert(folder: str) -> dict:
    relax.register_pipeline("bench_tanh_becomes_sigmoid")(tanh_becomes_sigmoid)
    model, args = ZOO["bert"].build()
    live = LiveModule("bert", pipeline="bench_tanh_becomes_sigmoid")
    live.add_torch(model, args)
    cut, seconds = timed(lambda: live.minimize("main", *args))
    assert cut.found and "R.tanh(" in cut.script, cut
    path = os.path.join(folder, "bert.html")
    _, report_seconds = timed(lambda: live.report("main", *args, path=path, minimize=cut))
    return {
        "seconds": seconds,
        "original": cut.original,
        "size": cut.size,
        "cuts": len(cut.steps),
        "report_bytes": os.path.getsize(path),
        "report_seconds": report_seconds,
    }


def reshape_in_place() -> dict:
    live = LiveModule("reshape")
    live.run_cell(RESHAPE_THEN_IN_PLACE)
    x, w = torch.arange(8.0).reshape(2, 4), torch.rand(8)
    cut, seconds = timed(lambda: live.minimize("main", x, w))
    assert cut.found, cut
    return {"seconds": seconds, "original": cut.original, "size": cut.size}


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        figures = {
            "tutorial": tutorial_model(),
            "bert": bert(folder),
            "reshape": reshape_in_place(),
        }
    print(json.dumps(figures))
