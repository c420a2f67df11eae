"""`LiveModule`: one IRModule built from many cells, changed in place, compiled lazily.

This is the core of the package and knows nothing about IPython. A cell is a
`CellFragment`; running one replaces what the same cell contributed before.
The whole module is checked before anything is replaced (transactional
update), and nothing compiles until a call needs it — then only what changed.
"""

from __future__ import annotations

import inspect
import itertools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import tvm
import tvm_ffi
from tvm import relax, tirx
from tvm.ir import GlobalVar

from . import py_registry
from .calling import (
    AS_IS_DTYPES, CallRecord, PyFuncTrampoline, allocate_outputs, bad_pyfunc_arguments, explain_bad_call, keywords_to_positions,
    pyfunc_error, specs_of, take_pending_error,
)
from .cell_fragment import PRIMFUNC, PYFUNC, RELAX, CellFragment, FunctionSource, split_cell
from .compiled_module import CompiledPyModule
from .crash_guards import out_of_bounds
from .compiler import CompileRecord, Compiler, CompileStats, relax_closure, sub_module
from .errors import CallError, CompileError, IllFormedModuleError, TVMModuleError, last_reason
from .pyfunc_loader import (
    CellGlobals, forget_cell_text, load_pyfunc, register_cell_text, run_preamble, runtime_pyfunc_source,
)
from .relax_rewrite import py_func_calls, rebind_global_vars, referenced_global_vars, rename_py_func_calls
from .tensors import to_torch, to_tvm_args, write_back
from .tvmscript_parse import parse_fragment

_cell_numbers = itertools.count(1)


@dataclass
class FunctionEntry:
    """One function of the module: where it came from and what it is now."""

    source: FunctionSource
    cell_key: object
    filename: str
    gvar: GlobalVar
    func: Any  # PrimFunc, relax.Function, or the pyfunc's ExternFunc placeholder
    pyfunc: Callable | None = None
    takes_self: bool = True

    @property
    def kind(self) -> str:
        """"pyfunc", "tir" or "relax"."""
        return self.source.kind

    @property
    def name(self) -> str:
        """The function's name in the module."""
        return self.source.name


@dataclass
class UpdateResult:
    """What running a cell changed."""

    module: str
    defined: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    replaced: dict[str, str] = field(default_factory=dict)  # name -> where the earlier definition came from
    compiled: list[CompileRecord] = field(default_factory=list)


