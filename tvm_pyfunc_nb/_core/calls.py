"""The call table: one fast callable per function, and the latest call of each.

`NAME.fn` is a plain attribute once `fn` was called: the table puts its fast
callable into the live module's `__dict__`. The one rule that keeps this
right is `changed()`: when the module changes, every handle is released and
the version moves on, so any handle still held (by a user, or by a traceback)
re-resolves at its next call instead of running old code.

A call is recorded for the panes at the least cost: a slotted record of
references (no copies) and the time it took, read from `perf_counter` alone.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

import torch

from ..errors import CallError, TVMModuleError, UnknownFunctionError
from .calling import (
    AS_IS_DTYPES,
    bad_pyfunc_arguments,
    explain_bad_call,
    keywords_to_positions,
    pyfunc_error,
    specs_of,
    take_pending_error,
)
from .contributions import FunctionEntry
from .py_registry import was_cleared
from .tensors import to_torch, to_tvm_args, write_back

# time.time() - time.perf_counter(), read once: a record keeps only perf_counter readings
_CLOCK_OFFSET = time.time() - time.perf_counter()


class CallRecord(NamedTuple):
    """The latest call of one function, for the results pane: references, not copies.

    The fast paths store it as a plain tuple of these fields (a tuple is the cheapest thing
    a call can leave behind); `RecordView` gives the fields their names.
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
        return self.end + _CLOCK_OFFSET


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

    `resolve(name)` makes the callable of `name` (compiling what it needs);
    `owner` is the object whose `__dict__` receives the callables as attributes.
    """

    def __init__(self, owner: object, resolve: Callable[[str], Callable], stats):
        self.version = 0
        self.records: dict[str, tuple] = {}  # name -> the fields of its latest CallRecord
        self._owner_dict = owner.__dict__
        self._owner_type = type(owner)
        self._resolve = resolve
        self._stats = stats
        self.handles: dict[str, Callable] = {}  # name -> its fast callable, until a change

    def handle(self, name: str) -> Callable:
        """The fast callable of `name`, resolved now if the module changed since it was made."""
        fast = self.handles.get(name)
        if fast is None:
            fast = self.handles[name] = self._resolve(name)
            if name not in self._owner_dict and not hasattr(self._owner_type, name):
                self._owner_dict[name] = fast  # `NAME.fn` is a plain attribute lookup from now on
        return fast

    def changed(self, redefined=(), remaining=None) -> None:
        """The module changed: handles re-resolve; records of redefined or gone functions go."""
        self.version += 1
        for name, fast in self.handles.items():
            if self._owner_dict.get(name) is fast:
                del self._owner_dict[name]
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
        compiling = self._stats.seconds - compile_mark
        self.records[name] = (
            args,
            result,
            end - start - compiling,
            end,
            compiled,
            error,
            compiling,
        )

    # -- the callables ---------------------------------------------------------------
    def pyfunc_callable(self, entry: FunctionEntry, live: object) -> Callable:
        """A pyfunc, called with `self` = the live module, its call recorded and its errors
        explained.
        """
        func, name, line, takes_self = entry.pyfunc, entry.name, entry.line, entry.takes_self
        perf_counter, stats, records = time.perf_counter, self._stats, self.records

        def call(*args, **kwargs):
            mark = stats.seconds
            start = perf_counter()
            try:
                out = func(live, *args, **kwargs) if takes_self else func(*args, **kwargs)
            except BaseException as err:
                self.record(name, args, None, start, mark, (), err)
                error = bad_pyfunc_arguments(name, func, takes_self, args, kwargs, err)
                error = error or pyfunc_error(name, line, err)
                if error is err:
                    # already the package's error (e.g. from a call the pyfunc made): keep its chain
                    raise
                raise error from err
            end = perf_counter()
            compiling = stats.seconds - mark
            records[name] = (args, out, end - start - compiling, end, (), None, compiling)
            return out

        _describe(call, entry)
        return call

    def compiled_callable(
        self,
        entry: FunctionEntry,
        function,
        compiled: tuple,
        *,
        device,
        writes_args: bool,
        explain: Callable[[TVMModuleError], TVMModuleError] | None = None,
    ) -> Callable:
        """A compiled PrimFunc or Relax function: torch in, torch out, the call recorded.
        `explain` may say more of an error a call raised (which binding a check stopped in).

        The compiled function sits in a list that `release` empties: a callable may
        outlive a change, and then it asks the table again instead of keeping old code alive.
        """
        name, specs, version, table = entry.name, specs_of(entry.func), self.version, self
        cell_lines = entry.line is not None
        holder, stats = [function], self._stats
        perf_counter, tensor, records = time.perf_counter, torch.Tensor, self.records

        def converted_call(args):
            passed = to_tvm_args(args)
            out = holder[0](*passed)
            if writes_args:  # outputs passed as views were written to contiguous copies
                write_back(args, passed)
            return out

        def call(*args, **kwargs):
            nonlocal compiled
            if kwargs:
                args = keywords_to_positions(name, specs, args, kwargs)
            if table.version != version:
                return table.handle(name)(*args)
            start = perf_counter()
            try:
                # Inline, as this is the hot path: torch tensors of a dtype TVM knows go as they are
                # (others, e.g. complex ones TVM would abort on, are converted or refused first) ...
                for arg in args:
                    if arg.__class__ is not tensor or arg.dtype not in AS_IS_DTYPES:
                        out = converted_call(args)
                        break
                else:
                    # ... and a view, which TVM refuses before running, is copied
                    try:
                        out = holder[0](*args)
                    except ValueError:
                        if all(arg.is_contiguous() for arg in args):
                            raise
                        out = converted_call(args)
                if out is not None and out.__class__ is not tensor:
                    out = to_torch(out)
            except Exception as err:
                if was_cleared(err):  # e.g. by an upstream BasePyModule.__del__
                    # not `call`: a closure naming itself is a cycle that keeps the VM alive
                    return table.handle(name)(*args)
                error = refused(name, specs, args, err, device, cell_lines)
                if explain is not None:
                    error = explain(error)
                table.record(name, args, None, start, stats.seconds, (), error)
                # a pyfunc's error keeps its own traceback
                raise error from (error.__cause__ or err)
            end = perf_counter()
            records[name] = (args, out, end - start, end, compiled, None, 0.0)
            compiled = ()
            return out

        _describe(call, entry)
        call.release = holder.clear
        return call

    def remote_callable(
        self, entry: FunctionEntry, invoke: Callable[[tuple], Any], compiled: tuple
    ) -> Callable:
        """For a remote device: `invoke(args)` copies the arguments there, runs, copies back."""
        name, specs, version, table = entry.name, specs_of(entry.func), self.version, self
        perf_counter, records, stats = time.perf_counter, self.records, self._stats

        def call(*args, **kwargs):
            nonlocal compiled
            if kwargs:
                args = keywords_to_positions(name, specs, args, kwargs)
            if table.version != version:
                return table.handle(name)(*args)
            start = perf_counter()
            try:
                out = invoke(args)
            except TVMModuleError as err:
                error = err if err.function else CallError(err.detail, function=name)
                table.record(name, args, None, start, stats.seconds, (), error)
                raise error from err
            except Exception as err:
                error = refused(name, specs, args, err, None)
                table.record(name, args, None, start, stats.seconds, (), error)
                raise error from err
            end = perf_counter()
            records[name] = (args, out, end - start, end, compiled, None, 0.0)
            compiled = ()
            return out

        _describe(call, entry)
        return call

    @staticmethod
    def run_compiled(entry: FunctionEntry, function, args: tuple, *, device) -> Any:
        """Call a compiled function once, outside the table (nothing recorded): torch in and out."""
        try:
            out = function(*to_tvm_args(args))
        except Exception as err:
            error = refused(
                entry.name, specs_of(entry.func), args, err, device, entry.line is not None
            )
            raise error from (error.__cause__ or err)
        return to_torch(out)


def refused(
    name: str, specs, args: tuple, err: Exception, device, cell_lines: bool = False
) -> TVMModuleError:
    """The package's error for a compiled call TVM refused (or a pyfunc it called that raised)."""
    error = take_pending_error() or explain_bad_call(name, specs, args, err, device, cell_lines)
    if not isinstance(error, TVMModuleError):
        error = pyfunc_error(getattr(error, "function", name), None, error)
    return error


