"""`NAME.time("fn", *args)`: how long a function takes, against a reference on the same inputs.

A compiled function is timed by TVM's own `time_evaluator` on the module's
device (remote devices included): `number` calls per measurement, `repeat`
measurements. A pyfunc, and the reference (`against=`, e.g. `torch.matmul`),
are timed by a wall-clock loop of the same shape, after one warm-up call; the
reference runs under `torch.inference_mode()` (no autograd), as a deployed
model would, and on as many threads as TVM's pool has when the function runs
on this CPU: a ratio across different thread counts compares machines, not
code. Each side says how many threads it ran on.

Against a reference, the figure is a speed ratio, the reference's median time over the
function's: `× torch.matmul's speed`, above 1 faster. Every figure this package and its
tutorials and benchmarks print against PyTorch follows that one convention.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import tvm

from ...errors import CallError, last_reason
from ..build.crash_guards import has_guards
from ..feature_checks import check_counts
from ..live.cells import PRIMFUNC, PYFUNC
from ..module_parts import ModuleParts
from ..run.tensors import own_copies
from ..tables import text_table


@dataclass(frozen=True)
class Measurement:
    """Seconds per call, one figure per repeat."""

    what: str
    samples: tuple[float, ...]
    how: str  # "time_evaluator on cpu:0", "wall clock"
    threads: int | None = None  # None: not known here (a remote device)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.samples)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def std(self) -> float:
        return statistics.pstdev(self.samples)


@dataclass(frozen=True)
class Timing:
    """What `NAME.time` returns: the function's measurement, and the reference's if given."""

    function: Measurement
    against: Measurement | None = None
    note: str = ""  # e.g. that the kernel carries the crash guards' checks

    @property
    def mean(self) -> float:
        return self.function.mean

    @property
    def median(self) -> float:
        return self.function.median

    @property
    def std(self) -> float:
        return self.function.std

    @property
    def speed(self) -> float | None:
        """The function's speed as a multiple of the reference's: the reference's median time
        over the function's. Above 1 the function is faster (2.0: it takes half the time)."""
        return self.against.median / self.function.median if self.against else None

    def verdict(self) -> str:
        """One line: the median per call, and against a reference its speed as a multiple of the
        reference's (the one ratio this package prints), with both times."""
        if self.against is None:
            return f"{self.function.what}: {duration(self.median)} per call (median)"
        return (
            f"{self.function.what} runs at {speed_text(self.speed)} {self.against.what}'s speed "
            f"(above 1 is faster): {duration(self.median)} against "
            f"{duration(self.against.median)} per call (medians)"
        )

    def rows(self) -> list[tuple[str, str, str, str, str]]:
        found = [self.function, *([self.against] if self.against else [])]
        return [
            (m.what, duration(m.mean), duration(m.median), duration(m.std), _how(m)) for m in found
        ]

    def __repr__(self) -> str:
        lines = [
            self.verdict(),
            text_table(("", "mean", "median", "std", "measured by"), self.rows()),
        ]
        return "\n".join(lines + ([self.note] if self.note else []))


def wall_clock_samples(
    func: Callable, args: Sequence, number: int, repeat: int
) -> tuple[float, ...]:
    """Seconds per call of each repeat of `number` calls, after one warm-up call."""
    synchronize = _synchronizer(args)
    func(*args)
    samples = []
    for _ in range(repeat):
        synchronize()
        start = time.perf_counter()
        for _ in range(number):
            func(*args)
        synchronize()
        samples.append((time.perf_counter() - start) / number)
    return tuple(samples)


def _synchronizer(args: Sequence) -> Callable[[], None]:
    """Wait for a GPU's queued work when the inputs live on one, so that a loop times the work."""
    if any(isinstance(a, torch.Tensor) and a.is_cuda for a in args):
        return torch.cuda.synchronize
    return lambda: None


def _how(m: Measurement) -> str:
    return m.how if m.threads is None else f"{m.how}, {_threads(m.threads)}"