class LiveModule:
    """A live TVM module: pyfuncs, PrimFuncs and Relax functions that cells change in place.

    `%%tvmmodule NAME` cells build one and bind it to `NAME`; without IPython,
    `LiveModule(name).run_cell(body)` does what such a cell does. Nothing
    compiles until a call needs it, and then only what changed.

    Calling (torch tensors in and out, zero-copy through DLPack; numpy arrays
    and tvm tensors are accepted as inputs):
        NAME.fn(*args)                        call `fn`, whatever its kind; a PrimFunc
                                              destination-passing style, outputs included
        NAME.call_tir(fn, args, out_ty)       allocate the outputs `out_ty` describes, run PrimFunc `fn`
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
        NAME.stats            every TVM compile (`stats.compiles`) and cache hit (`stats.cache_hits`)

    A mistake raises a `TVMModuleError` that names the function and the cell
    line; a cell or a call that fails leaves the module as it was.
    """

    def __init__(
        self,
        name: str,
        *,
        target: str = "llvm",
        device: str = "cpu",
        namespace: Mapping[str, Any] | None = None,
        persistent_cache=None,
    ):
        self.name = name
        self.target = target
        self.device_name = device
        self.device = _device(device)
        self.namespace = namespace if namespace is not None else {}
        self.stats = CompileStats()
        self.last_calls: dict[str, CallRecord] = {}
        self._compiler = _compiler(target, self.device, self.stats, persistent_cache)
        self._prefix = py_registry.new_prefix(name)
        self._fragments: dict[object, CellFragment] = {}
        self._parsed: dict[object, dict[str, FunctionEntry]] = {}
        self._origins: dict[object, str] = {}
        self._files: dict[object, str] = {}  # the linecache name of each cell's latest run
        self._entries: dict[str, FunctionEntry] = {}
        self._generation = 0
        self._ir_mod = tvm.IRModule({})
        self._callables: dict[str, Callable] = {}
        self._vm = None
        self._vm_key: int | None = None
        self._vm_failures: dict[str, CompileError] = {}
        self._registry_names: set[str] = set()
        self._compiled_generation = -1
        self._closed = False

    # -- cells ---------------------------------------------------------------------
    def run_cell(self, text: str, *, key: object = None, origin: str | None = None, reset: bool = False,
                 header: str | None = None) -> UpdateResult:
        """Apply a cell body: replace what cell `key` contributed before, or leave everything as it was.

        `key` identifies the cell (the front end's cell id); without one, a re-run
        replaces functions by name. `origin` names the cell in notices.
        """
        number = next(_cell_numbers)
        key = key if key is not None else ("run", number)
        filename = f"<tvmmodule {self.name} cell {number}>"
        register_cell_text(filename, header or f"%%tvmmodule {self.name}", text)
        try:
            fragment = split_cell(text, key)
            result = self._apply(fragment, filename, origin or f"cell run {number}", reset or bool(fragment.full_class))
        except BaseException:
            forget_cell_text(filename)
            raise
        return result

    def _all_but(self, key: object) -> tuple[dict, dict]:
        """Copies of the cell fragments and their parsed functions, without cell `key`'s."""
        return ({k: f for k, f in self._fragments.items() if k != key},
                {k: p for k, p in self._parsed.items() if k != key})

    def _apply(self, fragment: CellFragment, filename: str, origin: str, reset: bool) -> UpdateResult:
        fragments, parsed = ({}, {}) if reset else self._all_but(fragment.key)
        others = _owners(parsed)
        cell_globals = CellGlobals(self.namespace)
        run_preamble(fragment.preamble, filename, cell_globals)
        namespace = {**self.namespace, **cell_globals}
        new_entries: dict[str, FunctionEntry] = {}
        pyfunc_stubs = {}
        for source in fragment.functions.values():
            if source.kind == PYFUNC:
                pyfunc = load_pyfunc(source, filename, cell_globals)
                extern = _pyfunc_extern(source.name, source.source)
                pyfunc_stubs[source.name] = extern
                new_entries[source.name] = FunctionEntry(
                    source, fragment.key, filename, GlobalVar(source.name), extern, pyfunc, _takes_self(pyfunc)
                )
        funcs = parse_fragment(
            fragment, self.name, {n: e.func for n, e in others.items() if n not in fragment.functions},
            namespace, pyfunc_stubs,
        )
        for name, (gvar, func) in funcs.items():
            new_entries[name] = FunctionEntry(fragment.functions[name], fragment.key, filename, gvar, func)
        ordered = {name: new_entries[name] for name in fragment.functions}
        fragments[fragment.key] = fragment
        parsed[fragment.key] = ordered
        entries = _owners(parsed)
        try:
            entries, ir_mod = self._assemble(entries, fresh=set(ordered))
        except IllFormedModuleError as err:
            raise self._blame_other_cell(err, entries, fragment.key) from err.__cause__
        result = self._describe_update(fragment, ordered, entries, origin)
        self._commit(fragments, parsed, entries, ir_mod, {fragment.key: origin}, {fragment.key: filename},
                     redefined=list(ordered))
        return result

    def _blame_other_cell(self, err: IllFormedModuleError, entries, key) -> IllFormedModuleError:
        """An error about a function of another cell: its line is not a line of this cell, so say whose it is."""
        culprit = entries.get(err.function)
        if culprit is None or culprit.cell_key == key or err.line is None:
            return err
        origin = self._origins.get(culprit.cell_key, "an earlier cell")
        return IllFormedModuleError(f"{err.detail} (`{err.function}` is defined in {origin}, line {err.line})",
                                    function=err.function)

    def _describe_update(self, fragment, ordered, entries, origin) -> UpdateResult:
        result = UpdateResult(self.name, defined=list(ordered))
        for name in ordered:
            before = self._entries.get(name)
            if before is not None and before.cell_key != fragment.key:
                result.replaced[name] = self._origins.get(before.cell_key, "an earlier cell")
        result.removed = [n for n, e in self._entries.items() if n not in entries]
        return result

    def _assemble(self, entries: dict[str, FunctionEntry], fresh: set[str] = frozenset()):
        """Bind every cross-function reference to the callee's one GlobalVar and check the whole module.

        PrimFuncs are self-contained, so only the `fresh` ones need TIR's own checks again.
        """
        canonical = {name: e.gvar for name, e in entries.items()}
        pyfuncs = {n for n, e in entries.items() if e.kind == PYFUNC}
        bound = {}
        for name, entry in entries.items():
            if entry.kind == RELAX:
                _check_references(entry, canonical, pyfuncs)
                try:
                    func = rebind_global_vars(entry.func, canonical)
                except Exception as err:  # TVM normalizes while rebinding and refuses what does not fit
                    raise IllFormedModuleError(f"does not fit the module: {last_reason(err)}", function=name,
                                               line=entry.source.first_line) from err
                if not func.same_as(entry.func):
                    entry = FunctionEntry(**{**entry.__dict__, "func": func})
            bound[name] = entry
        ir_mod = tvm.IRModule({e.gvar: e.func for e in bound.values()}, attrs={"base_py_module": True})
        _check_well_formed(ir_mod, bound, fresh)
        return bound, ir_mod

    def _commit(self, fragments, parsed, entries, ir_mod, origins, files, redefined=()) -> None:
        for key in set(self._fragments) - set(fragments):
            self._origins.pop(key, None)
            forget_cell_text(self._files.pop(key, ""))
        for key, filename in files.items():
            if self._files.get(key, filename) != filename:
                forget_cell_text(self._files[key])
            self._files[key] = filename
        # entries rebound in _assemble replace their originals in the per-cell record
        for key, funcs in parsed.items():
            for name in funcs:
                if name in entries and entries[name].cell_key == key:
                    funcs[name] = entries[name]
        self._fragments, self._parsed, self._entries, self._ir_mod = fragments, parsed, entries, ir_mod
        self._origins.update(origins)
        self._generation += 1
        self._forget_callables()
        for name in [n for n in self.last_calls if n not in entries or n in redefined]:
            del self.last_calls[name]  # a new definition has had no call yet

    def drop_functions(self, key: object) -> list[str]:
        """Forget everything cell `key` contributed (as if it had never run); returns what left."""
        if key not in self._fragments:
            return []
        fragments, parsed = self._all_but(key)
        entries, ir_mod = self._assemble(_owners(parsed))
        removed = [n for n in self._entries if n not in entries]
        self._commit(fragments, parsed, entries, ir_mod, {}, {})
        return removed

    def add_python_function(self, name: str, func: Callable) -> None:
        """Add a pyfunc at run time: callable from Relax through `R.call_py_func` and shown in `script()`."""
        if not name.isidentifier():
            raise CallError(f"`{name}` is not a valid function name")
        source = runtime_pyfunc_source(name, func)
        key = ("add_python_function", name)
        origin = f"add_python_function({name!r})"
        source_info = FunctionSource(name, PYFUNC, source, 0)
        extern = _pyfunc_extern(name, source)
        entry = FunctionEntry(source_info, key, "", GlobalVar(name), extern, func, _takes_self(func))
        fragment = CellFragment(key=key, text=source, first_line=0, functions={name: source_info})
        fragments, parsed = self._all_but(key)
        fragments[key], parsed[key] = fragment, {name: entry}
        entries, ir_mod = self._assemble(_owners(parsed))
        self._commit(fragments, parsed, entries, ir_mod, {key: origin}, {}, redefined=[name])

    # -- what is there -------------------------------------------------------------
    @property
    def ir_mod(self) -> tvm.IRModule:
        """The current `tvm.IRModule` (pyfuncs as `ExternFunc`s carrying their source)."""
        return self._ir_mod

    @property
    def functions(self) -> dict[str, str]:
        """`{name: kind}` for every function, kind one of "pyfunc", "tir", "relax"."""
        return {name: e.kind for name, e in self._entries.items()}

    def entry(self, name: str) -> FunctionEntry:
        """What the module knows of function `name`: source, kind, cell, TVM function; `CallError` if none."""
        try:
            return self._entries[name]
        except KeyError:
            raise _unknown_function(self, name) from None

    def cell_functions(self, key: object) -> list[str]:
        """The functions cell `key` defines and still owns (a cell run later may have taken some over)."""
        return [n for n in self._parsed.get(key, {}) if self._entries.get(n) and self._entries[n].cell_key == key]

    @property
    def is_stale(self) -> bool:
        """True when the module changed since its last compile: the next call compiles what changed."""
        return self._compiled_generation != self._generation

    def __repr__(self) -> str:
        kinds = self.functions
        counts = ", ".join(f"{sum(1 for k in kinds.values() if k == kind)} {kind}" for kind in (PYFUNC, PRIMFUNC, RELAX))
        state = "stale" if self.is_stale else "compiled"
        return f"<LiveModule {self.name}: {counts}; {state}; target {self.target}>"

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._entries))

    def script(self) -> str:
        """TVMScript of the whole module, every pyfunc's source included; it parses back."""
        from .printer import module_script

        return module_script(self.name, self._ir_mod)

    def show(self) -> None:
        """Display the module's widget: a tab per function (script, latest call), the whole script."""
        from .display import show

        show(self)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        """`NAME` as a cell's last expression shows the module's widget (`repr` stays one line)."""
        from .display import module_view

        return module_view(self)._repr_mimebundle_(include=include, exclude=exclude)

    def watch_compiles(self, on_compile) -> None:
        """Run every TVM build of this module inside `on_compile(kind, names)`, a context manager."""
        self._compiler.on_compile = on_compile

    def as_torch(self, fn: str) -> str:
        """Relax function `fn` as PyTorch source text (TVM's op mapping); what it cannot map is flagged."""
        from .torch_source import relax_to_torch_source

        entry = self.entry(fn)
        if entry.kind != RELAX:
            raise CallError(f"as_torch needs a Relax function, but `{fn}` is a {entry.kind}", function=fn)
        return relax_to_torch_source(fn, entry.func)

    # -- compiling -----------------------------------------------------------------
    def compile(self) -> list[CompileRecord]:
        """Compile what changed since the last compile (what a call would do lazily)."""
        mark = len(self.stats.compiles)
        self._compile(use_cache=True)
        return self.stats.since(mark)

    def recompile(self) -> list[CompileRecord]:
        """Compile everything again, bypassing every cache."""
        self._compiler.clear()
        self._vm_key = None
        self._forget_callables()
        mark = len(self.stats.compiles)
        self._compile(use_cache=False)
        return self.stats.since(mark)

    def _compile(self, use_cache: bool) -> dict:
        """Every PrimFunc's library (`{name: lib}`) and the VM, built where needed; the first failure raises."""
        libs, errors = {}, []
        for name, entry in self._entries.items():
            if entry.kind == PRIMFUNC:
                try:
                    libs[name] = self._compiled_prim_func(entry, use_cache=use_cache)
                except CompileError as err:
                    errors.append(err)
        if any(e.kind == RELAX for e in self._entries.values()):
            self._ensure_vm(use_cache=use_cache)
        self._compiled_generation = self._generation
        if errors:
            raise errors[0]
        return libs

    @property
    def module(self) -> CompiledPyModule:
        """The current compiled module as TVM's own `BasePyModule`, compiling first if stale."""
        tir = {name: lib[name] for name, lib in self._compile(use_cache=True).items()}
        pyfuncs = {n: e.pyfunc for n, e in self._entries.items() if e.kind == PYFUNC}
        return CompiledPyModule(self._ir_mod, self.device, self._compiler.target, tir, self._vm, pyfuncs)

    def _compiled_prim_func(self, entry: FunctionEntry, use_cache: bool = True):
        try:
            return self._compiler.prim_func(entry.name, entry.func, use_cache=use_cache)
        except CompileError as err:
            raise CompileError(err.detail, function=entry.name, line=entry.source.first_line) from None

    def _ensure_vm(self, use_cache: bool = True):
        """The Relax VM for the current module, rebuilt only when a Relax function or what it calls changed."""
        relax_names = [n for n, e in self._entries.items() if e.kind == RELAX]
        previous_names, self._registry_names = self._registry_names, set()
        mod = self._vm_module(relax_names)
        key = tvm_ffi.structural_hash(mod)
        if key == self._vm_key:
            self._registry_names |= previous_names
            return self._vm
        try:
            vm, failures = self._compiler.relax_vm(mod, self.device, use_cache=use_cache), {}
        except CompileError:
            vm, failures = self._build_vm_isolating(relax_names, use_cache)
        self._vm, self._vm_key, self._vm_failures = vm, key, failures
        py_registry.unregister(previous_names - self._registry_names)
        return vm

    def _build_vm_isolating(self, relax_names, use_cache):
        """One Relax function failed to compile: find which, and build the VM from the others."""
        failures: dict[str, CompileError] = {}
        for name in relax_names:
            try:
                self._compiler.relax_vm(self._vm_module(relax_closure([name], self._ir_mod)), self.device,
                                        use_cache=use_cache)
            except CompileError as err:  # `name` itself, or a PrimFunc it calls (then that one is to blame)
                culprit = err.function if err.function in self._entries else name
                detail = err.detail if culprit == name else f"{err.detail} (needed by `{name}`)"
                failures[name] = CompileError(detail, function=culprit, line=self._entries[culprit].source.first_line)
        good = [n for n in relax_names if n not in failures]
        good = [n for n in good if not (relax_closure([n], self._ir_mod) & set(failures))]
        for name in set(relax_names) - set(good) - set(failures):
            culprit = sorted(relax_closure([name], self._ir_mod) & set(failures))[0]
            failures[name] = CompileError(f"calls `{culprit}`, which does not compile: {failures[culprit].detail}",
                                          function=name)
        vm = self._compiler.relax_vm(self._vm_module(good), self.device, use_cache=use_cache) if good else None
        return vm, failures

    def _vm_module(self, relax_names) -> tvm.IRModule:
        """The module the VM is built from: Relax functions, the PrimFuncs they call, pyfunc calls renamed."""
        names = relax_closure(relax_names, self._ir_mod)
        mod = sub_module(self._ir_mod, [n for n in names if self._entries[n].kind != PYFUNC])
        functions = {}
        for gv, func in mod.functions_items():
            if isinstance(func, relax.Function):
                counter = itertools.count()
                func = rename_py_func_calls(func, lambda py, ty, in_ty, caller=gv.name_hint, c=counter:
                                            self._trampoline(caller, py, ty, next(c), in_ty))
            functions[gv] = func
        return tvm.IRModule(functions)

    def _trampoline(self, caller: str, pyfunc: str, out_ty: list, index: int, in_ty: list) -> str:
        name = f"{self._prefix}.{caller}.{pyfunc}.{index}"
        py_registry.register(name, PyFuncTrampoline(self, pyfunc, out_ty, in_ty).ffi_function())
        self._registry_names.add(name)
        return name

    # -- calling -------------------------------------------------------------------
    def __getattr__(self, name: str):
        """`NAME.fn`: a callable for function `fn`, compiled at its first call; `CallError` if there is none."""
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._callables[name]
        except KeyError:
            pass
        entry = self._entries.get(name)
        if entry is None:
            raise _unknown_function(self, name)
        return _LazyCallable(self, name)

    def _callable(self, name: str) -> Callable:
        """Compile what `name` needs and return its fast callable (kept until the module changes)."""
        if self._closed:
            raise CallError(f"module `{self.name}` was dropped; run its cells again to rebuild it", function=name)
        entry = self.entry(name)
        if entry.kind == PYFUNC:
            fast = self._pyfunc_callable(entry)
        elif entry.kind == PRIMFUNC:
            fast = self._primfunc_callable(entry)
        else:
            fast = self._relax_callable(entry)
        self._callables[name] = fast
        if name not in self.__dict__ and not hasattr(type(self), name):
            self.__dict__[name] = fast  # `NAME.fn` is now a plain attribute lookup, without `__getattr__`
        return fast

    def _forget_callables(self) -> None:
        for name, fast in self._callables.items():
            if self.__dict__.get(name) is fast:
                del self.__dict__[name]
            # A callable may outlive the change (held by a user, or by a traceback in IPython's history);
            # it asks the module again when called, so the compiled code it holds can go now.
            getattr(fast, "release", _nothing)()
        self._callables.clear()

    def _fast(self, name: str) -> Callable:
        return self._callables.get(name) or self._callable(name)

    def _pyfunc_callable(self, entry: FunctionEntry) -> Callable:
        func, name, line, live, takes_self = entry.pyfunc, entry.name, entry.source.first_line, self, entry.takes_self
        perf_counter, now = time.perf_counter, time.time

        def call(*args, **kwargs):
            start = perf_counter()
            try:
                out = func(live, *args, **kwargs) if takes_self else func(*args, **kwargs)
            except BaseException as err:
                live._record(name, args, None, start, (), err)
                error = bad_pyfunc_arguments(name, func, takes_self, args, kwargs, err) or pyfunc_error(name, line, err)
                if error is err:
                    raise  # already the package's error (e.g. from a call the pyfunc made): keep its own chain
                raise error from err
            live.last_calls[name] = CallRecord(args, out, perf_counter() - start, (), None, now())
            return out

        call.__name__ = call.__qualname__ = name
        call.__doc__ = inspect.getdoc(func)
        return call

    def _primfunc_callable(self, entry: FunctionEntry) -> Callable:
        mark = len(self.stats.compiles)
        function = self._compiled_prim_func(entry)[entry.name]
        return self._compiled_callable(entry, function, tuple(self.stats.since(mark)), writes_args=True)

    def _relax_callable(self, entry: FunctionEntry) -> Callable:
        mark = len(self.stats.compiles)
        vm = self._ensure_vm()
        self._compiled_generation = self._generation
        if entry.name in self._vm_failures:
            raise self._vm_failures[entry.name]
        return self._compiled_callable(entry, vm[entry.name], tuple(self.stats.since(mark)), writes_args=False)

    def _compiled_callable(self, entry: FunctionEntry, function, compiled: tuple, *, writes_args: bool) -> Callable:
        """The fast path of a compiled PrimFunc or Relax function: torch in, torch out, the call recorded.

        The compiled function sits in a list that `release` empties: a callable may
        outlive a change (held by a user, or by a traceback in IPython's history),
        and then it asks the module again instead of keeping old code alive.
        """
        name, specs, live, generation = entry.name, specs_of(entry.func), self, self._generation
        holder = [function]
        perf_counter, now, tensor = time.perf_counter, time.time, torch.Tensor

        def converted_call(args):
            passed = to_tvm_args(args)
            out = holder[0](*passed)
            if writes_args:
                write_back(args, passed)  # outputs passed as views were written to contiguous copies
            return out

        def call(*args, **kwargs):
            nonlocal compiled
            if kwargs:
                args = keywords_to_positions(name, specs, args, kwargs)
            if live._generation != generation:
                return live._fast(name)(*args)
            start = perf_counter()
            try:
                # Inline, as this is the hot path: torch tensors of a dtype TVM knows go as they are
                # (others, e.g. complex ones TVM would abort on, are converted or refused first) ...
                for arg in args:
                    if arg.__class__ is not tensor or arg.dtype not in AS_IS_DTYPES:
                        out = converted_call(args)
                        break
                else:
                    try:
                        out = holder[0](*args)
                    except ValueError:  # ... and a view, which TVM refuses before running anything, is copied
                        if all(arg.is_contiguous() for arg in args):
                            raise
                        out = converted_call(args)
                if out is not None and out.__class__ is not tensor:
                    out = to_torch(out)
            except Exception as err:
                if py_registry.was_cleared(err):  # e.g. by an upstream BasePyModule.__del__
                    return live._fast(name)(*args)  # not `call`: a closure naming itself is a cycle keeping the VM
                error = take_pending_error() or explain_bad_call(name, specs, args, err, live.device)
                if not isinstance(error, TVMModuleError):
                    error = pyfunc_error(getattr(error, "function", name), None, error)
                live._record(name, args, None, start, (), error)
                raise error from (error.__cause__ or err)  # a pyfunc's error keeps its own traceback
            live.last_calls[name] = CallRecord(args, out, perf_counter() - start, compiled, None, now())
            compiled = ()
            return out

        call.__name__ = call.__qualname__ = name
        call.release = holder.clear
        return call

    def _record(self, name, args, out, start, compiled, error=None) -> None:
        self.last_calls[name] = CallRecord(args, out, time.perf_counter() - start, compiled, error, time.time())

    def call_tir(self, tir_func, args, out_ty):
        """Allocate outputs per `out_ty`, call PrimFunc `tir_func` (name or function) on `args` + outputs."""
        name = _function_name(tir_func)
        entry = self.entry(name)
        if entry.kind != PRIMFUNC:
            raise CallError(f"call_tir needs a PrimFunc, but `{name}` is a {entry.kind}", function=name)
        args = list(args) if isinstance(args, (list, tuple)) else [args]
        outputs = allocate_outputs(entry.func, name, args, out_ty)
        self._fast(name)(*args, *outputs)
        return outputs[0] if len(outputs) == 1 else outputs

    def call_py_func(self, name: str, args):
        """Call pyfunc `name` with `args` (a list or tuple), `self` being this live module."""
        entry = self.entry(name)
        if entry.kind != PYFUNC:
            raise CallError(f"call_py_func needs a pyfunc, but `{name}` is a {entry.kind}", function=name)
        return self._fast(name)(*(args if isinstance(args, (list, tuple)) else [args]))

    # -- lifetime ------------------------------------------------------------------
    def close(self) -> None:
        """Release compiled code and this module's `R.call_py_func` registry entries."""
        py_registry.unregister(self._registry_names)
        self._registry_names = set()
        self._vm = None
        self._vm_key = None
        self._forget_callables()
        self._compiler.clear()
        self._closed = True
        self._generation += 1  # callables handed out earlier see the change and ask again

    def __del__(self):
        try:
            py_registry.unregister(self._registry_names)
        except Exception:  # interpreter shutdown: the registry is cleared at exit anyway
            pass


