"""Every suggestion an error makes can be followed (SPEC "Verdicts you can trust"): each hint
the package's errors print ("X finds ...", "use X", "give X", "add X", "register it and call
again", "did you mean X") is triggered here, then followed as a user would, in a real shell.

The first: an isolated crash in a PrimFunc's build ends with `demo.bisect("pmadd", *args) finds
the pass at fault`, and bisect refused a PrimFunc ("bisect needs a Relax function"). Now bisect
takes one: it bisects the TIR passes of its build, crashes included.
"""

from __future__ import annotations

import pytest
import torch
import tvm
import tvm_ffi
from cells import LLVM_ABORTS_IN_CODEGEN

from tvm_pyfunc_nb import CallError, CompileError, TVMModuleError
from tvm_pyfunc_nb.errors import FileWriteError

GENERIC_X86 = '{"kind": "llvm", "mcpu": "x86-64"}'  # no AVX2: `pmadd` aborts LLVM
PLUS = """
@T.prim_func
def plus(a: T.Buffer((8,), "float32"), b: T.Buffer((8,), "float32"), c: T.Buffer((8,), "float32")):
    for i in range(8):
        c[i] = a[i] + b[i]
"""
PMADD_ARGS = "torch.zeros(4, 16, dtype=torch.int16), torch.zeros(4, 8).int()"


def hint_of(error: BaseException, start: str) -> str:
    """The code a message suggests: from `start` to the end of its sentence."""
    text = str(error)
    at = text.index(start)
    return text[at:].split(" finds ")[0].split(" shows ")[0].rstrip(".; ")


def test_a_crash_in_a_primfuncs_isolated_build_suggests_a_bisect_that_answers(shell):
    shell.ns["torch"] = torch
    shell.cell("demo", LLVM_ABORTS_IN_CODEGEN + PLUS, options=f"--isolate --target '{GENERIC_X86}'")
    error = shell.run(f"demo.pmadd({PMADD_ARGS})", expect_error=CompileError)
    suggested = hint_of(error, "demo.bisect(")
    assert suggested == 'demo.bisect("pmadd", *args)'
    result = shell.run(suggested.replace("*args", PMADD_ARGS))  # followed
    assert result.culprit is None and result.outcome == "crashed"
    assert result.crash.signal == "SIGABRT" and result.crash.stage == "codegen"
    assert result.verdict().startswith(
        "pmadd's build crashes in LLVM's code generation also with every optional pass off, so "
        "no optional pass is at fault"
    )
    assert "LLVM ERROR: Do not know how to split" in result.crash.output
    with pytest.raises(CallError, match="found no pass at fault"):
        result.save("unused.py")


def test_bisect_takes_a_primfunc_and_goes_through_the_passes_of_its_tir_build(shell):
    shell.cell("demo", PLUS)
    a, b = torch.arange(8.0), torch.ones(8)
    result = shell.ns["demo"].bisect("plus", a, b, torch.zeros(8))
    assert result.culprit is None, repr(result)
    assert result.verdict() == "plus gives the reference's numbers with every pass on"
    assert result.passes and all(p.phase == "tir" for p in result.passes)
    assert "tirx.MakePackedAPI" in result.needed
    # a reference writes into its arguments as the PrimFunc does: one that adds wrongly differs
    wrong = shell.ns["demo"].bisect(
        "plus", a, b, torch.zeros(8), reference=lambda a, b, c: c.copy_(a - b)
    )
    assert wrong.culprit is None and wrong.outcome == "differs"
    assert "already with every optional pass off" in wrong.verdict()
    with pytest.raises(CallError, match="bisect needs a Relax function or a PrimFunc"):
        shell.ns["demo"].add_python_function("double", lambda t: t * 2)
        shell.ns["demo"].bisect("double", a)


def test_code_for_another_architecture_suggests_reading_its_assembly(shell):
    shell.cell("arm", PLUS, options="--target 'llvm -mtriple=aarch64-linux-gnu'")
    a = torch.ones(8)
    with pytest.raises(CompileError, match="run it there with --rpc HOST:PORT") as raised:
        shell.ns["arm"].plus(a, a, a)
    suggested = hint_of(raised.value, "`arm.source(").strip("`")
    assert suggested == "arm.source('plus', 'asm')"
    assert "fadd" in shell.eval(suggested)  # AArch64's floating-point add


