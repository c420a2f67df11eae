"""What a feature may use of one live module: its parts, and a few questions asked of them.

`LiveModule` builds one `ModuleParts` when it is made and hands it to each
feature (`tracing.trace(parts, fn, args)`, `timing.time_function(parts, ...)`):
a feature is a function of the parts in a module of its own, never of the
facade. So a feature sees what it may use, typed, and nothing else; no
feature imports `LiveModule` or reads a private name of another object, and
no import circle runs through the facade. A new feature is a new module with
a function of `parts`, and one line in `LiveModule` that calls it.

A feature that changes the module does not change it itself: it returns what
the facade commits (a `Contribution`, see tuning.py), so the one rule that
keeps callables right stays in the facade.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import tvm

from .build.build import Build
from .build.compiler import Compiler
from .build.kernel_schedules import KernelSchedules
from .front_end_port import Progress, Reporter
from .live.assembly import Assembly, ModuleState
from .live.contributions import FunctionEntry
from .live.editing import ConstantTable, name_constants
from .models.importing import TorchOrigin, constant_names
from .options import ModuleOptions
from .run.call_errors import unknown_function, wrong_kind
from .run.call_table import CallTable
from .run.runner import Runner


@dataclass(frozen=True, eq=False)
class ModuleParts:
    """The parts of one live module, as its features see them (made once, never replaced).

    The live module itself is none of them: what the front end is told (long work's
    `progress`, each build under way) goes through the `reporter`. The mutable parts
    (`torch_origins`, `constants`) are the module's own, not copies.
    """

    name: str
    options: ModuleOptions
    device: Any  # a tvm.runtime.Device
    assembly: Assembly  # contributions -> the module (its current version: `state`)
    compiler: Compiler  # what is compiled, and compiling what a call needs
    runner: Runner  # where compiled code runs: here or on a remote device
    calls: CallTable  # the fast callables, and the latest call of each function
    schedules: KernelSchedules  # what the pipeline's kernels get after it (tuned, DLight)
    torch_origins: dict[str, TorchOrigin]  # Relax function -> the PyTorch model it came from
    constants: ConstantTable  # the weights by name (`consts` keeps it up to date)
    namespace: Mapping[str, Any]  # the user's namespace, which the module's cells read
    reporter: Reporter  # what the front end is told

    @property
    def state(self) -> ModuleState:
        """The module as it is now (a new version for every change)."""
        return self.assembly.state

    @property
    def build(self) -> Build:
        return self.compiler.build

    @property
    def target(self) -> tvm.target.Target:
        """The target compiled code is built for (the option, resolved)."""
        return self.compiler.build.target

    def entry(self, name: str, *, kind: str | None = None, needed_by: str = "") -> FunctionEntry:
        """What the module knows of function `name`; with `kind`, a `CallError` if it is of
        another kind (`needed_by` says what needed it)."""
        entries = self.assembly.state.entries
        entry = entries.get(name)
        if entry is None:
            raise unknown_function(self.name, entries, name)
        if kind is not None and entry.kind != kind:
            raise wrong_kind(entry, kind, needed_by)
        return entry

    def function(self, name: str) -> Callable:
        """The callable of function `name` (what `NAME.name` calls), resolved now."""
        self.entry(name)
        return self.calls.handle(name)

    def constant_names(self) -> dict:
        """Weights' names as the importer knew them (`fc1_weight`), by constant."""
        return constant_names(self.torch_origins.values())

    @property
    def consts(self) -> ConstantTable:
        """The module's weights by name, as edit and script text write them (`NAME.consts`)."""
        return named_constants(self.assembly, self.constants, self.torch_origins)

    def progress(self, title: str, total: int, unit: str = "") -> Progress:
        """A reporter of long work on this module (`total` steps of `unit`), from the front end."""
        return self.reporter.progress(title, total, unit)


def named_constants(
    assembly: Assembly, constants: ConstantTable, origins: Mapping[str, TorchOrigin]
) -> ConstantTable:
    """`constants`, naming every weight of the module now: as the importer knew it
    (`fc1_weight`) when a model brought it, else `<function>_c<k>`."""
    name_constants(assembly.state.ir_mod, constants, constant_names(origins.values()))
    return constants
