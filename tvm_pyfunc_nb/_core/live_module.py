"""`LiveModule`: one IRModule built from many cells, changed in place, compiled lazily.

The facade over the parts that each own one concern:

- `Assembly` (assembly.py): contributions (cells, added modules, schedules)
  in, one checked IRModule out, transactionally;
- `Build` (build.py): compiled PrimFunc libraries and Relax VMs, the
  pipeline, the caches;
- `CallTable` (calls.py): the fast callables and the latest call of each
  function;
- `PyFuncBridge` (trampolines.py): `R.call_py_func` into the current pyfuncs.

The rule that ties them together is `_commit`: when the module changes, the
call table's handles re-resolve at their next call. The core knows nothing
about IPython; a front end (front_end.py) is asked for what needs one.
"""

from __future__ import annotations

import contextlib
import inspect
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import tvm
import tvm_ffi
from tvm import relax

from ..errors import CallError, CompileError, ScheduleError, TVMModuleError, last_reason
from . import front_end
from .assembly import Assembly, ModuleState, Proposal, UpdateResult
from .build import AUTO_PIPELINE, Build, CompileRecord, CompileStats
from .calling import allocate_outputs
from .calls import CallTable, RecordView, refused, signature_of, unknown_function
from .cells import PRIMFUNC, PYFUNC, RELAX, FunctionSource, split_cell
from .comparing import Comparison, op_checks, output_differences
from .compiled_module import CompiledPyModule
from .contributions import Contribution, FunctionEntry, from_cell, next_run, owners, pyfunc_entry
from .crash_guards import has_guards
from .editing import ConstantTable, function_text, module_text, name_constants
from .exporting import LibraryExport, python_file
from .function_tuning import FunctionTuningReport, KernelSchedules, schedules_dir, tune_function
from .importing import TorchOrigin, added_contribution, import_torch, typed_global_var
from .lowering import generated_source, kernels_of, lowered_prim_func, lowered_relax
from .pyfunc_loader import forget_cell_text, register_cell_text, runtime_pyfunc_source
from .relax_rewrite import py_func_calls, relax_closure, sub_module
from .remote import DEFAULT_TIMEOUT, RemoteRunner
from .scheduling import TuningReport, by_hand, dlight, tune, work_dir_for
from .tensors import to_torch, to_tvm_args, to_tvm_tensor
from .timing import Measurement, Timing, evaluator_samples, name_of, wall_clock_samples
from .tracing import Trace, tapped, traced_values
from .trampolines import PyFuncBridge


@dataclass(frozen=True)
class ModuleOptions:
    """What a live module was made for: `%%tvmmodule` options, fixed for its lifetime."""

    target: str
    device: str
    pipeline: str
    checked: bool
    rpc: str | None = None  # `HOST:PORT` or `tracker=HOST:PORT/KEY`: compiled code runs there
    cross_compiler: str | None = None


