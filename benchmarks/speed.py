"""Fast by default: a model imported with `add_torch` as a user gets it, against PyTorch eager and
`torch.compile`, at one thread and at all threads, in one process (`run.py` runs this once per
model and target).

Per model: PyTorch eager (`torch.inference_mode()`), `torch.compile(model)` (inductor), ours
with no options, ours with `--offload torch`, and ours after `tune("main")` with its default
budget (a module of its own, tuned from an empty database at all threads, the time it took
recorded). The thread count is set on PyTorch's side only (`torch.set_num_threads`): TVM's pool
follows it, as in a notebook. Each count is timed in rounds that take every side in turn
(`NAME.time` for ours: TVM's `time_evaluator`; a wall-clock loop of the same shape for
PyTorch's), medians of all samples. Outputs are checked against eager before anything is timed.

`avx2` compiles ours for `{"kind": "llvm", "mcpu": "x86-64-v3"}` (8 floats to a vector) and runs
PyTorch with its AVX2 kernels too (`ATEN_CPU_CAPABILITY=avx2`, `ONEDNN_MAX_CPU_ISA=AVX2`, set
before torch is imported: `run.py` does), so both sides are what an AVX2 machine runs; `native`
is this machine's CPU on both sides.

For the MLP the figures also give its FLOP rate at one thread against one core's FP32 peak:
clock × FMA units × float32 lanes × 2 (a fused multiply-add is two operations), the units and the
clock found by a probe (`fma_rate`): one thread of independent vector multiply-adds reaches a rate
that one unit could give only above 5 GHz, so two, at the clock that rate implies (turbo
included; /proc/cpuinfo gives the nominal one).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

TARGETS = {"native": "", "avx2": '{"kind":"llvm","mcpu":"x86-64-v3"}'}
AVX2_TORCH = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
VARIANTS = {"none": "", "offload": "--offload torch"}
TOL = {"atol": 2e-3, "rtol": 2e-3}


def mlp():
    from torch import nn

    model = nn.Sequential(
        nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)
    )
    import torch

    return model, (torch.randn(32, 256),)


def encoder():
    import torch

    return torch.nn.TransformerEncoderLayer(d_model=128, nhead=4), (torch.randn(64, 1, 128),)


def convnet():
    """Three 3×3 convolutions (3 → 16 → 32 → 32 channels), each with a batch norm (running
    statistics drawn at random, so that it is not the identity) and a ReLU, on one 56×56 image."""
    import torch
    from torch import nn

    layers = []
    for fan_in, fan_out in ((3, 16), (16, 32), (32, 32)):
        norm = nn.BatchNorm2d(fan_out)
        norm.running_mean.uniform_(-0.5, 0.5)
        norm.running_var.uniform_(0.5, 1.5)
        layers += [nn.Conv2d(fan_in, fan_out, 3, padding=1, bias=False), norm, nn.ReLU()]
    return nn.Sequential(*layers), (torch.randn(1, 3, 56, 56),)


def bert():
    """The tests' tiny BERT (hidden 32, 2 layers, 8 tokens: tests/real_models.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from real_models import ZOO

    model, args = ZOO["bert"].build()
    return model, args


def resnet18():
    """transformers' `ResNetModel` in a ResNet-18 configuration, random weights, one 128×128
    image."""
    import torch
    from transformers import ResNetConfig, ResNetModel

    config = ResNetConfig(depths=[2, 2, 2, 2], hidden_sizes=[64, 128, 256, 512], layer_type="basic")
    return ResNetModel(config), (torch.randn(1, 3, 128, 128),)


MODELS = {
    "mlp": ("MLP 32×256 → 512 → 512 → 10", mlp),
    "encoder": ("TransformerEncoderLayer d=128, 4 heads, seq 64", encoder),
    "convnet": ("conv net: 3 × (conv 3×3 + BN + ReLU), 56×56", convnet),
    "bert": ("tiny BERT (hidden 32, 2 layers, 8 tokens)", bert),
    "resnet18": ("ResNet-18 (transformers ResNetModel), 128×128", resnet18),
}
MLP_FLOPS = 2 * 32 * (256 * 512 + 512 * 512 + 512 * 10)


