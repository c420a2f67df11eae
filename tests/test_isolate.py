"""`--isolate`: imports and compiles run in the build worker, and a crash there is an error that
names the function, the stage and the signal, while the kernel and the module keep working.

Each crash here would end this process without --isolate: LLVM's fatal error on an AVX2
intrinsic built for plain x86-64 (real, TVM 0.27), a pass of the test's own that aborts
(a Python `module_pass` in a registered pipeline), and an importer converter that aborts
(TVM's `custom_convert_map`). The worker is the process's shared one: it starts once, and
again after each crash.
"""

from __future__ import annotations

import os

import pytest
import torch
import tvm
from cells import LLVM_ABORTS_IN_CODEGEN as PMADD
from cells import elementwise_kernel
from IPython.core.error import UsageError
from tvm import relax

from tvm_pyfunc_nb import CompileError, LiveModule, ModelImportError, TVMModuleError
from tvm_pyfunc_nb._core.build.disk_cache import CompileCache
from tvm_pyfunc_nb._core.build.worker import shared_worker

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