def _threads(count: int) -> str:
    return f"{count} thread" + ("" if count == 1 else "s")


def tvm_threads() -> int:
    """The threads of TVM's pool in this process (what compiled kernels run on).

    Asking TVM pins the asking thread to one core when its pool has one thread (TVM's default on
    two or three cores: half the cores, for hyperthreads), the first time a thread asks: a
    kernel's main thread, and every process and thread it starts afterwards (PyTorch's, a
    server's, a test's), would then share that core: a tiny ResNet in PyTorch on two threads took
    120 ms instead of 0.8 ms after it. The thread's cores are put back.
    """
    if not hasattr(os, "sched_getaffinity"):  # no affinity to keep (macOS)
        return tvm.runtime.num_threads()
    cores = os.sched_getaffinity(0)
    try:
        return tvm.runtime.num_threads()
    finally:
        os.sched_setaffinity(0, cores)


def reference_measurement(
    func: Callable, args: Sequence, number: int, repeat: int, threads: int | None
) -> Measurement:
    """A reference timed without autograd, on `threads` of PyTorch's (its own count if None)."""
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads or before)
        with torch.inference_mode():
            samples = wall_clock_samples(func, args, number, repeat)
    finally:
        torch.set_num_threads(before)
    return Measurement(name_of(func), samples, "wall clock", threads or before)


def name_of(func: Callable) -> str:
    """`torch.matmul`, `my_fn`, a module's class (`ResNetModel`), or the repr of the rest."""
    if isinstance(func, torch.nn.Module):
        return type(func).__name__
    name = getattr(func, "__name__", None)
    if name is None:
        return repr(func)
    return f"torch.{name}" if getattr(torch, name, None) is func else name


def speed_text(speed: float) -> str:
    """`2.41×`, `0.18×`, `0.011×`: two decimals, or two significant digits below 0.1."""
    return f"{speed:.2f}×" if speed >= 0.1 else f"{speed:.2g}×"


def duration(seconds: float, digits: int = 3) -> str:
    """`12.3 µs`, `1.234 ms`, `2.500 s`: `digits` after the point (one fewer in microseconds)."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.{max(digits - 1, 0)}f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.{digits}f} ms"
    return f"{seconds:.{digits}f} s"


def time_function(
    parts: ModuleParts, fn: str, args: tuple, number: int, repeat: int, against
) -> Timing:
    """Time `fn` on `args` on the module's device, and `against` (if given) on the same inputs
    (each on copies of its own: a function that writes into its inputs leaves the caller's as
    they were)."""
    check_counts("time", fn, number=number, repeat=repeat)
    entry = parts.entry(fn)
    function = parts.function(fn)
    given, args = args, own_copies(args)
    function(*args)  # compiles if needed, and checks the arguments
    if entry.kind == PYFUNC:
        samples = wall_clock_samples(function, args, number, repeat)
        mine = Measurement(fn, samples, "wall clock", torch.get_num_threads())
    else:
        runner = parts.runner
        samples = runner.time(entry, args, number, repeat)
        threads = tvm_threads() if runner.on_this_cpu else None
        mine = Measurement(fn, samples, f"time_evaluator on {runner.where}", threads)
    reference = None
    if against is not None:
        args = own_copies(given)
        try:
            with torch.inference_mode():
                against(*args)
        except Exception as err:
            raise CallError(
                f"the reference `{name_of(against)}` refused these arguments: "
                f"{type(err).__name__}: {last_reason(err)}",
                function=fn,
            ) from err
        reference = reference_measurement(against, args, number, repeat, mine.threads)
    note = ""
    if entry.kind == PRIMFUNC and parts.options.checked and has_guards(entry.func, fn):
        note = (
            f"`{fn}` carries bounds or division checks (the crash guards); "
            "a module made with --unchecked times it without them"
        )
    return Timing(mine, reference, note)
