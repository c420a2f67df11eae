"""The core's parts on their own, without IPython or a widget: assembly, compiler, call table.

These are what a live module is made of; the shell tests go through the
magics as a user does, and these check each part's own promise directly.
"""

from __future__ import annotations

import inspect

import pytest
import torch
import tvm

from tvm_pyfunc_nb import CompileError, IllFormedModuleError
from tvm_pyfunc_nb._core.build.build import Build
from tvm_pyfunc_nb._core.build.compiler import Compiler
from tvm_pyfunc_nb._core.build.stats import CompileStats
from tvm_pyfunc_nb._core.live.assembly import Assembly
from tvm_pyfunc_nb._core.live.cells import split_cell
from tvm_pyfunc_nb._core.live.contributions import from_cell, owners
from tvm_pyfunc_nb._core.options import ModuleOptions
from tvm_pyfunc_nb._core.run.call_table import CallRecord, CallTable, call_record
from tvm_pyfunc_nb._core.run.trampolines import PyFuncBridge

ADD_ONE = """
@T.prim_func
def add_one(a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32")):
    for i in range(4):
        b[i] = a[i] + T.float32(1)
"""

TWICE = """
@R.function
def twice(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
    cls = m
    y = R.call_tir(cls.add_one, (x,), out_ty=R.Tensor((4,), "float32"))
    return R.add(y, y)
"""

BOOL_EQUAL = """
@R.function
def broken(x: R.Tensor((4,), "bool")) -> R.Tensor((4,), "bool"):
    return R.equal(R.cumsum(x, axis=0), x)
"""

CALLS_PYTHON = """
@R.function
def calls_python(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
    y = R.call_py_func("helper", x, out_ty=R.Tensor((4,), "float32"))
    return y
"""


def contribution(assembly: Assembly, text: str, key: str):
    """What a cell run of `text` (as cell `key`) brings to `assembly`'s module."""
    others = owners(c for k, c in assembly.state.contributions.items() if k != key)
    fragment = split_cell(text, key)
    return from_cell(
        fragment,
        run=1,
        filename=f"<core {key}>",
        origin=key,
        module_name="m",
        others=others,
        namespace={},
    )


def committed(assembly: Assembly, text: str, key: str):
    proposal = assembly.propose(contribution(assembly, text, key))
    assembly.commit(proposal)
    return proposal


@pytest.fixture
def parts():
    stats = CompileStats()
    assembly = Assembly("m")
    calls = CallTable(stats, {})
    compiler = Compiler(Build(ModuleOptions(), stats, module_name="m"), PyFuncBridge(calls, "m"))
    yield assembly, compiler, calls
    compiler.bridge.close()


def test_an_assembly_commits_a_checked_module_and_refuses_an_ill_formed_one():
    assembly = Assembly("m", relax_may_call_python=False)  # as for a remote device
    committed(assembly, ADD_ONE, "kernel")
    before = assembly.state
    assert before.functions == {"add_one": "tir"}
    with pytest.raises(IllFormedModuleError, match="remote device") as raised:
        assembly.propose(contribution(assembly, CALLS_PYTHON, "relax"))
    assert raised.value.function == "calls_python"
    assert assembly.state is before  # nothing proposed was committed


def test_a_proposal_changes_nothing_until_it_is_committed(parts):
    assembly, _, _ = parts
    committed(assembly, ADD_ONE, "kernel")
    proposal = assembly.propose(contribution(assembly, TWICE, "relax"))
    assert "twice" not in assembly.state.functions
    assembly.commit(proposal)
    assert assembly.state.functions == {"add_one": "tir", "twice": "relax"}
    assembly.commit(assembly.propose(drop=["relax"]))
    assert assembly.state.functions == {"add_one": "tir"}


