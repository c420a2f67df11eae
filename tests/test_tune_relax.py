"""Making a Relax function fast: `tune("fn")` over the kernels its pipeline makes, kept in the
compile cache and applied again by a new module; `schedule("fn", "dlight")` up to CUDA code.

Each test works as a user does, in a real IPython shell with `%%tvmmodule` cells. One tuning
run of a few trials on a one-kernel function: MetaSchedule's first use in a process imports
TVM's tensor intrinsics, the longest part.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest
import torch
import tvm
from cells import MLP
from IPython.utils.capture import capture_output
from tvm.script import tirx as T

from tvm_pyfunc_nb import CompileError, ScheduleError
from tvm_pyfunc_nb._core.build.tuning_records import tuning_target
from tvm_pyfunc_nb._core.tuning.entry import unscheduled
from tvm_pyfunc_nb._core.tuning.relax_kernels import kernel_tasks
from tvm_pyfunc_nb.testing import parts_of

MATMUL = """
@R.function
def rmm(
    x: R.Tensor((SIZE, SIZE), "float32"), y: R.Tensor((SIZE, SIZE), "float32")
) -> R.Tensor((SIZE, SIZE), "float32"):
    return R.matmul(x, y)
"""

CUDA_ZERO = "--target cuda --device cuda --pipeline zero"


def tuned_kernels(lowered: str) -> set[str]:
    """The kernels in `lowered` text that carry a schedule (tuned or DLight)."""
    found = set()
    for block in lowered.split("@T.prim_func")[1:]:
        name = re.search(r"def (\w+)\(", block).group(1)
        if '"tirx.is_scheduled": True' in block:
            found.add(name)
    return found


def latest_progress(outputs) -> str:
    """What a front end without widgets shows last for the progress line (its last update)."""
    texts = [o.data["text/plain"] for o in outputs if "text/plain" in o.data]
    lines = [t for t in texts if t.startswith("tuning ")]
    assert lines, texts
    return lines[-1]


@pytest.mark.slow
def test_tune_a_relax_function_then_a_new_module_uses_its_schedules(cached_shell):
    shell = cached_shell
    shell.cell("demo", MATMUL.replace("SIZE", "128"))
    demo = shell.ns["demo"]
    x, y = torch.randn(128, 128), torch.randn(128, 128)
    assert demo.kernels("rmm") == ["matmul"]

    with capture_output() as shown:
        report = demo.tune("rmm", trials=4)
    assert type(report).__name__ == "TuningReport" and report.function == "rmm"
    assert report.trials_run == 4 and report.trials_kept == 4, report
    (row,) = report.rows
    assert row.kernel == "matmul" and row.calls == 1 and row.trials == 4, row
    assert row.before > 0 and row.after > 0, row
    # the best trial and the CPU schedule were timed in turns: the kernel runs the faster one,
    # so tuning never leaves it slower than it ran before (`before` is that schedule's time)
    assert row.schedule in ("tuned", "kept") and row.after <= row.before, row
    text = shell.text(report)
    assert "time before" in text and "time after" in text and "matmul" in text, text
    assert "schedule" in text and row.schedule in text, text
    html = shell.ip.display_formatter.formatters["text/html"].lookup(report)(report)
    assert "<table" in html and "time after" in html, html
    # the line a front end without widgets keeps says where tuning ended, not where it began
    progress = latest_progress(shown.outputs)
    assert progress.startswith("tuning rmm: 4 of 4 trials · 1 kernel · "), progress
    assert "per call (was " in progress, progress

    # the tuned kernel is what runs, and what lowered and source show
    lowered = demo.lowered("rmm")  # the default schedule, or a trial that beat it
    assert tuned_kernels(lowered) == {"matmul"}, lowered
    assert "parallel" in lowered or "vectorized" in lowered
    assert torch.allclose(demo.rmm(x, y), x @ y, atol=1e-3)
    assert "define" in demo.source("rmm")

    # a new module with the same cache (a restart): tuned at its first compile, no tuning
    shell.flush_cache()
    shell.run("%tvmmodule_drop demo")
    shell.cell("demo", MATMUL.replace("SIZE", "128"))
    again = shell.ns["demo"]
    assert again is not demo
    assert torch.allclose(again.rmm(x, y), x @ y, atol=1e-3)
    assert again.lowered("rmm") == lowered
    start = time.perf_counter()
    kept = again.tune("rmm", trials=4)  # everything asked for is in the database already
    assert kept.trials_run == 0 and kept.trials_kept == 4, kept
    assert time.perf_counter() - start < 30

    # an edit that changes the kernel: it misses the database and falls back to the default
    shell.cell("demo", MATMUL.replace("SIZE", "96"))
    x96, y96 = torch.randn(96, 96), torch.randn(96, 96)
    assert torch.allclose(again.rmm(x96, y96), x96 @ y96, atol=1e-3)
    shell.cell("plain", MATMUL.replace("SIZE", "96"))  # no database: the default schedule
    assert again.lowered("rmm") == shell.ns["plain"].lowered("rmm")
    # and back: the database has that structure, so the tuned schedule returns
    shell.cell("demo", MATMUL.replace("SIZE", "128"))
    assert again.lowered("rmm") == lowered


@pytest.mark.slow
def test_tune_keeps_the_schedule_a_kernel_had_when_its_best_record_is_slower(cached_shell):
    """A record that claims a time it does not have (a lucky moment of a busy machine, here
    planted) is timed again against the kernel's CPU schedule, in turns, the same way: the
    faster one runs, and the report says the kernel kept its schedule."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import TuningRecord

    shell = cached_shell
    shell.cell("keep", MATMUL.replace("SIZE", "128"))
    keep = shell.ns["keep"]
    x, y = torch.randn(128, 128), torch.randn(128, 128)
    untuned = keep.lowered("rmm")
    parts = parts_of(keep)
    (task,) = kernel_tasks(unscheduled(parts, "rmm", link_first=False), "rmm")
    slow = tvm.s_tir.Schedule(task.workload)  # the loops column first: far slower, not faster
    i, j, k = slow.get_loops(slow.get_sblock("matmul"))
    slow.reorder(j, k, i)
    database = parts.schedules.database(create=True)
    database.commit_tuning_record(
        TuningRecord(
            slow.trace,
            database.commit_workload(task.workload),
            run_secs=[1e-9],
            target=tuning_target(parts.target),
            args_info=ArgInfo.from_prim_func(task.workload["main"]),
        )
    )
    report = keep.tune("rmm", trials=1)  # the planted record is the one trial: none measured
    assert report.trials_run == 0, report
    (row,) = report.rows
    assert row.schedule == "kept" and row.after == row.before, row
    assert report.kept == ["matmul"] and "1 of 1 kept their schedule" in report.summary()
    assert keep.lowered("rmm") == untuned  # the CPU schedule, not the record's loops
    assert torch.allclose(keep.rmm(x, y), x @ y, atol=1e-3)
    # the choice outlives the module: a new one with the same records keeps the schedule too
    shell.flush_cache()
    shell.run("%tvmmodule_drop keep")
    shell.cell("keep", MATMUL.replace("SIZE", "128"))
    assert shell.ns["keep"].lowered("rmm") == untuned


