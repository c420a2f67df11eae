"""Three models against PyTorch eager, each as a user gets it without options and with
`--offload torch`, at one thread count (`run.py` runs this once per count, in a fresh process).

- the MLP 32×256 → 512 → 512 → 10 (ReLU) of `make_fast.py`, written as one Relax function with
  its weights as arguments; PyTorch's twin is `F.linear` and `F.relu`;
- a `torch.nn.TransformerEncoderLayer` (d_model 128, 4 heads, its default 2048-wide
  feed-forward, sequence 64, batch 1, eval), imported with `add_torch`;
- a ResNet-18-shaped conv net (transformers' `ResNetModel`, a ResNet-18 configuration, random
  weights, eval) on one 3×128×128 image, imported with `add_torch`.

The thread count is set on both sides before anything runs: `TVM_NUM_THREADS` in the environment
of this process (read when TVM's thread pool starts; `run.py` sets it) and
`torch.set_num_threads`. The modules use the default target (`llvm`: this machine's CPU) and the
default pipeline: what a user who changes nothing, or only `--offload`, runs. Each row is
`NAME.time("main", *args, against=model)` (PyTorch under `torch.inference_mode()`) repeated in
rounds that alternate the two sides; medians of all samples. Results are checked against
PyTorch before anything is timed, and `kernels("main")` says what ran where. Each model is also
timed as `torch.compile(model)` (inductor), by the same wall-clock loop as PyTorch eager.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import sys
import time
import timeit

import torch
from harness import module_cell, notebook_shell
from make_fast import BATCH, MLP, SIZES, compare, inductor, torch_mlp

from tvm_pyfunc_nb._core.inspect.timing import tvm_threads
from tvm_pyfunc_nb.testing import parts_of

# The settings each model is timed under (`%%tvmmodule` options). `tune("main")` rows are a
# variant of the default module tuned after it is built: add them here.
VARIANTS = {"default": "", "offload": "--offload torch"}
GOALS = {"default": 0.1, "offload": {"mlp": 1.0, "transformer": 1.0, "resnet": 0.9}}
TOL = {"atol": 1e-3, "rtol": 1e-3}
PROFILE_RUNS = 10


def mlp_case():
    x = torch.randn(BATCH, SIZES[0])
    params = []
    for fan_in, fan_out in itertools.pairwise(SIZES):
        params += [torch.randn(fan_in, fan_out) / fan_in**0.5, torch.randn(fan_out)]
    return "mlp", None, (x, *params), torch_mlp


def transformer_case():
    layer = torch.nn.TransformerEncoderLayer(d_model=128, nhead=4).eval()
    return "main", layer, (torch.randn(64, 1, 128),), layer


def resnet_case():
    from transformers import ResNetConfig, ResNetModel

    config = ResNetConfig(depths=[2, 2, 2, 2], hidden_sizes=[64, 128, 256, 512], layer_type="basic")
    model = ResNetModel(config).eval()
    return "main", model, (torch.randn(1, 3, 128, 128),), model


CASES = {"mlp": mlp_case, "transformer": transformer_case, "resnet": resnet_case}


def outputs(value):
    """The first tensor of what a model returns (a `ModelOutput`'s first field, a tuple's first)."""
    if isinstance(value, torch.Tensor):
        return value
    if hasattr(value, "to_tuple"):
        value = value.to_tuple()
    return outputs(value[0])


def measure(threads: int, number: int, repeat: int, rounds: int) -> dict:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    shell = notebook_shell()
    out: dict = {
        "threads": {"torch": torch.get_num_threads(), "tvm": tvm_threads()},
        "rows": {},
        "torch_compile": {},
    }
    for case, make in CASES.items():
        fn, model, args, reference = make()
        with torch.inference_mode():
            for _ in range(5):  # PyTorch's first calls (its thread pool starting) are not timed
                expected = outputs(reference(*args))
        for variant, options in VARIANTS.items():
            name = f"{case}_{variant}"
            started = time.perf_counter()
            if model is None:
                module_cell(shell, name, "mlp", MLP, options)
            else:
                shell.ip.run_line_magic("tvmmodule", f"{name} {options}")
                shell.ns[name].add_torch(model, args)
            live = shell.ns[name]
            got = outputs(live.get_function(fn)(*args))
            compile_seconds = time.perf_counter() - started
            assert torch.allclose(got, expected, **TOL), f"{name} does not match PyTorch"
            shell.flush_cache()
            with torch.inference_mode():
                figures = compare(live, fn, args, reference, number, repeat, rounds)
            row = {**figures, "kernels": live.kernels(fn), "first_call": compile_seconds}
            if figures["torch"] / figures["ours"] < goal(case, variant):
                row["profile"] = per_op(live, fn, args)
            out["rows"][name] = row
        out["torch_compile"][case] = inductor(reference, args, number, repeat, rounds)
    out["bridge"] = bridge_cost()
    return out


def goal(case: str, variant: str) -> float:
    wanted = GOALS[variant]
    return wanted[case] if isinstance(wanted, dict) else wanted


def per_op(live, fn: str, args) -> list[tuple[str, float]]:
    """Seconds per run of each op the VM calls (kernels, PyTorch calls, VM builtins), from
    its instrumentation hook; the ten costliest. Each call is timed from Python, so every
    figure carries the hook's own overhead (about a microsecond)."""
    import tvm

    parts = parts_of(live)
    vm = parts.compiler.linked_for(parts.state, fn).vm(live.device)
    spent: dict[str, list[float]] = collections.defaultdict(list)
    started: dict[str, float] = {}

    def instrument(func, symbol, before, result, *rest):
        if before:
            started[symbol] = time.perf_counter()
        else:
            spent[symbol].append(time.perf_counter() - started[symbol])
        return 0

    arguments = [tvm.runtime.from_dlpack(a.contiguous()) for a in args]
    vm.set_instrument(instrument)  # the module is timed no more after this
    for _ in range(PROFILE_RUNS):
        vm[fn](*arguments)
    totals = {name: sum(times) / PROFILE_RUNS for name, times in spent.items()}
    return sorted(totals.items(), key=lambda item: -item[1])[:10]


def bridge_cost() -> dict:
    """What one PyTorch call through the bridge costs beyond the op: a registered function that
    does nothing, given three tensors as `torch.Tensor`s (tvm-ffi's DLPack exchange), called as
    the VM calls it; and `torch.addmm(out=...)` of the MLP's first layer called from Python."""
    import tvm
    import tvm_ffi

    nothing = tvm_ffi.convert_func(lambda a, b, out: None, tensor_cls=torch.Tensor)
    a, b, out = torch.randn(32, 256), torch.randn(256, 512), torch.empty(32, 512)
    tensors = [tvm.runtime.from_dlpack(t) for t in (a, b, out)]
    bias = torch.randn(512)
    number = 2000
    empty = min(timeit.repeat(lambda: nothing(*tensors), number=number, repeat=5)) / number
    addmm = min(timeit.repeat(lambda: torch.addmm(bias, a, b, out=out), number=200, repeat=5)) / 200
    return {"empty_call": empty, "addmm": addmm}


if __name__ == "__main__":
    os.environ.setdefault("TVM_NUM_THREADS", sys.argv[1])
    print(json.dumps(measure(*map(int, sys.argv[1:5]))))
