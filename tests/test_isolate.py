"""`--isolate`: imports and compiles run in the build worker, and a crash there is an error that
names the function, the stage and the signal, while the kernel and the module keep working.

Each crash here would end this process without --isolate: LLVM's fatal error on an AVX2
intrinsic built for plain x86-64 (real, TVM 0.27), a pass of the test's own that aborts
(a Python `module_pass` in a registered pipeline), and an importer converter that aborts
(TVM's `custom_convert_map`). The worker is the process's shared one: it starts once, and
again after each crash.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch
import tvm
from cells import LLVM_ABORTS_IN_CODEGEN as PMADD
from cells import elementwise_kernel
from IPython.core.error import UsageError
from tvm import relax

from tvm_pyfunc_nb import CompileError, LiveModule, ModelImportError, TVMModuleError, testing
from tvm_pyfunc_nb._core.build.disk_cache import CompileCache
from tvm_pyfunc_nb._core.build.worker.process import shared_worker

GENERIC_X86 = '{"kind": "llvm", "mcpu": "x86-64"}'
PIPELINE = "aborts_in_a_pass"

MLP = """
@R.function
def mlp(
    x: R.Tensor((8, 16), "float32"), w: R.Tensor((16, 4), "float32")
) -> R.Tensor((8, 4), "float32"):
    h = R.matmul(x, w)
    return R.nn.relu(h)
"""

DOUBLE = """
@I.pyfunc
def double(self, x):
    return x * 2