def test_tune_needs_an_llvm_module_run_here(shell):
    shell.cell("gpu", MLP, options="--target cuda --device cuda")
    with pytest.raises(ScheduleError) as caught:
        shell.ns["gpu"].tune("mlp", trials=2)
    assert caught.value.function == "mlp" and "llvm" in str(caught.value), caught.value


def test_dlight_schedules_every_kernel_of_a_relax_function_for_cuda(shell):
    shell.cell("gpu", MLP, options=CUDA_ZERO)
    gpu = shell.ns["gpu"]
    with pytest.raises(CompileError) as caught:  # `zero` fuses but binds no threads
        gpu.compile()
    assert 'gpu.schedule("mlp", "dlight")' in str(caught.value), caught.value

    scheduled = gpu.schedule("mlp", "dlight")
    kernels = gpu.kernels("mlp")
    assert sorted(scheduled) == sorted(kernels) and len(kernels) == 2, (scheduled, kernels)
    lowered = gpu.lowered("mlp")
    assert tuned_kernels(lowered) == set(kernels) and "T.thread_binding(" in lowered
    source = gpu.source("mlp")
    assert re.findall(r"^// kernel (\w+)$", source, re.MULTILINE) == kernels
    for kernel in kernels:
        assert re.search(rf"__global__ .*\b{kernel}_kernel\(", source), source[:2000]
    gpu.compile()  # everything compiles now


