"""A module built from an imported model: a small transformer (pre-LN attention + MLP blocks)
brought in with `NAME.add_torch`, hundreds of Relax bindings and tens of kernels.

- cold: a new module, an empty compile cache directory; the first call compiles everything;
- warm: a new module in the same process, the same cache directory (the disk cache has every
  kernel; the Relax VM is lowered and linked again);
- edit: `edit_text("main")` with one op changed (the first block's GELU becomes SiLU) run as a
  cell under a cell id of its own, then a call.

Upstream's twin: `tvm.compile` of the same IRModule and `relax.VirtualMachine` (it keeps nothing
between runs, so an edit costs it a whole compile again, measured on the edited module).
Both sides' first use of the Relax pipeline and of LLVM is paid by a tiny compile beforehand.
"""

from __future__ import annotations

import copy
import json
import statistics
import sys

import torch
import torch.nn.functional as F
import tvm
from harness import notebook_shell, scratch, timed
from torch import nn
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

D_MODEL, HEADS, SEQ = 64, 4, 16
TOL = {"atol": 1e-4, "rtol": 1e-4}


@I.ir_module
class Tiny:
    """What the warm-up compiles."""

    @R.function
    def main(a: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        return R.nn.relu(R.add(a, a))


class Block(nn.Module):
    """Pre-LN: x + attention(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads, self.act = heads, F.gelu
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        attention = torch.softmax(q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5, dim=-1)
        x = x + self.proj((attention @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(self.act(self.fc1(self.ln2(x))))


class Transformer(nn.Module):
    def __init__(self, layers: int, d: int = D_MODEL, heads: int = HEADS):
        super().__init__()
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.ln(x)


def warm_up() -> None:
    """The Relax pipeline's and LLVM's first use, which neither side should be timed paying."""
    relax.VirtualMachine(tvm.compile(Tiny, target="llvm"), tvm.cpu())


def upstream_twin(mod: tvm.IRModule, x: torch.Tensor) -> tuple[float, torch.Tensor]:
    """`tvm.compile` of `mod` and its VM: seconds, and the VM's output on `x`."""
    vm, seconds = timed(lambda: relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu()))
    return seconds, torch.from_dlpack(vm["main"](tvm.runtime.from_dlpack(x)))


def bindings_of(func: relax.Function) -> int:
    return sum(len(block.bindings) for block in func.body.blocks)


def compiled(live, mark: int) -> dict:
    records = live.stats.since(mark)
    return {
        "tir": sum(len(r.functions) for r in records if r.kind == "tir"),
        "tir_names": [n for r in records if r.kind == "tir" for n in r.functions],
        "vm": sum(r.kind == "vm" for r in records),
        "compile_seconds": sum(r.seconds for r in records),
    }


def measure(layers: int, repeats: int) -> dict:
    torch.manual_seed(0)
    model = Transformer(layers).eval()
    x = torch.randn(1, SEQ, D_MODEL)
    edited_model = copy.deepcopy(model)
    edited_model.blocks[0].act = F.silu
    with torch.no_grad():
        expected, expected_edit = model(x), edited_model(x)
    warm_up()
    shell = notebook_shell()
    runs: list[dict] = []
    for i in range(repeats):
        run: dict = {}
        # a cache directory no run has filled: the cold module compiles everything
        shell.run(f"%config TVMModuleMagics.cache_dir = {scratch('model-cache-')!r}")
        cold_name, warm_name = f"model{i}", f"model{i}_warm"
        shell.ip.run_line_magic("tvmmodule", cold_name)
        live = shell.ns[cold_name]
        _, run["import"] = timed(lambda live=live: live.add_torch(model, (x,)))
        run["bindings"] = bindings_of(live.ir_mod["main"])

        out, run["cold"] = timed(lambda live=live: live.main(x))
        assert torch.allclose(out, expected, **TOL)
        run["cold_compiled"] = compiled(live, 0)
        run["kernels"] = len(live.kernels("main"))
        _, run["exports"] = timed(shell.flush_cache)  # the background exports fill the cache

        run["upstream"], out = upstream_twin(live.ir_mod, x)
        assert torch.allclose(out, expected, **TOL)

        shell.ip.run_line_magic("tvmmodule", warm_name)
        warm = shell.ns[warm_name]
        warm.add_torch(model, (x,))
        out, run["warm"] = timed(lambda warm=warm: warm.main(x))
        assert torch.allclose(out, expected, **TOL)
        run["warm_compiled"] = compiled(warm, 0)
        run["warm_from_disk"] = sum(warm.stats.served["disk"].values())

        text = live.edit_text("main")
        assert text.count("R.nn.gelu(") == layers
        header, body = text.split("\n", 1)
        cell = f"{header} --quiet\n{body.replace('R.nn.gelu(', 'R.nn.silu(', 1)}"
        cell_id = f"edit-{i}"
        mark = len(live.stats.compiles)
        _, run["edit_cell"] = timed(
            lambda cell=cell, cell_id=cell_id: shell.run(cell, cell_id=cell_id)
        )
        out, run["edit_call"] = timed(lambda live=live: live.main(x))
        assert torch.allclose(out, expected_edit, **TOL)
        run["edit_compiled"] = compiled(live, mark)
        shell.flush_cache()  # the edit's export, before the twin is timed
        run["upstream_edit"], out = upstream_twin(live.ir_mod, x)
        assert torch.allclose(out, expected_edit, **TOL)
        runs.append(run)
    figures: dict = {
        key: statistics.median(run[key] for run in runs)
        for key in ("import", "cold", "exports", "upstream", "warm", "edit_cell", "edit_call")
    }
    figures["upstream_edit"] = statistics.median(run["upstream_edit"] for run in runs)
    figures["edit"] = statistics.median(run["edit_cell"] + run["edit_call"] for run in runs)
    for key in ("bindings", "kernels", "cold_compiled"):
        figures[key] = runs[-1][key]
    # what a warm call and an edit compiled: the run that compiled the most, not the last
    for key in ("warm_compiled", "edit_compiled"):
        figures[key] = max((run[key] for run in runs), key=lambda c: (c["tir"], c["vm"]))
    figures["warm_from_disk"] = min(run["warm_from_disk"] for run in runs)
    figures["layers"] = layers
    return figures


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]), int(sys.argv[2]))))
