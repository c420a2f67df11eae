"""The fast callables of a live module: what `NAME.fn` runs once `fn` is resolved.

Each is a closure holding what its call needs in locals: a pyfunc called with
`self` = the live module; a compiled PrimFunc or Relax function, torch in and
torch out; a function on a remote device. Each records its call in the call
table and turns a failure into the package's error (call_errors.py). A
callable made before a change sees the table's version move on and asks the
table again.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any

import torch
import tvm_ffi

from ...errors import CallError, TVMModuleError
from ..live.cells import PRIMFUNC
from ..live.contributions import FunctionEntry
from .arguments import (
    AS_IS_DTYPES,
    allocate_outputs,
    function_name,
    keywords_to_positions,
    out_ty_of,
    specs_of,
)
from .call_errors import (
    bad_pyfunc_arguments,
    pending_error,
    pyfunc_error,
    raised_in_pyfunc,
    refused,
)
from .call_table import CallTable, call_record
from .interrupts import is_interrupt
from .py_registry import was_cleared
from .tensors import to_torch, to_tvm_args, write_back


def pyfunc_callable(table: CallTable, entry: FunctionEntry, live: object) -> Callable:
    """A pyfunc, called with `self` = the live module, its call recorded and its errors
    explained.
    """
    func, name, line, takes_self = entry.pyfunc, entry.name, entry.line, entry.takes_self
    perf_counter, stats, records = time.perf_counter, table.stats, table.records
    code = getattr(func, "__code__", None)

    def call(*args, **kwargs):
        mark = stats.seconds
        start = perf_counter()
        try:
            out = func(live, *args, **kwargs) if takes_self else func(*args, **kwargs)
        except BaseException as err:
            table.record(name, args, None, start, mark, (), err)
            if is_interrupt(err):  # Ctrl-C stays itself (and crosses TVM as itself: interrupts.py)
                raise
            error = bad_pyfunc_arguments(name, func, takes_self, args, kwargs, err)
            error = error or pyfunc_error(name, line, err)
            pending_error.error = error  # for a compiled caller beyond TVM
            error = raised_in_pyfunc(error, err, code)
            raise error from error.__cause__
        end = perf_counter()
        compiling = stats.seconds - mark
        records[name] = call_record(args, out, end - start - compiling, end, (), None, compiling)
        return out

    _describe(call, entry)
    return call


def compiled_callable(
    table: CallTable,
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
    name, specs, version = entry.name, specs_of(entry.func), table.version
    cell_lines = entry.line is not None
    holder, stats = [function], table.stats
    perf_counter, tensor, records = time.perf_counter, torch.Tensor, table.records

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
            raise error from error.__cause__
        end = perf_counter()
        records[name] = call_record(args, out, end - start, end, compiled)
        compiled = ()
        return out

    _describe(call, entry)
    call.release = holder.clear
    return call


def remote_callable(
    table: CallTable, entry: FunctionEntry, invoke: Callable[[tuple], Any], compiled: tuple
) -> Callable:
    """For a remote device: `invoke(args)` copies the arguments there, runs, copies back."""
    name, specs, version = entry.name, specs_of(entry.func), table.version
    perf_counter, records, stats = time.perf_counter, table.records, table.stats

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
            raise error from error.__cause__
        end = perf_counter()
        records[name] = call_record(args, out, end - start, end, compiled)
        compiled = ()
        return out

    _describe(call, entry)
    return call


def run_compiled(entry: FunctionEntry, function, args: tuple, *, device) -> Any:
    """Call a compiled function once, outside the table (nothing recorded): torch in and out."""
    try:
        out = function(*to_tvm_args(args))
    except Exception as err:
        error = refused(entry.name, specs_of(entry.func), args, err, device, entry.line is not None)
        raise error from error.__cause__
    return to_torch(out)


class LazyCallable:
    """`NAME.fn` before `fn` was called: the call table resolves it at the first call, then
    hands over to the fast path."""

    def __init__(self, calls: CallTable, module: str, entry: FunctionEntry):
        self._calls, self._module, self._kind = calls, module, entry.kind
        self.__name__ = entry.name
        self.__signature__ = signature_of(entry)
        self.__doc__ = inspect.getdoc(entry.pyfunc) if entry.pyfunc is not None else None

    def __call__(self, *args, **kwargs):
        return self._calls.handle(self.__name__)(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<{self._kind} {self._module}.{self.__name__}>"


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


def call_tir(entry_of: Callable, table: CallTable, tir_func, args, out_ty, out_sinfo):
    """Allocate the outputs `out_ty` describes, then call PrimFunc `tir_func` (its entry from
    `entry_of`, its callable from `table`)."""
    name = function_name(tir_func)
    entry = entry_of(name, kind=PRIMFUNC, needed_by="call_tir")
    out_ty = out_ty_of(out_ty, out_sinfo, "call_tir", name)
    args = list(args) if isinstance(args, (list, tuple)) else [args]
    outputs = allocate_outputs(entry.func, name, args, out_ty)
    table.handle(name)(*args, *outputs)
    return outputs[0] if len(outputs) == 1 else outputs


def call_dps_packed(name: str, args, out_ty, out_sinfo, device):
    """Call global packed function `name` destination-passing style: the outputs `out_ty`
    describes are allocated, passed after `args`, and returned."""
    out_ty = out_ty_of(out_ty, out_sinfo, "call_dps_packed", name)
    func = tvm_ffi.get_global_func(name, allow_missing=True)
    if func is None:
        raise CallError(
            "no global packed function has this name; register it first (e.g. "
            "with tvm.register_global_func)",
            function=name,
        )
    args = list(args) if isinstance(args, (list, tuple)) else [args]
    outputs = allocate_outputs(None, name, args, out_ty)
    try:
        func(*to_tvm_args(args), *outputs)
    except Exception as err:
        error = refused(name, None, args, err, device)
        raise error from error.__cause__
    return outputs[0] if len(outputs) == 1 else outputs
