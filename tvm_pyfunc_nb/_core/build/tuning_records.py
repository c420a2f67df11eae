"""Where a module's tuning records live: one place for kernels of every kind.

A MetaSchedule record carries code (`pragma_import_llvm`, `T.call_extern`), so
it is read back only from a folder the compile cache vouches for
(`CompileCache.tuning_directory`: this user's own, no one else can write it or
a file in it, asked again at each use): `<cache>/tuning/<folder>`, where a new
kernel process (or a new module of the same name) finds the tuned schedules
again. Without a compile cache, or with one refused, the records stay in
memory, for this module only: never in a predictable shared path, where anyone
could plant one.

A PrimFunc's records are filed by its structure and the target
(`add_tir-<hash>-<target>`); those of the kernels a Relax function's pipeline
makes, by module (`demo.relax-<target>`): their names change with every edit,
MetaSchedule finds each by its structure inside the database.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import tvm
import tvm_ffi

from . import trust
from .disk_cache import code_target

# the kernel's name inside a schedule or a MetaSchedule workload, so that block lookups need no
# func_name
WORKLOAD = "main"
# what a MetaSchedule JSON database reads back from its directory
RECORD_FILES = ("database_workload.json", "database_tuning_record.json")
RECORDS = RECORD_FILES[1]
IN_MEMORY = "in memory"


def target_digest(target: tvm.target.Target) -> str:
    """Part of the name of a tuning database's folder: a schedule tuned for one CPU (its vector
    width, its tensor intrinsics) is not one for another."""
    return hashlib.sha256(code_target(target).encode()).hexdigest()[:12]


def open_database(directory: Path):
    """The MetaSchedule database kept in `directory`, its files made private first: MetaSchedule
    would make them with the umask's mode, which may let the group write them (umask 002), and
    then they would not be trusted. Raises what reading a record cut short raises (TVM's
    RuntimeError) or an OSError."""
    from tvm.s_tir import meta_schedule as ms

    for name in RECORD_FILES:
        trust.write_private(Path(directory) / name, b"")
    return ms.database.JSONDatabase(work_dir=str(directory))


class TuningRecords:
    """The tuning records of one live module, in the compile cache `persistent` when it may be
    read, else in memory."""

    def __init__(self, persistent, module_name: str, target: tvm.target.Target):
        self.persistent = persistent
        self.target = target
        self.module_folder = f"{module_name}.relax-{target_digest(target)}"
        self._memory: dict[str, object] = {}

    def kernel_folder(self, name: str, func: tvm.tirx.PrimFunc) -> str:
        """The folder of PrimFunc `name`'s records: by its structure, never by its name alone."""
        key = tvm_ffi.structural_hash(tvm.IRModule({WORKLOAD: func})) & 0xFFFFFFFFFFFF
        return f"{name}-{key:012x}-{target_digest(self.target)}"

    def directory(self, folder: str, *, create: bool) -> Path | None:
        """`<cache>/tuning/<folder>` if the cache trusts it (else None, and the cache's notice
        says why); without `create`, None too when it does not exist."""
        if self.persistent is None:
            return None
        return self.persistent.tuning_directory(folder, RECORD_FILES, create=create)

    def database(self, folder: str, *, create: bool):
        """The database of `folder` and where it is: read from the trusted folder (raising what
        `open_database` raises), else this module's database in memory (made with `create`);
        (None, "") when nothing was ever tuned there."""
        directory = self.directory(folder, create=create)
        if directory is not None and (create or (directory / RECORDS).exists()):
            return open_database(directory), str(directory)
        return self.in_memory(folder, create=create)

    def in_memory(self, folder: str, *, create: bool):
        """The database of `folder` that this module keeps in memory, and IN_MEMORY."""
        from tvm.s_tir import meta_schedule as ms

        if create and folder not in self._memory:
            self._memory[folder] = ms.database.MemoryDatabase()
        database = self._memory.get(folder)
        return database, IN_MEMORY if database is not None else ""


def kept_trials(database, mod: tvm.IRModule, default=None) -> int:
    """The trials in `database` for kernel `mod` (a default schedule recorded beside them, with
    its time, is not a trial)."""
    if not database.has_workload(mod):
        return 0
    records = database.get_top_k(database.commit_workload(mod), 1 << 20)
    if default is None:
        return len(records)
    default_text = str(default.trace)
    return sum(1 for r in records if len(r.trace.insts) and str(r.trace) != default_text)


def tuning_target(target: tvm.target.Target) -> tvm.target.Target:
    """MetaSchedule needs the number of cores of a CPU target."""
    config = dict(target.export())
    if target.kind.name == "llvm" and "num-cores" not in config:
        config["num-cores"] = os.cpu_count() or 1
    return tvm.target.Target(config)
