"""Where a live module's compiled code runs: here, or on a remote device through TVM's RPC.

A runner is chosen once, when the module is made, so no other part asks
"is this remote?". It makes the module's call table and is its resolver: it
makes the callable of a function at its first call (a pyfunc's, which always
runs here, or one of compiled code, compiling what it needs with the
module's `Compiler`, which it makes too: the compiled code calls pyfuncs
through the table), and it runs compiled code once for `trace` and many
times for `time`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import tvm
from tvm import relax

from ...errors import CallError, TVMModuleError
from ..build.build import Build
from ..build.compiler import Compiler
from ..live.assembly import Assembly
from ..live.cells import PRIMFUNC, PYFUNC, RELAX
from ..live.contributions import FunctionEntry
from ..live.editing import ConstantTable
from ..models.input_writes import writes_inputs
from .call_errors import refused, unknown_function
from .call_table import CallTable
from .callables import compiled_callable, pyfunc_callable, remote_callable, run_compiled
from .guard_sites import name_the_binding
from .remote import RemoteDevice
from .tensors import to_tvm_tensor
from .trampolines import PyFuncBridge


def remote_address(options) -> str | None:
    """Where a module's compiled code runs: None for this machine, else the address of the RPC
    server whose device runs it. The one place that asks; the build (what it may keep on disk,
    for which CPU) and the assembly (whether Relax may call Python) take its word."""
    return options.rpc or None


@dataclass(frozen=True)
class Calling:
    """What a runner's callables need of the module beyond its parts: where the table publishes
    each callable (`NAME.fn`) and the names it must leave alone there, what a pyfunc gets as
    `self` (the live module, as upstream's `BasePyModule` gives itself), and the module's
    weights, named (`NAME.consts`: what an error writes a weight as)."""

    published: dict[str, Any]
    reserved: frozenset[str]
    pyfunc_self: object
    consts: Callable[[], ConstantTable]


def make_runner(
    name: str, assembly: Assembly, build: Build, device, options, calling: Calling
) -> Runner:
    """The runner of module `name`: here, or on the remote device `options.rpc` names."""
    remote = remote_address(options)
    if remote is None:
        return LocalRunner(name, assembly, build, device, calling)
    uploads = RemoteDevice(remote, options, build.stats.uploads.append)
    return RemoteRunner(name, assembly, build, device, calling, uploads)


def evaluator_samples(evaluator: Callable, args: Sequence) -> tuple[float, ...]:
    """Seconds per call of each repeat, from a TVM `time_evaluator`."""
    return tuple(float(s) for s in evaluator(*args).results)


class Runner(ABC):
    """What both runners share: resolving a name, and the pyfunc path (always here)."""

    def __init__(self, name: str, assembly: Assembly, build: Build, device, calling: Calling):
        self.name = name
        self.assembly = assembly
        self.calling = calling
        self.calls = CallTable(build.stats, calling.published, calling.reserved, self.resolve)
        self.compiler = Compiler(build, PyFuncBridge(self.calls, name))
        self.device = device
        self.closed = False

    @property
    def where(self) -> str:
        """The device compiled code runs on, as a user reads it."""
        return str(self.device)

    @property
    def on_this_cpu(self) -> bool:
        """Whether compiled code runs on this machine's CPU (on TVM's thread pool here)."""
        return self.device.dlpack_device_type() == tvm.cpu().dlpack_device_type()

    def resolve(self, name: str) -> Callable:
        """The callable of function `name`, compiling what it needs (the call table keeps it
        until the module changes)."""
        if self.closed:
            raise CallError(
                f"module `{self.name}` was dropped; run its cells again to rebuild it",
                function=name,
            )
        entries = self.assembly.state.entries
        if name not in entries:
            raise unknown_function(self.name, entries, name)
        entry = entries[name]
        if entry.kind == PYFUNC:
            return pyfunc_callable(self.calls, entry, self.calling.pyfunc_self)
        return self.compiled_callable(entry)

    def close(self) -> None:
        self.closed = True

    @abstractmethod
    def compiled_callable(self, entry: FunctionEntry) -> Callable:
        """The callable of compiled function `entry`, compiling what it needs now."""

    @abstractmethod
    def run_relax(self, fn: str, linked, entry: FunctionEntry, args: tuple) -> Any:
        """Run Relax function `fn` of `linked` once on `args` (nothing recorded)."""

    @abstractmethod
    def time(self, entry: FunctionEntry, args: tuple, number: int, repeat: int):
        """Seconds per call of each of `repeat` runs of `number` calls, on the device."""


class LocalRunner(Runner):
    """Compiled code in this process, on a device of this machine: torch tensors go as they are."""

    def compiled_callable(self, entry: FunctionEntry) -> Callable:
        state, name = self.assembly.state, entry.name
        stats = self.compiler.build.stats
        mark = len(stats.compiles)
        if entry.kind == PRIMFUNC:
            function, writes_args = self.compiler.kernel(state, entry)[name], True
        else:
            linked = self.compiler.relax_function(state, name)
            try:
                function, writes_args = linked.vm(self.device)[name], writes_inputs(entry.func)
            except CallError as err:
                raise CallError(err.detail, function=name) from err.__cause__
        compiled = tuple(stats.since(mark))
        explain = partial(self._stopped_in, linked, name) if entry.kind == RELAX else None
        return compiled_callable(
            self.calls,
            entry,
            function,
            compiled,
            device=self.device,
            writes_args=writes_args,
            explain=explain,
        )

    def _stopped_in(self, linked, fn: str, error: TVMModuleError) -> TVMModuleError:
        """`error` naming the binding whose kernel's check stopped a call of `fn`, if one did.
        The kernels are matched as the pipeline made them, before their CPU schedule (a
        scheduled kernel is no longer the op's legalized form)."""
        prefix = f"{self.name}.consts."
        unscheduled = self.compiler.build.lower(linked.mod, scheduled=False)
        consts = self.calling.consts()
        return name_the_binding(error, linked.mod, unscheduled, fn, consts, prefix)

    def run_relax(self, fn: str, linked, entry: FunctionEntry, args: tuple) -> Any:
        return run_compiled(entry, linked.vm(self.device)[fn], args, device=self.device)

    def time(self, entry: FunctionEntry, args: tuple, number: int, repeat: int):
        fn, state = entry.name, self.assembly.state
        if entry.kind == PRIMFUNC:
            module = self.compiler.kernel(state, entry)
        else:
            module = self.compiler.linked_for(state, fn).vm(self.device)
        evaluator = module.time_evaluator(fn, self.device, number=number, repeat=repeat)
        try:
            return evaluator_samples(evaluator, to_tvm_tensor(list(args)))
        except Exception as err:
            error = refused(fn, None, args, err, self.device)
            raise error from error.__cause__


class RemoteRunner(Runner):
    """Compiled here, uploaded and run on a remote device: arguments and results are copies."""

    def __init__(self, name, assembly, build, device, calling: Calling, remote: RemoteDevice):
        super().__init__(name, assembly, build, device, calling)
        self.remote = remote

    @property
    def where(self) -> str:
        return f"remote {self.remote.device_name} ({self.remote.address})"

    @property
    def on_this_cpu(self) -> bool:
        return False

    def compiled_callable(self, entry: FunctionEntry) -> Callable:
        state, name, remote = self.assembly.state, entry.name, self.remote
        stats = self.compiler.build.stats
        mark = len(stats.compiles)
        if entry.kind == PRIMFUNC:
            lib = self.compiler.kernel(state, entry)
            remote.kernel(name, lib)

            def invoke(args):
                return remote.call_kernel(name, lib, args)
        else:
            linked = self.compiler.relax_function(state, name)
            remote.vm(linked)
            returns_tuple = isinstance(entry.func.ret_ty, relax.TupleType)
            writes = writes_inputs(entry.func)

            def invoke(args):
                return remote.call_relax(name, linked, args, returns_tuple, writes)

        return remote_callable(self.calls, entry, invoke, tuple(stats.since(mark)))

    def run_relax(self, fn: str, linked, entry: FunctionEntry, args: tuple) -> Any:
        return self.remote.call_relax(fn, linked, args, returns_tuple=True)

    def time(self, entry: FunctionEntry, args: tuple, number: int, repeat: int):
        fn, state, remote = entry.name, self.assembly.state, self.remote
        if entry.kind == PRIMFUNC:
            module = remote.module(fn, self.compiler.kernel(state, entry))
        else:
            module = remote.vm(self.compiler.linked_for(state, fn))
        return remote.time(module, fn, args, number, repeat)

    def close(self) -> None:
        super().close()
        self.remote.close()