def _describe(call: Callable, entry: FunctionEntry) -> None:
    """Give a handle the function's name, docstring and real parameters (`help`, completion)."""
    call.__name__ = call.__qualname__ = entry.name
    call.__signature__ = signature_of(entry)
    if entry.pyfunc is not None:
        call.__doc__ = inspect.getdoc(entry.pyfunc)


def signature_of(entry: FunctionEntry) -> inspect.Signature:
    """What a caller passes: a pyfunc's own parameters (without `self`), a compiled one's names."""
    if entry.pyfunc is not None:
        try:
            signature = inspect.signature(entry.pyfunc)
        except (TypeError, ValueError):
            return inspect.Signature([_positional("args", inspect.Parameter.VAR_POSITIONAL)])
        params = list(signature.parameters.values())
        return signature.replace(parameters=params[1:] if entry.takes_self else params)
    specs = specs_of(entry.func) or []
    return inspect.Signature([_positional(spec.name) for spec in specs])


def _positional(name: str, kind=inspect.Parameter.POSITIONAL_OR_KEYWORD) -> inspect.Parameter:
    return inspect.Parameter(name if name.isidentifier() else f"arg_{name}", kind)


def unknown_function(module: str, known, name: str) -> CallError:
    names = ", ".join(sorted(known)) or "none yet"
    return UnknownFunctionError(
        f"module `{module}` has no function `{name}` (it has: {names})", function=name
    )
