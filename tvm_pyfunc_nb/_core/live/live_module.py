"""`LiveModule`: one IRModule built from many cells, changed in place, compiled lazily.

The facade. It makes the parts of a module once (`made_parts`: each part
gets all it depends on when it is made, nothing is hung on it later), hands
them to each feature as one `ModuleParts` (module_parts.py), and delegates:

- `Assembly` (assembly.py): contributions (cells, added modules, schedules)
  in, one checked IRModule out, transactionally;
- a `Build` (build/build.py) for the module's target and pipeline, with its
  builder, chosen once: here, or the build worker with --isolate
  (faults/isolation.py);
- a runner (runner.py), chosen once: compiled code here or on a remote
  device; it makes the `Compiler` (what is compiled, and compiling what a
  call needs) and the `CallTable` (call_table.py: the fast callables and the
  latest call of each function), whose resolver it is;
- features, each a function of the parts in its own module (features.py:
  `trace`, `compare`, `time`, `profile`, `graph`, `lowered`/`kernels`/
  `source`, `export`, `script`/`edit_text`...), and `schedule`/`tune` (tuning/), whose
  result it commits.

What it owns itself is the one rule that ties the parts together, `_commit`:
when the module (or its compiled code) changes, the call table's handles
re-resolve at their next call; features that change the module return a
contribution for it to commit. The core knows nothing about IPython; a front
end (front_end_port.py) is asked for what needs one.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Mapping
from typing import Any

import tvm

from .. import front_end_port
from ..build.build import Build
from ..build.builder import HERE
from ..build.stats import CompileRecord, CompileStats
from ..faults.isolation import WorkerBuilder
from ..front_end_port import Reporter
from ..models.importing import added_contribution, binding_site, import_torch
from ..module_parts import ModuleParts, named_constants
from ..options import ModuleOptions, check_target_runs_on, device_of, module_options
from ..run.call_table import RecordView
from ..run.callables import LazyCallable
from ..run.compiled_module import CompiledPyModule
from ..run.runner import Calling, make_runner, remote_address
from ..tuning import entry as tuning
from .assembly import Assembly, ModuleState, Proposal, UpdateResult
from .cell_runs import cell_contribution
from .cells import PRIMFUNC, PYFUNC, RELAX
from .contributions import FunctionEntry, next_run, python_function
from .editing import ConstantTable
from .features import Features
from .pyfunc_loader import forget_cell_text, register_cell_text
from .upstream import UpstreamInterface


class LiveModule(UpstreamInterface, Features):
    """A live TVM module: pyfuncs, PrimFuncs and Relax functions that cells change in place.

    `%%tvmmodule NAME` cells build one and bind it to `NAME` (without IPython,
    `LiveModule(name, **options).run_cell(body)`); nothing compiles until a call
    needs it, and then only what changed. `NAME.fn(*args)` calls `fn`, whatever
    its kind, torch tensors in and out. A mistake raises a `TVMModuleError` that
    names the function and the cell line, and leaves the module as it was.
    """

    def __init__(self, name: str, *, namespace=None, persistent_cache=None, **options):
        self.name = name
        self.options: ModuleOptions = module_options(options)
        self.target, self.device_name = self.options.target, self.options.device
        self.device = device_of(self.device_name)
        self.namespace: Mapping[str, Any] = namespace if namespace is not None else {}
        self.stats = CompileStats()
        self._extern_called: dict[str, None] = {}  # packed functions `call_dps_packed` looked up
        # names `NAME.<name>` gives the module's own, not a function's
        self._own_names = frozenset(n for n in [*vars(self), *dir(type(self))] if n[0] != "_")
        self._parts = made_parts(self, self._own_names, persistent_cache)

    # -- contributions -------------------------------------------------------------
    def run_cell(self, text: str, *, key=None, origin=None, reset=False, header=None, eager=False):
        """Apply a cell body: replace what cell `key` contributed before, or change nothing at
        all. `key` identifies the cell (a front end's cell id; without one, a re-run replaces by
        name); `origin` names it in notices; `eager` compiles first, failing the cell if that
        fails."""
        number = next_run()
        key = key if key is not None else ("run", number)
        filename = f"<tvmmodule {self.name} cell {number}>"
        register_cell_text(filename, header or f"%%tvmmodule {self.name}", text)
        try:
            contribution, reset = cell_contribution(
                self._parts, text, key, number, filename, origin, reset
            )
            return self._apply(self._parts.assembly.propose(contribution, reset=reset), eager=eager)
        except BaseException:
            forget_cell_text(filename)  # nothing of this run was committed
            raise

    def drop_functions(self, key: object) -> list[str]:
        """Forget what contribution `key` brought (as if it had never run); returns what left."""
        if key not in self._state.contributions:
            return []
        return self._apply(self._parts.assembly.propose(drop=[key])).removed

    def add_python_function(self, name: str, func: Callable) -> None:
        """Add a pyfunc at run time: callable from Relax through `R.call_py_func`, in `script()`."""
        self._apply(self._parts.assembly.propose(python_function(name, func)))

    def add(self, obj, *, name: str | None = None) -> UpdateResult:
        """Add what `obj` holds as one contribution: an IRModule (every function, its constants),
        a PrimFunc, a Relax Function (`name=` if it has no global symbol), a Python callable (a
        pyfunc), or a list of them. Adding the same names again replaces it."""
        result = self._add(obj, name, f"{self.name}.add({_what(obj)})")
        for defined in result.defined:  # no longer the function a PyTorch model became
            self._parts.torch_origins.pop(defined, None)
        return result

    def add_torch(
        self, model, example_args=None, *, name="main", dynamic_shapes=None, custom_convert_map=None
    ) -> UpdateResult:
        """Import `model` (a `torch.nn.Module` and its example arguments, or the
        `ExportedProgram` that `torch.export.load` gives) as Relax function `name`, its weights
        constants, through `torch.export`; `compare(name, model, ...)` then goes op by op, and
        rows say where each binding came from. Inputs the model writes into (`x.add_(1)`), a
        call writes into too. An op TVM's importer cannot translate runs as a PyTorch
        call: a pyfunc (`<name>_<op>`) added with it; the import says which.
        `custom_convert_map` is TVM's own (`{op name: converter(node, importer)}`); with
        --isolate the import runs in the build worker first."""
        imported = import_torch(
            model,
            example_args,
            name=name,
            dynamic_shapes=dynamic_shapes,
            custom_convert_map=custom_convert_map,
            translate_first=self._parts.build.builder.translate_first,
        )
        by = f"{self.name}.add_torch({type(model).__name__})"
        result = self._add(imported.functions, None, by, imported.notes)
        self._parts.torch_origins[name] = imported.origin
        return result

    def _add(self, obj, name: str | None, origin: str, notes=()) -> UpdateResult:
        contribution = added_contribution(
            obj,
            name=name,
            module_name=self.name,
            namespace=self.namespace,
            origin=origin,
            notes=notes,
        )
        return self._apply(self._parts.assembly.propose(contribution))

    def _apply(self, proposal: Proposal, *, eager: bool = False) -> UpdateResult:
        proposal.result.shadowed = [n for n in proposal.result.defined if n in self._own_names]
        if eager:
            proposal.result.compiled = self._parts.compiler.check(proposal.state)
        self._commit(proposal)
        return proposal.result

    def _commit(self, proposal: Proposal | None = None) -> None:
        """The one rule: the module changed (`proposal`), or its compiled code did (no proposal),
        so every handle re-resolves at its next call."""
        calls = self._parts.calls
        if proposal is None:
            calls.changed()
            return
        self._parts.assembly.commit(proposal)
        calls.changed(redefined=proposal.fresh, remaining=proposal.state.entries)

    # -- what is there -------------------------------------------------------------
    @property
    def _state(self) -> ModuleState:
        return self._parts.assembly.state

    @property
    def ir_mod(self) -> tvm.IRModule:
        """The current `tvm.IRModule` (pyfuncs as `ExternFunc`s carrying their source)."""
        return self._state.ir_mod

    @property
    def functions(self) -> dict[str, str]:
        """`{name: kind}` for every function, kind one of "pyfunc", "tir", "relax"."""
        return self._state.functions

    @property
    def last_calls(self) -> dict:
        """`{name: CallRecord}`: each function's latest call (arguments, result, own run time)."""
        return RecordView(self._parts.calls.records)

    def entry(self, name: str, *, kind: str | None = None, needed_by: str = "") -> FunctionEntry:
        """What the module knows of function `name` (source, kind, origin, TVM function); with
        `kind`, a `CallError` if it is of another kind (`needed_by` says what needed it)."""
        return self._parts.entry(name, kind=kind, needed_by=needed_by)

    def origin_of(self, name: str) -> str:
        """Where function `name` comes from now, as notices say it ("cell In[3]")."""
        return self._state.contributions[self.entry(name).contribution].origin

    @property
    def is_stale(self) -> bool:
        """True when the module changed since its last compile (the next call compiles that)."""
        return self._parts.compiler.is_stale(self._state)

    def __repr__(self) -> str:
        kinds = list(self.functions.values())
        counts = ", ".join(f"{kinds.count(k)} {k}" for k in (PYFUNC, PRIMFUNC, RELAX))
        state = "stale" if self.is_stale else "compiled"
        return f"<LiveModule {self.name}: {counts}; {state}; target {self.target}>"

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._state.entries))

    def show(self) -> None:
        """Display the module's widget: a tab per function (script, latest call), the script."""
        front_end_port.current().show(self)

    @property
    def consts(self) -> ConstantTable:
        """The module's weights by name: `NAME.consts.fc1_weight` is the constant itself, as
        edit and script text write it; `NAME.consts.numpy(name)` its value."""
        return self._parts.consts

    # -- changing how it runs -------------------------------------------------------------
    def schedule(self, kernel: str, how) -> UpdateResult | list[str]:
        """Schedule PrimFunc `kernel`: `how="dlight"` (TVM's default schedules for the target) or
        a function of a `tvm.s_tir.Schedule`; the result replaces it until its cell runs again.
        On a Relax function, DLight over every kernel its pipeline makes (returns which)."""
        return self._scheduled(tuning.schedule(self._parts, kernel, how))

    def tune(self, kernel: str, trials: int = 32):
        """Tune PrimFunc `kernel` with MetaSchedule (`trials` candidates, progress shown) and use
        the best schedule, as `schedule` does; a Relax function's kernels are tuned together and
        used whenever it compiles. The database is kept in the compile cache for next time."""
        return self._scheduled(tuning.tune(self._parts, kernel, trials))

    def _scheduled(self, change: tuning.Scheduled):
        if change.contribution is None:  # the pipeline's kernels are scheduled otherwise now
            self._parts.compiler.forget_linked()
            self._commit()
            return change.result
        applied = self._apply(self._parts.assembly.propose(change.contribution))
        return applied if change.result is None else change.result

    # -- compiling -----------------------------------------------------------------
    def compile(self) -> list[CompileRecord]:
        """Compile what changed since the last compile (what a call would do lazily)."""
        return self._parts.compiler.compile(self._state)

    def recompile(self) -> list[CompileRecord]:
        """Compile everything again, bypassing every cache."""
        self._commit()  # handles let go of the code compiled before
        return self._parts.compiler.recompile(self._state)

    @property
    def module(self) -> CompiledPyModule:
        """The current compiled module as TVM's own `BasePyModule`, compiling first if stale."""
        return self._parts.compiler.module(self._state, self.device)

    # -- calling -------------------------------------------------------------------
    def __getattr__(self, name: str):
        """`NAME.fn`: a callable for function `fn`, compiled at its first call."""
        if name.startswith("_"):
            raise AttributeError(name)
        return LazyCallable(self._parts.calls, self.name, self.entry(name))

    # -- lifetime ------------------------------------------------------------------
    @property
    def kept(self) -> dict[str, int]:
        """What this module holds on to: kernel versions, Relax VMs, `R.call_py_func` names."""
        return self._parts.compiler.kept()

    def close(self) -> None:
        """Release compiled code, this module's `R.call_py_func` names and its remote session."""
        self._parts.runner.close()
        self._parts.compiler.close()
        self._commit()  # callables handed out earlier see the change and ask again

    def __del__(self):
        # at interpreter shutdown this may fail: the registry is cleared at exit anyway
        with contextlib.suppress(Exception):
            self._parts.compiler.bridge.close()


