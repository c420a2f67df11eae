"""`NAME.module`: TVM's own `BasePyModule`, filled from what the live module compiled.

Upstream's constructor compiles the whole module (twice) and its `__del__`
clears the process-wide `R.call_py_func` registry of every module. This
subclass takes the already-compiled pieces instead and leaves the registry
to `py_registry`.
"""

from __future__ import annotations

from tvm import relax
from tvm.relax.base_py_module import BasePyModule


class CompiledPyModule(BasePyModule):
    """A `BasePyModule` built from a live module's compiled functions (no compile of its own)."""

    def __init__(self, ir_mod, device, target, tir_funcs: dict, relax_vm, pyfuncs: dict):
        # Deliberately not calling BasePyModule.__init__: it would compile everything again.
        self.device = device
        self.ir_mod = ir_mod
        self.target = target
        self.functions = ir_mod.functions
        self.attrs = ir_mod.attrs
        self.compiled_tir_funcs = dict(tir_funcs)
        self.extern_funcs = {}
        self.tir_func_names = list(tir_funcs)
        self.relax_func_names = [
            gv.name_hint for gv, f in ir_mod.functions_items() if isinstance(f, relax.Function)
        ]
        self.relax_vm = relax_vm
        self.pyfuncs = {}
        self._wrap_tir_functions()
        self._wrap_relax_functions()
        for name, func in pyfuncs.items():
            self.add_python_function(name, func)

    def __del__(self):
        """Unlike upstream, leave the shared `R.call_py_func` registry alone."""
