"""What a build keeps, and where it finds it again: in memory (in_memory.py) and on disk (the
compile cache, disk_cache.py), each counted in `NAME.stats` by the function it served.

A kernel is looked for in memory first, then on disk; a library loaded from disk is kept in
memory too. A kernel that does not compile is kept in memory (so its error is not worked out
again) but never written to disk. Linked VMs are kept in memory only.
"""

from __future__ import annotations

import tvm
import tvm_ffi

from ...errors import CompileError
from .in_memory import KeptBuilds
from .linking import Built, Linked
from .stats import CompileStats


class BuildCache:
    """The memory and disk caches of one build; `key` is everything beyond a function that makes
    two builds of it differ (target, pipeline, checks, offload). `persistent` (a
    `CompileCache`, or None) is the disk."""

    def __init__(self, stats: CompileStats, persistent, key: str):
        self.stats = stats
        self.persistent = persistent
        self.key = key
        self.kept = KeptBuilds()

    def kernel(self, name: str, func, *, counted: bool = True, disk: bool = True) -> Built | None:
        """What was built from `func`, kept in memory or (with `disk`) on disk; `counted` says
        whether a hit counts as a compile served (a kernel the caller asked for)."""
        built = self.kept.kernel(name, func)
        if built is not None:
            if counted and not isinstance(built.lib, CompileError):
                self.stats.served_by("memory", name)
            return built
        if not (disk and self.persistent):
            return None
        loaded = self.persistent.load(name, func, self.key)
        if loaded is None:
            return None
        self.stats.served_by("disk", name)
        built = Built(*loaded)
        self.kept.keep_kernel(name, func, built)
        return built

    def keep_kernels(self, funcs: dict[str, tvm.tirx.PrimFunc], built: Built) -> None:
        """`built` is the library of every function of `funcs`: kept in memory, and written to
        disk unless it is a failure."""
        for name, func in funcs.items():
            self.kept.keep_kernel(name, func, built)
        if self.persistent and not isinstance(built.lib, CompileError):
            self.persistent.store(funcs, self.key, built.lib)

    def vm(self, mod: tvm.IRModule, names: tuple[str, ...]) -> Linked | None:
        """The VM kept for `mod` (its Relax functions `names` counted as served), or None."""
        linked = self.kept.vm(tvm_ffi.structural_hash(mod), mod)
        if linked is not None:
            for name in names:
                self.stats.served_by("memory", name)
        return linked

    def keep_vm(self, linked: Linked) -> None:
        self.kept.keep_vm(tvm_ffi.structural_hash(linked.mod), linked)
