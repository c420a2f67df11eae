"""The compile cache's files: their names, the records, and the sweep that bounds them.

Everything the cache writes goes into a folder of its own (`OWN_DIR` in
`cache_dir`), under names of its own: an entry is `<key>.json` (its record)
and `<key>.so` (its library), a temporary file starts with one of
`TEMPORARY`. The size bound, the sweep of stale temporary files and `clear`
look only at those names, so a folder shared with other files loses none of
them. Entries of an earlier version (directly in `cache_dir`) are removed
only where their checksums prove the cache wrote them.

A record is JSON carrying a checksum of its own (`dump_record`,
`parse_record`); one that fails it, or any other check of an entry, is
`Rejected`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from .trust import Exposed, read_own

LIBRARY_SUFFIX = ".so"
RECORD_SUFFIX = ".json"
TUNING = "tuning"  # the folder of the tuning records, in the cache's own
ENTRY_NAME = re.compile(r"[0-9a-f]{40}(\.json|\.so)")
TEMPORARY = (".work-", ".load-", ".entry-")  # the names of the cache's own temporary files
STALE_TEMP_SECONDS = 3600


class Rejected(Exception):
    """An entry that must not be loaded: damaged, truncated, or not the function asked for."""


@dataclass
class Entry:
    """One entry of the cache, as the sweep sees it: its key, its bytes, its last use."""

    key: str
    size: int = 0
    last_used: float = 0.0


class CacheSweep:
    """The entries of one cache folder (`own_dir`) as files: where each is, how many bytes
    they take, the least recently used evicted past a bound, and all of them cleared."""

    def __init__(self, own_dir: Path):
        self.own_dir = own_dir

    def paths(self, key: str) -> tuple[Path, Path]:
        """The record and the library of entry `key`."""
        return self.own_dir / f"{key}{RECORD_SUFFIX}", self.own_dir / f"{key}{LIBRARY_SUFFIX}"

    def discard(self, key: str) -> None:
        for path in self.paths(key):
            remove(path)

    def entries(self) -> list[Entry]:
        found: dict[str, Entry] = {}
        for path in entry_files(self.own_dir):
            try:
                info = path.stat()
            except FileNotFoundError:
                continue
            entry = found.setdefault(path.stem, Entry(path.stem))
            entry.size += info.st_size // max(info.st_nlink, 1)  # a shared file counts once
            if path.suffix == RECORD_SUFFIX or not entry.last_used:
                entry.last_used = info.st_mtime
        return list(found.values())

    def evict(self, max_bytes: int) -> None:
        """Delete least recently used entries until the cache fits in `max_bytes`; sweep stale
        temp files (the cache's own: other kernels may be writing the young ones)."""
        now = time.time()
        for path in _temporary_files(self.own_dir):
            if now - _mtime(path) > STALE_TEMP_SECONDS:
                remove(path)
        entries = sorted(self.entries(), key=lambda e: e.last_used)
        total = sum(e.size for e in entries)
        while entries and total > max_bytes:
            oldest = entries.pop(0)
            self.discard(oldest.key)
            total -= oldest.size

    def clear(self, earlier: Path) -> int:
        """Delete every entry, temporary file and tuning record, and the entries of an earlier
        version in folder `earlier` that their checksums prove the cache wrote; returns how
        many entries there were. Nothing else is touched."""
        entries = entry_files(self.own_dir)
        for path in [*entries, *_temporary_files(self.own_dir), self.own_dir / TUNING]:
            remove(path)
        for path in _earlier_own(earlier):
            remove(path)
        return len({path.stem for path in entries})


# -- records ---------------------------------------------------------------------------
def dump_record(record: dict) -> bytes:
    body = json.dumps(record, sort_keys=True)
    return json.dumps({"checksum": sha256(body.encode()), "record": body}).encode()


def parse_record(raw: bytes) -> dict:
    try:
        wrapper = json.loads(raw)
        body = wrapper["record"]
        if sha256(body.encode()) != wrapper["checksum"]:
            raise Rejected("its record does not match the checksum it was written with")
        return json.loads(body)
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise Rejected(f"its record is unreadable ({type(err).__name__})") from None


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- whose files -------------------------------------------------------------------------
def entry_files(directory: Path) -> list[Path]:
    """The files in `directory` named as the cache names its entries."""
    try:
        return [p for p in directory.iterdir() if ENTRY_NAME.fullmatch(p.name)]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _temporary_files(directory: Path) -> list[Path]:
    try:
        return [p for p in directory.iterdir() if p.name.startswith(TEMPORARY)]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _earlier_own(directory: Path) -> list[Path]:
    """The entry files an earlier version of the cache wrote directly in `directory`, as far as
    their checksums prove it: a record whose own checksum holds and the library whose SHA-256
    it recorded. A file merely named like an entry is not deleted."""
    proven = []
    for record in directory.glob(f"*{RECORD_SUFFIX}"):
        if not ENTRY_NAME.fullmatch(record.name):
            continue
        library = record.with_suffix(LIBRARY_SUFFIX)
        try:
            recorded = parse_record(read_own(record)).get("library_sha256")
            if recorded and sha256(read_own(library)) == recorded:
                proven += [record, library]
        except (Rejected, Exposed, OSError):
            continue
    return proven


def remove(path: Path) -> None:
    """Delete `path` if it can be: a read-only cache keeps what it has, and a caller that
    discards an entry goes on (it compiles instead)."""
    with contextlib.suppress(OSError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink()


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return time.time()
