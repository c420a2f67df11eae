"""Persistent compile cache: compiled PrimFuncs kept on disk and shared by kernels.

A PrimFunc compiled once is saved as a shared library (`library_files.write_library`:
LLVM emits into memory and the system C compiler assembles and links, so a full disk is
an error, never the end of the process) and loaded back (`tvm.runtime.load_module`)
by any later kernel instead of being compiled again. An entry is keyed by
everything that changes the code: the function's structural hash and name,
the target as it was resolved (`-mcpu` and the CPU features LLVM enables for
it, so that machines with different CPUs sharing a home directory never
serve each other's code), the pipeline, offload, the crash guards, the
PassContext options in effect and the versions of TVM, tvm-ffi and this
package; the function's TVMScript is stored with it and compared on load, so
a hash collision or a changed function is never served.

The cache touches only what it wrote: `cache_dir` may be a folder holding
other files (a home directory, a project), so everything the cache writes
goes into a folder of its own there, `OWN_DIR`, marked with a `CACHEDIR.TAG`
(which also tells backup tools to skip it). `CompileCache` is its entries,
loaded and stored here; its files' names, the size bound (the least recently
used go first), the sweep of stale temporary files and `clear` are
cache_files.py's; whether the cache may be used at all is cache_trust.py's.
Entries of an earlier version (directly in `cache_dir`) are never read.

What keeps a bad entry from ever being loaded:
- only what this user could have written is read (trust.py, cache_trust.py):
  a cache folder that another user owns or that others can write turns the
  cache off with a notice (`CompileCacheWarning`), and an entry another user
  owns or others can write is ignored, checked before every use;
- every file is written under a temporary name, then renamed into place
  (`os.replace`);
- the library's SHA-256 and size are recorded when it is written, and the
  record itself carries a checksum;
- on load the library's bytes are read and checked, and those same bytes,
  copied to a private file, are what `dlopen` sees. An entry that fails any
  check is deleted and its function compiled again.

A write that fails (a full disk, a quota, a read-only or vanished folder)
costs the entry only: a one-line notice says why, at the next use of the
cache, the function runs from memory, and the entries already there stay.

PrimFuncs built together (one `tirx.build` of several) share one library:
each has its own entry, the entries' library files are hard links to one
file, and the record names the other kernels that library holds.

Exporting costs about as much as compiling did (LLVM's code generator runs
again, then the C compiler assembles and links), so it runs on one background
thread, off the path of the call that compiled (`flush()` waits for it on
demand). When the interpreter exits, the export running finishes and those not
started are dropped, so that a kernel shuts down at once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import queue
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future, wait
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path

import tvm
import tvm_ffi

from ...errors import LibraryWriteError, TVMModuleError, last_reason
from ..options import default_of
from .cache_files import (
    LIBRARY_SUFFIX,
    CacheSweep,
    Rejected,
    dump_record,
    entry_files,
    parse_record,
    remove,
    sha256,
)
from .cache_trust import CacheTrust
from .library_files import load_library, write_library
from .pass_contexts import cache_key
from .trust import Exposed, make_private, read_own

FORMAT = 2  # 2: the cache's own folder, the complete key
DEFAULT_MAX_BYTES = default_of("cache_max_mb") * 2**20
OWN_DIR = "tvm_pyfunc_nb.cache"  # in `cache_dir`: the cache writes nowhere else
MAX_OPENED = 16  # libraries kept loaded, so that the kernels of one build load it once


def _shown_path(path: str) -> str:
    """`path` relative to the working directory when it is inside it (as git shows paths)."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


@dataclass(frozen=True)
class CacheSummary:
    """What `%tvmcache` shows: where the cache is, whether it is trusted, how full, and what it
    did in this kernel."""

    location: str
    entries: int
    size: int
    max_size: int
    hits: int
    misses: int
    stored: int
    rejected: int
    pending: int
    problem: str | None = None
    distrust: str | None = None  # why the cache is off: others could change what it would load
    earlier: int = 0  # entry files of an earlier version beside the cache's folder

    def __repr__(self) -> str:
        trust = (
            f"  not trusted, so off: {self.distrust}"
            if self.distrust
            else "  trusted: no one else can change it"
        )
        lines = [
            f"compile cache: {_shown_path(self.location)}",
            trust,
            f"  {self.entries} {'entry' if self.entries == 1 else 'entries'}, "
            f"{_size(self.size)} of {_size(self.max_size)}",
            f"  this kernel: {self.hits} loaded, {self.misses} missed, {self.stored} stored, "
            f"{self.rejected} rejected as damaged, stale or writable by others, "
            f"{self.pending} being written",
        ]
        if self.earlier:
            lines.append(
                f"  {self.earlier} file{'s' * (self.earlier != 1)} of an earlier version beside "
                "it, no longer read "
                "(%tvmcache clear removes those it can prove it wrote)"
            )
        if self.problem:
            lines.append(f"  last problem: {self.problem}")
        return "\n".join(lines)

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(repr(self))


