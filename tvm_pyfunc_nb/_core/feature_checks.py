"""What the features check: their arguments at their entry, and that `tune`'s records were kept.

A wrong argument (`time`, `profile`, `compare`, `bisect`) is a `CallError`
that names the function, the argument and what it takes, before anything
runs: not a `TypeError` from deep inside TVM or PyTorch, and not a count that
TVM's `time_evaluator` silently wraps (it counts in 32 bits: `number=2**31`
timed nothing and printed "-0.00 µs").

MetaSchedule appends its records to its files and says nothing when a write
fails: a full disk, a quota or a file size limit left the records cut short
while `tune` reported them kept. `warn_unless_kept` reads them back.
"""

from __future__ import annotations

import math
import numbers
import warnings
from pathlib import Path

import numpy as np
import torch

from ..errors import CallError, CompileCacheWarning, last_reason
from .build.tuning_records import kept_trials

MAX_COUNT = 2**31 - 1  # the most runs TVM's time_evaluator counts (an int32)


def check_counts(feature: str, fn: str, **counts: object) -> None:
    """Each of `counts` (`number=10`, `repeat=5`) a whole number from 1 to `MAX_COUNT`."""
    for name, value in counts.items():
        whole = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        if not whole or not 1 <= value <= MAX_COUNT:
            raise CallError(
                f"{feature}: {name} must be a whole number, at least 1 and at most {MAX_COUNT}, "
                f"not {value!r}",
                function=fn,
            )


def check_tolerances(feature: str, fn: str, rtol: object, atol: object) -> None:
    """`rtol` and `atol` finite numbers, not negative."""
    for name, value in (("rtol", rtol), ("atol", atol)):
        real = isinstance(value, numbers.Real) and not isinstance(value, bool)
        if not real or not math.isfinite(value) or value < 0:
            raise CallError(
                f"{feature}: {name} is a number of 0 or more, not {value!r}", function=fn
            )


def check_reference(feature: str, fn: str, reference: object, *, values: bool = False) -> None:
    """`reference` a callable (a function, a `torch.nn.Module`); with `values`, also None or the
    expected outputs: a tensor, an array, or a (nested) list or tuple of them."""
    if callable(reference) or (values and (reference is None or _outputs(reference))):
        return
    wanted = "a callable (a function or a torch.nn.Module)"
    if values:
        wanted += ", the expected outputs (tensors, or a list or tuple of them), or None"
    raise CallError(
        f"{feature}: the reference is {wanted}, not {type(reference).__name__} {reference!r:.60}",
        function=fn,
    )


def check_tensors(feature: str, fn: str, args: tuple) -> None:
    """No argument a tensor without data (on PyTorch's `meta` device)."""
    for i, arg in enumerate(args):
        if isinstance(arg, torch.Tensor) and arg.is_meta:
            raise CallError(
                f"{feature}: argument {i} is a meta tensor, which has a shape but no values; "
                "give a tensor with values (e.g. torch.randn of that shape)",
                function=fn,
            )


def _outputs(value: object) -> bool:
    if isinstance(value, (list, tuple)):
        return bool(value) and all(_outputs(v) for v in value)
    return isinstance(value, (torch.Tensor, np.ndarray)) or hasattr(value, "__dlpack__")


def check_comparison(
    feature: str, fn: str, reference: object, args: tuple, rtol: object, atol: object, *,
    values: bool = False,
) -> None:  # fmt: skip
    """What `compare` and `bisect` take: a reference (`check_reference`), tolerances, and
    arguments with values."""
    check_reference(feature, fn, reference, values=values)
    check_tolerances(feature, fn, rtol, atol)
    check_tensors(feature, fn, args)


def warn_unless_kept(fn: str, directory: str | Path | None, database, workloads: list) -> None:
    """A `CompileCacheWarning` if the tuning records of `workloads` that `database` holds are
    not all in `directory` on disk (None or "in memory": nothing to check). The tuned
    schedules are used all the same, from memory."""
    if directory is None or not Path(directory).is_dir():
        return
    from tvm.s_tir import meta_schedule as ms

    wanted = sum(kept_trials(database, w) for w in workloads)
    try:
        on_disk = ms.database.JSONDatabase(work_dir=str(directory), allow_missing=False)
        kept = sum(kept_trials(on_disk, w) for w in workloads)
    except Exception as err:  # a record cut short: TVM's RuntimeError
        kept, why = 0, f"they cannot be read back: {last_reason(err)}"
    else:
        why = f"{kept} of {wanted} trials are there"
    if kept < wanted:
        warnings.warn(
            f"tune: the tuning records of `{fn}` were not all written to {directory} ({why}; "
            "a full disk, a quota or a file size limit?). Its tuned schedule is used in this "
            "session; delete that folder to tune it again later.",
            CompileCacheWarning,
            stacklevel=3,
        )
