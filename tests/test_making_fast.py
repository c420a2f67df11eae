"""Making it fast, and seeing why: pipelines, the cache key, lowered and source, time, schedule,
tune, and CUDA up to code generation without a GPU.

Each test works as a user does, in a real IPython shell with `%%tvmmodule` cells (or with
`LiveModule` and a `CompileCache` of its own where the cache's counters are what is checked).
Shapes are small and timings few, so that the whole file runs in well under two minutes on two
cores; the one MetaSchedule run is the longest part.
"""

from __future__ import annotations

import os
import platform
import re
import threading
import time
from pathlib import Path

import pytest
import torch
import tvm
import tvm_ffi
from cells import ADD_TIR, MLP, SCALE_PYFUNC, SYMBOLIC_LOOP
from IPython.utils.capture import capture_output

from tvm_pyfunc_nb import (
    CallError,
    CompileCache,
    CompileError,
    LiveModule,
    ScheduleError,
    TVMModuleError,
)
from tvm_pyfunc_nb._core.build import builder, pipelines
from tvm_pyfunc_nb._core.build.disk_cache import OWN_DIR
from tvm_pyfunc_nb._core.inspect import lowered_views
from tvm_pyfunc_nb.errors import native_stderr_without
from tvm_pyfunc_nb.testing import parts_of

# -- cells -----------------------------------------------------------------------------------------
MATMUL = """
@T.prim_func(s_tir=True)
def mm(a: T.handle, b: T.handle, c: T.handle):
    A = T.match_buffer(a, (SIZE, SIZE), "float32")
    B = T.match_buffer(b, (SIZE, SIZE), "float32")
    C = T.match_buffer(c, (SIZE, SIZE), "float32")
    for i, j, k in T.grid(SIZE, SIZE, SIZE):
        with T.sblock("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
"""
MM128 = MATMUL.replace("SIZE", "128")
MM64 = MATMUL.replace("SIZE", "64")

RELAX_MATMUL = """
@R.function
def rmm(
    x: R.Tensor((64, 64), "float32"), y: R.Tensor((64, 64), "float32")
) -> R.Tensor((64, 64), "float32"):
    return R.matmul(x, y)
"""

# An element-wise kernel with blocks but no GPU thread bindings: DLight's fallback binds threads.
ADD_BLOCKS = """
@T.prim_func(s_tir=True)
def add_blocks(a: T.handle, b: T.handle, c: T.handle):
    A = T.match_buffer(a, (1024,), "float32")
    B = T.match_buffer(b, (1024,), "float32")
    C = T.match_buffer(c, (1024,), "float32")
    for i in range(1024):
        with T.sblock("C"):
            vi = T.axis.remap("S", [i])
            C[vi] = A[vi] + B[vi]
"""


TILE = """
def tile(sch):
    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    i0, i1 = sch.split(i, [None, 32])
    j0, j1 = sch.split(j, [None, 32])
    k0, k1 = sch.split(k, [None, 4])
    sch.reorder(i0, j0, k0, i1, k1, j1)
    sch.vectorize(j1)
    sch.parallel(i0)
"""

CUDA = "--target cuda --device cuda"
FUSING = ("zero", "target")
NO_GPU = not tvm.cuda(0).exist

_seeded = torch.Generator().manual_seed(0)  # not the global generator other tests may use
MLP_ARGS = tuple(
    torch.randn(*shape, generator=_seeded) for shape in ((4, 16), (16, 32), (32,), (32, 8), (8,))
)


def mlp_reference(x, w1, b1, w2, b2):
    return torch.relu(torch.relu(x @ w1 + b1) @ w2 + b2)


def tir_compiles(live: LiveModule) -> list[str]:
    """The PrimFuncs TVM built, in order (one compile may build several together)."""
    return [name for c in live.stats.compiles if c.kind == "tir" for name in c.functions]


def disk_served(live: LiveModule) -> set[str]:
    return {name for name, hits in live.stats.served["disk"].items() if hits}