class LiveModule:
    """A live TVM module: pyfuncs, PrimFuncs and Relax functions that cells change in place.

    `%%tvmmodule NAME` cells build one and bind it to `NAME`; without IPython,
    `LiveModule(name).run_cell(body)` does what such a cell does. Nothing
    compiles until a call needs it, and then only what changed.

    Calling (torch tensors in and out, zero-copy through DLPack; numpy arrays
    and tvm tensors are accepted as inputs):
        NAME.fn(*args)                        call `fn`, whatever its kind; a PrimFunc
                                              destination-passing style, outputs included
        NAME.call_tir(fn, args, out_ty)       allocate the outputs `out_ty` describes, run `fn`
        NAME.call_py_func(name, args)         call pyfunc `name`
        NAME.add_python_function(name, fn)    add a Python function as a pyfunc at run time

    Looking:
        NAME.functions        `{name: kind}`, kind "pyfunc", "tir" or "relax"
        NAME.script()         the whole module as TVMScript that parses back, pyfuncs included
        NAME.show()           the module's widget: a tab per function, with its latest call
        NAME.as_torch("fn")   Relax function `fn` as PyTorch source, what it cannot map flagged
        NAME.ir_mod           the current `tvm.IRModule`
        NAME.last_calls       the latest call of each function: arguments, result, time

    Compiling:
        NAME.compile()        compile what changed now rather than at the next call
        NAME.recompile()      compile everything again, bypassing every cache
        NAME.module           the compiled module as TVM's own `BasePyModule`
        NAME.stats            every TVM compile, and what each cache served, by function

    A mistake raises a `TVMModuleError` that names the function and the cell
    line; a cell or a call that fails leaves the module as it was.
    """

    def __init__(
        self,
        name: str,
        *,
        target: str = "llvm",
        device: str = "cpu",
        pipeline: str | None = None,
        checked: bool = True,
        rpc: str | None = None,
        rpc_timeout: float = DEFAULT_TIMEOUT,
        cross_compiler: str | None = None,
        namespace: Mapping[str, Any] | None = None,
        persistent_cache=None,
    ):
        self.name = name
        self.target = target
        self.device_name = device
        self.device = _device(device)
        self.namespace = namespace if namespace is not None else {}
        self.stats = CompileStats()
        # a remote VM runs on the server, which cannot call back into this process's Python
        self._assembly = Assembly(name, relax_may_call_python=rpc is None)
        self._build = Build(
            target,
            self.device,
            self.stats,
            pipeline=pipeline,
            persistent=persistent_cache,
            checked=checked,
            module_name=name,
            local=rpc is None,
        )
        _check_target_runs_on(self._build.target, target, self.device, device)
        self._schedules = KernelSchedules(
            schedules_dir(persistent_cache, name, self._build.target), self._build.target
        )
        self._build.after_pipeline = self._schedules.apply
        self.options = ModuleOptions(
            target, device, pipeline or AUTO_PIPELINE, checked, rpc, cross_compiler
        )
        self._remote = None
        if rpc:
            self._remote = RemoteRunner(
                rpc,
                device,
                timeout=rpc_timeout,
                cross_compiler=cross_compiler,
                on_upload=lambda n, size: self.stats.uploads.append((n, size)),
            )
        self._calls = CallTable(self, self._resolve, self.stats)
        self._bridge = PyFuncBridge(self._calls, name)
        self._compiled_version = -1
        self._torch_origins: dict[str, TorchOrigin] = {}
        self._consts = ConstantTable()
        self._vm_state: tuple[int, Any, dict[str, CompileError]] | None = (
            None  # (version, vm, failures)
        )
        self._closed = False
        me = weakref.ref(self)
        self._build.on_compile = lambda kind, names: front_end.current().compiling(
            me(), kind, names
        )
        # names `NAME.<name>` gives the module's own, not a function's
        self._own_names = frozenset(n for n in [*vars(self), *dir(type(self))] if n[0] != "_")

    # -- contributions -------------------------------------------------------------
    def run_cell(
        self,
        text: str,
        *,
        key: object = None,
        origin: str | None = None,
        reset: bool = False,
        header: str | None = None,
        eager: bool = False,
    ) -> UpdateResult:
        """Apply a cell body: replace what cell `key` contributed before, or change nothing at all.

        `key` identifies the cell (the front end's cell id); without one, a re-run
        replaces functions by name. `origin` names the cell in notices. With
        `eager`, the module is compiled before the change is made, and a compile
        failure leaves the module as it was.
        """
        number = next_run()
        key = key if key is not None else ("run", number)
        filename = f"<tvmmodule {self.name} cell {number}>"
        register_cell_text(filename, header or f"%%tvmmodule {self.name}", text)
        try:
            fragment = split_cell(text, key)
            reset = reset or bool(fragment.full_class)
            others = (
                {}
                if reset
                else owners(c for k, c in self._assembly.state.contributions.items() if k != key)
            )
            contribution = from_cell(
                fragment,
                run=number,
                filename=filename,
                origin=origin or f"cell run {number}",
                module_name=self.name,
                others=others,
                namespace=self.namespace,
                consts=self.consts,
            )
            return self._apply(self._assembly.propose(contribution, reset=reset), eager=eager)
        except BaseException:
            forget_cell_text(filename)  # nothing of this run was committed
            raise

    def drop_functions(self, key: object) -> list[str]:
        """Forget what contribution `key` brought (as if it had never run); returns what left."""
        if key not in self._assembly.state.contributions:
            return []
        return self._apply(self._assembly.propose(drop=[key])).removed

    def add_python_function(self, name: str, func: Callable) -> None:
        """Add a pyfunc at run time: callable from Relax through `R.call_py_func` and shown in
        `script()`.
        """
        if not isinstance(name, str) or not name.isidentifier():
            raise CallError(f"`{name}` is not a valid function name")
        if not callable(func):
            raise CallError(
                f"add_python_function needs a callable, got {type(func).__name__}", function=name
            )
        key = ("add_python_function", name)
        source = FunctionSource(name, PYFUNC, runtime_pyfunc_source(name, func), 0)
        entry = pyfunc_entry(source, key, "", func)
        contribution = Contribution(key, f"add_python_function({name!r})", {name: entry})
        self._apply(self._assembly.propose(contribution))

    def add(self, obj, *, name: str | None = None) -> UpdateResult:
        """Add what `obj` holds as one contribution: an IRModule (every function, its constants and
        attributes), a PrimFunc, a Relax Function (`name=` if it has no global symbol), a Python
        callable (as a pyfunc), or a list of them. Adding the same names again replaces it; a cell
        that defines one of them later takes it over.
        """
        result = self._add(obj, name, f"{self.name}.add({_what(obj)})")
        for defined in result.defined:  # no longer the function a PyTorch model became
            self._torch_origins.pop(defined, None)
        return result

    def add_torch(
        self, model, example_args, *, name: str = "main", dynamic_shapes=None
    ) -> UpdateResult:
        """Import `model` (a `torch.nn.Module`) as Relax function `name`, its weights as constants.

        Through `torch.export` and TVM's `from_exported_program`; the exported
        graph is kept, so that `compare(name, model, ...)` goes op by op.
        """
        func, origin = import_torch(model, example_args, name=name, dynamic_shapes=dynamic_shapes)
        result = self._add(func, name, f"{self.name}.add_torch({type(model).__name__})")
        self._torch_origins[name] = origin
        return result

    def _add(self, obj, name: str | None, origin: str) -> UpdateResult:
        contribution = added_contribution(
            obj, name=name, module_name=self.name, namespace=self.namespace, origin=origin
        )
        return self._apply(self._assembly.propose(contribution))

    def _apply(self, proposal: Proposal, *, eager: bool = False) -> UpdateResult:
        proposal.result.shadowed = [n for n in proposal.result.defined if n in self._own_names]
        if eager:
            proposal.result.compiled = self._compile_state(proposal.state, use_cache=True)
        self._commit(proposal)
        if eager:
            self._compiled_version = self._calls.version
        return proposal.result

    def _commit(self, proposal: Proposal) -> None:
        """The one rule: the module changed, so every handle re-resolves at its next call."""
        self._assembly.commit(proposal)
        self._calls.changed(redefined=proposal.fresh, remaining=proposal.state.entries)

    # -- what is there -------------------------------------------------------------
    @property
    def _state(self) -> ModuleState:
        return self._assembly.state

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
        return RecordView(self._calls.records)

    def entry(self, name: str) -> FunctionEntry:
        """What the module knows of function `name`: source, kind, origin, TVM function."""
        try:
            return self._state.entries[name]
        except KeyError:
            raise unknown_function(self.name, self._state.entries, name) from None

    def origin_of(self, name: str) -> str:
        """Where function `name` comes from now, as notices say it ("cell In[3]")."""
        return self._state.contributions[self.entry(name).contribution].origin

    @property
    def is_stale(self) -> bool:
        """True when the module changed since its last compile (the next call compiles that)."""
        return self._compiled_version != self._calls.version

    def __repr__(self) -> str:
        kinds = self.functions
        counts = ", ".join(
            f"{sum(1 for k in kinds.values() if k == kind)} {kind}"
            for kind in (PYFUNC, PRIMFUNC, RELAX)
        )
        state = "stale" if self.is_stale else "compiled"
        return f"<LiveModule {self.name}: {counts}; {state}; target {self.target}>"

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._state.entries))

    def script(self) -> str:
        """TVMScript of the whole module, every pyfunc's source included; it parses back (in a
        `%%tvmmodule` cell: weights are written `NAME.consts.<name>`)."""
        return module_text(
            self.name, self.ir_mod, self.consts, self._constant_names(), f"{self.name}.consts."
        )

    def show(self) -> None:
        """Display the module's widget: a tab per function (script, latest call), the script."""
        front_end.current().show(self)

    def as_torch(self, fn: str) -> str:
        """Relax function `fn` as PyTorch source text (TVM's op mapping); what it cannot map is
        flagged.
        """
        from .torch_source import relax_to_torch_source

        return relax_to_torch_source(fn, self._relax_entry(fn, "as_torch").func)

    def list_functions(self) -> dict[str, list[str]]:
        """As upstream `BasePyModule.list_functions()`: `{"tir": [...], "relax": [...], "python":
        [...]}`.
        """
        kinds = {PRIMFUNC: "tir", RELAX: "relax", PYFUNC: "python"}
        listed: dict[str, list[str]] = {"tir": [], "relax": [], "python": []}
        for name, kind in self.functions.items():
            listed[kinds[kind]].append(name)
        return listed

    def get_function(self, name: str) -> Callable:
        """As upstream `BasePyModule.get_function(name)`: the callable of function `name`."""
        self.entry(name)
        return getattr(self, name)

    # -- looking inside ----------------------------------------------------------------
    def edit_text(self, fn: str) -> str:
        """The cell that defines `fn` as it is now: `%%tvmmodule NAME` and its TVMScript (a
        pyfunc's source), weights named `NAME.consts.<name>`. Running it makes the cell the owner.
        """
        entry = self.entry(fn)
        if entry.kind == PYFUNC:
            text = entry.source.source
        else:
            text = function_text(self.name, self.ir_mod, fn, self.consts, self._constant_names())
        return f"%%tvmmodule {self.name}\n{text}"

    def edit(self, fn: str) -> str | None:
        """Put `fn`'s cell (`edit_text`) in a new cell below, as `%load` does; run it to make it
        `fn`'s owner. Outside a notebook the text is returned instead.
        """
        text = self.edit_text(fn)
        return None if front_end.current().next_input(text) else text

    def export(self, path: str, *, example: tuple | None = None) -> str:
        """Write the module to `path` as a standalone Python file: its TVMScript (pyfuncs and
        weights included) and a `load()` that compiles it with plain TVM, pyfuncs callable from
        Relax. `example=("fn", args)` runs `fn` on `args` now, and `python path` checks that it
        gives the same numbers. Returns `path`."""
        if example is not None:
            if not isinstance(example, (tuple, list)) or len(example) != 2:
                raise CallError('export: example is ("function", (arguments, ...))')
            fn, args = example
            if self.entry(fn).kind == PRIMFUNC:
                raise CallError(
                    "export: the example must be a Relax function or a pyfunc (a "
                    "PrimFunc writes its outputs into its arguments)",
                    function=fn,
                )
            args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
            example = (fn, args, self.get_function(fn)(*args))
        script = module_text(
            self.name, self.ir_mod, self.consts, self._constant_names(), "consts.", py_module=True
        )
        constants = {name: self.consts.numpy(name) for name in self.consts}
        pyfuncs = [n for n, kind in self.functions.items() if kind == PYFUNC]
        text = python_file(self.name, script, pyfuncs, constants, example)
        with open(path, "w") as out:
            out.write(text)
        return path

    def export_library(self, path: str) -> LibraryExport:
        """Export the compiled PrimFuncs and Relax functions as one library at `path`, for
        `tvm.runtime.load_module`: `relax.VirtualMachine(lib, device)` runs the Relax functions,
        `lib.get_function(name, query_imports=True)` a PrimFunc. Relax functions that call
        pyfuncs are left out (a library cannot carry Python); the result says which."""
        state = self._state
        left_out = {}
        relax_names = []
        for name, entry in state.entries.items():
            if entry.kind != RELAX:
                continue
            closure = [state.entries[n] for n in relax_closure([name], state.ir_mod)]
            calls_python = [
                e
                for e in closure
                if e.kind == PYFUNC or (e.kind == RELAX and py_func_calls(e.func))
            ]
            if calls_python:
                left_out[name] = "calls Python (a pyfunc), which a library cannot carry"
            else:
                relax_names.append(name)
        kernels = {n: e.func for n, e in state.entries.items() if e.kind == PRIMFUNC}
        mod = sub_module(state.ir_mod, relax_closure(relax_names, state.ir_mod))
        linked = self._build.export_library(mod, kernels, path)
        return LibraryExport(path, relax_names, [n for n in linked if n in kernels], left_out)

    @property
    def consts(self) -> ConstantTable:
        """The module's tensor constants (weights) by name: `NAME.consts.fc1_weight` is the
        constant itself, as edit and script text write it; `NAME.consts.numpy(name)` its value."""
        name_constants(self.ir_mod, self._consts, self._constant_names())
        return self._consts

    def _constant_names(self) -> dict:
        """Weights' names as the importer knew them (`fc1_weight`), for edit and export text."""
        return {c: n for o in self._torch_origins.values() for c, n in o.constant_names.items()}

    def trace(self, fn: str, *args) -> Trace:
        """Run Relax function `fn` once and return every intermediate by binding name (in order),
        each a `torch.Tensor`; shown as a table of binding, op, shape, dtype, min/max/mean."""
        entry = self._relax_entry(fn, "trace")
        copy, taps = tapped(entry.func)
        state = self._state
        names = [n for n in relax_closure([fn], state.ir_mod) if state.entries[n].kind != PYFUNC]
        mod = sub_module(state.ir_mod, names)
        mod = tvm.IRModule(
            {gv: copy if gv.name_hint == fn else f for gv, f in mod.functions_items()},
            attrs=mod.attrs,
        )
        linked = self._build.link(
            self._bridge.vm_module(mod)
        )  # kept: tracing again compiles nothing
        if self._remote is not None:
            output, values = self._remote.call_relax(fn, linked, args, returns_tuple=True)
        else:
            vm = linked.vm(self.device)
            output, values = self._calls.run_compiled(entry, vm[fn], args, device=self.device)
        return Trace(fn, traced_values(taps, values), output)

    def compare(
        self, fn: str, reference, *args, rtol: float = 1e-5, atol: float = 1e-6
    ) -> Comparison:
        """Run `fn` and `reference` (a callable or torch.nn.Module) on `args`: each output's largest
        absolute and relative error, pass/fail; op by op when `fn` came from `add_torch(reference)`,
        naming the first binding that diverges and the PyTorch op behind it."""
        origin = self._torch_origins.get(fn)
        with torch.no_grad():
            expected = reference(*args)
        if origin is None or origin.model is not reference or self.entry(fn).kind != RELAX:
            actual = self.get_function(fn)(*args)
            why = (
                ""
                if origin is None
                else f"op by op needs the model `{fn}` was imported from with add_torch"
            )
            return Comparison(
                self.name,
                fn,
                rtol,
                atol,
                output_differences(actual, expected, rtol, atol),
                why_not_op_by_op=why,
            )
        trace = self.trace(fn, *args)
        return Comparison(
            self.name,
            fn,
            rtol,
            atol,
            output_differences(trace.output, expected, rtol, atol),
            op_checks(trace, origin, args, rtol, atol),
        )

    def lowered(self, fn: str) -> str:
        """`fn` as TVM lowered it: a Relax function after the module's pipeline (with the kernels
        it calls), a PrimFunc after TIR lowering. Computed now, never on a call's path."""
        entry = self.entry(fn)
        if entry.kind == PRIMFUNC:
            return lowered_prim_func(self._build, fn, entry.func)
        return lowered_relax(self._linked_for(fn, "lowered"), fn)

    def kernels(self, fn: str) -> list[str]:
        """The kernels (PrimFuncs) Relax function `fn` runs after the module's pipeline."""
        return kernels_of(self._linked_for(fn, "kernels"), fn)

    def source(self, fn: str, fmt: str | None = None) -> str:
        """The code TVM generated for `fn`: LLVM IR (`fmt="ll"`, the default) or assembly
        (`"asm"`) on a CPU target, CUDA source on a CUDA target; for a Relax function, that of
        every kernel it runs."""
        entry = self.entry(fn)
        build, target = self._build, self._build.target
        # built again here: a library the compile cache loaded from disk holds no source
        if entry.kind == PRIMFUNC:
            return generated_source(build.build_kernel_module(fn, entry.func), fn, target, fmt)
        linked = self._linked_for(fn, "source")
        comment = ";" if target.kind.name == "llvm" and fmt in (None, "ll", "llvm") else "//"
        return "\n".join(
            f"{comment} kernel {k}\n"
            + generated_source(build.build_kernel_module(k, linked.lowered[k]), k, target, fmt)
            for k in kernels_of(linked, fn)
        )

    def time(self, fn: str, *args, number: int = 10, repeat: int = 5, against=None) -> Timing:
        """Time `fn` on `args`: TVM's `time_evaluator` on the module's device for compiled
        functions (a wall-clock loop for pyfuncs), `repeat` measurements of `number` calls each.
        `against=callable` times a reference (e.g. `torch.matmul`) on the same inputs, and
        the result shows the ratio; mean, median and std are in seconds."""
        if number < 1 or repeat < 1:
            raise CallError("time: number and repeat must be at least 1", function=fn)
        entry = self.entry(fn)
        self.get_function(fn)(*args)  # compiles if needed, and checks the arguments
        if entry.kind == PYFUNC:
            mine = Measurement(
                fn, wall_clock_samples(self.get_function(fn), args, number, repeat), "wall clock"
            )
        else:
            samples = self._time_compiled(entry, args, number, repeat)
            where = (
                f"remote {self.device_name} ({self._remote.address})"
                if self._remote
                else (self.device_name)
            )
            mine = Measurement(fn, samples, f"time_evaluator on {where}")
        reference = None
        if against is not None:
            try:
                against(*args)
            except Exception as err:
                raise CallError(
                    f"the reference `{name_of(against)}` refused these arguments: "
                    f"{type(err).__name__}: {last_reason(err)}",
                    function=fn,
                ) from err
            reference = Measurement(
                name_of(against), wall_clock_samples(against, args, number, repeat), "wall clock"
            )
        return Timing(mine, reference, self._guard_note(entry))

    def _time_compiled(self, entry: FunctionEntry, args: tuple, number: int, repeat: int):
        fn, remote = entry.name, self._remote
        if entry.kind == PRIMFUNC:
            lib = self._kernel(entry)
            module = remote.module(fn, lib) if remote else lib
        else:
            linked = self._linked_for(fn, "time")
            module = remote.vm(linked) if remote else linked.vm(self.device)
        if remote is not None:
            return remote.time(module, fn, args, number, repeat)
        evaluator = module.time_evaluator(fn, self.device, number=number, repeat=repeat)
        try:
            return evaluator_samples(evaluator, to_tvm_tensor(list(args)))
        except Exception as err:
            raise refused(fn, None, args, err, self.device) from err

    def _guard_note(self, entry: FunctionEntry) -> str:
        if entry.kind == PRIMFUNC and self.options.checked and has_guards(entry.func, entry.name):
            return (
                f"`{entry.name}` carries bounds or division checks (the crash guards); "
                "a module made with --unchecked times it without them"
            )
        return ""

    # -- making kernels fast ---------------------------------------------------------
    def schedule(self, kernel: str, how) -> UpdateResult | list[str]:
        """Schedule PrimFunc `kernel`: `how="dlight"` applies TVM's DLight default schedules for
        the target; `how=function` calls `function(sch)` with a `tvm.s_tir.Schedule` of the kernel
        (its function is `main`: `sch.get_sblock("C")`) to apply primitives. The result replaces
        the kernel until the kernel's own cell runs again.

        `schedule("fn", "dlight")` on a Relax function applies DLight to every kernel its
        pipeline makes, whenever it compiles (on a GPU target, what binds their threads);
        returns the kernels DLight scheduled."""
        if self.entry(kernel).kind == RELAX and isinstance(how, str) and how == "dlight":
            return self._dlight_function(kernel)
        entry = self._prim_entry(kernel, "schedule")
        if isinstance(how, str) and how == "dlight":
            func, what = dlight(entry.func, kernel, self._build.target), '"dlight"'
        elif callable(how):
            func, what = by_hand(entry.func, kernel, how), getattr(how, "__name__", "a function")
        else:
            raise CallError(
                'schedule: how must be "dlight" or a function of a tvm.s_tir.Schedule',
                function=kernel,
            )
        return self._replace_kernel(entry, func, f"{self.name}.schedule({kernel!r}, {what})")

    def tune(self, kernel: str, trials: int = 32) -> TuningReport | FunctionTuningReport:
        """Tune PrimFunc `kernel` with MetaSchedule (`trials` candidates measured here, progress
        shown), then use the best schedule found, as `schedule` does. Its database is kept (in
        the compile cache's directory), so tuning again reuses the trials already measured.

        For a Relax function, the kernels its pipeline makes (`kernels(fn)`) are tuned
        together, sharing the trials by weight; their best schedules are used whenever the
        function compiles, also in a later kernel process with the same compile cache. The
        report is a table: kernel, time before, time after."""
        if not isinstance(trials, int) or trials < 1:
            raise CallError("tune: trials must be a positive number", function=kernel)
        if self.entry(kernel).kind == RELAX:
            return self._tune_function(kernel, trials)
        original = self._original_kernel(self._prim_entry(kernel, "tune"))
        persistent = self._build.persistent
        work_dir = work_dir_for(
            str(persistent.directory) if persistent else None,
            kernel,
            original.func,
            self._build.target,
        )
        func, report = tune(
            original.func,
            kernel,
            self._build.target,
            trials,
            work_dir,
            lambda todo: front_end.current().progress(self, f"tuning {kernel}", todo),
        )
        self._replace_kernel(original, func, f"{self.name}.tune({kernel!r}, trials={trials})")
        return report

    def _tune_function(self, fn: str, trials: int) -> FunctionTuningReport:
        if self._remote is not None or self._build.target.kind.name != "llvm":
            raise ScheduleError(
                "tune measures each candidate on this machine's CPU, so it needs a module for "
                f"an llvm target run here (this one: --target {self.target}"
                f"{' --rpc ' + self.options.rpc if self.options.rpc else ''})",
                function=fn,
            )
        self._linked_for(fn, "tune")  # compile errors first, as a call would give them
        lowered = self._build.lower(self._vm_module(self._state, [fn]), scheduled=False)
        report = tune_function(
            lowered,
            fn,
            self._schedules,
            trials,
            lambda todo: front_end.current().progress(self, f"tuning {fn}", todo, "trials"),
        )
        self._kernel_schedules_changed()
        return report

    def _dlight_function(self, fn: str) -> list[str]:
        """DLight over every kernel of Relax function `fn`; the kernels it scheduled."""
        self._relax_entry(fn, "schedule")
        try:  # not linked first: on a GPU the kernels may not compile before DLight binds them
            lowered = self._build.lower(self._vm_module(self._state, [fn]), scheduled=False)
        except Exception as err:  # TVM raises many types; each means "this does not lower"
            raise CompileError(f"Relax lowering failed: {last_reason(err)}", function=fn) from err
        scheduled = self._schedules.dlight_kernels_of(lowered, fn)
        if not scheduled:
            raise ScheduleError(
                f"DLight has no schedule for any kernel of it on target "
                f"{self._build.target.kind.name} (its kernels are scheduled already, or, on a "
                "CPU, are not GEMV or reductions: try tune)",
                function=fn,
            )
        self._schedules.dlight.add(fn)
        self._kernel_schedules_changed()
        return scheduled

    def _kernel_schedules_changed(self) -> None:
        """Relax functions compile again, their kernels scheduled as `_schedules` says now."""
        self._build.forget_linked()
        self._vm_state = None
        self._calls.changed()

    def _prim_entry(self, kernel: str, what: str) -> FunctionEntry:
        return self._entry_of_kind(kernel, PRIMFUNC, what)

    def _original_kernel(self, entry: FunctionEntry) -> FunctionEntry:
        """The kernel as its cell (or `add`) made it, before any schedule."""
        contribution = self._state.contributions[entry.contribution]
        base = self._state.contributions.get(contribution.derived_from)
        return base.functions[entry.name] if base is not None else entry

    def _replace_kernel(self, entry: FunctionEntry, func, origin: str) -> UpdateResult:
        """`func` as kernel `entry.name`: a contribution of its own, derived from the original's."""
        name = entry.name
        base = self._original_kernel(entry).contribution
        key = ("schedule", name)
        func = func.with_attr("global_symbol", name)
        source = FunctionSource(name, PRIMFUNC, "", 0)
        scheduled = FunctionEntry(
            source, key, "", typed_global_var(name, func), func, run=next_run()
        )
        contribution = Contribution(
            key, origin, {name: scheduled}, derived_from=base, reports_rerun=True
        )
        return self._apply(self._assembly.propose(contribution))

    def _linked_for(self, fn: str, what: str):
        self._relax_entry(fn, what)
        linked, failures = self._linked_of(self._state)
        if fn in failures:
            raise failures[fn]
        return linked

    def _relax_entry(self, fn: str, what: str) -> FunctionEntry:
        return self._entry_of_kind(fn, RELAX, what)

    def _entry_of_kind(self, fn: str, kind: str, what: str) -> FunctionEntry:
        entry = self.entry(fn)
        if entry.kind != kind:
            wanted = {PRIMFUNC: "a PrimFunc", RELAX: "a Relax function"}[kind]
            raise CallError(f"{what} needs {wanted}, but `{fn}` is a {entry.kind}", function=fn)
        return entry

    # -- compiling -----------------------------------------------------------------
    def compile(self) -> list[CompileRecord]:
        """Compile what changed since the last compile (what a call would do lazily)."""
        return self._compile_state(self._state, use_cache=True, commit=True)

    def recompile(self) -> list[CompileRecord]:
        """Compile everything again, bypassing every cache."""
        self._build.clear()
        self._vm_state = None
        self._calls.changed()
        return self._compile_state(self._state, use_cache=False, commit=True)

    def _compile_state(self, state: ModuleState, *, use_cache: bool, commit: bool = False):
        """Build every PrimFunc and the VM of `state`; the first failure raises after all were
        tried.
        """
        mark = len(self.stats.compiles)
        kernels = self._kernels_of(state, None, use_cache)
        errors = [
            _placed(lib, state.entries[name])
            for name, lib in kernels.items()
            if isinstance(lib, CompileError)
        ]
        if any(e.kind == RELAX for e in state.entries.values()):
            _, failures = self._linked_of(state, use_cache=use_cache)
            errors += failures.values()
        if commit:
            self._compiled_version = self._calls.version
        if errors:
            raise errors[0]
        return self.stats.since(mark)

    @property
    def module(self) -> CompiledPyModule:
        """The current compiled module as TVM's own `BasePyModule`, compiling first if stale."""
        self.compile()
        state = self._state
        tir = {n: self._kernel(e)[n] for n, e in state.entries.items() if e.kind == PRIMFUNC}
        linked = self._linked_of(state)[0]
        vm = linked.vm(self.device) if linked is not None else None
        pyfuncs = {n: e.pyfunc for n, e in state.entries.items() if e.kind == PYFUNC}
        return CompiledPyModule(state.ir_mod, self.device, self._build.target, tir, vm, pyfuncs)

    def _kernel(self, entry: FunctionEntry, use_cache: bool = True):
        """The library of PrimFunc `entry`. The module's other PrimFuncs that no cache has are
        built with it, in one build: they are likely called next (a notebook run top to bottom
        then builds its kernels once, not once each)."""
        lib = self._kernels_of(self._state, {entry.name}, use_cache)[entry.name]
        if isinstance(lib, CompileError):
            raise _placed(lib, entry)
        return lib

    def _kernels_of(self, state: ModuleState, wanted: set[str] | None, use_cache: bool) -> dict:
        funcs = {n: e.func for n, e in state.entries.items() if e.kind == PRIMFUNC}
        return self._build.kernels(funcs, wanted=wanted, use_cache=use_cache)

    def _linked_of(self, state: ModuleState, use_cache: bool = True):
        """The linked Relax functions of `state`, and those that failed to compile (kept per
        version).
        """
        if state is self._state and self._vm_state and self._vm_state[0] == self._calls.version:
            return self._vm_state[1], self._vm_state[2]
        relax_names = [n for n, e in state.entries.items() if e.kind == RELAX]
        try:
            linked = self._build.link(self._vm_module(state, relax_names), use_cache=use_cache)
            failures = {}
        except CompileError:
            linked, failures = self._vm_isolating(state, relax_names, use_cache)
        if state is self._state:
            self._vm_state = (self._calls.version, linked, failures)
        return linked, failures

    def _vm_isolating(self, state: ModuleState, relax_names: list[str], use_cache: bool):
        """One Relax function failed to compile: find which, and build the VM from the others."""
        failures: dict[str, CompileError] = {}
        entries = state.entries
        for name in relax_names:
            try:
                self._build.link(self._vm_module(state, [name]), use_cache=use_cache)
            except (
                CompileError
            ) as err:  # `name` itself, or a PrimFunc it calls (then that one is to blame)
                culprit = err.function if err.function in entries else name
                detail = err.detail if culprit == name else f"{err.detail} (needed by `{name}`)"
                failures[name] = CompileError(detail, function=culprit, line=entries[culprit].line)
        good = [n for n in relax_names if n not in failures]
        good = [n for n in good if not (relax_closure([n], state.ir_mod) & set(failures))]
        for name in set(relax_names) - set(good) - set(failures):
            culprit = sorted(relax_closure([name], state.ir_mod) & set(failures))[0]
            failures[name] = CompileError(
                f"calls `{culprit}`, which does not compile: {failures[culprit].detail}",
                function=name,
            )
        linked = (
            self._build.link(self._vm_module(state, good), use_cache=use_cache) if good else None
        )
        return linked, failures

    def _vm_module(self, state: ModuleState, relax_names) -> tvm.IRModule:
        """What a VM is built of: Relax functions, the PrimFuncs they call, pyfunc calls bridged."""
        names = relax_closure(relax_names, state.ir_mod)
        kept = [n for n in names if state.entries[n].kind != PYFUNC]
        return self._bridge.vm_module(sub_module(state.ir_mod, kept))

    # -- calling -------------------------------------------------------------------
    def __getattr__(self, name: str):
        """`NAME.fn`: a callable for function `fn`, compiled at its first call; `CallError` if there
        is none.
        """
        if name.startswith("_"):
            raise AttributeError(name)
        return _LazyCallable(self, self.entry(name))

    def _resolve(self, name: str) -> Callable:
        """Compile what `name` needs and make its fast callable (the call table keeps it until a
        change).
        """
        if self._closed:
            raise CallError(
                f"module `{self.name}` was dropped; run its cells again to rebuild it",
                function=name,
            )
        entry = self.entry(name)
        if entry.kind == PYFUNC:
            return self._calls.pyfunc_callable(entry, self)
        if self._remote is not None:
            return self._remote_callable(entry)
        mark = len(self.stats.compiles)
        if entry.kind == PRIMFUNC:
            function, writes_args = self._kernel(entry)[name], True
        else:
            linked, failures = self._linked_of(self._state)
            self._compiled_version = self._calls.version
            if name in failures:
                raise failures[name]
            try:
                function, writes_args = linked.vm(self.device)[name], False
            except CallError as err:
                raise CallError(err.detail, function=name) from err.__cause__
        compiled = tuple(self.stats.since(mark))
        return self._calls.compiled_callable(
            entry, function, compiled, device=self.device, writes_args=writes_args
        )

    def _remote_callable(self, entry: FunctionEntry) -> Callable:
        """`entry` compiled here, uploaded and run on the remote device (at its first call)."""
        mark, name, remote = len(self.stats.compiles), entry.name, self._remote
        if entry.kind == PRIMFUNC:
            lib = self._kernel(entry)
            remote.kernel(name, lib)

            def invoke(args):
                return remote.call_kernel(name, lib, args)
        else:
            linked = self._linked_for(name, "a call")
            remote.vm(linked)
            self._compiled_version = self._calls.version
            returns_tuple = isinstance(entry.func.ret_ty, relax.TupleType)

            def invoke(args):
                return remote.call_relax(name, linked, args, returns_tuple)

        return self._calls.remote_callable(entry, invoke, tuple(self.stats.since(mark)))

    def call_tir(self, tir_func, args, out_ty=None, *, out_sinfo=None):
        """Allocate outputs per `out_ty`, then call PrimFunc `tir_func` (a name or a function).

        `out_sinfo=` is accepted as the spelling of TVM before 0.27.
        """
        name = _function_name(tir_func)
        entry = self._prim_entry(name, "call_tir")
        out_ty = _out_ty(out_ty, out_sinfo, "call_tir", name)
        args = list(args) if isinstance(args, (list, tuple)) else [args]
        outputs = allocate_outputs(entry.func, name, args, out_ty)
        self._calls.handle(name)(*args, *outputs)
        return outputs[0] if len(outputs) == 1 else outputs

    def call_dps_packed(self, name: str, args, out_ty=None, *, out_sinfo=None):
        """Call global packed function `name` destination-passing style, as upstream does: the
        outputs `out_ty` describes are allocated, passed after `args`, and returned."""
        out_ty = _out_ty(out_ty, out_sinfo, "call_dps_packed", name)
        func = tvm_ffi.get_global_func(name, allow_missing=True)
        if func is None:
            raise CallError(
                "no global packed function has this name; register it first (e.g. "
                "with tvm.register_global_func)",
                function=name,
            )
        args = list(args) if isinstance(args, (list, tuple)) else [args]
        outputs = allocate_outputs(None, name, args, out_ty)
        try:
            func(*to_tvm_args(args), *outputs)
        except Exception as err:
            raise refused(name, None, args, err, self.device) from err
        return outputs[0] if len(outputs) == 1 else outputs

    def call_py_func(self, name: str, args):
        """Call pyfunc `name` with `args` (a list or tuple), `self` being this live module."""
        entry = self.entry(name)
        if entry.kind != PYFUNC:
            raise CallError(
                f"call_py_func needs a pyfunc, but `{name}` is a {entry.kind}", function=name
            )
        return self._calls.handle(name)(*(args if isinstance(args, (list, tuple)) else [args]))

    @staticmethod
    def _convert_pytorch_to_tvm(tensors):
        """As upstream `BasePyModule`: torch tensors (one, or a list) as TVM tensors, through
        DLPack.
        """
        return to_tvm_tensor(tensors)

    @staticmethod
    def _convert_tvm_to_pytorch(tensors):
        """As upstream `BasePyModule`: TVM tensors (one, or a list) as torch tensors, through
        DLPack.
        """
        converted = to_torch(tensors)
        return list(converted) if isinstance(tensors, list) else converted

    # -- lifetime ------------------------------------------------------------------
    @property
    def kept(self) -> dict[str, int]:
        """What this module holds on to: compiled kernel versions, Relax VMs, `R.call_py_func`
        names.
        """
        return {**self._build.kept(), "registered_pyfunc_sites": len(self._bridge.names)}

    def close(self) -> None:
        """Release compiled code, this module's `R.call_py_func` registry entries, and its share
        of a remote session."""
        self._bridge.close()
        if self._remote is not None:
            self._remote.close()
            self._remote = None
        self._vm_state = None
        self._build.clear()
        self._closed = True
        self._calls.changed()  # callables handed out earlier see the change and ask again

    def __del__(self):
        # at interpreter shutdown this may fail: the registry is cleared at exit anyway
        with contextlib.suppress(Exception):
            self._bridge.close()