class CompileCache:
    """Compiled PrimFunc libraries and tuning records in `directory`/`OWN_DIR`, at most
    `max_bytes` of libraries.

    `Build` calls `load` before building a PrimFunc and `store` after; tuning finds its
    records' folder with `tuning_directory`. Counters (`hits`, `misses`, `stored`,
    `rejected`) cover this process. `directory` is kept with its symlinks resolved, once:
    what is checked is what is read, even if a link is pointed elsewhere later.
    """

    def __init__(self, directory: str | os.PathLike, max_bytes: int = DEFAULT_MAX_BYTES):
        given = Path(directory).expanduser().absolute()
        try:
            make_private(given)
        except OSError as err:
            raise TVMModuleError(
                f"cannot use {given} as the compile cache: {err.strerror or err}"
            ) from err
        self.directory = given.resolve()
        self.own_dir = self.directory / OWN_DIR
        self.max_bytes = max_bytes
        self.hits = self.misses = self.stored = self.rejected = 0
        self.problem: str | None = None
        self.trust = CacheTrust(self.own_dir)  # whether it may be used; its notices
        self.sweep = CacheSweep(self.own_dir)  # its files: the size bound, clearing
        self.distrust()  # said now, when the first module is made, rather than at its first call
        self._writer = _Writer()
        self._pending: set[Future] = set()
        self._lock = threading.Lock()
        self._opened: dict[str, tvm.runtime.Module] = {}  # library sha256 -> loaded, latest last

    # -- what Build uses -----------------------------------------------------------
    def load(
        self, name: str, func: tvm.tirx.PrimFunc, target_key: str
    ) -> tuple[tvm.runtime.Module, frozenset[str]] | None:
        """The library of `func` built for `target_key` if a verified entry has it, and the
        names of every kernel that library holds (built together); else None."""
        self.trust.say_later()
        context = cache_key()
        if self.distrust() or context is None:
            return None
        structural_hash = str(tvm_ffi.structural_hash(func))
        key = entry_key(name, structural_hash, target_key, context)
        try:
            loaded = self._load_verified(key, name, structural_hash, target_key, context, func)
        except Exposed as why:
            self.sweep.discard(key)
            self.rejected += 1
            self.problem = f"{name}: entry {key[:12]} ignored ({why}); compiling again"
            self.trust.notice(
                "entry",
                f"compile cache: ignored the entry of `{name}`, since {why}; it compiles "
                "again (entries like it are ignored without another notice; %tvmcache "
                "counts them as rejected)",
            )
            loaded = None
        except Rejected as why:
            self.sweep.discard(key)
            self.rejected += 1
            self.problem = f"{name}: entry {key[:12]} rejected ({why}); compiling again"
            loaded = None
        except OSError as err:  # the cache cannot be read: compile as if it were empty
            self.problem = f"{name}: cannot read the cache ({err}); compiling again"
            loaded = None
        if loaded is None:
            self.misses += 1
            return None
        self.hits += 1
        return loaded

    def store(
        self, funcs: dict[str, tvm.tirx.PrimFunc], target_key: str, lib: tvm.runtime.Module
    ) -> None:
        """Save `lib`, the library of every PrimFunc in `funcs` (`{name: func}`, more than one
        when they were built together), as the entry of each; the export runs once, on the
        background thread, and the entries share the file.

        A cache that cannot take an entry never fails the compile that made it: the
        function is compiled again next time, and a notice says why.
        """
        self.trust.say_later()
        context = cache_key()
        if self.distrust() or context is None:
            return
        records = {}
        for name, func in funcs.items():
            structural_hash = str(tvm_ffi.structural_hash(func))
            try:
                script = func.script()
            except Exception as err:  # a PrimFunc TVMScript cannot print runs, uncached
                self.problem = (
                    f"{name}: not cached, its TVMScript does not print ({last_reason(err)})"
                )
                continue
            records[entry_key(name, structural_hash, target_key, context)] = {
                "format": FORMAT,
                "name": name,
                "members": sorted(funcs),
                "target": target_key,
                "pass_context": context,
                "structural_hash": structural_hash,
                "environment": environment(),
                "script": script,
            }
        if not records:
            return
        future = self._writer.submit(self._write, records, lib)
        with self._lock:
            self._pending.add(future)
        future.add_done_callback(partial(self._done, sorted(funcs)))

    def tuning_directory(self, name: str, reads: Iterable[str], *, create: bool) -> Path | None:
        """Folder `name` of the tuning records, if the cache vouches for it (cache_trust.py)."""
        return self.trust.tuning_directory(name, reads, create=create)

    def distrust(self) -> str | None:
        """Why the cache is off (and nothing in it is read), or None (cache_trust.py)."""
        return self.trust.distrust()

    # -- looking and tidying -----------------------------------------------------
    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every export started so far is on disk, or `timeout` seconds have passed;
        True if none is left."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                pending = list(self._pending)
            if not pending:
                self.trust.say_later()
                return True
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            wait(pending, timeout=left)

    def summary(self) -> CacheSummary:
        entries = self.sweep.entries()
        with self._lock:
            pending = len(self._pending)
        return CacheSummary(
            str(self.own_dir),
            len(entries),
            sum(e.size for e in entries),
            self.max_bytes,
            self.hits,
            self.misses,
            self.stored,
            self.rejected,
            pending,
            self.problem,
            self.distrust(),
            len(entry_files(self.directory)),
        )

    def clear(self) -> int:
        """Delete every entry and tuning record (after pending exports finish), and the entries
        of an earlier version that their checksums prove the cache wrote (cache_files.py);
        returns how many entries there were. Nothing else is touched. A cache that is off
        deletes nothing: its files may be someone else's."""
        self.flush()
        if self.distrust():
            return 0
        return self.sweep.clear(self.directory)

    # -- loading -------------------------------------------------------------------
    def _load_verified(
        self, key: str, name: str, structural_hash: str, target_key: str, context: dict, func
    ) -> tvm.runtime.Module | None:
        record_path, library_path = self.sweep.paths(key)
        try:
            raw = read_own(record_path)
        except FileNotFoundError:
            return None
        record = parse_record(raw)
        expected = {
            "format": FORMAT,
            "name": name,
            "target": target_key,
            "pass_context": context,
            "environment": environment(),
            "structural_hash": structural_hash,
        }
        for field_name, value in expected.items():
            if record.get(field_name) != value:
                raise Rejected(f"recorded {field_name} differs")
        if record.get("script") != func.script():
            raise Rejected("the stored function is not this one (same hash, different TVMScript)")
        try:
            library = read_own(library_path)
        except FileNotFoundError:
            raise Rejected("its library file is missing") from None
        if len(library) != record.get("library_bytes") or sha256(library) != record.get(
            "library_sha256"
        ):
            raise Rejected("its library does not match the checksum recorded when it was written")
        members = frozenset(record.get("members", [name]))
        lib = self._load_library(library, record["library_sha256"], name)
        _touch(record_path)
        return lib, members

    def _load_library(self, library: bytes, sha256: str, name: str) -> tvm.runtime.Module:
        """`dlopen` a private copy of bytes already verified, so what was checked is what loads
        (once for the kernels of one library)."""
        lib = self._opened.get(sha256)
        if lib is None:
            fd, path = tempfile.mkstemp(dir=self.own_dir, prefix=".load-", suffix=LIBRARY_SUFFIX)
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(library)  # OSError (a full disk): compiled instead, the entry stays
                try:
                    lib = load_library(path, library)  # kept, so that it can be written again
                except Exception as err:  # passed its checksum but does not load: discard it
                    raise Rejected(f"it does not load: {last_reason(err)}") from err
            finally:
                remove(Path(path))
        try:
            lib.get_function(name)
        except Exception as err:
            raise Rejected(f"it does not hold `{name}`: {last_reason(err)}") from err
        self._opened[sha256] = lib
        while len(self._opened) > MAX_OPENED:
            self._opened.pop(next(iter(self._opened)))
        return lib

    # -- writing (background thread) -----------------------------------------------
    def _write(self, records: dict[str, dict], lib: tvm.runtime.Module) -> None:
        problem = self.trust.problem()  # again: it may have changed since `store`
        if problem:
            raise Rejected(problem)
        self.trust.make_own_dir()  # again: someone may have deleted it since
        with tempfile.TemporaryDirectory(dir=self.own_dir, prefix=".work-") as work:
            built = Path(work) / f"library{LIBRARY_SUFFIX}"
            write_library(lib, built, workspace=work)
            library = built.read_bytes()
            os.chmod(built, 0o600)
            facts = {"library_sha256": sha256(library), "library_bytes": len(library)}
            for key, record in records.items():
                record_path, library_path = self.sweep.paths(key)
                linked = Path(work) / key
                _link_or_copy(built, linked)  # the entries of one build share one file
                os.replace(linked, library_path)
                record = {**record, **facts, "written": time.time()}
                _write_atomically(record_path, dump_record(record))
                self.stored += 1
        self.sweep.evict(self.max_bytes)

    def _done(self, names: list[str], future: Future) -> None:
        with self._lock:
            self._pending.discard(future)
        if future.cancelled():  # dropped at exit: the function is compiled again next time
            return
        err = future.exception()
        if err is None:
            return
        # the function runs from memory and compiles again next time; the entries there stay
        reason = f"{err.strerror}: {err.filename}" if isinstance(err, OSError) else last_reason(err)
        self.problem = f"writing an entry failed: {reason}"
        told = isinstance(err, (OSError, LibraryWriteError))  # by the error number: EFBIG...
        kind = f"write {err.errno}" if told else f"write {type(err).__name__}"
        self.trust.later(
            kind,
            f"compile cache: could not store {', '.join(names)} ({reason}); it runs from "
            "memory and compiles again in the next kernel (writes failing this way are not "
            "told again)",
        )


