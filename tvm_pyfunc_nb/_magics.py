"""The IPython layer: the magics, and loading and unloading the extension. Thin by design.

It parses options, knows which cell is running (the front end's cell id from
the `pre_run_cell` event), forwards to `LiveModule`, and hands results to the
views. Everything else lives in the core (`_core`) and the views (`_views`).
"""

from __future__ import annotations

import dataclasses
import os
import sys

from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.paths import get_ipython_cache_dir
from traitlets import Bool, Float, Int, Unicode, default

from ._core import front_end_port
from ._core.build.disk_cache import CompileCache
from ._core.live.live_module import LiveModule
from ._core.options import OPTION_BY_NAME, OPTIONS, ModuleOptions, Option
from ._core.run.interrupts import python_sigint
from ._views import notebook_front_end
from ._views.render import ModuleList
from .errors import TVMModuleError

CACHE_DIR_ENV = "TVM_PYFUNC_NB_CACHE_DIR"
# `%tvmcache` waits this long at most for the background writes of what was just compiled
# (one kernel's export takes about as long as its compile), so that it shows them done
SHOW_WAIT_SECONDS = 30.0


def _trait(option: Option):
    """The `%config TVMModuleMagics.<name>` trait of `option`."""
    kind = {bool: Bool, float: Float, int: Int, str: Unicode}[type(option.default)]
    flag = f" (`{option.flag}`)" if option.flag else ""
    return kind(option.default, help=f"{option.help[0].upper()}{option.help[1:]}{flag}.").tag(
        config=True
    )


def _option_flags(magic):
    """`magic` with a `%%tvmmodule` flag for every option that has one."""
    for option in reversed(OPTIONS):
        if option.flag is None:
            continue
        if isinstance(option.default, bool):
            kwargs = {"action": "store_true", "default": None, "help": option.help + "."}
        else:
            default = f" (default: TVMModuleMagics.{option.name})"
            kwargs = {"default": None, "help": option.help + default, "metavar": option.metavar}
        magic = argument(option.flag, dest=option.name, **kwargs)(magic)
    return magic


# Every option's trait, declared from OPTIONS (options.py), the one place options are listed
_OptionTraits = type("_OptionTraits", (Magics,), {o.name: _trait(o) for o in OPTIONS})