def test_the_compiler_knows_which_version_is_compiled(parts):
    assembly, compiler, _ = parts
    committed(assembly, ADD_ONE + TWICE, "cell")
    state = assembly.state
    assert compiler.is_stale(state)
    compiled = compiler.compile(state)
    assert {r.kind for r in compiled} == {"tir", "vm"}
    assert not compiler.is_stale(state)
    assert compiler.compile(state) == []  # nothing changed: nothing compiles
    committed(assembly, ADD_ONE.replace("T.float32(1)", "T.float32(2)"), "cell2")
    assert compiler.is_stale(assembly.state) and not compiler.is_stale(state)


def test_a_called_kernel_leaves_the_module_compiled_when_nothing_else_needs_compiling(parts):
    """Calling a PrimFunc builds the module's PrimFuncs: without a Relax function, nothing is
    left for the next call to compile, and the module is no longer stale (`%tvmmodules` listed a
    module as stale right after its one kernel ran)."""
    assembly, compiler, _ = parts
    committed(assembly, ADD_ONE, "kernel")
    state = assembly.state
    compiler.kernel(state, state.entries["add_one"])
    assert not compiler.is_stale(state)
    committed(assembly, TWICE, "relax")  # a VM to link: a kernel's call does not link it
    compiler.kernel(assembly.state, assembly.state.entries["add_one"])
    assert compiler.is_stale(assembly.state)
    compiler.relax_function(assembly.state, "twice")
    assert not compiler.is_stale(assembly.state)


def test_the_compiler_runs_the_current_version(parts):
    assembly, compiler, _ = parts
    committed(assembly, ADD_ONE + TWICE, "cell")
    linked = compiler.relax_function(assembly.state, "twice")
    out = linked.vm(tvm.cpu())["twice"](torch.zeros(4))
    assert torch.equal(torch.from_dlpack(out), torch.full((4,), 2.0))
    assert compiler.linked(assembly.state)[0] is linked  # kept for this version


def test_the_compiler_isolates_the_relax_function_that_does_not_compile(parts):
    assembly, compiler, _ = parts
    committed(assembly, ADD_ONE + TWICE + BOOL_EQUAL, "cell")
    linked, failures = compiler.linked(assembly.state)
    assert set(failures) == {"broken"} and isinstance(failures["broken"], CompileError)
    assert linked is not None  # `twice` still runs
    with pytest.raises(CompileError):
        compiler.relax_function(assembly.state, "broken")


def test_an_eager_check_that_fails_leaves_the_compiled_version_alone(parts):
    assembly, compiler, _ = parts
    committed(assembly, ADD_ONE + TWICE, "cell")
    compiler.compile(assembly.state)
    good = assembly.state
    proposal = assembly.propose(contribution(assembly, BOOL_EQUAL, "bad"))
    with pytest.raises(CompileError):
        compiler.check(proposal.state)
    assert not compiler.is_stale(good)


def test_a_call_record_is_made_with_the_fields_and_defaults_of_callrecord():
    params = inspect.signature(call_record).parameters
    assert tuple(params) == CallRecord._fields
    assert {k: p.default for k, p in params.items() if p.default is not p.empty} == (
        CallRecord._field_defaults
    )
    assert CallRecord._make(call_record(*CallRecord._fields)) == CallRecord(*CallRecord._fields)


def test_the_call_table_resolves_once_and_lets_go_on_a_change():
    published, resolved = {}, []

    def resolver(name):
        resolved.append(name)
        return lambda *args: (name, args)

    table = CallTable(CompileStats(), published, frozenset({"reserved"}))
    table.resolver = resolver
    assert table.handle("f")(1) == ("f", (1,))
    assert table.handle("f") is published["f"]  # kept and published: a plain attribute
    assert resolved == ["f"]
    table.handle("reserved")
    assert "reserved" not in published  # the owner's own name is never shadowed
    version = table.version
    table.records["f"] = table.records["g"] = call_record((), None, 0.0, 0.0)
    table.changed(redefined=("f",), remaining={"f": None})
    assert table.version == version + 1 and not published and not table.handles
    assert "f" not in table.records and "g" not in table.records  # redefined, gone
    table.handle("f")
    assert resolved == ["f", "reserved", "f"]  # asked again after the change
