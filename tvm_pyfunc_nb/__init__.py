"""tvm_pyfunc_nb: live, mixed Python/TIR/Relax TVM modules built from notebook cells.

Load with `%load_ext tvm_pyfunc_nb`, then write `%%tvmmodule NAME` cells:
`%%tvmmodule?` explains what a cell may hold, and `help(NAME)` what a live
module does. `%tvmmodules` lists the live modules, `%tvmmodule_drop NAME`
removes one. Without IPython, `LiveModule(name).run_cell(body)` does what a
cell does. Every error raised on a user's behalf is a `TVMModuleError`.
"""

from .errors import (
    CallError, CellSyntaxError, CompileError, IllFormedModuleError, PyFuncError, TVMModuleError, TVMScriptError,
)
from .live_module import LiveModule, UpdateResult

__version__ = "0.1.0"
__all__ = [
    "CallError", "CellSyntaxError", "CompileError", "IllFormedModuleError", "LiveModule", "PyFuncError",
    "TVMModuleError", "TVMScriptError", "UpdateResult", "load_ipython_extension", "unload_ipython_extension",
]

_loaded = {}


def load_ipython_extension(ipython) -> None:
    """`%load_ext tvm_pyfunc_nb`: register the magics (loading twice is harmless)."""
    from .magics import TVMModuleMagics, show_error

    if ipython in _loaded:
        return
    magics = TVMModuleMagics(ipython)
    ipython.register_magics(magics)
    if magics not in ipython.configurables:
        ipython.configurables.append(magics)
    ipython.events.register("pre_run_cell", magics.pre_run_cell)
    ipython.events.register("post_run_cell", magics.post_run_cell)
    ipython.set_custom_exc((TVMModuleError,), show_error)
    _loaded[ipython] = magics


def unload_ipython_extension(ipython) -> None:
    """`%unload_ext tvm_pyfunc_nb`: remove the magics and drop every live module."""
    magics = _loaded.pop(ipython, None)
    if magics is None:
        return
    for name in list(magics.modules):
        magics.tvmmodule_drop(name)
    ipython.events.unregister("pre_run_cell", magics.pre_run_cell)
    ipython.events.unregister("post_run_cell", magics.post_run_cell)
    ipython.set_custom_exc((), None)
    for kind in ("cell", "line"):
        for name in ("tvmmodule", "tvmmodules", "tvmmodule_drop", "tvmcache"):
            ipython.magics_manager.magics[kind].pop(name, None)
    if magics in ipython.configurables:
        ipython.configurables.remove(magics)