def _nothing() -> None:
    pass


class _LazyCallable:
    """`NAME.fn` before `fn` is compiled: compiles on the first call, then hands over to the fast path."""

    def __init__(self, live: LiveModule, name: str):
        self._live, self.__name__ = live, name
        self.__doc__ = inspect.getdoc(live.entry(name).pyfunc) if live.entry(name).kind == PYFUNC else None

    def __call__(self, *args, **kwargs):
        return self._live._callable(self.__name__)(*args, **kwargs)

    def __repr__(self) -> str:
        entry = self._live.entry(self.__name__)
        return f"<{entry.kind} {self._live.name}.{self.__name__}>"


class UnknownFunctionError(CallError, AttributeError):
    """`NAME.fn` where the module has no `fn`."""


def _unknown_function(live: LiveModule, name: str) -> UnknownFunctionError:
    known = ", ".join(sorted(live.functions)) or "none yet"
    return UnknownFunctionError(f"module `{live.name}` has no function `{name}` (it has: {known})", function=name)


def _owners(parsed: dict[object, dict[str, FunctionEntry]]) -> dict[str, FunctionEntry]:
    """Last run wins: each name from the most recently run cell that defines it."""
    owners: dict[str, FunctionEntry] = {}
    for funcs in parsed.values():
        owners.update(funcs)
    return owners


