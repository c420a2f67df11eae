"""Making a model fast with `tune("main")`: a model imported with `add_torch`, its kernels tuned
together, against PyTorch eager (under `torch.inference_mode`) on the same inputs in the same run.

The module is compiled for this machine's CPU (`{"kind": "llvm", "mcpu": "native"}`), under the
default pipeline and under `zero` (which folds the weights' transposes and fuses); the tuning
database lives in this run's empty cache directory, so every trial is measured. Ours is timed by
`NAME.time("main", x)` (TVM's `time_evaluator`), PyTorch by the same wall-clock loop `against=`
runs, in a few rounds of both. Per kernel, the report's before and after times (each kernel
alone, as MetaSchedule times a trial) say where the time goes.
"""

from __future__ import annotations

import itertools
import json
import sys
import time

import torch
from harness import notebook_shell
from make_fast import compare
from torch import nn

from tvm_pyfunc_nb._core.tuning.measuring import import_tensor_intrinsics

NATIVE = '{"kind":"llvm","mcpu":"native"}'  # no spaces: IPython's magic line keeps quotes


def mlp() -> tuple[nn.Module, tuple[torch.Tensor, ...], str]:
    model = nn.Sequential(
        nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)
    )
    return model.eval(), (torch.randn(32, 256),), "MLP 32×256 → 512 → 512 → 10 (ReLU)"


MODELS = {"mlp": mlp}
# the default (each op a kernel of its own), and `zero` (weights' transposes folded, ops fused)
PIPELINES = ("auto", "zero")


def eager(model: nn.Module):
    """The reference as a user runs it for inference: PyTorch eager under `inference_mode`."""

    def run(*args):
        with torch.inference_mode():
            return model(*args)

    run.__name__ = type(model).__name__
    return run


def measure(trials: int, number: int, repeat: int, rounds: int) -> dict:
    torch.manual_seed(0)
    shell = notebook_shell()
    out: dict = {"torch_threads": torch.get_num_threads(), "trials": trials}
    start = time.perf_counter()
    import_tensor_intrinsics()  # MetaSchedule's one-time imports, as `tune` does them, timed apart
    out["import_seconds"] = time.perf_counter() - start
    out["models"] = models = {}
    for (key, make), pipeline in itertools.product(MODELS.items(), PIPELINES):
        model, args, title = make()
        name = f"{key}_{pipeline}"
        shell.run(f"%tvmmodule {name} --quiet --target {NATIVE} --pipeline {pipeline}")
        live = shell.ns[name]
        live.add_torch(model, args)
        reference = eager(model)
        expected = reference(*args)
        assert torch.allclose(live.main(*args), expected, atol=1e-4), key
        shell.flush_cache()
        before = compare(live, "main", args, reference, number, repeat, rounds)
        start = time.perf_counter()
        report = live.tune("main", trials=trials)
        seconds = time.perf_counter() - start
        assert torch.allclose(live.main(*args), expected, atol=1e-4), f"{key} tuned"
        shell.flush_cache()
        after = compare(live, "main", args, reference, number, repeat, rounds)
        models[name] = {
            "title": title,
            "pipeline": pipeline,
            "before": before,
            "after": after,
            "tune_seconds": seconds,
            "trials_run": report.trials_run,
            "kernels": [
                {
                    "kernel": r.kernel,
                    "calls": r.calls,
                    "trials": r.trials,
                    "before": r.before,
                    "after": r.after,
                }
                for r in report.rows
            ],
        }
    return out


if __name__ == "__main__":
    print(json.dumps(measure(*map(int, sys.argv[1:5]))))