def run_mm(live: LiveModule, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = torch.empty(a.shape[0], b.shape[1])
    live.mm(a, b, out)
    return out


def samples_sane(timing) -> None:
    samples = timing.function.samples
    assert samples and all(s > 0 for s in samples), samples
    assert timing.mean > 0 and timing.median > 0 and timing.std >= 0
    assert min(samples) <= timing.median <= max(samples)


@pytest.fixture
def config_shell(shell):
    """The shell; `TVMModuleMagics.pipeline` and `cache_dir` are the tests' own again after."""
    yield shell
    shell.run("%config TVMModuleMagics.pipeline = 'auto'")
    shell.run("%config TVMModuleMagics.cache_dir = ''")


# -- 1. the pipeline -------------------------------------------------------------------------------
def test_fusing_pipelines_give_fewer_kernels_with_the_same_numbers(shell):
    kernels, lowered = {}, {}
    expected = mlp_reference(*MLP_ARGS)
    for pipeline in ("default", "auto", *FUSING):
        name = f"mlp_{pipeline}"
        shell.cell(name, MLP, options=f"--pipeline {pipeline}")
        live = shell.ns[name]
        # `auto` on a CPU is the package's fused pipeline, and the module says so
        assert live.options.pipeline == ("fused" if pipeline == "auto" else pipeline)
        assert torch.allclose(live.mlp(*MLP_ARGS), expected, atol=1e-5), pipeline
        kernels[pipeline], lowered[pipeline] = live.kernels("mlp"), live.lowered("mlp")

    assert len(kernels["default"]) == 6  # matmul, add, relu twice: one kernel per op
    for pipeline in ("auto", *FUSING):
        assert 0 < len(kernels[pipeline]) < len(kernels["default"]), kernels
        assert all(k.startswith("fused_") for k in kernels[pipeline]), kernels
        assert "T.parallel" in lowered[pipeline] and "T.vectorized" in lowered[pipeline]
    assert kernels["auto"] == ["fused_matmul_add_relu", "fused_matmul1_add1_relu1"]


def test_auto_is_the_fused_pipeline_on_a_cpu_and_the_targets_own_elsewhere():
    cpu, gpu = tvm.target.Target("llvm"), tvm.target.Target("cuda")
    fused = pipelines.pipeline_for("auto", cpu)
    assert fused.name == "fused" and fused.scheduled and fused.key.startswith("fused:")
    assert pipelines.pipeline_for("auto", gpu).name == "target"
    exact = pipelines.pipeline_for("default", cpu)
    assert exact.name == "default" and not exact.scheduled  # no schedule of ours after it
    assert pipelines.pipeline_for("zero", cpu).scheduled
    with pytest.raises(TVMModuleError, match="for CPU"):
        pipelines.pipeline_for("fused", gpu)


def test_pipeline_default_is_exactly_what_tvm_compile_builds(shell):
    """`--pipeline default`: tvm.compile's build for a CPU, one unscheduled kernel per op, and
    the numbers of tvm.compile's executable, bit for bit (a schedule of ours would sum in
    another order)."""
    from tvm import relax

    shell.cell("plain", MLP, options="--pipeline default")
    plain = shell.ns["plain"]
    assert plain.kernels("mlp") == ["matmul", "add", "relu", "matmul1", "add1", "relu1"]
    lowered = plain.lowered("mlp")
    assert "T.parallel" not in lowered and "T.vectorized" not in lowered
    assert "tirx.is_scheduled" not in lowered
    executable = tvm.compile(plain.ir_mod, target=parts_of(plain).target)
    vm = relax.VirtualMachine(executable, tvm.cpu())
    theirs = torch.from_dlpack(vm["mlp"](*[tvm.runtime.from_dlpack(a) for a in MLP_ARGS]))
    assert torch.equal(plain.mlp(*MLP_ARGS), theirs)


def test_an_unknown_pipeline_is_a_package_error_listing_the_known_ones(shell):
    err = shell.cell("fast", MLP, options="--pipeline fastest", expect_error=TVMModuleError)
    message = str(err)
    assert "fastest" in message
    for known in ("auto", "target", "default", "zero"):
        assert re.search(rf"\b{known}\b", message.split("fastest", 1)[1]), message
    assert "fast" not in shell.ns  # no module was made
    with pytest.raises(TVMModuleError, match="zero"):
        LiveModule("fast", pipeline="fastest")


def test_config_pipeline_sets_the_default_for_new_modules(config_shell):
    shell = config_shell
    shell.cell("before", MLP)
    shell.run("%config TVMModuleMagics.pipeline = 'zero'")
    shell.cell("after", MLP)
    shell.cell("chosen", MLP, options="--pipeline default")
    shell.cell("before", SCALE_PYFUNC)  # a module made earlier keeps its pipeline

    before, after, chosen = (shell.ns[n] for n in ("before", "after", "chosen"))
    assert after.options.pipeline == "zero"
    assert before.options.pipeline == "fused" and chosen.options.pipeline == "default"
    assert after.kernels("mlp") == ["fused_matmul_add_relu", "fused_matmul1_add1_relu1"]
    assert before.kernels("mlp") == after.kernels("mlp")
    assert len(chosen.kernels("mlp")) == 6
    expected = mlp_reference(*MLP_ARGS)
    for live in (before, after, chosen):
        assert torch.allclose(live.mlp(*MLP_ARGS), expected, atol=1e-5)


# -- 2. the pipeline in every cache key ------------------------------------------------------------
def test_a_module_under_another_pipeline_never_loads_this_pipelines_cache_entries(tmp_path):
    """`zero` and `target` make structurally equal kernels of the same names for this MLP, and
    `add_tir` does not depend on the pipeline at all: only the key tells their entries apart.
    """
    body = MLP + ADD_TIR
    x, y = torch.arange(5, dtype=torch.float32), torch.ones(5)

    def fresh(pipeline: str) -> tuple[LiveModule, CompileCache]:
        cache = CompileCache(tmp_path)  # nothing shared in memory with an earlier module
        live = LiveModule(f"m_{pipeline}", pipeline=pipeline, persistent_cache=cache)
        live.run_cell(body)
        out = torch.empty(5)
        live.add_tir(x, y, out)
        assert torch.equal(out, x + y)
        assert torch.allclose(live.mlp(*MLP_ARGS), mlp_reference(*MLP_ARGS), atol=1e-5)
        cache.flush()
        return live, cache

    zero, _ = fresh("zero")
    fused = zero.kernels("mlp")
    assert set(tir_compiles(zero)) == {*fused, "add_tir"}

    for other in ("target", "default"):
        live, cache = fresh(other)
        assert disk_served(live) == set() and cache.hits == 0, live.stats
        assert "add_tir" in tir_compiles(live)
        kernels = live.kernels("mlp")
        assert set(tir_compiles(live)) == {*kernels, "add_tir"}
        if other == "default":
            assert kernels == ["matmul", "add", "relu", "matmul1", "add1", "relu1"]
        else:
            assert kernels == fused

    back, cache = fresh("zero")  # the first pipeline's entries are still there, and served
    assert tir_compiles(back) == []
    assert disk_served(back) == {*fused, "add_tir"} and cache.hits == len(fused) + 1
    assert back.kernels("mlp") == fused


def test_the_magics_cache_keeps_pipelines_apart(config_shell, tmp_path):
    shell = config_shell
    shell.run(f"%config TVMModuleMagics.cache_dir = {str(tmp_path / 'cache')!r}")
    cache = shell.magics.compile_cache()

    def module(pipeline: str) -> LiveModule:
        shell.cell("net", MLP, options=f"--reset --pipeline {pipeline}")
        live = shell.ns["net"]
        assert torch.allclose(live.mlp(*MLP_ARGS), mlp_reference(*MLP_ARGS), atol=1e-5)
        shell.flush_cache()
        return live

    first = module("zero")
    assert len(tir_compiles(first)) == 2 and not disk_served(first)
    hits = cache.hits
    other = module("default")
    assert not disk_served(other) and cache.hits == hits
    assert len(tir_compiles(other)) == 6 == len(other.kernels("mlp"))
    again = module("zero")
    assert tir_compiles(again) == [] and cache.hits == hits + 2
    assert disk_served(again) == set(again.kernels("mlp")) == set(first.kernels("mlp"))


# -- 3. lowered and source -------------------------------------------------------------------------
def test_lowered_and_source_of_a_primfunc(shell):
    shell.cell("demo", MM128)
    demo = shell.ns["demo"]
    lowered = demo.lowered("mm")
    assert "T.sblock" not in lowered and "T.grid(128, 128, 128)" in lowered
    # the buffers are flat: every access has one index, 2-D subscripts are gone
    accesses = re.findall(r"\b[ABC]\w*\[([^\]]*)\]", lowered)
    assert accesses and all("," not in index for index in accesses), accesses
    assert any("128" in index for index in accesses), accesses

    llvm_ir = demo.source("mm")
    assert "define" in llvm_ir and "mm" in llvm_ir
    assembly = demo.source("mm", "asm")
    assert ".text" in assembly and "define" not in assembly
    assert demo.source("mm", "ll") == llvm_ir


@pytest.mark.skipif(platform.machine() != "x86_64", reason="cross-compiles from x86_64")
def test_a_kernel_for_another_architecture_shows_its_code_but_a_call_says_where_to_run_it(shell):
    arm = """'{"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"]}'"""
    shell.cell("demo", ADD_TIR, options=f"--target {arm}")
    demo = shell.ns["demo"]
    assembly = demo.source("add_tir", "asm")
    assert "fadd" in assembly and "vaddps" not in assembly  # AArch64 code, built on x86
    x = torch.ones(4)
    with pytest.raises(CompileError) as caught:
        demo.add_tir(x, x, torch.empty(4))
    message = str(caught.value)
    assert "aarch64" in message and "--rpc" in message and "demo.source('add_tir'" in message


def test_lowered_and_source_of_a_relax_function_show_the_pipelines_kernels(shell):
    shell.cell("demo", MLP, options="--pipeline zero")
    demo = shell.ns["demo"]
    kernels = demo.kernels("mlp")
    assert kernels == ["fused_matmul_add_relu", "fused_matmul1_add1_relu1"]
    lowered = demo.lowered("mlp")
    for kernel in kernels:
        assert f"def {kernel}(" in lowered and f"cls.{kernel}(" in lowered
    assert "R.nn.relu" not in lowered and "R.vm.alloc_tensor" in lowered  # after the pipeline

    source = demo.source("mlp")
    assert re.findall(r"^; kernel (\w+)$", source, re.MULTILINE) == kernels
    assert source.count("define") >= len(kernels)
    assert ".text" in demo.source("mlp", "asm")


def test_lowered_source_and_kernels_of_a_pyfunc_are_package_errors(shell):
    shell.cell("demo", SCALE_PYFUNC + ADD_TIR)
    demo = shell.ns["demo"]
    for what in ("lowered", "source", "kernels"):
        with pytest.raises(TVMModuleError) as caught:
            getattr(demo, what)("scale")
        assert caught.value.function == "scale" and "pyfunc" in str(caught.value), caught.value
    with pytest.raises(TVMModuleError, match="Relax"):
        demo.kernels("add_tir")  # a PrimFunc runs no kernels but itself


def test_lowered_and_source_are_computed_on_demand_not_on_a_call(shell, monkeypatch):
    made = []
    for helper in ("lowered_prim_func", "lowered_relax", "generated_source"):
        real = getattr(lowered_views, helper)

        def spy(*args, _real=real, _helper=helper, **kwargs):
            made.append(_helper)
            return _real(*args, **kwargs)

        monkeypatch.setattr(lowered_views, helper, spy)

    shell.cell("demo", MM128 + MLP, options="--pipeline zero")
    demo = shell.ns["demo"]
    a, b = torch.randn(128, 128), torch.randn(128, 128)
    assert torch.allclose(run_mm(demo, a, b), a @ b, atol=1e-3)
    assert torch.allclose(demo.mlp(*MLP_ARGS), mlp_reference(*MLP_ARGS), atol=1e-5)
    demo.compile()
    assert made == []  # calls and compiles computed neither
    records = list(demo.stats.compiles)
    assert {r.kind for r in records} == {"tir", "vm"}
    assert all(set(vars(r)) == {"kind", "functions", "target", "seconds", "end"} for r in records)

    demo.lowered("mm"), demo.source("mm"), demo.lowered("mlp"), demo.source("mlp")
    assert {"lowered_prim_func", "lowered_relax", "generated_source"} <= set(made)
    assert demo.stats.compiles == records  # looking compiled nothing and recorded nothing


# -- 4. time ---------------------------------------------------------------------------------------
def test_time_gives_sane_numbers_and_a_ratio_against_a_reference(shell):
    shell.cell("demo", MM128 + RELAX_MATMUL + SCALE_PYFUNC)
    demo = shell.ns["demo"]
    a, b = torch.randn(128, 128), torch.randn(128, 128)

    kernel = demo.time("mm", a, b, torch.empty(128, 128), number=2, repeat=3)
    samples_sane(kernel)
    assert len(kernel.function.samples) == 3 and kernel.function.how.startswith("time_evaluator")
    assert kernel.against is None and kernel.speed is None

    x, y = torch.randn(64, 64), torch.randn(64, 64)
    relax_fn = demo.time("rmm", x, y, number=3, repeat=3, against=torch.matmul)
    samples_sane(relax_fn)
    assert relax_fn.against is not None and relax_fn.against.how == "wall clock"
    assert relax_fn.against.what == "torch.matmul" and len(relax_fn.against.samples) == 3
    assert relax_fn.speed == pytest.approx(relax_fn.against.median / relax_fn.median)
    verdict = relax_fn.verdict()  # one convention: × the reference's speed, both times shown
    assert "torch.matmul's speed (above 1 is faster)" in verdict and verdict.count(" against ") == 1
    assert "faster than" not in repr(relax_fn) and "slower" not in repr(relax_fn)

    pyfunc = demo.time("scale", x, number=3, repeat=2)
    samples_sane(pyfunc)
    assert pyfunc.function.how == "wall clock"

    for bad in ({"number": 0}, {"repeat": 0}, {"number": -1, "repeat": 2}):
        with pytest.raises(CallError) as caught:
            demo.time("rmm", x, y, **bad)
        assert caught.value.function == "rmm", caught.value


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity on this OS")
def test_time_leaves_the_cores_its_thread_may_run_on_as_they_were(shell, monkeypatch):
    # TVM pins a thread that first asks for its pool's size to one core when the pool has one
    # thread (its default on two or three cores); `time` asks. A fresh thread asks anew.
    shell.cell("demo", ADD_TIR)
    monkeypatch.setenv("TVM_NUM_THREADS", "1")
    cores = {}

    def timed():
        cores["before"] = os.sched_getaffinity(0)
        a, b = torch.ones(5), torch.ones(5)
        shell.ns["demo"].time("add_tir", a, b, torch.empty(5), number=1, repeat=1)
        cores["after"] = os.sched_getaffinity(0)

    thread = threading.Thread(target=timed)
    thread.start()
    thread.join()
    assert cores["after"] == cores["before"]


def test_time_notes_the_crash_guards_only_when_the_kernel_carries_them(shell):
    shell.cell("checked", SYMBOLIC_LOOP + MM64)
    shell.cell("unchecked", SYMBOLIC_LOOP, options="--unchecked")
    args = (torch.ones(8), torch.empty(8))

    guarded = shell.ns["checked"].time("copy", *args, number=2, repeat=2)
    samples_sane(guarded)
    assert "crash guards" in guarded.note and "--unchecked" in guarded.note
    assert guarded.note in repr(guarded)

    proven = shell.ns["checked"].time(
        "mm", torch.ones(64, 64), torch.ones(64, 64), torch.empty(64, 64), number=1, repeat=1
    )
    assert proven.note == ""  # its bounds are proven: no guards went in

    bare = shell.ns["unchecked"].time("copy", *args, number=2, repeat=2)
    samples_sane(bare)
    assert bare.note == "" and "crash guards" not in repr(bare)


# -- 5. schedule -----------------------------------------------------------------------------------
def test_a_schedule_by_hand_is_faster_and_replaces_the_kernel_until_its_cell_runs_again(shell):
    shell.cell("demo", MM128, cell_id="mm-cell")
    demo = shell.ns["demo"]
    original = demo.ir_mod["mm"]
    origin = demo.origin_of("mm")
    a, b = torch.randn(128, 128), torch.randn(128, 128)
    naive_out = run_mm(demo, a, b)
    naive = demo.time("mm", a, b, torch.empty(128, 128), number=2, repeat=3)
    assert naive.median > 0

    shell.run(TILE)
    result = demo.schedule("mm", shell.ns["tile"])
    assert result.defined == ["mm"] and result.replaced == {"mm": origin}
    notices = repr(result)
    assert "schedule" in notices and f"mm replaces the definition from {origin}" in notices

    scheduled_out = run_mm(demo, a, b)
    assert torch.allclose(scheduled_out, naive_out, rtol=1e-4, atol=1e-4)
    assert torch.allclose(scheduled_out, a @ b, atol=1e-3)
    fast = demo.time("mm", a, b, torch.empty(128, 128), number=2, repeat=3)
    assert fast.median > 0 and fast.against is None  # how much faster: make bench says

    script = demo.script()
    assert "T.parallel(" in script and "T.vectorized(" in script
    assert not tvm_ffi.structural_equal(demo.ir_mod["mm"], original)
    assert demo.stats.by_function()["mm"]["compiles"] == 2  # the original, then the scheduled
    assert tir_compiles(demo)[-1] == "mm"

    shell.cell("demo", MM128, cell_id="mm-cell")  # the kernel's own cell again
    assert tvm_ffi.structural_equal(demo.ir_mod["mm"], original)
    assert "T.parallel(" not in demo.script()
    assert torch.allclose(run_mm(demo, a, b), naive_out, rtol=1e-4, atol=1e-4)


def test_a_schedule_function_that_raises_names_the_kernel_and_its_line(shell):
    shell.cell("demo", MM128 + SCALE_PYFUNC)
    demo = shell.ns["demo"]
    a, b = torch.randn(128, 128), torch.randn(128, 128)
    expected = run_mm(demo, a, b)
    ir_mod, script = demo.ir_mod, demo.script()

    shell.run(
        "def wrong(sch):\n    loops = sch.get_loops(sch.get_sblock('C'))\n"
        "    sch.parallel(sch.get_sblock('D'))\n"
    )
    err = shell.run("demo.schedule('mm', wrong)", expect_error=ScheduleError)
    assert isinstance(err, TVMModuleError) and err.function == "mm"
    assert "`mm`" in str(err) and "in wrong, line 3" in str(err) and "D" in str(err), err

    shell.run("def typo(sch):\n    sch.no_such_primitive()\n")
    err = shell.run("demo.schedule('mm', typo)", expect_error=ScheduleError)
    assert err.function == "mm" and "in typo, line 2" in str(err), err

    assert demo.ir_mod.same_as(ir_mod) and demo.script() == script
    assert torch.equal(run_mm(demo, a, b), expected)


def test_dlight_has_no_cpu_schedule_for_a_matmul(shell):
    shell.cell("demo", MM128)
    demo = shell.ns["demo"]
    ir_mod = demo.ir_mod
    err = shell.run("demo.schedule('mm', 'dlight')", expect_error=ScheduleError)
    assert err.function == "mm" and "DLight" in str(err) and "llvm" in str(err), err
    assert re.search(r"no (CPU )?schedule", str(err)), err
    assert demo.ir_mod.same_as(ir_mod)


def test_a_kernel_without_blocks_cannot_be_scheduled_by_hand(shell):
    shell.cell("demo", ADD_TIR)
    demo = shell.ns["demo"]
    ir_mod = demo.ir_mod
    shell.run(TILE)
    err = shell.run("demo.schedule('add_tir', tile)", expect_error=ScheduleError)
    assert err.function == "add_tir" and "sblock" in str(err) and "s_tir" in str(err), err
    assert demo.ir_mod.same_as(ir_mod)


# -- 6. tune ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_tune_finds_a_schedule_and_keeps_its_database(config_shell, tmp_path):
    shell = config_shell
    shell.run(f"%config TVMModuleMagics.cache_dir = {str(tmp_path / 'cache')!r}")
    shell.cell("demo", MM64)
    demo = shell.ns["demo"]
    original = demo.ir_mod["mm"]
    a, b = torch.randn(64, 64), torch.randn(64, 64)

    with capture_output() as shown:
        report = demo.tune("mm", trials=4)
    assert type(report).__name__ == "TuningReport" and report.function == "mm"
    started, ended = shown.outputs  # the progress line, then its text where tuning ended
    assert started.data["text/plain"] == "tuning mm: 0 of 4"
    assert ended.update and ended.data["text/plain"].startswith("tuning mm: 4 of 4 · best ")
    assert report.trials_run == 4 and report.trials_kept >= 4, report
    assert report.best_seconds is not None and report.best_seconds > 0, report
    assert report.work_dir.startswith(str(tmp_path / "cache" / OWN_DIR / "tuning")), report
    assert "4 trials measured now" in repr(report)
    assert any(Path(report.work_dir).iterdir())  # the database is on disk
    # the best candidate replaces the loops as written only if it is faster: timed in turns
    (row,) = report.rows
    assert row.after <= row.before, row
    changed = not tvm_ffi.structural_equal(demo.ir_mod["mm"], original)
    assert changed == (row.schedule == "tuned"), row
    assert torch.allclose(run_mm(demo, a, b), a @ b, atol=1e-4)

    start = time.perf_counter()
    again = demo.tune("mm", trials=4)
    assert time.perf_counter() - start < 5
    assert again.trials_run == 0 and again.trials_kept == report.trials_kept, again
    assert again.work_dir == report.work_dir
    assert torch.allclose(run_mm(demo, a, b), a @ b, atol=1e-4)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="cross-compiles from x86_64")
