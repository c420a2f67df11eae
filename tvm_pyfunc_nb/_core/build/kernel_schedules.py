"""What a build applies to the kernels its Relax pipeline makes: tuned and DLight schedules.

A Relax function has no kernels of its own: the module's pipeline makes them
(what `NAME.kernels("fn")` lists). So a schedule for them is applied to the
pipeline's output, every time the function compiles, by the module's
`KernelSchedules`, which its `Build` is made with:

- a MetaSchedule database (tuning_records.py): kernels found in it by
  structural hash get their best schedule. It lives in the compile cache's
  folder, so a new kernel process (or a new module of the same name) uses the
  tuned schedules at its first compile; it is read only if no one else could
  have written it (trust.py), and without a compile cache, or with one
  refused, it lives in memory, for this module only;
- the Relax functions whose kernels DLight schedules (`dlight_kernels`, the
  one place DLight runs: here, and for one PrimFunc in tuning/schedules.py).

A kernel is keyed by its structure, never by its name: the pipeline's names
(`matmul1`) change when other ops change, and an edit that changes a kernel
makes it miss the database (it falls back to the default schedule) unless the
database has its new structure too. Tuning itself (tuning/) fills the
database and the DLight set; nothing here imports it.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import tvm
import tvm_ffi
from tvm import relax

from ...errors import CompileCacheWarning, last_reason
from .cpu_schedules import SCHEDULED
from .tuning_records import (
    IN_MEMORY,
    WORKLOAD,
    Choice,
    TuningRecords,
    read_choices,
    tuning_target,
    workload_key,
    write_choices,
)


def is_scheduled(func) -> bool:
    return isinstance(func, tvm.tirx.PrimFunc) and bool(
        func.attrs is not None and func.attrs.get(SCHEDULED, False)
    )


def tunable(func) -> bool:
    """A kernel of blocks no schedule has touched yet. A function of plain statements under the
    root (a `shape_func` of symbolic sizes) is not one: DLight's rules and MetaSchedule need
    its root block."""
    return (
        isinstance(func, tvm.tirx.PrimFunc)
        and bool(func.attrs is not None and func.attrs.get("s_tir", False))
        and isinstance(func.body, tvm.s_tir.SBlockRealize)
        and not is_scheduled(func)
    )


def as_kernel(scheduled: tvm.tirx.PrimFunc, name: str) -> tvm.tirx.PrimFunc:
    return scheduled.with_attr("global_symbol", name).with_attr(SCHEDULED, True)


def dlight_rules(target: tvm.target.Target) -> list:
    """DLight's default rules for `target`: GPU rules bind threads; CPU rules know GEMV and
    reductions only."""
    from tvm.s_tir import dlight as dl

    if "gpu" in target.keys:
        return [
            dl.gpu.Matmul(),
            dl.gpu.GEMV(),
            dl.gpu.Reduction(),
            dl.gpu.GeneralReduction(),
            dl.gpu.Fallback(),
        ]
    return [dl.cpu.GEMV(), dl.cpu.Reduction()]


def dlight_kernels(kernels: dict, target: tvm.target.Target) -> dict:
    """The kernels of `kernels` (`{GlobalVar: PrimFunc}`) that DLight schedules, scheduled."""
    from tvm.s_tir import dlight as dl

    if not kernels:
        return {}
    mod = tvm.IRModule(dict(kernels))  # DLight changes the module it is given: a copy
    with target:
        scheduled = dl.ApplyDefaultSchedule(*dlight_rules(target))(mod)
    return {
        gv: as_kernel(scheduled[gv.name_hint], gv.name_hint)
        for gv in kernels
        if is_scheduled(scheduled[gv.name_hint])
    }


def workload(func: tvm.tirx.PrimFunc) -> tvm.IRModule:
    """The kernel as MetaSchedule files it, whatever the pipeline named it."""
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    if func.attrs is not None and "global_symbol" in func.attrs:
        func = func.without_attr("global_symbol")
    return _normalize_mod(func)


class KernelSchedules:
    """The schedules a live module applies to the kernels its pipeline makes, and its tuning
    records (`records`, tuning_records.py: PrimFuncs tuned alone keep theirs there too).

    `directory` is where the Relax kernels' database is, once open; `dlight` names the Relax
    functions whose remaining kernels DLight schedules. `tune`'s choices say, per kernel,
    whether its best record is faster than the schedule it had (else it keeps that one), and
    are kept beside the records.
    """

    def __init__(self, records: TuningRecords):
        self.records = records
        self.target = records.target
        self.directory: Path | None = None
        self.dlight: set[str] = set()
        self._database = None
        self._on_disk = True  # until its records cannot be read
        self._choices: dict[str, Choice] = {}

    def database(self, *, create: bool = False):
        """The tuning database, read from disk once, from a folder that passed the trust test
        then (asked again at each call until there is one); None if nothing was ever tuned."""
        if self._database is None:
            folder = self.records.module_folder
            try:
                if self._on_disk:
                    self._database, where = self.records.database(folder, create=create)
                else:
                    self._database, where = self.records.in_memory(folder, create=create)
                if self._database is not None and where != IN_MEMORY:
                    self._choices = read_choices(Path(where))
            except Exception as err:  # a record cut short by a full disk; an OSError
                self._on_disk = False  # this module keeps its schedules in memory from now on
                where = self.records.directory(folder, create=False)
                warnings.warn(
                    f"compile cache: the tuning records in {where} cannot be read "
                    f"({last_reason(err)}); kernels compile with their default schedules "
                    "and tuning results stay in memory",
                    CompileCacheWarning,
                    stacklevel=2,
                )
                self._database, where = self.records.in_memory(folder, create=create)
                self._choices = {}
            if self._database is not None and where != IN_MEMORY:
                self.directory = Path(where)
        return self._database

    def uses_tuned(self, mod: tvm.IRModule) -> bool:
        """Whether kernel `mod` runs its best record (else the schedule it had: `tune` found
        no faster one)."""
        choice = self._choices.get(workload_key(mod))
        return choice is None or choice.tuned

    def choice(self, mod: tvm.IRModule) -> Choice | None:
        return self._choices.get(workload_key(mod))

    def choose(self, mod: tvm.IRModule, tuned: bool, before, after) -> Choice:
        choice = self._choices[workload_key(mod)] = Choice(tuned, before, after)
        return choice

    def save_choices(self) -> None:
        """The choices beside the records on disk (in memory, they are kept as they are)."""
        if self.directory is not None and self._on_disk:
            write_choices(self.directory, self._choices)

    def dlight_kernels_of(self, lowered: tvm.IRModule, fn: str) -> list[str]:
        """The kernels of `fn` in `lowered` that DLight would schedule."""
        called = _called(lowered, [fn])
        todo = {
            gv: f for gv, f in lowered.functions_items() if gv.name_hint in called and tunable(f)
        }
        return sorted(gv.name_hint for gv in dlight_kernels(todo, self.target))

    def apply(self, lowered: tvm.IRModule) -> tvm.IRModule:
        """`lowered` (the pipeline's output) with tuned and DLight schedules in its kernels."""
        updates = {}
        database = self.database()
        if database is not None:
            target = tuning_target(self.target)
            for gv, func in lowered.functions_items():
                if tunable(func):
                    mod = workload(func)
                    if not self.uses_tuned(mod):
                        continue
                    sch = database.query_schedule(mod, target, WORKLOAD)
                    if sch is not None and not tvm_ffi.structural_equal(sch.mod, mod):
                        updates[gv] = as_kernel(sch.mod[WORKLOAD], gv.name_hint)
        if self.dlight:
            called = _called(lowered, self.dlight)
            todo = {
                gv: f
                for gv, f in lowered.functions_items()
                if gv.name_hint in called and gv not in updates and tunable(f)
            }
            updates.update(dlight_kernels(todo, self.target))
        if not updates:
            return lowered
        mod = lowered.clone()
        for gv, func in updates.items():
            mod.update_func(gv, func)
        return mod


def _called(lowered: tvm.IRModule, functions) -> set[str]:
    """The names of the functions that Relax functions `functions` of `lowered` call."""
    present = {gv.name_hint for gv in lowered.get_global_vars()}
    return {
        gv.name_hint
        for fn in functions
        if fn in present
        for gv in relax.analysis.all_global_vars(lowered[fn])
    }