"""


def _aborting_pipeline():
    """A pipeline whose first pass aborts the process. A user adds a pass of their own the same
    way: a `tvm.transform.module_pass` made inside the pipeline function, registered with
    `relax.register_pipeline`, named with `--pipeline`."""

    @tvm.transform.module_pass(opt_level=0, name="AbortingPass")
    def aborting(mod, ctx):
        os.abort()

    return aborting


@pytest.fixture(scope="module")
def worker():
    """The shared worker, started now (it imports TVM and PyTorch while the first test runs its
    cells), and the pipeline with the aborting pass."""
    relax.register_pipeline(PIPELINE)(_aborting_pipeline)
    started = shared_worker()
    started.start()
    return started


def _crashed(error: Exception, function: str, stage: str) -> None:
    text = str(error)
    assert error.function == function, text
    assert f"TVM crashed in {stage}" in text, text
    assert "killed by SIGABRT" in text, text
    assert "the module is as it was" in text, text


def test_llvm_aborting_in_codegen_is_a_compile_error_and_the_module_keeps_working(shell, worker):
    plus = elementwise_kernel("plus", "A[i] + B[i]")
    shell.cell("demo", plus, options=f"--isolate --target '{GENERIC_X86}'")
    a, b, c = torch.arange(8.0), torch.ones(8), torch.zeros(8)
    shell.ns.update(a=a, b=b, c=c, torch=torch)
    shell.run("demo.plus(a, b, c)")  # built first, so that `pmadd` is built (and crashes) alone
    assert torch.equal(c, a + b)
    assert "addps" in shell.eval('demo.source("plus", "asm")')  # read from a build here
    assert "def plus(" in shell.eval('demo.lowered("plus")')
    shell.cell("demo", PMADD)
    pmadd = "demo.pmadd(torch.zeros(4, 16, dtype=torch.int16), torch.zeros(4, 8).int())"
    error = shell.run(pmadd, expect_error=CompileError)
    _crashed(error, "pmadd", "codegen")
    assert "LLVM ERROR: Do not know how to split" in str(error)
    assert 'demo.bisect("pmadd", *args)' in str(error)
    assert error.line == 3  # the cell line of `def pmadd`
    assert "pmadd" in str(error) and "plus" not in str(error)
    c.zero_()
    shell.run("demo.plus(a, b, c)")
    assert torch.equal(c, a + b)

    # a cell that compiles at once (--eager) and crashes fails, and changes nothing
    broken = PMADD.replace("def pmadd", "def plus")
    shell.cell("demo", broken, options="--eager", expect_error=CompileError)
    c.zero_()
    shell.run("demo.plus(a, b, c)")
    assert torch.equal(c, a + b)
    assert worker.pid is not None


def test_a_pass_that_aborts_is_a_compile_error_naming_the_pass(shell, worker):
    shell.cell("demo", MLP + DOUBLE, options=f"--isolate --pipeline {PIPELINE}")
    shell.ns.update(x=torch.ones(8, 16), torch=torch)
    error = shell.run("demo.mlp(x, torch.ones(16, 4))", expect_error=CompileError)
    _crashed(error, "mlp", "pipeline pass AbortingPass")
    assert torch.equal(shell.eval("demo.double(x)"), 2 * torch.ones(8, 16))


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) + 1


def _aborting_converter(node, importer):
    os.abort()


def test_an_import_that_crashes_is_a_model_import_error_and_changes_nothing(shell, worker):
    shell.cell("demo", DOUBLE, options="--isolate")
    shell.ns.update(Model=Model, boom=_aborting_converter, x=torch.randn(4))
    add = 'demo.add_torch(Model(), (x,), custom_convert_map={"relu.default": boom})'
    error = shell.run(add, expect_error=ModelImportError)
    _crashed(error, "main", "import")
    assert "bisect" not in str(error)  # no pass to find: the importer itself crashed
    assert "Model (add_torch)" in str(error)
    assert shell.eval("demo.ir_mod").get_global_vars()[0].name_hint == "double"
    shell.run("demo.add_torch(Model(), (x,))")  # the same model imports without the converter
    assert torch.allclose(shell.eval("demo.main(x)"), torch.relu(shell.ns["x"]) + 1)


def test_an_isolated_compile_gives_what_the_default_gives(shell, worker):
    x, w = torch.randn(8, 16), torch.randn(16, 4)
    shell.ns.update(x=x, w=w)
    shell.cell("here", MLP)
    shell.run("%config TVMModuleMagics.isolate = True")
    try:
        shell.cell("there", MLP)  # isolated by %config
        assert shell.eval("there.options.isolate") and not shell.eval("here.options.isolate")
        there, here = shell.eval("there.mlp(x, w)"), shell.eval("here.mlp(x, w)")
        assert torch.allclose(there, here, rtol=1e-5, atol=1e-6)
        assert torch.allclose(there, torch.relu(x @ w), rtol=1e-4, atol=1e-4)
        compiled = {c.kind for c in shell.eval("there.stats").compiles}
        assert compiled == {"tir", "vm"}
    finally:
        shell.run("%config TVMModuleMagics.isolate = False")


def test_the_compile_cache_keeps_what_the_worker_built(tmp_path, worker):
    """The worker's library goes to the disk cache as its file's bytes (no second codegen), and
    serves modules with and without --isolate."""
    cache = CompileCache(tmp_path)
    plus = elementwise_kernel("plus", "A[i] + B[i]")
    a, b = torch.arange(8.0), torch.ones(8)
    for name, isolated in [("first", True), ("second", True), ("third", False)]:
        live = LiveModule(name, isolate=isolated, persistent_cache=cache)
        live.run_cell(plus)
        c = torch.zeros(8)
        live.plus(a, b, c)
        assert torch.equal(c, a + b)
        cache.flush()
        assert live.stats.served["disk"]["plus"] == (name != "first"), name
        live.close()


def test_bad_isolate_options_change_nothing(shell, worker):
    shell.cell("demo", DOUBLE)
    shell.cell("demo", DOUBLE, options="--isolate yes", expect_error=UsageError)
    error = shell.cell("demo", DOUBLE, options="--isolate", expect_error=TVMModuleError)
    assert "add --reset" in str(error)
    error = shell.cell(
        "other", DOUBLE, options="--isolate --rpc 127.0.0.1:1", expect_error=TVMModuleError
    )
    assert "--isolate" in str(error) and "other" not in shell.ns
    shell.run("%config TVMModuleMagics.isolate = 'yes'")  # IPython says why, and keeps it
    # ... in the shell's config, where the next load of the extension would meet it again
    shell.ip.config.TVMModuleMagics.pop("isolate")
    assert shell.magics.isolate is False
    assert not shell.eval("demo.options.isolate")


# -- the same build, elsewhere ------------------------------------------------------------------
class WithWeights(torch.nn.Module):
    """Parameters (the linear layers') and buffers (batch norm's running statistics)."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.norm = torch.nn.BatchNorm1d(16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.norm(self.fc1(x))))