def test_tune_is_refused_before_it_starts_where_its_candidates_cannot_run_here():
    arm = LiveModule("board", target='{"kind": "llvm", "mtriple": "aarch64-linux-gnu"}')
    gpu = LiveModule("gpu", target="cuda", device="cuda")
    for live in (arm, gpu):
        live.run_cell(MM64 + RELAX_MATMUL)
    for live, fn in [(arm, "mm"), (arm, "rmm"), (gpu, "mm"), (gpu, "rmm")]:
        ir_mod, started = live.ir_mod, time.monotonic()
        with pytest.raises(ScheduleError) as caught:  # not 4 trials that all fail to run
            live.tune(fn, trials=4)
        assert time.monotonic() - started < 2 and live.ir_mod.same_as(ir_mod)
        message = str(caught.value)
        assert caught.value.function == fn and "on this machine's CPU" in message, message
        assert ("compiles for aarch64" if live is arm else "--target cuda") in message, message


# -- 7. CUDA without a GPU -------------------------------------------------------------------------
def test_a_cuda_kernel_without_thread_bindings_is_refused_until_dlight_schedules_it(shell):
    shell.cell("gpu", ADD_BLOCKS + MM64, options=CUDA)
    gpu = shell.ns["gpu"]
    for kernel in ("add_blocks", "mm"):
        with pytest.raises(CompileError) as caught:
            gpu.source(kernel)
        message = str(caught.value)
        assert caught.value.function == kernel and "no GPU thread bindings" in message
        assert f'schedule("{kernel}", "dlight")' in message, message

    for kernel in ("add_blocks", "mm"):
        gpu.schedule(kernel, "dlight")
        assert "T.thread_binding(" in gpu.ir_mod[kernel].script(), kernel
        source = gpu.source(kernel)
        assert "__global__" in source and "threadIdx" in source, kernel
    gpu.compile()  # everything compiles now


