"""`NAME.profile("fn", *args)`: the time of every kernel a compiled Relax function launches.

TVM 0.27 removed the VM profiler; this one stands on what remains, the
Relax VM's instrument hook (`VirtualMachine.set_instrument`), which sees
every call the VM makes with its arguments, on a VM of its own (the module's
calls are never instrumented):

- a TIR kernel is timed by TVM's `time_evaluator`, in C++, on copies of the
  arguments the VM gave it at that call (`number` calls, `repeat` times, the
  median per call): a Python timer around a kernel of a few microseconds
  times Python more than the kernel, and leaves the next kernel a cold
  cache;
- a PyTorch call (`--offload torch`) writes its output only: the hook makes
  it itself and the VM skips it, `number` calls `repeat` times over in the
  first run, by the clock around them, the median per call; a pyfunc
  (`R.call_py_func`) returns a value, so the clock runs from the hook before
  the VM's call to the hook after it (a few µs of the hook's own, turning the
  result into Python objects, included); each the median of `repeat` runs;
- the VM's own work, its builtins (allocation, shape checks, views) and the
  dispatch of every call, is one row apart: what `time()` measures of the
  whole function beyond the other rows (0 if they already cover it).

So the rows' total is `time()`'s median, taken in the same call, unless the
measured rows exceed it; `.time` keeps that median. How far the measured
rows are from it, on this project's 2-core machine, load about 2: on tiny
BERT (20 to 43 kernels, 46 to 108 launches, about 150 µs a call on one
thread) the kernels sum to 70-80 % of `time()`, the VM's row (133 to 379
builtin calls) is the rest; with `--offload torch` kernels and PyTorch calls
sum to 87-90 %; tiny GPT-2's kernels to 50-75 %. Against a `time()` taken
separately right after, the total was within 6 % for BERT (0.94-1.04 in five
runs each, with and without offload) and GPT-2 (0.92-1.04, one run at 1.42):
`time()`'s own noise. On a loaded machine (load 5) both vary by 10 % to
several times from one call to the next: compare shares, not totals, there.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import tvm

from ...errors import CallError
from ..build.linking import relax_names
from ..build.offload import PREFIX
from ..feature_checks import check_counts
from ..live.cells import RELAX
from ..models.source_sites import where_of
from ..module_parts import ModuleParts
from ..run.tensors import own_copies, to_tvm_tensor
from ..run.thread_pool import threads_text
from ..tables import text_table
from .timing import duration

KERNEL, TORCH_CALL, PYFUNC_CALL, VM = "kernel", "PyTorch call", "pyfunc", "VM"
CALL_PY_FUNC = "vm.builtin.call_py_func"
VM_ROW = "VM builtins and dispatch"
SKIP_RUN = 1  # what the instrument returns for a call it ran itself (VMInstrumentReturnKind)
SHOWN = 6  # bindings, or PyTorch ops, a row's text names before it says how many it left out


@dataclass(frozen=True)
class KernelTime:
    """One row of a profile: what ran, how often per run of the function, and for how long."""

    kernel: str
    kind: str  # "kernel", "PyTorch call", "pyfunc" or "VM"
    calls: int  # per run of the function
    total: float  # seconds per run of the function
    share: float  # of the rows' total, 0..1
    bindings: tuple[str, ...] = ()  # every binding of the function fused into it (all sites)
    ops: tuple[str, ...] = ()  # the PyTorch ops fused into it, each once (from add_torch)
    where: str = ""  # where in the model's code they came from

    @property
    def mean(self) -> float:
        """Seconds per call."""
        return self.total / self.calls if self.calls else 0.0


class Profile:
    """What `NAME.profile` returns: `.rows` (`KernelTime`s, slowest first), `.total` (seconds
    per run, the rows' sum), `.time` (`time()`'s median of the whole function, uninstrumented);
    shown as a table, a bar per kernel in a notebook."""

    header = ("kernel", "kind", "calls", "total", "mean", "share", "bindings", "PyTorch ops")

    def __init__(
        self, function: str, rows: list[KernelTime], whole: float, how: str, module: str = ""
    ):
        self.module = module  # the live module's name
        self.function = function
        self.rows = rows
        self.time = whole
        self.how = how

    @property
    def total(self) -> float:
        return sum(r.total for r in self.rows)

    @property
    def kernels(self) -> list[KernelTime]:
        """The rows of what the function launches (the VM's own row left out)."""
        return [r for r in self.rows if r.kind != VM]

    def summary(self) -> str:
        launched = sum(r.calls for r in self.kernels)
        return (
            f"profile of {self.function}: {len(self.kernels)} kernels, {launched} launches, "
            f"{duration(self.total)} per run (time(): {duration(self.time)}; {self.how})"
        )

    def sited(self) -> bool:
        return any(r.where for r in self.rows)

    def table_header(self) -> tuple[str, ...]:
        return self.header + (("where",) if self.sited() else ())

    def table_rows(self) -> list[tuple[str, ...]]:
        rows = []
        for r in self.rows:
            row = (r.kernel, r.kind, str(r.calls), duration(r.total), duration(r.mean))
            row += (f"{100 * r.share:.1f}%", listed(r.bindings), listed(r.ops))
            rows.append(row + ((r.where,) if self.sited() else ()))
        return rows

    def __repr__(self) -> str:
        return f"{self.summary()}\n{text_table(self.table_header(), self.table_rows())}"


@dataclass
class _Tally:
    """What the hook saw of one callee over the runs."""

    alone: bool  # timed on its own (a kernel, a PyTorch call), not inside the run
    calls: int = 0  # in one run
    seconds: list[float] | None = None  # per call (timed alone), or per run


class _Hook:
    """The instrument: in the first run, kernels and PyTorch calls timed on their own; in the
    runs after, pyfuncs and the VM's builtins by the clock around the VM's call."""

    def __init__(self, kernels: Mapping[str, object], skip: set[str], device, number, repeat):
        self.kernels, self.skip, self.device = kernels, skip, device
        self.number, self.repeat = number, repeat
        self.first_run = True
        self.tallies: dict[str, _Tally] = {}
        self.per_run: dict[str, list[float]] = defaultdict(list)  # callee -> seconds, this run
        self.evaluators: dict[str, Callable] = {}
        self.started = 0.0

    def __call__(self, func, symbol, before, ret, *args):
        symbol = str(symbol)
        if symbol in self.kernels:
            if before and self.first_run:
                self._time_kernel(symbol, args)
            return 0
        if symbol in self.skip:  # another Relax function: its own calls are counted
            return 0
        if symbol.startswith(PREFIX):  # a PyTorch call writes its output: run it here, timed
            if before:
                self._time_call(symbol, func, args)
            return SKIP_RUN if before else 0
        if before:
            self.started = time.perf_counter()
            return 0
        seconds = time.perf_counter() - self.started
        if not self.first_run:
            self.per_run[self._name(symbol, args)].append(seconds)
        return 0

    def _time_call(self, symbol: str, func, args) -> None:
        """A PyTorch call, made here: in the first run `number` times, `repeat` times over
        (it writes only its output), the median per call; later, once."""
        if not self.first_run:
            func(*args)
            return
        samples = []
        for _ in range(self.repeat):
            start = time.perf_counter()
            for _ in range(self.number):
                func(*args)
            samples.append((time.perf_counter() - start) / self.number)
        self._tally(symbol, statistics.median(samples))

    def _name(self, symbol: str, args) -> str:
        if symbol == CALL_PY_FUNC:  # its first argument: (registered name, its arguments)
            return f"{CALL_PY_FUNC}:{args[0][0]}"
        return symbol

    def _time_kernel(self, symbol: str, args) -> None:
        evaluator = self.evaluators.get(symbol)
        if evaluator is None:
            evaluator = self.kernels[symbol].time_evaluator(
                symbol, self.device, number=self.number, repeat=self.repeat
            )
            self.evaluators[symbol] = evaluator
        copies = [_copy(a) for a in args]  # a kernel may write into what it reads
        self._tally(symbol, statistics.median(float(s) for s in evaluator(*copies).results))

    def _tally(self, symbol: str, seconds: float) -> None:
        """One launch timed on its own (a kernel, a PyTorch call): seconds per call."""
        tally = self.tallies.setdefault(symbol, _Tally(True, seconds=[]))
        tally.calls += 1
        tally.seconds.append(seconds)

    def end_run(self) -> None:
        if not self.first_run:
            for name, seconds in self.per_run.items():
                tally = self.tallies.setdefault(name, _Tally(False, seconds=[]))
                tally.calls = len(seconds)
                tally.seconds.append(sum(seconds))
        self.per_run = defaultdict(list)
        self.first_run = False


def _copy(value):
    if isinstance(value, tvm.runtime.Tensor):
        return value.copyto(value.device)
    return value


def profile(parts: ModuleParts, fn: str, args: tuple, number: int, repeat: int) -> Profile:
    """Run Relax function `fn` on `args` under the VM's instrument hook and time each kernel,
    PyTorch call and pyfunc it launches; the VM's own work is the rest of `time()`."""
    check_counts("profile", fn, number=number, repeat=repeat)
    entry = parts.entry(fn, kind=RELAX, needed_by="profile")
    if parts.options.rpc:
        raise CallError(
            "profile runs the function in this process; a module with --rpc runs it on the "
            "remote device: time it there with time()",
            function=fn,
        )
    # each run on copies of its own: a function that writes into its inputs leaves them be
    parts.function(fn)(*own_copies(args))  # compiles if needed (not timed), checks the arguments
    threads = threads_text()  # after the call: TVM's pool matched to PyTorch's
    linked = parts.compiler.linked_for(parts.state, fn)
    whole = statistics.median(parts.runner.time(entry, own_copies(args), number, repeat))
    hook = _Hook(linked.kernels, set(relax_names(linked.lowered)), parts.device, number, repeat)
    vm = linked.instrumented_vm(parts.device, hook)
    function, tvm_args = vm[fn], to_tvm_tensor(list(own_copies(args)))
    function(*tvm_args)  # kernels timed, the rest warmed up
    hook.end_run()
    for _ in range(repeat):
        function(*tvm_args)
        hook.end_run()
    rows = _rows(parts, fn, linked, hook.tallies, whole)
    return Profile(fn, rows, whole, threads, module=parts.name)


def _rows(parts: ModuleParts, fn: str, linked, tallies: dict, whole: float) -> list[KernelTime]:
    origin = parts.torch_origins.get(fn)
    site_of = origin.site if origin is not None else (lambda binding: None)
    pyfuncs = parts.compiler.bridge.names  # registered name of a call site -> the pyfunc
    sites = linked.sites.of(fn)
    found: dict[str, list] = {}  # row name -> [kind, calls, seconds, call sites]
    vm_calls = 0
    for name, tally in tallies.items():
        if name.startswith(PREFIX):
            row, kind, callee = name.removeprefix(PREFIX), TORCH_CALL, name
            seconds = sum(tally.seconds)
        elif tally.alone:
            row, kind, callee = name, KERNEL, name
            seconds = sum(tally.seconds)
        else:
            seconds = statistics.median(tally.seconds)
            if name.startswith(f"{CALL_PY_FUNC}:"):
                callee = name.split(":", 1)[1]
                row, kind = pyfuncs.get(callee, callee), PYFUNC_CALL
            else:
                vm_calls += tally.calls
                continue
        entry = found.setdefault(row, [kind, 0, 0.0, []])
        entry[1] += tally.calls
        entry[2] += seconds
        entry[3].extend(sites.get(callee, []))
    measured = sum(e[2] for e in found.values())
    rows = []
    for row, (kind, calls, seconds, call_sites) in found.items():
        bindings = tuple(dict.fromkeys(b for site in call_sites for b in site))
        where = where_of(site_of(b) for b in bindings)
        rows.append((row, kind, calls, seconds, bindings, torch_ops(origin, bindings), where))
    rows.append((VM_ROW, VM, vm_calls, max(whole - measured, 0.0), (), (), ""))
    total = sum(r[3] for r in rows) or 1.0
    made = [
        KernelTime(name, kind, calls, seconds, seconds / total, bindings, ops, where)
        for name, kind, calls, seconds, bindings, ops, where in rows
    ]
    return sorted(made, key=lambda r: -r.total)


def listed(names: tuple[str, ...], shown: int = SHOWN) -> str:
    """`lv1, lv2, lv3, lv4, lv5, lv6 (+12 more)`: the first names, and how many are left out."""
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" (+{more} more)" if more > 0 else "")


def torch_ops(origin, bindings: tuple[str, ...]) -> tuple[str, ...]:
    """The PyTorch ops behind a kernel's bindings, each once: `linear`, `add`, `gelu`."""
    if origin is None:
        return ()
    return tuple(
        dict.fromkeys(
            _op_name(node.op)
            for binding in bindings
            if (node := origin.bindings.get(binding)) is not None
        )
    )


def _op_name(op: str) -> str:
    """`addmm` for `aten.addmm.default`, `add.Tensor` for `aten.add.Tensor`."""
    return op.removeprefix("aten.").removesuffix(".default")