class _Writer:
    """The thread that exports libraries into the cache, one job at a time, in order.

    When the interpreter exits (its main thread has ended), exports go on for at most
    `EXIT_GRACE_SECONDS`; the one running then is finished and those not started are
    dropped, so that a kernel shuts down within Jupyter's patience (5 s) however many
    exports were queued. A dropped entry only means its function is compiled again next
    time. The thread ends when it has been idle a while, and starts again with the next job.
    """

    IDLE_SECONDS = 5.0
    POLL_SECONDS = 0.1
    EXIT_GRACE_SECONDS = 2.0

    def __init__(self):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def submit(self, fn, *args) -> Future:
        future: Future = Future()
        with self._lock:
            self._jobs.put((future, fn, args))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tvm-compile-cache")
                self._thread.start()
        return future

    def _run(self) -> None:
        idle, exit_started = 0.0, None
        while True:
            try:
                future, fn, args = self._jobs.get(timeout=self.POLL_SECONDS)
            except queue.Empty:
                idle += self.POLL_SECONDS
                if self._exiting() or idle >= self.IDLE_SECONDS:
                    with self._lock:
                        if self._exiting() or self._jobs.empty():
                            self._thread = None
                            return
                continue
            idle = 0.0
            if exit_started is None and self._exiting():
                exit_started = time.monotonic()
            if exit_started is not None and (
                time.monotonic() - exit_started >= self.EXIT_GRACE_SECONDS
            ):
                future.cancel()
                continue
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as err:
                    future.set_exception(err)

    @staticmethod
    def _exiting() -> bool:
        return not threading.main_thread().is_alive()