def _pyfunc_extern(name: str, source: str) -> relax.ExternFunc:
    func = relax.ExternFunc(name)
    for key, value in {
        "is_pyfunc": True, "function_type": "python", "python_function_name": name, "python_source": source,
    }.items():
        func = func.with_attr(key, value)
    return func


def _takes_self(func: Callable) -> bool:
    try:
        params = list(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return False
    return bool(params) and params[0] == "self"


def _check_references(entry: FunctionEntry, canonical: Mapping[str, GlobalVar], pyfuncs: set[str]) -> None:
    for gv in referenced_global_vars(entry.func):
        if gv.name_hint in pyfuncs:
            raise IllFormedModuleError(
                f"refers to pyfunc `{gv.name_hint}` directly; Relax calls a pyfunc with "
                f"R.call_py_func(\"{gv.name_hint}\", ..., out_ty=...)", function=entry.name, line=entry.source.first_line,
            )
        if gv.name_hint not in canonical:
            raise IllFormedModuleError(
                f"calls `{gv.name_hint}`, which the module does not define", function=entry.name,
                line=entry.source.first_line,
            )
    for pyname, _ in py_func_calls(entry.func):
        if pyname not in pyfuncs:
            raise IllFormedModuleError(
                f"R.call_py_func calls `{pyname}`, which is not a pyfunc of this module", function=entry.name,
                line=entry.source.first_line,
            )


def _check_well_formed(ir_mod: tvm.IRModule, entries: Mapping[str, FunctionEntry], fresh: set[str]) -> None:
    try:
        relax.analysis.well_formed(ir_mod)
    except Exception as err:
        culprit = _ill_formed_function(ir_mod, entries)
        raise IllFormedModuleError(
            f"the module is not well formed: {last_reason(err)}",
            function=culprit.name if culprit else None, line=culprit.source.first_line if culprit else None,
        ) from err
    for name, entry in entries.items():
        if entry.kind == PRIMFUNC and name in fresh:
            try:  # the checks TVMScript's own parser runs on a PrimFunc
                tvm.s_tir.analysis.verify_well_formed(entry.func)
                if not entry.func.attrs.get("s_tir", False):
                    tirx.analysis.verify_tirx_well_formed(entry.func)
            except Exception as err:
                raise IllFormedModuleError(
                    f"not a well-formed PrimFunc: {last_reason(err)}", function=name, line=entry.source.first_line
                ) from err
            outside = out_of_bounds(entry.func)  # running it could corrupt memory or segfault
            if outside:
                raise IllFormedModuleError(outside[0], function=name, line=outside[1] or entry.source.first_line)


def _ill_formed_function(ir_mod: tvm.IRModule, entries: Mapping[str, FunctionEntry]) -> FunctionEntry | None:
    for name, entry in entries.items():
        if entry.kind == RELAX:
            alone = sub_module(ir_mod, relax_closure([name], ir_mod))
            if not relax.analysis.check_well_formed(alone):
                return entry
    return None



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
        raise TVMModuleError(f"device `{device}`: the index after `:` must be a small non-negative number")
    try:
        return tvm.runtime.device(kind, int(index or 0))
    except ValueError as err:
        raise TVMModuleError(f"device `{device}`: {err} (e.g. cpu, cpu:0, cuda:0)") from None


def _compiler(target: str, device, stats: CompileStats, persistent_cache) -> Compiler:
    """The compiler for `target`, which must be one TVM understands and that runs on `device`."""
    try:
        compiler = Compiler(target, stats, persistent_cache)
    except Exception as err:  # TVM raises ValueError, TypeError or its own errors for a bad target
        raise TVMModuleError(f"target `{target}` is not a TVM target: {last_reason(err)}") from None
    runs_on = tvm.runtime.device(compiler.target.get_target_device_type(), 0)
    if runs_on.dlpack_device_type() != device.dlpack_device_type():
        raise TVMModuleError(f"target `{target}` runs on {runs_on.type} devices, not on `{device}`; pass --device")
    return compiler
