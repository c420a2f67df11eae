"""Leaving the notebook, asked directly of the module's parts (no shell): a Python file that
needs nothing of this package and loads back, and a library a deployment loads with plain TVM,
without the functions that call Python."""

from __future__ import annotations

import ast
import runpy
from pathlib import Path

import pytest
import torch
import tvm
from cells import ADD_TIR, MAIN_RELAX, RELAX_CALLS_BOTH, SCALE_PYFUNC
from tvm import relax

from tvm_pyfunc_nb import CallError, LiveModule
from tvm_pyfunc_nb._core.exporting import LibraryExport, export, export_library, python_file
from tvm_pyfunc_nb.testing import parts_of

X = torch.arange(5, dtype=torch.float32)
Y = torch.ones(5)


@pytest.fixture(scope="module")
def parts():
    live = LiveModule("demo")
    live.run_cell(ADD_TIR + MAIN_RELAX + SCALE_PYFUNC + RELAX_CALLS_BOTH)
    return parts_of(live)


def imported_modules(text: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_a_python_file_holds_the_script_and_needs_nothing_of_this_package():
    text = python_file("demo", "x = 1\n", ["scale"], {}, None)
    assert "tvm_pyfunc_nb" not in imported_modules(text)
    assert text.startswith("from __future__ import annotations\n") and "x = 1" in text


def test_an_exported_module_loads_back_and_runs_as_the_live_one(parts, tmp_path):
    path = export(parts, str(tmp_path / "demo.py"), ("pipeline", (X, Y)))
    text = Path(path).read_text()
    assert "tvm_pyfunc_nb" not in imported_modules(text)
    exported = runpy.run_path(path, run_name="exported")  # not __main__: no example check
    module = exported["load"]()
    assert torch.equal(torch.as_tensor(module.pipeline(X, Y)), (X + Y) * 10)
    with pytest.raises(CallError, match="PrimFunc writes its outputs"):
        export(parts, str(tmp_path / "no.py"), ("add_tir", (X, Y, torch.empty(5))))


def test_a_library_holds_what_needs_no_python_and_plain_tvm_runs_it(parts, tmp_path):
    path = str(tmp_path / "demo.so")
    written = export_library(parts, path)
    assert isinstance(written, LibraryExport)
    assert written.relax == ["main_relax"] and "add_tir" in written.kernels
    assert list(written.left_out) == ["pipeline"] and "calls Python" in written.left_out["pipeline"]
    lib = tvm.runtime.load_module(path)
    vm = relax.VirtualMachine(lib, tvm.cpu())
    out = vm["main_relax"](tvm.runtime.from_dlpack(X), tvm.runtime.from_dlpack(Y))
    assert torch.equal(torch.from_dlpack(out), X + Y)
    kernel = lib.get_function("add_tir", query_imports=True)
    result = torch.empty(5)
    kernel(X, Y, result)
    assert torch.equal(result, X + Y)
