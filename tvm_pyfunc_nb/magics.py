"""The IPython layer: `%%tvmmodule`, `%tvmmodules`, `%tvmmodule_drop`, `%tvmcache`. Thin by design.

It parses options, knows which cell is running (the front end's cell id from
the `pre_run_cell` event), forwards to `LiveModule`, and shows results and
errors. Everything else lives in the core.
"""

from __future__ import annotations

import os
import sys

from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.paths import get_ipython_cache_dir
from traitlets import Bool, Int, Unicode, default

from . import display
from .compile_cache import CompileCache
from .errors import TVMModuleError
from .live_module import LiveModule


CACHE_DIR_ENV = "TVM_PYFUNC_NB_CACHE_DIR"


@magics_class
class TVMModuleMagics(Magics):
    """Magics that build live TVM modules from cells. Defaults: `%config TVMModuleMagics.<option> = ...`."""

    target = Unicode("llvm", help="TVM target of new modules (`--target`).").tag(config=True)
    device = Unicode("cpu", help="Device of new modules, e.g. `cpu`, `cpu:0`, `cuda:0` (`--device`).").tag(config=True)
    eager = Bool(False, help="Compile when the cell runs instead of at the first call (`--eager`).").tag(config=True)
    quiet = Bool(False, help="Show nothing after a %%tvmmodule cell (`--quiet`).").tag(config=True)
    cache_dir = Unicode(
        help="Persistent compile cache shared by kernels; '' turns it off. Default: "
        f"${CACHE_DIR_ENV} if set, else <IPython cache dir>/tvm_pyfunc_nb (`%tvmcache` shows it)."
    ).tag(config=True)
    cache_max_mb = Int(
        512, help="Size bound of the compile cache in MB; least recently used entries go first."
    ).tag(config=True)

    @default("cache_dir")
    def _default_cache_dir(self) -> str:
        return os.environ.get(CACHE_DIR_ENV) or os.path.join(get_ipython_cache_dir(), "tvm_pyfunc_nb")

    def __init__(self, shell):
        super().__init__(shell=shell)
        self.modules: dict[str, LiveModule] = {}
        self._cell_id: str | None = None
        self._cache: CompileCache | None = None

    # -- events ------------------------------------------------------------------------
    def pre_run_cell(self, info) -> None:
        """Remember the front end's id of the cell about to run: a re-run of that cell replaces its functions."""
        self._cell_id = getattr(info, "cell_id", None) or None

    def post_run_cell(self, result) -> None:
        """Bring every view on screen up to date with the calls the cell made."""
        display.refresh_views()

    # -- magics ------------------------------------------------------------------------
    @magic_arguments("%tvmmodule")  # shown as `%%tvmmodule` in the usage line: it is a cell magic
    @argument("name", help="Name of the live module; bound to it in the user namespace.")
    @argument("--target", default=None, help="TVM target, e.g. llvm (default: TVMModuleMagics.target).")
    @argument("--device", default=None, help="Device, e.g. cpu, cpu:0, cuda:0 (default: TVMModuleMagics.device).")
    @argument("--eager", action="store_true", default=None, help="Compile now instead of at the first call.")
    @argument("--quiet", action="store_true", default=None, help="Show nothing.")
    @argument("--reset", action="store_true", help="Drop every earlier contribution to NAME first.")
    @cell_magic
    def tvmmodule(self, line: str, cell: str):
        """Add this cell's functions to the live module NAME (created on first use).

        The cell holds what the body of an `@I.ir_module` class would: functions
        decorated with `@I.pyfunc`, `@T.prim_func` or `@R.function`, comments and
        docstrings (or one whole `@I.ir_module class ...`, such as the text of
        `NAME.script()`, which replaces the module). `I`, `R`, `T`, `tvm`, `torch`
        and `BasePyModule` are pre-bound, and the names of your notebook are
        visible. Functions of different cells call each other as in one class:
        `cls = NAME` then `R.call_tir(cls.k, ...)` or `cls.f(...)` in Relax,
        `R.call_py_func("f", x, out_ty=...)`, and `self.k`, `self.call_tir(...)`
        in a pyfunc.

        Running an edited cell again replaces what it contributed before, and
        where two cells define a name the last one run wins. The whole module is
        checked before anything changes: a cell that fails leaves it as it was.
        Nothing compiles until a call needs it (with --eager: now), and then
        only what changed. The output shows each function the cell defines next
        to its latest call.

        Example:

            %%tvmmodule demo
            @I.pyfunc
            def double(self, x):
                return x * 2

        then `demo.double(torch.ones(3))`; `help(demo)` lists what a live module does.
        """
        args = parse_argstring(self.tvmmodule, line)
        name = args.name
        if not name.isidentifier():
            raise TVMModuleError(f"`{name}` is not a valid Python name for a module")
        live = self._module(name, args)
        # The running cell's own count: IPython 9 has already advanced `execution_count` at pre_run_cell, 8 had not
        running = self.shell.displayhook.exec_result
        number = running.execution_count if running is not None else None
        origin = f"cell In[{number}]" if number else "an earlier cell"
        result = live.run_cell(
            cell, key=self._cell_id, origin=origin, reset=args.reset, header=f"%%tvmmodule {line}"
        )
        self.shell.user_ns[name] = live
        if args.eager if args.eager is not None else self.eager:
            result.compiled = live.compile()
        if args.quiet if args.quiet is not None else self.quiet:
            return None
        return display.cell_view(live, result)

    @line_magic
    def tvmmodules(self, line: str = ""):
        """List live modules: name, functions by kind, compiled or stale."""
        return display.ModuleList(list(self.modules.values()))

    @line_magic
    def tvmmodule_drop(self, line: str):
        """Remove live module NAME: its compiled code, registry entries and namespace binding."""
        name = line.strip()
        live = self.modules.pop(name, None)
        if live is None:
            known = ", ".join(sorted(self.modules)) or "none"
            raise TVMModuleError(f"no live module named `{name}` (live modules: {known})")
        live.close()
        if self.shell.user_ns.get(name) is live:
            del self.shell.user_ns[name]

    def _module(self, name: str, args) -> LiveModule:
        target = args.target or self.target
        device = args.device or self.device
        live = self.modules.get(name)
        if live is not None and (live.target, live.device_name) != (target, device):
            if not args.reset and (args.target or args.device):
                raise TVMModuleError(
                    f"module `{name}` is built for target {live.target} on {live.device_name}; "
                    "add --reset to start it again for another target or device"
                )
            if args.reset:
                live.close()
                live = None
        if live is None:
            live = LiveModule(name, target=target, device=device, namespace=self.shell.user_ns,
                              persistent_cache=self.compile_cache())
            self.modules[name] = live
        return live

    def compile_cache(self) -> CompileCache | None:
        """The persistent compile cache as configured now (None when `cache_dir` is '')."""
        if not self.cache_dir:
            return None
        directory = os.path.abspath(os.path.expanduser(self.cache_dir))
        if self._cache is None or str(self._cache.directory) != directory:
            self._cache = CompileCache(directory)
        self._cache.max_bytes = self.cache_max_mb * 2**20
        return self._cache

    @magic_arguments()
    @argument("action", nargs="?", choices=["clear"], help="`clear` deletes every entry.")
    @line_magic
    def tvmcache(self, line: str = ""):
        """Show the persistent compile cache (location, entries, size); `%tvmcache clear` empties it."""
        args = parse_argstring(self.tvmcache, line)
        cache = self.compile_cache()
        if cache is None:
            print("compile cache: off (TVMModuleMagics.cache_dir is '')")
            return None
        if args.action == "clear":
            cache.clear()
        return cache.summary()


def show_error(shell, etype, value, tb, tb_offset=None):
    """Show a package error like IPython's UsageError: the message only; `%tb` keeps the full story."""
    sys.last_type, sys.last_value, sys.last_traceback = etype, value, tb
    if hasattr(sys, "last_exc"):
        sys.last_exc = value
    stb = [f"{etype.__name__}: {value}"]
    shell._showtraceback(etype, value, stb)
    return stb
