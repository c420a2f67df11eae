"""What code written for upstream `BasePyModule` expects of `self`, on a live module.

A pyfunc's `self` is the live module, so upstream's examples run unchanged in
a cell: `self.call_tir(...)` (with `out_sinfo=`, the older spelling),
`self.call_py_func`, `self.call_dps_packed`, `list_functions()`,
`get_function(name)` and the DLPack converters.
"""

from __future__ import annotations

from collections.abc import Callable

from ..run.arguments import out_ty_of
from ..run.callables import LazyCallable, call_dps_packed, call_tir
from ..run.tensors import to_torch, to_tvm_tensor
from .cells import PRIMFUNC, PYFUNC


class UpstreamInterface:
    """Upstream `BasePyModule`'s calling and listing methods, over a live module's parts."""

    def list_functions(self) -> dict[str, list[str]]:
        """As upstream `BasePyModule.list_functions()`: `{"tirx": [PrimFuncs], "relax": [Relax
        functions], "extern": [global packed functions call_dps_packed has looked up]}`.
        Upstream lists no pyfuncs; `functions` has every function with its kind."""
        listed: dict[str, list[str]] = {"tirx": [], "relax": [], "extern": []}
        for name, kind in self.functions.items():
            if kind != PYFUNC:
                listed["tirx" if kind == PRIMFUNC else "relax"].append(name)
        listed["extern"] = list(self._extern_called)
        return listed

    def get_function(self, name: str) -> Callable:
        """As upstream `BasePyModule.get_function(name)`: the callable of function `name` (also
        where the module's own attribute takes the name: `NAME.kernels` is the method)."""
        entry = self.entry(name)
        if name in self._own_names:
            return LazyCallable(self._parts.calls, self.name, entry)
        return getattr(self, name)

    def call_tir(self, tir_func, args, out_ty=None, *, out_sinfo=None):
        """Allocate outputs per `out_ty`, then call PrimFunc `tir_func` (a name or a function);
        `out_sinfo=` is TVM's spelling before 0.27."""
        parts = self._parts
        return call_tir(parts.entry, parts.calls, tir_func, args, out_ty, out_sinfo)

    def call_dps_packed(self, name: str, args, out_ty=None, *, out_sinfo=None):
        """Call global packed function `name` destination-passing style, as upstream does: the
        outputs `out_ty` describes are allocated, passed after `args`, and returned. As upstream,
        a function of this module named `name` (a pyfunc added with `add_python_function`, say)
        comes first: it is called with `args` and its result returned."""
        if name in self.functions:
            out_ty_of(out_ty, out_sinfo, "call_dps_packed", name)
            return self.get_function(name)(*(args if isinstance(args, (list, tuple)) else [args]))
        self._extern_called[name] = None
        return call_dps_packed(name, args, out_ty, out_sinfo, self.device)

    def call_py_func(self, name: str, args):
        """Call pyfunc `name` with `args` (a list or tuple), `self` being this live module."""
        self.entry(name, kind=PYFUNC, needed_by="call_py_func")
        args = args if isinstance(args, (list, tuple)) else [args]
        return self._parts.calls.handle(name)(*args)

    @staticmethod
    def _convert_pytorch_to_tvm(tensors):
        """As upstream `BasePyModule`: torch tensors (one, or a list) as TVM tensors."""
        return to_tvm_tensor(tensors)

    @staticmethod
    def _convert_tvm_to_pytorch(tensors):
        """As upstream `BasePyModule`: TVM tensors (one, or a list) as torch tensors."""
        converted = to_torch(tensors)
        return list(converted) if isinstance(tensors, list) else converted
