"""Files the product writes for the user (`export`, a bisect's repro, a report): whole or not at
all.

Each is written to a temporary file in the destination's folder, flushed to the disk, then
renamed over the destination: a full disk, a quota or a file size limit leaves the
destination as it was (absent, or the file that was there) and no fragment, and the error
says what happened. A symbolic link at the destination is refused, not followed: writing
through it would change a file somewhere else (in a shared folder, one another user planted).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from ..errors import FileWriteError


def write_whole(path: str | os.PathLike, text: str, what: str) -> str:
    """Write `text` to `path`, whole or not at all (`what` names the file in an error: "export",
    "the repro"); returns the path. Raises `FileWriteError`."""
    destination = Path(path)
    if destination.is_symlink():
        raise FileWriteError(
            f"{what}: {destination} is a symbolic link, which is not followed; nothing was "
            "written (remove the link, or choose another path)"
        )
    try:
        fd, partial = tempfile.mkstemp(
            dir=destination.parent, prefix=f".{destination.name}.", suffix=".tmp"
        )
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(partial, 0o666 & ~_umask())  # the mode `open` would give it
            os.replace(partial, destination)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(partial)
            raise
    except OSError as err:
        raise FileWriteError(
            f"{what}: cannot write {destination}: {err.strerror or err}; nothing was written",
            errno=err.errno,
        ) from err
    return str(destination)


def _umask() -> int:
    """This process's umask, read without changing it (`os.umask` sets it to read it: another
    thread creating a file meanwhile would get the wrong mode)."""
    with contextlib.suppress(OSError, ValueError, StopIteration):
        status = Path("/proc/self/status").read_text().splitlines()
        return int(next(line for line in status if line.startswith("Umask:")).split()[1], 8)
    return 0o022