def test_a_cuda_modules_relax_function_lowers_and_generates_code(shell):
    shell.cell("gpu", MLP, options=CUDA)
    gpu = shell.ns["gpu"]
    kernels = gpu.kernels("mlp")
    assert kernels == ["fused_matmul_add_relu", "fused_matmul1_add1_relu1"]
    lowered = gpu.lowered("mlp")
    assert all(f"def {k}(" in lowered for k in kernels) and "T.thread_binding(" in lowered
    source = gpu.source("mlp")
    assert re.findall(r"^// kernel (\w+)$", source, re.MULTILINE) == kernels
    for kernel in kernels:
        assert re.search(rf"__global__ .*\b{kernel}_kernel\(", source), source[:2000]


@pytest.mark.skipif(not NO_GPU, reason="a GPU is here: TVM asks it and has nothing to say")
def test_a_cuda_module_keeps_tvms_cuda_version_warning_out_of_the_notebook(shell, capfd):
    """Without a GPU to ask, TVM warns from C++, at every CUDA target it makes, that it cannot
    detect the CUDA version (and takes sm_50): neither the cells nor the views of a CUDA module
    show it, while what else TVM writes to stderr meanwhile still shows."""
    tvm.target.Target("cuda")
    assert builder.NO_CUDA_VERSION in capfd.readouterr().err  # what TVM says by itself here

    shell.cell("gpu", MLP + MM64, options=CUDA)
    gpu = shell.ns["gpu"]
    gpu.schedule("mm", "dlight")
    assert "__global__" in gpu.source("mm") and "// kernel" in gpu.source("mlp")
    assert "T.launch_thread" in gpu.lowered("mm") and gpu.kernels("mlp")
    gpu.compile()
    said = capfd.readouterr()
    assert "CUDA version" not in said.err + said.out, said

    with native_stderr_without(builder.NO_CUDA_VERSION):
        os.write(2, f"[00:00:00] codegen.cc:1: Warning: {builder.NO_CUDA_VERSION}\n".encode())
        os.write(2, b"something else TVM says\n")
    assert capfd.readouterr().err == "something else TVM says\n"