def test_other_options_for_a_module_suggest_reset_and_a_foreign_cpu_suggests_one_that_runs(
    shell,
):
    shell.cell("demo", PLUS)
    error = shell.cell("demo", PLUS, options="--unchecked", expect_error=TVMModuleError)
    assert "add --reset to start it again with other options" in str(error)
    shell.cell("demo", PLUS, options="--reset --unchecked")  # followed
    assert shell.ns["demo"].options.checked is False
    amd = '{"kind": "llvm", "mcpu": "bdver1"}'
    error = shell.cell("demo", PLUS, options=f"--reset --target '{amd}'", expect_error=Exception)
    if "cannot run on this machine" in str(error):  # an Intel CPU: no FMA4 and XOP
        assert '{"kind": "llvm", "mcpu": "x86-64-v2"}' in str(error)
        shell.cell("demo", PLUS, options='--reset --target \'{"kind":"llvm","mcpu":"x86-64-v2"}\'')
        a, c = torch.ones(8), torch.zeros(8)
        shell.ns["demo"].plus(a, a, c)
        assert torch.equal(c, 2 * a)


@pytest.mark.parametrize(
    ("target", "meant"),
    [("llvm -mcpuu=haswell", "-mcpu"), ("llvm -mcpu=haswel", "haswell")],
)
def test_a_misspelt_target_suggests_the_word_it_meant(shell, target, meant):
    error = shell.cell("demo", PLUS, options=f"--target '{target}'", expect_error=TVMModuleError)
    assert f"did you mean {meant}?" in str(error)
    shell.cell("demo", PLUS, options="--target 'llvm -mcpu=haswell'")  # followed
    assert "haswell" in str(shell.ns["demo"].options.target)


def test_a_function_without_a_name_suggests_giving_one(shell):
    shell.cell("demo", PLUS)
    demo = shell.ns["demo"]
    with pytest.raises(CallError, match="give one with name=") as raised:
        demo.add(lambda x: x + 1)
    assert "name=..." in str(raised.value)
    demo.add(lambda x: x + 1, name="inc")  # followed
    assert torch.equal(demo.inc(torch.ones(2)), torch.full((2,), 2.0))


CALLS_LATER = """
@R.function
def uses(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
    y = R.call_py_func("later", (x,), out_ty=R.Tensor((4,), "float32"))
    return y

@R.function
def packed(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
    y = R.call_dps_packed("test_hints.not_yet", (x,), out_sinfo=R.Tensor((4,), "float32"))
    return y
"""


def test_a_function_defined_or_registered_later_suggests_doing_so_and_calling_again(shell):
    shell.cell("demo", CALLS_LATER)
    demo, x = shell.ns["demo"], torch.ones(4)
    with pytest.raises(CallError, match="add_python_function, then call again"):
        demo.uses(x)
    compiles = len(demo.stats.compiles)
    demo.add_python_function("later", lambda t: t * 3)  # followed
    assert torch.equal(demo.uses(x), 3 * x)
    assert len(demo.stats.compiles) == compiles  # "nothing needs recompiling"
    with pytest.raises(CallError, match=r"register it \(e.g. with tvm.register_global_func\)"):
        demo.packed(x)

    def not_yet(inp, out):
        out.copyfrom(inp.numpy() * 5)

    tvm.register_global_func("test_hints.not_yet", not_yet, override=True)  # followed
    try:
        assert torch.equal(demo.packed(x), 5 * x)
    finally:
        tvm_ffi.remove_global_func("test_hints.not_yet")


def test_a_symbolic_link_at_the_destination_suggests_another_path(shell, tmp_path):
    shell.cell("demo", PLUS)
    (tmp_path / "link.py").symlink_to(tmp_path / "target.txt")
    with pytest.raises(FileWriteError, match="choose another path"):
        shell.ns["demo"].export(str(tmp_path / "link.py"))
    shell.ns["demo"].export(str(tmp_path / "other.py"))  # followed
    assert "def plus(" in (tmp_path / "other.py").read_text()