# -- keys ------------------------------------------------------------------------------
def entry_key(name: str, structural_hash: str, target_key: str, context: dict) -> str:
    """The file name of a PrimFunc's entry: everything that decides what its compiled library is."""
    parts = [FORMAT, name, target_key, structural_hash, context, environment()]
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:40]


def code_target(target: tvm.target.Target) -> str:
    """`target` as it decides the code: its JSON form (with `mcpu` as resolved, never `native`)
    and, for LLVM, the CPU features LLVM enables for it and for its host, sorted."""
    parts = [str(target)]
    for each in (target, target.host):
        if each is not None and each.kind.name == "llvm":
            features = tvm.target.codegen.llvm_get_cpu_features(each)
            parts.append("+" + ",+".join(sorted(features)))
    return " | ".join(parts)


@cache
def environment() -> dict[str, str]:
    """What else shapes a library: the versions of TVM (and the commit and LLVM it was built
    from), tvm-ffi, this package and its crash guards, and the host."""
    from ..._version import __version__
    from .crash_guards import GUARDS_VERSION

    built = tvm.support.libinfo()
    return {
        "guards": str(GUARDS_VERSION),
        "tvm": tvm.__version__,
        "tvm_commit": str(built.get("GIT_COMMIT_HASH", "")),
        "llvm": str(built.get("LLVM_VERSION", "")),
        "tvm_ffi": tvm_ffi.__version__,
        "tvm_pyfunc_nb": __version__,
        "machine": platform.machine(),
        "cpu": str(tvm.target.codegen.llvm_get_system_cpu()),
    }


# -- small file helpers ------------------------------------------------------------------
def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # a file system without hard links
        shutil.copyfile(source, target)


def _write_atomically(path: Path, data: bytes) -> None:
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".entry-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(temp, path)
    except BaseException:
        remove(Path(temp))
        raise


def _touch(path: Path) -> None:
    with contextlib.suppress(OSError):  # evicted meanwhile by another kernel: nothing to mark
        os.utime(path)


def _size(size: int) -> str:
    """`size` bytes in MB, or in KB below one MB (a few small kernels are not `0.0 MB`)."""
    if size < 2**20:
        return f"{size / 2**10:.0f} KB"
    return f"{size / 2**20:.1f} MB"