def _placed(err: CompileError, entry: FunctionEntry) -> CompileError:
    """`err` (a kernel that does not compile) naming the function and its line in its cell."""
    return CompileError(err.detail, function=entry.name, line=entry.line)


class _LazyCallable:
    """`NAME.fn` before `fn` is compiled: compiles on the first call, then hands over to the fast
    path.
    """

    def __init__(self, live: LiveModule, entry: FunctionEntry):
        self._live, self.__name__ = live, entry.name
        self.__signature__ = signature_of(entry)
        self.__doc__ = _doc_of(entry)

    def __call__(self, *args, **kwargs):
        return self._live._calls.handle(self.__name__)(*args, **kwargs)

    def __repr__(self) -> str:
        entry = self._live.entry(self.__name__)
        return f"<{entry.kind} {self._live.name}.{self.__name__}>"


def _what(obj) -> str:
    if isinstance(obj, (list, tuple)):
        return f"{len(obj)} functions"
    return type(obj).__name__


def _doc_of(entry: FunctionEntry) -> str | None:
    return inspect.getdoc(entry.pyfunc) if entry.pyfunc is not None else None


def _out_ty(out_ty, out_sinfo, what: str, name: str):
    if out_ty is not None and out_sinfo is not None:
        raise CallError(
            f"{what}: give out_ty or out_sinfo (its older name), not both", function=name
        )
    if out_ty is None and out_sinfo is None:
        raise CallError(
            f"{what}: out_ty is missing (the outputs' R.Tensor(shape, dtype))", function=name
        )
    return out_ty if out_ty is not None else out_sinfo