def test_a_model_with_weights_and_buffers_imports_as_without_isolate(worker):
    """torch.export.save wants parameters as `nn.Parameter`s; the import's copies of the
    weights were plain tensors, and every model with a `Linear` failed to reach the worker."""
    torch.manual_seed(0)
    model, x = WithWeights().eval(), torch.randn(3, 8)
    model.norm.running_mean.uniform_(-1, 1)
    model.norm.running_var.uniform_(0.5, 2)
    isolated = LiveModule("isolated", isolate=True)
    isolated.add_torch(model, (x,))
    with torch.no_grad():
        expected = model(x)
    assert torch.allclose(isolated.main(x), expected, rtol=1e-5, atol=1e-5)
    assert sorted(isolated.consts)[:2] == ["fc1_bias", "fc1_weight"]
    isolated.close()


SUM = """
@R.function
def plus(x: R.Tensor((4,), "float32"), y: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
    return R.add(x, y)
"""


@pytest.fixture(scope="module")
def add_becomes_subtract():
    from tvm.relax.pipeline import PIPELINE_MAP

    relax.register_pipeline("add_becomes_subtract")(testing.add_becomes_subtract)
    yield "add_becomes_subtract"
    PIPELINE_MAP.pop("add_becomes_subtract")


def test_the_worker_builds_in_the_callers_pass_context(worker, add_becomes_subtract):
    """Its disabled passes, its config: a call gives what it gives without --isolate."""
    ones = torch.ones(4)
    modules = {
        isolate: LiveModule(f"m{isolate}", isolate=isolate, pipeline=add_becomes_subtract)
        for isolate in (False, True)
    }
    for live in modules.values():
        live.run_cell(SUM)
    with tvm.transform.PassContext(disabled_pass=["AddBecomesSubtract"]):
        assert [live.plus(ones, ones).tolist() for live in modules.values()] == [[2.0] * 4] * 2
    for live in modules.values():
        live.recompile()  # outside the context, the pass is on again
    assert [live.plus(ones, ones).tolist() for live in modules.values()] == [[0.0] * 4] * 2

    fused = {}
    for isolate in (False, True):
        live = LiveModule(f"f{isolate}", isolate=isolate)
        live.run_cell(MLP)
        with tvm.transform.PassContext(config={"relax.FuseOps.max_depth": 1}):
            fused[isolate] = list(live.kernels("mlp"))
        live.close()
    assert fused[True] == fused[False] and len(fused[True]) == 2, fused  # matmul, relu: apart
    for live in modules.values():
        live.close()


def test_instruments_that_cannot_reach_the_worker_are_refused_and_nothing_is_remembered(worker):
    live = LiveModule("instrumented", isolate=True)
    live.run_cell(MLP)
    x, w = torch.randn(8, 16), torch.randn(16, 4)
    timing = tvm.ir.instrument.PassTimingInstrument()
    with (
        tvm.transform.PassContext(instruments=[timing]),
        pytest.raises(CompileError, match=r"instruments \(PassTimingInstrument\)") as raised,
    ):
        live.mlp(x, w)
    assert raised.value.function == "mlp" and "without --isolate" in str(raised.value)
    assert torch.allclose(live.mlp(x, w), torch.relu(x @ w), rtol=1e-4, atol=1e-4)
    live.close()


# -- a worker's death is never the function's fault ----------------------------------------
def _dies_once(marker: str):
    """A pipeline whose first pass kills the process that runs it (SIGKILL, as the kernel's
    out-of-memory killer does) if `marker` exists, removing it: the next build goes through."""

    @tvm.transform.module_pass(opt_level=0, name="DiesOnce")
    def dies_once(mod, ctx):
        if os.path.exists(marker):
            os.remove(marker)
            os.kill(os.getpid(), signal.SIGKILL)
        return mod

    return tvm.transform.Sequential([dies_once, relax.get_pipeline("default")])