def _what(obj) -> str:
    return f"{len(obj)} functions" if isinstance(obj, (list, tuple)) else type(obj).__name__


def made_parts(live: LiveModule, reserved: frozenset[str], persistent_cache) -> ModuleParts:
    """The parts of `live`, each made once with all it depends on: the build with its builder
    (here, or the build worker with --isolate), what it reports and where a binding came
    from; the runner with what its callables need (`reserved`: the module's own names, which
    no function's callable takes). Nothing is hung on a part later."""
    name, options = live.name, live.options
    local = remote_address(options) is None
    # a remote VM runs on the server, which cannot call back into this process's Python
    assembly = Assembly(name, relax_may_call_python=local)
    reporter = Reporter(live)
    torch_origins: dict = {}
    constants = ConstantTable()
    builder = WorkerBuilder.isolating(options, name) if options.isolate else HERE
    build = Build(
        options,
        live.stats,
        persistent_cache,
        name,
        local=local,
        builder=builder,
        compiling=reporter.compiling,
        site_of=functools.partial(binding_site, torch_origins),
    )
    check_target_runs_on(build.target, options, live.device)
    builder.warm()
    consts = functools.partial(named_constants, assembly, constants, torch_origins)
    calling = Calling(vars(live), reserved, live, consts)
    runner = make_runner(name, assembly, build, live.device, options, calling)
    return ModuleParts(
        name,
        options,
        live.device,
        assembly,
        runner.compiler,
        runner,
        runner.calls,
        build.schedules,
        torch_origins=torch_origins,
        constants=constants,
        namespace=live.namespace,
        reporter=reporter,
    )
