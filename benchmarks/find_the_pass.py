"""`bisect` on a model of the tutorials' size: two attention blocks (d=64, 16 tokens) imported
with `add_torch`, in a module whose pipeline starts with a pass that turns every add into a
subtract (TVM 0.27 has no miscompile left to find). Timed from the call to the result, the
PyTorch model as the reference: once with a worker that has to start (TVM, PyTorch and the
package imported there first), then with the worker warm.
"""

from __future__ import annotations

import json
import math
import sys
import time

import torch
from torch import nn
from tvm import relax

from tvm_pyfunc_nb import LiveModule, testing


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
        return self.norm(x + weights @ v)


def planted() -> tuple[LiveModule, torch.Tensor]:
    """Two attention blocks imported into a module whose pipeline turns every add into a
    subtract (the fault `bisect` and `minimize` look for), and their input."""
    relax.register_pipeline("bench_add_becomes_subtract")(testing.add_becomes_subtract)
    torch.manual_seed(0)
    model = nn.Sequential(Block(64), Block(64)).eval()
    x = torch.randn(16, 64)
    live = LiveModule("bench", pipeline="bench_add_becomes_subtract")
    live.add_torch(model, (x,))
    return live, x


def measure(repeats: int) -> dict:
    live, x = planted()
    runs = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        result = live.bisect("main", x)
        runs.append(time.perf_counter() - start)
        assert result.culprit.name == "AddBecomesSubtract", result
    return {
        "cold": runs[0],
        "warm": sorted(runs[1:])[len(runs[1:]) // 2],
        "builds": len(result.tried),
        "passes": len(result.passes),
        "bindings": len(live.trace("main", x).intermediates),
    }


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]))))
