"""Calling into a compiled module on small tensors: our live module against upstream `BasePyModule`.

Both sides get the same functions and the same 5-element tensors; the raw
VM call with prefetched TVM tensors is the floor nothing can beat.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import torch
import tvm
import tvm_ffi
from cells import ADD_TIR
from harness import module_cell, notebook_shell, per_call
from tvm.relax.base_py_module import BasePyModule

from tvm_pyfunc_nb._core.run import py_registry
from tvm_pyfunc_nb.testing import NotebookShell

FUNCTIONS = ADD_TIR + textwrap.dedent("""
    @I.pyfunc
    def py_tir(self, x, y):
        return self.call_tir(self.add_tir, [x, y], out_ty=R.Tensor((x.shape[0],), "float32"))

    @I.pyfunc
    def scale(self, x):
        return x * 10

    @I.pyfunc
    def ident(self, x):
        return x

    @R.function
    def main_relax(
        x: R.Tensor(("n",), "float32"), y: R.Tensor(("n",), "float32")
    ) -> R.Tensor(("n",), "float32"):
        return R.add(x, y)

    @R.function
    def to_scale(x: R.Tensor(("n",), "float32")) -> R.Tensor(("n",), "float32"):
        n = T.int64()
        return R.call_py_func("scale", x, out_ty=R.Tensor((n,), "float32"))

    @R.function
    def to_ident(x: R.Tensor(("n",), "float32")) -> R.Tensor(("n",), "float32"):
        n = T.int64()
        return R.call_py_func("ident", x, out_ty=R.Tensor((n,), "float32"))
    """)
PYFUNCS = ("py_tir", "scale", "ident")


def upstream_module(shell: NotebookShell) -> BasePyModule:
    """Upstream's module, with its pyfuncs registered for `R.call_py_func` the way upstream does it
    (`ir_mod.pyfuncs`).
    """
    shell.run(
        "from tvm.script import ir as I, relax as R, tirx as T\n"
        "from tvm.relax.base_py_module import BasePyModule\n"
        "@I.ir_module\nclass Up(BasePyModule):\n" + textwrap.indent(FUNCTIONS, "    "),
        store_history=False,
    )
    factory = shell.ns["Up"]
    ir_mod = tvm.IRModule(dict(factory.ir_module.functions_items()))
    ir_mod.pyfuncs = {name: getattr(factory.original_class, name) for name in PYFUNCS}
    module = BasePyModule(ir_mod, tvm.cpu())
    for name in PYFUNCS:
        module.add_python_function(name, getattr(factory.original_class, name))
    return module


def measure(number: int, rounds: int) -> dict:
    shell = notebook_shell()
    # first: dropping an upstream module clears every R.call_py_func registration
    upstream = upstream_module(shell)
    module_cell(shell, "demo", "all", FUNCTIONS)
    demo = shell.ns["demo"]
    x, y = torch.arange(5, dtype=torch.float32), torch.ones(5)
    for a, b in [
        (demo.main_relax(x, y), upstream.main_relax(x, y)),
        (demo.py_tir(x, y), upstream.py_tir(x, y)),
        (demo.to_scale(x), upstream.to_scale(x)),
        (demo.to_ident(x), upstream.to_ident(x)),
    ]:
        assert torch.equal(a, b), (a, b)
    shell.flush_cache()  # the compile cache's background exports must not run during timing
    ours_vm, upstream_vm = demo.module.relax_vm["main_relax"], upstream.relax_vm["main_relax"]
    xt, yt = tvm.runtime.from_dlpack(x), tvm.runtime.from_dlpack(y)
    calls = {
        "ours raw VM, tvm tensors": lambda: ours_vm(xt, yt),
        "upstream raw VM, tvm tensors": lambda: upstream_vm(xt, yt),
        "ours raw VM, torch tensors": lambda: ours_vm(x, y),
        "upstream raw VM, torch tensors": lambda: upstream_vm(x, y),
        "ours relax": lambda: demo.main_relax(x, y),
        "upstream relax": lambda: upstream.main_relax(x, y),
        "ours call_tir": lambda: demo.py_tir(x, y),
        "upstream call_tir": lambda: upstream.py_tir(x, y),
        "ours call_py_func scale": lambda: demo.to_scale(x),
        "upstream call_py_func scale": lambda: upstream.to_scale(x),
        "ours call_py_func ident": lambda: demo.to_ident(x),
        "upstream call_py_func ident": lambda: upstream.to_ident(x),
        "torch x * 10": lambda: x * 10,
    }
    figures = per_call(calls, number=number, rounds=rounds)
    figures.update(callback_floor(demo, x, number, rounds))
    return figures


def callback_floor(demo, x, number: int, rounds: int) -> dict:
    """The least a Relax → Python call can cost: our VM calling a bare `lambda x: x` (torch tensors,
    as ours).
    """
    name = site_name(demo.name, "to_ident", "ident")
    ours = py_registry._entries[name]
    vm_fn = demo.module.relax_vm["to_ident"]
    py_registry.register(name, tvm_ffi.convert_func(lambda t: t, tensor_cls=torch.Tensor))
    try:
        return per_call({"raw VM + bare callback": lambda: vm_fn(x)}, number=number, rounds=rounds)
    finally:
        py_registry.register(name, ours)


def site_name(module: str, caller: str, pyfunc: str) -> str:
    """The registry name of the one `R.call_py_func` site of `caller` calling `pyfunc` in live
    module `module`: `{prefix}.{caller}.{pyfunc}.{index}.{types hash}`, the prefix
    `tvmnb<N>.<module>` (`tvm_pyfunc_nb._core.run.trampolines`).
    """
    found = [
        n
        for n in py_registry.registered()
        if n.split(".")[1:4] == [module, caller, pyfunc] and len(n.split(".")) == 6
    ]
    assert len(found) == 1, (module, caller, pyfunc, py_registry.registered())
    return found[0]


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]), int(sys.argv[2]))))
