"""The call table: one fast callable per function, and the latest call of each.

A resolver (the module's runner) makes the callable of a function the first
time it is called; the table keeps it and publishes it in a mapping its owner
gives (the live module's attributes), so that `NAME.fn` is a plain attribute
lookup from then on. The one rule that keeps this right is `changed()`: when
the module changes, every handle is released and the version moves on, so
any handle still held (by a user, or by a traceback) re-resolves at its next
call instead of running old code.

A call is recorded for the panes at the least cost: a plain tuple of
references (no copies) and the time it took, read from `perf_counter` alone,
made by `call_record`, the one constructor every path uses.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

from ..build.stats import CLOCK_OFFSET


class CallRecord(NamedTuple):
    """The latest call of one function, for the results pane: references, not copies.

    The fast paths store it as a plain tuple of these fields, made by `call_record` (a tuple
    is the cheapest thing a call can leave behind); `RecordView` gives the fields their names.
    """

    args: tuple
    result: Any
    seconds: float  # the call's own run time, compiles it triggered excluded
    end: float  # perf_counter() when it returned: a new call, a new `end`
    compiled: tuple = ()  # CompileRecords this call triggered
    error: BaseException | None = None
    compile_seconds: float = 0.0  # spent compiling during the call (not in `seconds`)

    @property
    def when(self) -> float:
        """The wall-clock time (`time.time()`) at which the call returned."""
        return self.end + CLOCK_OFFSET


def call_record(
    args: tuple,
    result: Any,
    seconds: float,
    end: float,
    compiled: tuple = (),
    error: BaseException | None = None,
    compile_seconds: float = 0.0,
) -> tuple:
    """The fields of a `CallRecord`, in its order, as the plain tuple the table keeps."""
    return (args, result, seconds, end, compiled, error, compile_seconds)


class RecordView(Mapping[str, CallRecord]):
    """`NAME.last_calls`: the latest call of each function, as `CallRecord`s."""

    def __init__(self, records: dict[str, tuple]):
        self._records = records

    def __getitem__(self, name: str) -> CallRecord:
        return CallRecord._make(self._records[name])

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)


class CallTable:
    """The fast callables of one live module, the latest call of each function, and the change rule.

    `resolver(name)` makes the callable of `name` (compiling what it needs: the runner, which
    makes the table); `published` receives each callable under its function's name, unless
    the name is one of `reserved` (the owner's own attributes) or private.
    """

    def __init__(
        self,
        stats,
        published: dict[str, Any],
        reserved: frozenset[str] = frozenset(),
        resolver: Callable[[str], Callable] | None = None,
    ):
        self.version = 0
        self.records: dict[str, tuple] = {}  # name -> the fields of its latest CallRecord
        self.resolver = resolver
        self._published = published
        self.reserved = reserved
        self.stats = stats
        self.handles: dict[str, Callable] = {}  # name -> its fast callable, until a change

    def handle(self, name: str) -> Callable:
        """The fast callable of `name`, resolved now if the module changed since it was made."""
        fast = self.handles.get(name)
        if fast is None:
            fast = self.handles[name] = self.resolver(name)
            if name not in self._published and name not in self.reserved and name[0] != "_":
                self._published[name] = fast  # `NAME.fn` is a plain attribute lookup from now on
        return fast

    def changed(self, redefined=(), remaining=None) -> None:
        """The module changed: handles re-resolve; records of redefined or gone functions go."""
        self.version += 1
        for name, fast in self.handles.items():
            if self._published.get(name) is fast:
                del self._published[name]
            # A callable may outlive the change (held by a user, or by a traceback in IPython's
            # history); it asks the table again when called, so its compiled code can go now.
            release = getattr(fast, "release", None)
            if release is not None:
                release()
        self.handles.clear()
        for name in list(self.records):
            if name in redefined or (remaining is not None and name not in remaining):
                del self.records[name]  # a new definition has had no call yet

    def record(
        self,
        name: str,
        args: tuple,
        result: Any,
        start: float,
        compile_mark: float,
        compiled: tuple = (),
        error: BaseException | None = None,
    ) -> None:
        end = time.perf_counter()
        compiling = self.stats.seconds - compile_mark
        self.records[name] = call_record(
            args, result, end - start - compiling, end, compiled, error, compiling
        )
