"""tvm_pyfunc_nb: live, mixed Python/TIR/Relax TVM modules built from notebook cells.

Load with `%load_ext tvm_pyfunc_nb`, then write `%%tvmmodule NAME` cells:
`%%tvmmodule?` explains what a cell may hold, and `help(NAME)` what a live
module does. Without IPython, `LiveModule(name).run_cell(body)` does what a
cell does. Every error raised on a user's behalf is a `TVMModuleError`.

The supported surface is what this module exports, `tvm_pyfunc_nb.testing`
(a test shell for your own tests) and the magics; modules whose names start
with `_` are internal.
"""

from ._core.build.disk_cache import CompileCache
from ._core.live.assembly import UpdateResult
from ._core.live.live_module import LiveModule
from ._magics import load_ipython_extension, unload_ipython_extension
from ._version import __version__
from .errors import (
    CallError,
    CellSyntaxError,
    CompileCacheWarning,
    CompileError,
    IllFormedModuleError,
    ModelImportError,
    PyFuncError,
    ScheduleError,
    ScheduleWarning,
    TVMModuleError,
    TVMScriptError,
    UnknownFunctionError,
)

__all__ = [
    "CallError",
    "CellSyntaxError",
    "CompileCache",
    "CompileCacheWarning",
    "CompileError",
    "IllFormedModuleError",
    "LiveModule",
    "ModelImportError",
    "PyFuncError",
    "ScheduleError",
    "ScheduleWarning",
    "TVMModuleError",
    "TVMScriptError",
    "UnknownFunctionError",
    "UpdateResult",
    "__version__",
    "load_ipython_extension",
    "unload_ipython_extension",
]