def test_a_worker_killed_while_it_lowers_is_not_the_functions_fault(tmp_path, worker):
    from tvm.relax.pipeline import PIPELINE_MAP

    marker = tmp_path / "die"
    relax.register_pipeline("dies_once")(lambda: _dies_once(str(marker)))
    try:
        live = LiveModule("killed", isolate=True, pipeline="dies_once")
        live.run_cell(MLP)
        x, w = torch.randn(8, 16), torch.randn(16, 4)
        marker.touch()
        with pytest.raises(CompileError, match="killed by SIGKILL") as raised:
            live.mlp(x, w)
        assert raised.value.function == "mlp" and not marker.exists()
        assert torch.allclose(live.mlp(x, w), torch.relu(x @ w), rtol=1e-4, atol=1e-4)
        live.close()
    finally:
        PIPELINE_MAP.pop("dies_once")


def test_a_worker_killed_while_it_builds_a_kernel_is_not_the_kernels_fault(worker):
    """The worker is stopped, the kernel's build sent to it, and then it is killed (SIGKILL,
    as by the out-of-memory killer): the call fails, and the next one builds again."""
    live = LiveModule("killed", isolate=True)
    live.run_cell(elementwise_kernel("plus", "A[i] + B[i]"))
    a, b, c = torch.arange(8.0), torch.ones(8), torch.zeros(8)
    worker.run(functools.partial(sum, [1]))  # ready
    os.kill(worker.pid, signal.SIGSTOP)
    failed: list[BaseException] = []

    def call() -> None:
        try:
            live.plus(a, b, c)
        except CompileError as err:
            failed.append(err)

    caller = threading.Thread(target=call)
    caller.start()
    while not _waiting_for_the_worker(caller):  # the job is sent: the worker has it
        assert caller.is_alive()
        time.sleep(0.01)
    os.kill(worker.pid, signal.SIGKILL)
    caller.join(60)
    assert len(failed) == 1 and "killed by SIGKILL" in str(failed[0]), failed
    live.plus(a, b, c)
    assert torch.equal(c, a + b)
    live.close()


def _waiting_for_the_worker(thread: threading.Thread) -> bool:
    frame = sys._current_frames().get(thread.ident)
    while frame is not None:
        if frame.f_code.co_name == "_receive":
            return True
        frame = frame.f_back
    return False


EXPORTS_PMADD = """
import sys
import tvm
from tvm_pyfunc_nb import CompileError, LiveModule

live = LiveModule("demo", isolate=True, target='{"kind": "llvm", "mcpu": "x86-64"}')
live.run_cell(sys.argv[1])
try:
    live.export_library(sys.argv[2])
except CompileError as err:
    print("CompileError:", err)
"""


def test_export_library_builds_in_the_worker_too(tmp_path, worker):
    """What `export_library` writes is built and linked in the worker with --isolate (a
    library loaded from a file cannot be linked into one that is written, so it all happens
    there): LLVM's fatal error there is an error, in a process that lives on. Before, it was
    built in the process that exports, and ended it (run apart here, for that reason)."""
    path = tmp_path / "lib.so"
    done = subprocess.run(
        [sys.executable, "-c", EXPORTS_PMADD, PMADD, str(path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "CompileError: `pmadd`" in done.stdout and "TVM crashed in codegen" in done.stdout
    assert not path.exists()

    live = LiveModule("exported", isolate=True)
    live.run_cell(elementwise_kernel("plus", "A[i] + B[i]") + MLP)
    written = live.export_library(str(tmp_path / "ok.so"))
    lib = tvm.runtime.load_module(written.path)
    vm = relax.VirtualMachine(lib, tvm.cpu())
    x, w = torch.randn(8, 16), torch.randn(16, 4)
    out = torch.from_dlpack(vm["mlp"](tvm.runtime.tensor(x.numpy()), tvm.runtime.tensor(w.numpy())))
    assert torch.allclose(out, torch.relu(x @ w), rtol=1e-4, atol=1e-4)
    assert written.kernels == ["plus"]
    live.close()
