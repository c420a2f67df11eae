"""One trust test for everything read back from disk and then run as code.

Compiled libraries in the compile cache and MetaSchedule tuning records (a record carries
code: `pragma_import_llvm` splices LLVM IR into the kernel, `T.call_extern` calls any symbol)
are read only from where no one but this user could have written them, as ssh's `StrictModes`
decides: the directory, symlinks resolved, belongs to this user and no one else can write it,
and so does each directory above it, up to the first that root owns and that others cannot
write or that is sticky, as /tmp is; each file read is this user's and writable by no one else,
and is not a symlink. The test runs again before each read, so a `chmod` counts at once.

There is no predictable shared path: where there is no cache, what would be kept goes to a
directory made for this process alone (`temporary_directory`: mkdtemp's random name, mode
0700), removed when the process exits.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shlex
import shutil
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

from ...errors import TVMModuleError

BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH
ELSEWHERE = "point TVMModuleMagics.cache_dir at a directory only you can write"


class Exposed(Exception):
    """A file that must not even be read: another user owns it, or others can write it."""


def directory_problem(directory: Path) -> str | None:
    """Why someone else could change what is in `directory`, and the fix; None if no one can.

    `directory` (symlinks resolved) must be this user's and writable by no one else, and so
    must each directory above it (root's will do), up to the root directory or the first that
    root owns and that is sticky, as /tmp is (others may add files to it, but not rename or
    delete this user's). A directory that does not exist yet is skipped: it is made private.
    """
    real = Path(os.path.realpath(directory))
    try:
        for path in (real, *real.parents):
            try:
                info = path.stat()
            except FileNotFoundError:
                continue
            above = path != real
            if above and info.st_uid == 0 and info.st_mode & stat.S_ISVTX:
                return None
            why = exposed(path, info, root_too=above)
            if why:
                return f"{why}. Fix: {_fix(path, info, below=path != real)}"
    except OSError as err:
        return f"{err.filename} cannot be checked ({err.strerror})"
    return None


def files_problem(directory: Path, names: Iterable[str]) -> str | None:
    """Why someone else could have written one of the files `names` in `directory` (a missing
    one is fine: it is made by this user), or None."""
    for name in names:
        path = directory / name
        try:
            info = path.lstat()
        except FileNotFoundError:
            continue
        except OSError as err:
            return f"{path} cannot be checked ({err.strerror})"
        if stat.S_ISLNK(info.st_mode):
            return f"{path} is a symbolic link"
        why = exposed(path, info)
        if why:
            return why
    return None


def exposed(path: Path, info: os.stat_result, *, root_too: bool = False) -> str | None:
    """Why someone other than this user (or root, with `root_too`) could change file or
    directory `path`, or None."""
    mode = stat.S_IMODE(info.st_mode)
    if info.st_mode & BY_OTHERS:
        whom = {stat.S_IWGRP: "its group", stat.S_IWOTH: "others"}.get(
            info.st_mode & BY_OTHERS, "its group and others"
        )
        return f"{path} is writable by {whom} (mode {mode:04o})"
    if info.st_uid != os.getuid() and not (root_too and info.st_uid == 0):
        return f"{path} belongs to another user (uid {info.st_uid}, mode {mode:04o})"
    return None


def _fix(path: Path, info: os.stat_result, *, below: bool) -> str:
    """What the user can do: make their own directory private, or use another one."""
    if info.st_uid != os.getuid():
        return ELSEWHERE
    return f"chmod {'go-w' if below else '700'} {shlex.quote(str(path))}, or {ELSEWHERE}"


def read_own(path: Path) -> bytes:
    """The bytes of file `path`, if no one but this user could have written them (else
    `Exposed`). The file checked is the file read (its open descriptor is checked), and a
    symlink is not followed."""
    with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as file:
        why = exposed(path, os.fstat(file.fileno()))
        if why:
            raise Exposed(why)
        return file.read()


def make_private(directory: Path) -> None:
    """Create `directory` and those above it that are missing, each private (0700); OSError if
    that fails.

    A directory that exists is left as it is, even one open to others: it may not be this
    user's to change, and `directory_problem` says whether it may be read.
    """
    missing = []
    for path in (directory, *directory.parents):
        if path.exists():
            break
        missing.append(path)
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile: `directory_problem` judges
            path.mkdir(mode=0o700)


def write_private(path: Path, data: bytes) -> None:
    """A new file `path` holding `data`, readable and writable by this user only; nothing
    happens if it exists."""
    with contextlib.suppress(FileExistsError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(data)


_temporary: list[Path] = []  # this process's private directory, once made


def temporary_directory() -> Path:
    """A directory of this process alone (random name, 0700), checked at each call and made
    again if it went away or became open to others; removed when the process exits."""
    if _temporary:
        kept = _temporary[-1]
        if kept.is_dir() and directory_problem(kept) is None:
            return kept
    made = Path(tempfile.mkdtemp(prefix="tvm-pyfunc-nb-"))
    problem = directory_problem(made)
    if problem:  # TMPDIR itself is open to others: nothing may be kept below it
        shutil.rmtree(made, ignore_errors=True)
        raise TVMModuleError(f"the temporary directory is not private: {problem}")
    if not _temporary:
        atexit.register(_remove_temporary, os.getpid())
    _temporary.append(made)
    return made


def _remove_temporary(owner: int) -> None:
    """Remove this process's directories at its exit; not in a process forked from it, whose
    `atexit` this is too (they are still the parent's)."""
    if os.getpid() != owner:
        return
    for path in _temporary:
        shutil.rmtree(path, ignore_errors=True)
