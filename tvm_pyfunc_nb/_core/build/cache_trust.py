"""Whether the compile cache may be used, asked at each use: its folder, its tuning records'
folders, and the notices that say why not, once per reason.

Only what this user could have written is read (trust.py): a cache folder
that another user owns or that others can write, or one below such a
directory, or one holding files the cache did not write (it has no
`CACHEDIR.TAG`), turns the cache off with a notice (`CompileCacheWarning`),
and then nothing is read from it, neither a library nor a tuning record. The
check runs before every use, so a `chmod` counts at once. The folders the
cache makes are private (0700) and marked; one that exists is never changed,
since it may not be the user's to change.

A notice comes once per reason in a cache's life (one repeated at every
compile would bury the cell's output); one from the writer thread waits for
the caller's thread (`later`, `say_later`), where it lands in the cell that
caused it.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterable
from pathlib import Path

from ...errors import CompileCacheWarning
from .cache_files import TUNING
from .trust import directory_problem, files_problem, make_private, write_private

MARKER = "CACHEDIR.TAG"
MARK = (
    b"Signature: 8a477f597d28d172789f06886806bc55\n"
    b"# The compile cache of tvm_pyfunc_nb: compiled kernels and tuning records.\n"
    b"# For information about cache directory tags see https://bford.info/cachedir/\n"
)


class CacheTrust:
    """The trust test of one cache folder (`own_dir`), and its notices."""

    def __init__(self, own_dir: Path):
        self.own_dir = own_dir
        self._noticed: set[str] = set()
        self._unsaid: list[tuple[str, str]] = []  # notices of the writer thread, for the caller

    def distrust(self) -> str | None:
        """Why the cache is off, or None: someone else could change its folder or one above it
        (`directory_problem`), or its folder holds files the cache did not write; then nothing
        in it is read, neither a library nor a tuning record, and nothing written. Checked at
        each use, so that a `chmod` counts at once; the notice comes once per reason."""
        problem = self.problem()
        if problem:
            self.notice(
                problem,
                "compile cache off, nothing is read from it (no library, no tuning record) and "
                f"every function compiles instead: {problem}",
            )
        return problem

    def problem(self) -> str | None:
        """`distrust`'s reason, without its notice."""
        problem = directory_problem(self.own_dir)
        if problem is None and self.own_dir.is_dir() and not (self.own_dir / MARKER).exists():
            with contextlib.suppress(OSError):
                if any(self.own_dir.iterdir()):
                    problem = (
                        f"{self.own_dir} holds files the cache did not write (it has no {MARKER}). "
                        "Fix: move them elsewhere, or point TVMModuleMagics.cache_dir at "
                        "another directory"
                    )
        return problem

    def make_own_dir(self) -> None:
        """The cache's folder, made private and marked if it is missing or empty."""
        make_private(self.own_dir)
        if not (self.own_dir / MARKER).exists() and not any(self.own_dir.iterdir()):
            write_private(self.own_dir / MARKER, MARK)

    def tuning_directory(self, name: str, reads: Iterable[str], *, create: bool) -> Path | None:
        """Folder `name` of the cache's tuning records, whose files `reads` tuning reads back:
        None when the cache is off or someone else could have written one of those files (a
        notice says why), or when it cannot be made; without `create`, None when it does not
        exist. Checked at each call, as entries are."""
        if self.distrust():
            return None
        directory = self.own_dir / TUNING / name
        problem = directory_problem(directory) or files_problem(directory, reads)
        if problem:
            self.notice(
                problem,
                f"compile cache: the tuning records in {directory} are not read, since "
                f"{problem}; tuning results stay in memory",
            )
            return None
        if not create:
            return directory if directory.is_dir() else None
        try:
            self.make_own_dir()
            make_private(directory)
        except OSError as err:
            self.notice(
                f"tuning {err.errno}",
                f"compile cache: cannot keep tuning records in {directory} ({err.strerror or err}"
                "); tuning results stay in memory",
            )
            return None
        return directory

    # -- notices -----------------------------------------------------------------------
    def notice(self, key: str, message: str) -> None:
        """Warn once per `key` in this cache's life."""
        if key not in self._noticed:
            self._noticed.add(key)
            warnings.warn(message, CompileCacheWarning, stacklevel=4)

    def later(self, key: str, message: str) -> None:
        """A notice of the writer thread, said at the caller's next use of the cache."""
        self._unsaid.append((key, message))

    def say_later(self) -> None:
        """The notices of writes that failed on the writer thread, said by the caller's thread
        (a warning from the writer would land in whatever cell runs then, or nowhere)."""
        while self._unsaid:
            self.notice(*self._unsaid.pop(0))
