"""What code written for upstream `BasePyModule` expects of `self`, on a live module.

A pyfunc's `self` is the live module, so upstream's examples run unchanged in
a cell: `self.call_tir(...)` (with `out_sinfo=`, the older spelling),
`self.call_py_func`, `self.call_dps_packed`, `list_functions()`,
`get_function(name)` and the DLPack converters.
"""

from __future__ import annotations

from collections.abc import Callable

from .callables import call_dps_packed, call_tir
from .cells import PRIMFUNC, PYFUNC, RELAX
from .tensors import to_torch, to_tvm_tensor


class UpstreamInterface:
    """Upstream `BasePyModule`'s calling and listing methods, over a live module's parts."""

    def list_functions(self) -> dict[str, list[str]]:
        """As upstream `BasePyModule.list_functions()`: `{"tir": [...], "relax": [...], "python":
        [...]}`."""
        kinds = {PRIMFUNC: "tir", RELAX: "relax", PYFUNC: "python"}
        listed: dict[str, list[str]] = {"tir": [], "relax": [], "python": []}
        for name, kind in self.functions.items():
            listed[kinds[kind]].append(name)
        return listed

    def get_function(self, name: str) -> Callable:
        """As upstream `BasePyModule.get_function(name)`: the callable of function `name`."""
        self.entry(name)
        return getattr(self, name)

    def call_tir(self, tir_func, args, out_ty=None, *, out_sinfo=None):
        """Allocate outputs per `out_ty`, then call PrimFunc `tir_func` (a name or a function);
        `out_sinfo=` is TVM's spelling before 0.27."""
        return call_tir(self, tir_func, args, out_ty, out_sinfo)

    def call_dps_packed(self, name: str, args, out_ty=None, *, out_sinfo=None):
        """Call global packed function `name` destination-passing style, as upstream does."""
        return call_dps_packed(name, args, out_ty, out_sinfo, self.device)

    def call_py_func(self, name: str, args):
        """Call pyfunc `name` with `args` (a list or tuple), `self` being this live module."""
        self.entry(name, kind=PYFUNC, needed_by="call_py_func")
        return self._calls.handle(name)(*(args if isinstance(args, (list, tuple)) else [args]))

    @staticmethod
    def _convert_pytorch_to_tvm(tensors):
        """As upstream `BasePyModule`: torch tensors (one, or a list) as TVM tensors."""
        return to_tvm_tensor(tensors)

    @staticmethod
    def _convert_tvm_to_pytorch(tensors):
        """As upstream `BasePyModule`: TVM tensors (one, or a list) as torch tensors."""
        converted = to_torch(tensors)
        return list(converted) if isinstance(tensors, list) else converted
