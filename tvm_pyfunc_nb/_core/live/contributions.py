"""What a live module is made of: contributions, each a set of functions from one source.

A contribution is what one cell run, one `add`, one `add_python_function` or
one `schedule` brought. Contributions are kept in the order they last ran;
for a name that several define, the latest one wins (`owners`).
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tvm import relax
from tvm.ir import GlobalVar

from ...errors import CallError, CellSyntaxError
from .cells import PYFUNC, CellFragment, FunctionSource
from .pyfunc_loader import CellGlobals, load_pyfunc, run_preamble, runtime_pyfunc_source
from .tvmscript_parse import parse_fragment

_runs = itertools.count(1)


@dataclass(frozen=True)
class FunctionEntry:
    """One function of the module: what it is now, and where it came from."""

    source: FunctionSource
    contribution: object  # the key of the contribution that defines it
    filename: str  # the linecache name of its cell run ("" when it has no cell)
    gvar: GlobalVar
    func: Any  # PrimFunc, relax.Function, or the pyfunc's ExternFunc placeholder
    pyfunc: Callable | None = None
    takes_self: bool = True
    # which run made this definition (unique in the process): views tell versions apart
    run: int = 0

    @property
    def kind(self) -> str:
        """ "pyfunc", "tir" or "relax"."""
        return self.source.kind

    @property
    def name(self) -> str:
        """The function's name in the module."""
        return self.source.name

    @property
    def line(self) -> int | None:
        """The cell line of its first decorator, if it came from a cell."""
        return self.source.first_line or None

    def with_func(self, func: Any) -> FunctionEntry:
        return dataclasses.replace(self, func=func)


@dataclass(frozen=True)
class Contribution:
    """The functions one cell run (or `add`, `schedule`...) brought, under a key of its own."""

    key: object
    origin: str  # how notices name it: "cell In[3]", "demo.add(IRModule)"
    functions: Mapping[str, FunctionEntry]
    filename: str = ""  # its cell text in linecache ("" when it has none)
    derived_from: object = None  # a contribution whose next run drops this one (a schedule's cell)
    attrs: Mapping[str, Any] = field(default_factory=dict)  # module attrs it brings (an import's)
    # a run again replaces the same key, and says so (an `add` of the same names; not a cell,
    # whose run again is an edit of itself)
    reports_rerun: bool = False
    global_infos: Mapping[str, Any] = field(default_factory=dict)
    notes: Sequence[str] = ()  # what was changed on the way in (an importer's defects repaired)

    def with_entries(self, entries: Mapping[str, FunctionEntry]) -> Contribution:
        """This contribution with its functions replaced by `entries`' versions of them."""
        functions = {
            name: entries[name]
            if name in entries and entries[name].contribution == self.key
            else entry
            for name, entry in self.functions.items()
        }
        return dataclasses.replace(self, functions=functions)


def owners(contributions: Iterable[Contribution]) -> dict[str, FunctionEntry]:
    """Last run wins: each name's entry from the latest contribution that defines it."""
    found: dict[str, FunctionEntry] = {}
    for contribution in contributions:
        found.update(contribution.functions)
    return found


def next_run() -> int:
    """A number no other run (of a cell, an `add`...) in this process has."""
    return next(_runs)


def pyfunc_entry(
    source: FunctionSource, key: object, filename: str, func: Callable, run: int = 0
) -> FunctionEntry:
    """The entry of a pyfunc: a Python function, an `ExternFunc` placeholder carrying its source."""
    return FunctionEntry(
        source,
        key,
        filename,
        GlobalVar(source.name),
        pyfunc_extern(source.name, source.source),
        func,
        takes_self(func),
        run or next_run(),
    )


def pyfunc_extern(name: str, source: str) -> relax.ExternFunc:
    """A pyfunc as an IRModule holds it (as `@I.pyfunc` makes it): an `ExternFunc` carrying its
    source."""
    extern = relax.ExternFunc(name)
    for attr, value in {
        "is_pyfunc": True,
        "function_type": "python",
        "python_function_name": name,
        "python_source": source,
    }.items():
        extern = extern.with_attr(attr, value)
    return extern


def is_pyfunc_extern(func: Any) -> bool:
    return isinstance(func, relax.ExternFunc) and bool(func.attrs.get("is_pyfunc", False))


def takes_self(func: Callable) -> bool:
    """Whether a pyfunc's first parameter is `self` (upstream's form) or it is a plain function."""
    try:
        params = list(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return False
    return bool(params) and params[0] == "self"


def from_cell(
    fragment: CellFragment,
    *,
    run: int,
    filename: str,
    origin: str,
    module_name: str,
    others: Mapping[str, FunctionEntry],
    namespace: Mapping[str, Any],
    consts: object = None,
) -> Contribution:
    """Parse a cell's functions; `others` are the module's functions from other contributions,
    `consts` its constant table (edit text names weights `NAME.consts.<name>`)."""
    cell_globals = CellGlobals(namespace)
    run_preamble(fragment.preamble, filename, cell_globals)
    entries: dict[str, FunctionEntry] = {}
    for source in fragment.functions.values():
        if source.kind == PYFUNC:
            func = load_pyfunc(source, filename, cell_globals)
            entries[source.name] = pyfunc_entry(source, fragment.key, filename, func, run)
    visible = {name: e.func for name, e in others.items() if name not in fragment.functions}
    parsed = parse_fragment(
        fragment,
        module_name,
        visible,
        {**namespace, **cell_globals},
        {name: e.func for name, e in entries.items()},
        consts,
    )
    for name, (gvar, func) in parsed.items():
        entries[name] = FunctionEntry(
            fragment.functions[name], fragment.key, filename, gvar, func, run=run
        )
    ordered = {name: entries[name] for name in fragment.functions}
    attrs = _module_attrs(fragment, filename, cell_globals)
    return Contribution(fragment.key, origin, ordered, filename, attrs=attrs)


def _module_attrs(fragment: CellFragment, filename: str, cell_globals) -> dict[str, Any]:
    """The attributes a full class's `I.module_attrs({...})` gives the module."""
    if fragment.module_attrs is None:
        return {}
    text, line = fragment.module_attrs
    try:
        attrs = eval(compile("\n" * (line - 1) + text, filename, "eval"), cell_globals)
    except Exception as err:
        raise CellSyntaxError(f"I.module_attrs: {type(err).__name__}: {err}", line=line) from None
    if not isinstance(attrs, dict):
        raise CellSyntaxError("I.module_attrs takes a dict", line=line)
    return {k: v for k, v in attrs.items() if k != "base_py_module"}


def python_function(name: str, func: Callable) -> Contribution:
    """What `NAME.add_python_function(name, func)` brings: `func` as pyfunc `name`."""
    if not isinstance(name, str) or not name.isidentifier():
        raise CallError(f"`{name}` is not a valid function name")
    if not callable(func):
        raise CallError(
            f"add_python_function needs a callable, got {type(func).__name__}", function=name
        )
    key = ("add_python_function", name)
    source = FunctionSource(name, PYFUNC, runtime_pyfunc_source(name, func), 0)
    entry = pyfunc_entry(source, key, "", func)
    return Contribution(key, f"add_python_function({name!r})", {name: entry})