def _function_name(func) -> str:
    if isinstance(func, str):
        return func
    for attr in ("name_hint", "__name__", "name"):
        value = getattr(func, attr, None)
        if isinstance(value, str):
            return value
    raise CallError(f"expected a function name or a function, got {type(func).__name__}")


def _device(device: str):
    """`cpu`, `cpu:0`, `cuda:1`... as a TVM device, or a `TVMModuleError` saying what is wrong."""
    kind, _, index = device.partition(":")
    if not (index or "0").isdigit() or int(index or 0) >= 2**31:
        raise TVMModuleError(
            f"device `{device}`: the index after `:` must be a small non-negative number"
        )
    try:
        return tvm.runtime.device(kind, int(index or 0))
    except ValueError as err:
        raise TVMModuleError(f"device `{device}`: {err} (e.g. cpu, cpu:0, cuda:0)") from None


def _check_target_runs_on(
    target: tvm.target.Target, target_name: str, device, device_name: str
) -> None:
    runs_on = tvm.runtime.device(target.get_target_device_type(), 0)
    if runs_on.dlpack_device_type() != device.dlpack_device_type():
        raise TVMModuleError(
            f"target `{target_name}` runs on {runs_on.type} devices, not on `{device_name}`; "
            f"choose a {runs_on.type} device"
        )
