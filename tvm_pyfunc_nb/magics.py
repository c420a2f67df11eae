"""The IPython layer: `%%tvmmodule`, `%tvmmodules`, `%tvmmodule_drop`. Thin by design.

It parses options, knows which cell is running (the front end's cell id from
the `pre_run_cell` event), forwards to `LiveModule`, and shows results and
errors. Everything else lives in the core.
"""

from __future__ import annotations

import sys

from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from traitlets import Bool, Unicode

from . import display
from .errors import TVMModuleError
from .live_module import LiveModule


@magics_class
class TVMModuleMagics(Magics):
    """Magics that build live TVM modules from cells. Defaults: `%config TVMModuleMagics.<option> = ...`."""

    target = Unicode("llvm", help="TVM target of new modules (`--target`).").tag(config=True)
    device = Unicode("cpu", help="Device of new modules, e.g. `cpu`, `cpu:0`, `cuda:0` (`--device`).").tag(config=True)
    eager = Bool(False, help="Compile when the cell runs instead of at the first call (`--eager`).").tag(config=True)
    quiet = Bool(False, help="Show nothing after a %%tvmmodule cell (`--quiet`).").tag(config=True)

    def __init__(self, shell):
        super().__init__(shell=shell)
        self.modules: dict[str, LiveModule] = {}
        self._cell_id: str | None = None
        self._cell_number: int | None = None

    # -- events ------------------------------------------------------------------------
    def pre_run_cell(self, info) -> None:
        self._cell_id = getattr(info, "cell_id", None) or None
        self._cell_number = self.shell.execution_count

    def post_run_cell(self, result) -> None:
        display.refresh_views()

    # -- magics ------------------------------------------------------------------------
    @magic_arguments()
    @argument("name", help="Name of the live module; bound to it in the user namespace.")
    @argument("--target", default=None, help="TVM target, e.g. llvm (default: TVMModuleMagics.target).")
    @argument("--device", default=None, help="Device, e.g. cpu, cpu:0, cuda:0 (default: TVMModuleMagics.device).")
    @argument("--eager", action="store_true", default=None, help="Compile now instead of at the first call.")
    @argument("--quiet", action="store_true", default=None, help="Show nothing.")
    @argument("--reset", action="store_true", help="Drop every earlier contribution to NAME first.")
    @cell_magic
    def tvmmodule(self, line: str, cell: str):
        """Add this cell's functions to live module NAME (created on first use).

        The cell holds functions decorated with `@I.pyfunc`, `@T.prim_func` or
        `@R.function`, as in the body of an `@I.ir_module` class (or one whole
        `@I.ir_module class ...`). Re-running an edited cell replaces what it
        contributed; the last cell run wins for a name; nothing compiles until
        a call needs it. `I`, `R`, `T`, `tvm`, `torch` and `BasePyModule` are
        pre-bound, and names from your namespace are visible.
        """
        args = parse_argstring(self.tvmmodule, line)
        name = args.name
        if not name.isidentifier():
            raise TVMModuleError(f"`{name}` is not a valid Python name for a module")
        live = self._module(name, args)
        origin = f"cell In[{self._cell_number}]" if self._cell_number else "an earlier cell"
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
            live = LiveModule(name, target=target, device=device, namespace=self.shell.user_ns)
            self.modules[name] = live
        return live


def show_error(shell, etype, value, tb, tb_offset=None):
    """Show a package error like IPython's UsageError: the message only; `%tb` keeps the full story."""
    sys.last_type, sys.last_value, sys.last_traceback = etype, value, tb
    if hasattr(sys, "last_exc"):
        sys.last_exc = value
    stb = [f"{etype.__name__}: {value}"]
    shell._showtraceback(etype, value, stb)
    return stb