SOFTMAX_ROWS = """
@R.function
def rows(x: R.Tensor(("n", 256), "float32")) -> R.Tensor(("n", 256), "float32"):
    return R.nn.softmax(x, axis=1)
"""


def test_dlight_leaves_out_the_shape_function_of_a_symbolic_size(shell):
    """A symbolic size gives the lowered function a `shape_func` (plain TIR, no root block),
    which DLight's rules cannot take (a ValueError from inside DLight): it is left alone."""
    shell.cell("gpu", SOFTMAX_ROWS, options=CUDA_ZERO)
    gpu = shell.ns["gpu"]
    assert gpu.schedule("rows", "dlight") == ["softmax"]


def test_dlight_on_a_cpu_relax_function_without_gemv_or_reductions_says_so(shell):
    shell.cell("demo", MLP, options="--pipeline default")  # matmul, add, relu: no GEMV
    with pytest.raises(ScheduleError) as caught:
        shell.ns["demo"].schedule("mlp", "dlight")
    assert caught.value.function == "mlp" and "DLight has no schedule" in str(caught.value)


SCANS = """
import inspect, sys
from tvm_pyfunc_nb._core.tuning.measuring import import_tensor_intrinsics

scans = []  # the files inspect.getmodule scans every loaded module for (its caches know none)
getmodule = inspect.getmodule
def counted(obj, _filename=None):
    if not inspect.ismodule(obj) and not hasattr(obj, "__module__"):
        if _filename not in inspect.modulesbyfile:
            file = inspect.getabsfile(obj, _filename)
            if file not in inspect.modulesbyfile:
                scans.append(file)
    return getmodule(obj, _filename)
inspect.getmodule = counted
import_tensor_intrinsics()  # called from this code, whose file "<string>" no module has
assert "tvm.s_tir.tensor_intrin" in sys.modules
assert "<string>" not in inspect.modulesbyfile  # answered only while the import ran
print(len(scans))
"""


@pytest.mark.slow
def test_the_tensor_intrinsics_import_scans_the_modules_a_few_times_not_at_every_primfunc():
    """MetaSchedule's first use parses ~500 PrimFuncs, each under `inspect.stack()`: a frame of a
    file no module has (a notebook cell, code run from a string as here) cost a scan of every
    loaded module each time, 13 s of 18 s in a pytest-xdist worker."""
    done = subprocess.run(
        [sys.executable, "-c", SCANS], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) < 50, done.stdout  # 1488 when each frame scanned anew


@T.prim_func
def _gather(
    a: T.Buffer((4,), "float32"), idx: T.Buffer((4096,), "int64"), b: T.Buffer((4096,), "float32")
):
    for i in range(4096):
        b[i] = a[idx[i]]


def test_a_kernel_that_gathers_is_measured_on_indices_inside_its_buffer():
    """MetaSchedule fills arguments with random bits; an index read that far outside its buffer
    segfaulted this process (tune of a BERT, whose embeddings gather by token id)."""
    from tvm_pyfunc_nb._core.tuning import measuring

    measurer = measuring.local_measurer(tvm.target.Target("llvm"))
    (seconds,) = measurer.times([tvm.IRModule({"main": _gather})])
    assert seconds is not None and seconds > 0


def test_a_build_applies_its_kernel_schedules_only_to_the_functions_given_them():
    """What `schedule("fn", "dlight")` and `tune` leave for the build (build/kernel_schedules.py):
    nothing tuned, nothing asked, the pipeline's kernels stay as they are."""
    from tvm_pyfunc_nb import LiveModule
    from tvm_pyfunc_nb._core.build.kernel_schedules import is_scheduled

    live = LiveModule("gpu", target="cuda", device="cuda", pipeline="zero")
    live.run_cell(MLP)
    build = parts_of(live).build
    lowered = build.lower(live.ir_mod, scheduled=False)
    assert build.schedules.apply(lowered) is lowered and build.schedules.database() is None
    build.schedules.dlight.add("mlp")
    scheduled = build.schedules.apply(lowered)
    kernels = [gv.name_hint for gv, f in scheduled.functions_items() if is_scheduled(f)]
    assert len(kernels) == 2 and not any(is_scheduled(lowered[k]) for k in kernels)  # a copy
    live.close()