@magics_class
class TVMModuleMagics(_OptionTraits):
    """Magics that build live TVM modules from cells. Defaults: `%config TVMModuleMagics.<option> =
    ...`.
    """

    @default("cache_dir")
    def _default_cache_dir(self) -> str:
        return os.environ.get(CACHE_DIR_ENV) or os.path.join(
            get_ipython_cache_dir(), "tvm_pyfunc_nb"
        )

    def __init__(self, shell):
        super().__init__(shell=shell)
        self.modules: dict[str, LiveModule] = {}
        self._cell_id: str | None = None
        self._cache: CompileCache | None = None

    # -- events ------------------------------------------------------------------------
    def pre_run_cell(self, info) -> None:
        """Remember the front end's id of the cell about to run: a re-run of that cell replaces its
        functions.
        """
        self._cell_id = getattr(info, "cell_id", None) or None

    def post_run_cell(self, result) -> None:
        """Bring every view on screen up to date with the calls the cell made; Ctrl-C handled as
        Python handles it again, whatever TVM did to it in the cell (`interrupts.py`)."""
        notebook_front_end.refresh_views()
        python_sigint()

    # -- magics ------------------------------------------------------------------------
    @magic_arguments("%tvmmodule")
    @argument("name", help="Name of the live module; bound to it in the user namespace.")
    @_option_flags
    @argument("--reset", action="store_true", help="Drop every earlier contribution to NAME first.")
    @line_cell_magic
    def tvmmodule(self, line: str, cell: str | None = None):
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

        As a line magic, `%tvmmodule NAME [options]` creates the module empty
        (or returns the existing one), e.g. to `NAME.add(...)` a model into.

        Example:

            %%tvmmodule demo
            @I.pyfunc
            def double(self, x):
                return x * 2

        then `demo.double(torch.ones(3))`; `help(demo)` lists what a live module does.
        """
        args = parse_argstring(self.tvmmodule, line)
        live, fresh = self._module(args)
        if cell is None:
            return self._adopt(args.name, live)
        # The running cell's own count: IPython 9 has already advanced `execution_count` at
        # pre_run_cell, 8 had not
        running = self.shell.displayhook.exec_result
        number = running.execution_count if running is not None else None
        try:
            result = live.run_cell(
                cell,
                key=self._cell_id,
                origin=f"cell In[{number}]" if number else "an earlier cell",
                reset=args.reset,
                header=f"%%tvmmodule {line}",
                eager=self._option(args, "eager"),
            )
        except BaseException:
            if fresh:  # it never became NAME: NAME (if any) is as it was
                live.close()
            raise
        self._adopt(args.name, live)
        if not self._option(args, "quiet"):
            notebook_front_end.display_view(notebook_front_end.cell_view(live, result))
        return None

    @magic_arguments()
    @argument("function", help="NAME.fn: the function of live module NAME to open in a new cell.")
    @line_magic
    def tvmmodule_edit(self, line: str):
        """Open `fn` of live module NAME in a new cell below, as `%load` does: run it to make it
        `fn`'s owner.
        """
        args = parse_argstring(self.tvmmodule_edit, line)
        name, _, fn = args.function.partition(".")
        if not fn:
            raise TVMModuleError(
                f"`{args.function}`: write NAME.fn, e.g. %tvmmodule_edit demo.main"
            )
        self._live(name).edit(fn)

    @line_magic
    def tvmmodules(self, line: str = ""):
        """List live modules: name, functions by kind, compiled or stale."""
        return ModuleList(list(self.modules.values()))

    @line_magic
    def tvmmodule_drop(self, line: str):
        """Remove live module NAME: its compiled code, registry entries and namespace binding."""
        name = line.strip()
        live = self._live(name)
        del self.modules[name]
        live.close()
        if self.shell.user_ns.get(name) is live:
            del self.shell.user_ns[name]

    @magic_arguments()
    @argument("action", nargs="?", choices=["clear"], help="`clear` deletes every entry.")
    @line_magic
    def tvmcache(self, line: str = ""):
        """Show the persistent compile cache (location, whether it is trusted, entries, size);
        `%tvmcache clear` empties it.

        The kernels compiled last are written to the cache in the background; what is shown
        waits for those writes (`SHOW_WAIT_SECONDS` at most), so that it counts them.
        """
        args = parse_argstring(self.tvmcache, line)
        cache = self.compile_cache()
        if cache is None:
            print("compile cache: off (TVMModuleMagics.cache_dir is '')")
            return None
        if args.action == "clear":
            cache.clear()
        else:
            cache.flush(timeout=SHOW_WAIT_SECONDS)
        return cache.summary()

    # -- helpers -----------------------------------------------------------------------
    def _option(self, args, name: str):
        given = getattr(args, name, None)
        if given is not None and OPTION_BY_NAME[name].negated:
            given = not given
        if (
            isinstance(given, str)
            and len(given) > 1
            and given[0] == given[-1]
            and given[0] in "'\""
        ):
            given = given[1:-1]  # IPython keeps the quotes of `--target '{"kind": "llvm"}'`
        return given if given is not None else getattr(self, name)

    def _live(self, name: str) -> LiveModule:
        live = self.modules.get(name)
        if live is None:
            known = ", ".join(sorted(self.modules)) or "none"
            raise TVMModuleError(f"no live module named `{name}` (live modules: {known})")
        return live

    def _module(self, args) -> tuple[LiveModule, bool]:
        """The module the cell runs in, and whether it is a fresh one: NAME, or a module made
        for the cell's options (first use, or --reset with other options). A fresh module is
        fully made, its options checked, before anything else happens: it becomes NAME only
        once its cell succeeded (`_adopt`), so a cell that fails leaves NAME as it was."""
        name = args.name
        if not name.isidentifier():
            raise TVMModuleError(f"`{name}` is not a valid Python name for a module")
        wanted = {f.name: self._option(args, f.name) for f in dataclasses.fields(ModuleOptions)}
        live = self.modules.get(name)
        if live is not None:
            have = dataclasses.asdict(live.options)
            differ = [k for k in wanted if wanted[k] != have[k] and self._given(args, k)]
            if differ and not args.reset:
                built = ", ".join(f"{k} {have[k]}" for k in differ)
                raise TVMModuleError(
                    f"module `{name}` is built with {built}; add --reset to start it again "
                    "with other options"
                )
            if not (args.reset and any(wanted[k] != have[k] for k in wanted)):
                return live, False
        made = LiveModule(
            name, namespace=self.shell.user_ns, persistent_cache=self.compile_cache(), **wanted
        )
        return made, True

    def _adopt(self, name: str, live: LiveModule) -> LiveModule:
        """`live` is NAME from now on; the module it replaces is closed."""
        replaced = self.modules.get(name)
        self.modules[name] = live
        self.shell.user_ns[name] = live
        if replaced is not None and replaced is not live:
            replaced.close()
        return live

    @staticmethod
    def _given(args, key: str) -> bool:
        return getattr(args, key, None) is not None

    def compile_cache(self) -> CompileCache | None:
        """The persistent compile cache as configured now (None when `cache_dir` is '')."""
        if not self.cache_dir:
            return None
        directory = os.path.realpath(os.path.expanduser(self.cache_dir))  # as the cache keeps it
        if self._cache is None or str(self._cache.directory) != directory:
            try:
                self._cache = CompileCache(directory)
            except TVMModuleError as err:
                raise TVMModuleError(
                    f"{err}; choose another with %config TVMModuleMagics.cache_dir = '...' "
                    "('' turns it off)"
                ) from err.__cause__
        self._cache.max_bytes = self.cache_max_mb * 2**20
        return self._cache


def show_error(shell, etype, value, tb, tb_offset=None):
    """Show a package error as IPython's UsageError: the message only (`%tb` has the rest).

    With `%pdb on`, the debugger then opens on it, as IPython does after its own tracebacks.
    """
    sys.last_type, sys.last_value, sys.last_traceback = etype, value, tb
    if hasattr(sys, "last_exc"):
        sys.last_exc = value
    stb = [f"{etype.__name__}: {value}"]
    shell._showtraceback(etype, value, stb)
    shell.debugger()  # only if `%pdb` is on
    return stb


# -- loading and unloading -----------------------------------------------------------------
class _Loaded:
    """What loading registered in one shell, so that unloading removes exactly that."""

    def __init__(self, shell):
        self.shell = shell
        self.magics = TVMModuleMagics(shell)
        self.previous_exc = (shell.custom_exceptions, shell.CustomTB)
        self.previous_front_end: front_end_port.FrontEnd | None = None

    def load(self) -> None:
        shell, magics = self.shell, self.magics
        shell.register_magics(magics)
        if magics not in shell.configurables:
            shell.configurables.append(magics)
        shell.events.register("pre_run_cell", magics.pre_run_cell)
        shell.events.register("post_run_cell", magics.post_run_cell)
        previous_types, previous_handler = self.previous_exc

        def handler(shell_, etype, value, tb, tb_offset=None):
            if isinstance(value, TVMModuleError):
                return show_error(shell_, etype, value, tb, tb_offset)
            return previous_handler(etype, value, tb, tb_offset=tb_offset)

        shell.set_custom_exc((*previous_types, TVMModuleError), handler)
        notebook_front_end.register_formatters(shell)
        self.previous_front_end = front_end_port.install(notebook_front_end.NotebookFrontEnd(shell))

    def unload(self) -> None:
        shell, magics = self.shell, self.magics
        for name in list(magics.modules):
            magics.tvmmodule_drop(name)
        shell.events.unregister("pre_run_cell", magics.pre_run_cell)
        shell.events.unregister("post_run_cell", magics.post_run_cell)
        types, handler = self.previous_exc
        shell.custom_exceptions, shell.CustomTB = types, handler
        notebook_front_end.unregister_formatters(shell)
        front_end_port.install(self.previous_front_end)
        for kind, names in magics.magics.items():
            for name in names:
                shell.magics_manager.magics[kind].pop(name, None)
        shell.magics_manager.registry.pop(type(magics).__name__, None)
        if magics in shell.configurables:
            shell.configurables.remove(magics)


_loaded: dict[object, _Loaded] = {}


def load_ipython_extension(shell) -> None:
    """`%load_ext tvm_pyfunc_nb`: register the magics (loading twice is harmless)."""
    if shell in _loaded:
        return
    loaded = _Loaded(shell)
    loaded.load()
    _loaded[shell] = loaded


def unload_ipython_extension(shell) -> None:
    """`%unload_ext tvm_pyfunc_nb`: remove the magics and drop every live module."""
    loaded = _loaded.pop(shell, None)
    if loaded is not None:
        loaded.unload()


def magics_of(shell) -> TVMModuleMagics | None:
    """The extension's magics in `shell`, if it is loaded there."""
    loaded = _loaded.get(shell)
    return loaded.magics if loaded else None