@pytest.mark.skipif(not NO_GPU, reason="a GPU is here: the calls run (see the GPU test)")
def test_calling_a_cuda_module_without_a_gpu_is_a_call_error(shell):
    shell.cell("gpu", MLP + MM64, options=CUDA)
    gpu = shell.ns["gpu"]
    gpu.schedule("mm", "dlight")
    gpu.compile()
    with pytest.raises(CallError) as caught:
        gpu.mlp(*MLP_ARGS)
    assert caught.value.function == "mlp" and "cannot run" in str(caught.value), caught.value
    with pytest.raises(CallError) as caught:
        gpu.time("mlp", *MLP_ARGS, number=1, repeat=1)
    assert "cannot run" in str(caught.value)
    with pytest.raises(CallError) as caught:
        run_mm(gpu, torch.ones(64, 64), torch.ones(64, 64))
    assert caught.value.function == "mm" and "cuda" in str(caught.value), caught.value
    assert gpu.kernels("mlp") and "__global__" in gpu.source("mm")  # still there to look at


def test_the_advice_for_a_cuda_kernel_without_blocks_is_advice_that_works(shell):
    shell.cell("gpu", ADD_TIR, options=CUDA)
    gpu = shell.ns["gpu"]
    with pytest.raises(CompileError) as caught:
        gpu.compile()
    message = str(caught.value)
    assert "no GPU thread bindings" in message and "@T.prim_func(s_tir=True)" in message
    with pytest.raises(ScheduleError) as refused:  # DLight cannot help a kernel without blocks
        gpu.schedule("add_tir", "dlight")
    assert "T.sblock" in str(refused.value)


@pytest.mark.skipif(NO_GPU, reason="needs a CUDA GPU (tvm.cuda(0).exist is False here)")
def test_dlight_scheduled_kernels_and_a_relax_mlp_run_on_the_gpu(shell):
    if not torch.cuda.is_available():
        pytest.skip("a CUDA GPU is here, but this torch build has no CUDA")
    shell.cell("gpu", MLP + MM64, options=CUDA)
    gpu = shell.ns["gpu"]
    gpu.schedule("mm", "dlight")
    a, b = torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")
    out = torch.empty(64, 64, device="cuda")
    gpu.mm(a, b, out)
    assert torch.allclose(out, a @ b, atol=1e-3)
    args = [t.cuda() for t in MLP_ARGS]
    assert torch.allclose(gpu.mlp(*args), mlp_reference(*args), atol=1e-4)
    samples_sane(gpu.time("mm", a, b, out, number=2, repeat=2))
