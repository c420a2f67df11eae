"""Code is built only for a CPU whose instruction sets this machine has, and for its operating
system (SPEC "Nothing lost, nothing planted"): otherwise the cell is refused, saying what is
missing, before anything runs.

The cells run in a fresh Python of their own: before, `mcpu: bdver1` (AMD's FMA4 and XOP, which
no Intel CPU has) stopped the process with SIGILL at the first call, with and without
--isolate, and a Windows triple crashed LLVM's JIT with SIGSEGV.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import tvm

from tvm_pyfunc_nb._core.build.target_text import why_not_here
from tvm_pyfunc_nb._core.options import ModuleOptions, check_target_runs_on

AMD_ONLY = '{"kind": "llvm", "mcpu": "bdver1"}'
HAS_AMD_ONLY = "xop" not in (why_not_here(tvm.target.Target(AMD_ONLY)) or "")
WINDOWS = "llvm -mtriple=x86_64-pc-windows-msvc"
CASES = {
    f"{target} {isolate}": f"--reset --target '{target}' {isolate}"
    for target in (AMD_ONLY, WINDOWS)
    for isolate in ("", "--isolate")
}
PLUS = """
@T.prim_func
def plus(a: T.Buffer((8,), "float32"), b: T.Buffer((8,), "float32")):
    for i in range(8):
        b[i] = a[i] + {0}
"""
# Each case's cell would replace the function of a module that works; then the module is called
CELLS = f"""
import torch
from tvm_pyfunc_nb.errors import TVMModuleError
from tvm_pyfunc_nb.testing import NotebookShell

shell = NotebookShell()
shell.cell("kept", {PLUS.format("1.0")!r})
for case, options in {CASES!r}.items():
    error = shell.cell("kept", {PLUS.format("2.0")!r}, options=options, expect_error=TVMModuleError)
    a, b = torch.ones(8), torch.zeros(8)
    shell.ns["kept"].plus(a, b)
    print(case, "->", error, "| kept:", b.tolist() == [2.0] * 8, flush=True)
"""


@pytest.fixture(scope="module")
def said() -> dict[str, str]:
    """What each case printed, all run in one Python of their own (which must not crash)."""
    done = subprocess.run(
        [sys.executable, "-c", CELLS], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr[-2000:])
    return dict(line.split(" -> ", 1) for line in done.stdout.splitlines() if " -> " in line)


@pytest.mark.skipif(HAS_AMD_ONLY, reason="this CPU has AMD's FMA4 and XOP")
@pytest.mark.parametrize("isolate", ["", "--isolate"])
def test_a_cpu_with_instruction_sets_this_one_lacks_is_refused_naming_them(said, isolate):
    text = said[f"{AMD_ONLY} {isolate}"]
    assert "cannot run on this machine: it makes code for a CPU with fma4, lwp, sse4a, xop" in text
    assert "--rpc HOST:PORT" in text
    assert text.endswith("| kept: True")  # the module is as it was, and runs


@pytest.mark.parametrize("isolate", ["", "--isolate"])
def test_code_for_another_operating_system_is_refused(said, isolate):
    text = said[f"{WINDOWS} {isolate}"]
    assert "it makes code for windows, which this linux process cannot load" in text
    assert text.endswith("| kept: True")


def test_what_this_cpu_runs_is_not_refused_and_a_remote_target_is_left_to_its_machine():
    here = tvm.target.Target({"kind": "llvm", "mcpu": "x86-64"})
    assert why_not_here(here) is None
    assert why_not_here(tvm.target.Target({"kind": "llvm", "mtriple": "aarch64-linux-gnu"})) is None
    remote = ModuleOptions(target=AMD_ONLY, rpc="127.0.0.1:9090")
    check_target_runs_on(tvm.target.Target(AMD_ONLY), remote, tvm.cpu())  # meant for there