def first_tensor(value):
    """A model's first output tensor (a `ModelOutput`'s first field, a tuple's first)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value
    if hasattr(value, "to_tuple"):
        value = value.to_tuple()
    return first_tensor(value[0])


def measure(model_key: str, target_key: str, number: int, repeat: int, rounds: int) -> dict:
    import torch
    from harness import notebook_shell

    from tvm_pyfunc_nb._core.inspect.timing import wall_clock_samples
    from tvm_pyfunc_nb._core.run.thread_pool import tvm_threads

    torch.manual_seed(0)
    title, make = MODELS[model_key]
    model, args = make()
    model = model.eval()
    all_threads = os.cpu_count() or 1
    torch.set_num_threads(all_threads)
    with torch.inference_mode():
        expected = first_tensor(model(*args))
    shell = notebook_shell()
    target = TARGETS[target_key]
    modules, first_calls = {}, {}
    for variant, options in {**VARIANTS, "tuned": ""}.items():
        name = f"{model_key}_{variant}"
        flags = f"{options} --target {target}" if target else options
        shell.ip.run_line_magic("tvmmodule", f"{name} --quiet {flags}")
        live = shell.ns[name]
        started = time.perf_counter()
        live.add_torch(model, args)
        got = first_tensor(live.main(*args))
        first_calls[variant] = time.perf_counter() - started
        assert torch.allclose(got, expected, **TOL), f"{name} does not match PyTorch"
        modules[variant] = live
    shell.flush_cache()
    started = time.perf_counter()
    report = modules["tuned"].tune("main")
    tune_seconds = time.perf_counter() - started
    got = first_tensor(modules["tuned"].main(*args))
    assert torch.allclose(got, expected, **TOL), f"{model_key} tuned does not match PyTorch"
    shell.flush_cache()
    compiled_model = torch.compile(model)
    started = time.perf_counter()
    with torch.inference_mode():
        compiled_model(*args)  # inductor compiles at the first call
    compile_seconds = time.perf_counter() - started

    def eager(*xs):
        return model(*xs)

    out: dict = {
        "load": list(os.getloadavg()),
        "title": title,
        "target": target_key,
        "tune": {
            "seconds": tune_seconds,
            "trials": report.trials_run,
            "kernels": [
                {
                    "kernel": r.kernel,
                    "calls": r.calls,
                    "before": r.before,
                    "after": r.after,
                    "schedule": r.schedule,
                    "trials": r.trials,
                }
                for r in report.rows
            ],
        },
        "kernels": {v: live.kernels("main") for v, live in modules.items()},
        "first_call": first_calls,
        "compile_seconds": compile_seconds,
        "threads": {},
    }
    for threads in sorted({1, all_threads}):
        torch.set_num_threads(threads)
        samples: dict[str, list[float]] = {k: [] for k in ("eager", "compile", *modules)}
        with torch.inference_mode():
            for _ in range(rounds):
                samples["eager"] += wall_clock_samples(eager, args, number, repeat)
                samples["compile"] += wall_clock_samples(compiled_model, args, number, repeat)
                for variant, live in modules.items():
                    samples[variant] += live.time(
                        "main", *args, number=number, repeat=repeat
                    ).function.samples
        medians = {k: statistics.median(v) for k, v in samples.items()}
        row = {"times": medians, "tvm": tvm_threads(), "torch": torch.get_num_threads()}
        slowest = min(("none", "offload", "tuned"), key=lambda v: medians["eager"] / medians[v])
        row["profile"] = profile_rows(modules[slowest], args, slowest)
        out["threads"][threads] = row
    out["load"] += list(os.getloadavg())  # at the start of timing, and at its end
    if model_key == "mlp":
        out["peak"] = peak(target_key)
        out["flops"] = MLP_FLOPS
    return out


def profile_rows(live, args, variant: str) -> dict:
    """The slowest variant's profile: its costliest rows (kernel, share, time per run)."""
    profile = live.profile("main", *args, number=5, repeat=3)
    rows = sorted(profile.rows, key=lambda r: -r.total)[:5]
    return {
        "variant": variant,
        "rows": [
            {"kernel": r.kernel, "kind": r.kind, "total": r.total, "share": r.share} for r in rows
        ],
    }


def peak(target_key: str) -> dict:
    """One core's FP32 peak for the target's vectors: clock × FMA units × lanes × 2."""
    import tvm

    from tvm_pyfunc_nb._core.build.cpu_schedules import vector_lanes

    target = tvm.target.Target(
        json.loads(TARGETS[target_key])
        if TARGETS[target_key]
        else {"kind": "llvm", "mcpu": tvm.target.codegen.llvm_get_system_cpu()}
    )
    lanes = vector_lanes(target)
    probe = fma_rate(target, lanes)
    # the fewest FMA units that give the probe's rate at a clock this CPU can run
    units = next(n for n in (1, 2, 4) if probe / (n * lanes * 2) <= MAX_CLOCK_HZ)
    clock = probe / (units * lanes * 2)
    return {
        "clock_hz": clock,
        "nominal_hz": cpu_mhz() * 1e6,
        "lanes": lanes,
        "fma_units": units,
        "probe": probe,
        "flops": clock * units * lanes * 2,
    }


MAX_CLOCK_HZ = 5.0e9  # no x86 core runs faster (turbo included)


def cpu_mhz() -> float:
    """This CPU's clock, as /proc/cpuinfo gives it (the nominal one under a hypervisor)."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("cpu MHz"):
            return float(line.split(":")[1])
    raise RuntimeError("no clock in /proc/cpuinfo")


CHAINS = 16  # independent multiply-add chains: enough to hide the latency of two units


def fma_rate(target, lanes: int) -> float:
    """Float operations per second of one thread running independent vector multiply-adds (the
    best of a few runs): a probe of how many FMA units a core has."""
    import numpy as np
    import tvm
    from tvm.script import tirx as T

    steps = 4096

    @T.prim_func
    def probe(
        a: T.Buffer((CHAINS * lanes,), "float32"), out: T.Buffer((CHAINS * lanes,), "float32")
    ):
        acc = T.alloc_buffer((CHAINS * lanes,), "float32", scope="local")
        for c in T.unroll(CHAINS):
            for lane in T.vectorized(lanes):
                acc[c * lanes + lane] = a[c * lanes + lane]
        for _ in range(steps):
            for c in T.unroll(CHAINS):
                for lane in T.vectorized(lanes):
                    acc[c * lanes + lane] = acc[c * lanes + lane] * T.float32(0.999) + T.float32(
                        0.001
                    )
        for c in T.unroll(CHAINS):
            for lane in T.vectorized(lanes):
                out[c * lanes + lane] = acc[c * lanes + lane]

    lib = tvm.tirx.build(probe, target=target)
    device = tvm.cpu()
    a = tvm.runtime.tensor(np.ones(CHAINS * lanes, "float32"), device)
    out = tvm.runtime.empty((CHAINS * lanes,), "float32", device)
    seconds = min(lib.time_evaluator("main", device, number=50, repeat=7)(a, out).results)
    return steps * CHAINS * lanes * 2 / seconds


if __name__ == "__main__":
    model_key, target_key = sys.argv[1], sys.argv[2]
    print(json.dumps(measure(model_key, target_key, *map(int, sys.argv[3:6]))))
