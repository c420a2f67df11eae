"""Schedules that need no measuring: TVM's DLight rules, and a function of the user's.

- DLight applies TVM's default schedules for the module's target (thread
  bindings and shared memory on a GPU; on a CPU it knows GEMV and reductions
  only). `dlight_kernels` (build/kernel_schedules.py) is the one place it
  runs: on one PrimFunc here (`NAME.schedule("k", "dlight")`), and on the
  kernels a Relax function's pipeline makes, each time it compiles.
- `by_hand` calls `how(sch)` with a `tvm.s_tir.Schedule` of the kernel (its
  only function is `main`, so `sch.get_sblock("C")` finds block C) for the
  user to apply primitives: split, reorder, vectorize, parallel...
"""

from __future__ import annotations

import traceback
from collections.abc import Callable

import tvm

from ...errors import ScheduleError, last_reason
from ..build.kernel_schedules import dlight_kernels
from ..build.tuning_records import WORKLOAD


def dlight(func: tvm.tirx.PrimFunc, name: str, target: tvm.target.Target) -> tvm.tirx.PrimFunc:
    """PrimFunc `func` with DLight's default schedule rules for `target` applied."""
    needs_blocks(func, name)
    main = tvm.ir.GlobalVar(WORKLOAD)
    try:
        scheduled = dlight_kernels({main: func}, target)
    except Exception as err:  # TVM raises many types; each means DLight cannot do it
        raise ScheduleError(f"DLight failed: {last_reason(err)}", function=name) from err
    if main not in scheduled:
        raise ScheduleError(
            f"DLight has no schedule for this kernel on target {target.kind.name} (its CPU rules "
            "cover GEMV and reductions only); schedule it with a function of your own",
            function=name,
        )
    return scheduled[main]


def by_hand(func: tvm.tirx.PrimFunc, name: str, how: Callable) -> tvm.tirx.PrimFunc:
    """`func` after `how(sch)` applied primitives to `sch`, a `tvm.s_tir.Schedule` of it."""
    needs_blocks(func, name)
    sch = tvm.s_tir.Schedule(tvm.IRModule({WORKLOAD: func}))
    try:
        how(sch)
    except Exception as err:  # TVM's ScheduleError, or the user's own mistake
        raise ScheduleError(f"{_where(err, how)}{last_reason(err)}", function=name) from err
    return sch.mod[WORKLOAD]


def needs_blocks(func: tvm.tirx.PrimFunc, name: str) -> None:
    if not func.attrs.get("s_tir", False):
        raise ScheduleError(
            "has no blocks to schedule: write it with `@T.prim_func(s_tir=True)` and `T.sblock`",
            function=name,
        )


def _where(err: BaseException, how: Callable) -> str:
    """`in tile, line 4: ` for the deepest frame of the user's schedule function, if any."""
    code = getattr(how, "__code__", None)
    frames = [
        f
        for f in traceback.extract_tb(err.__traceback__)
        if code and f.filename == code.co_filename
    ]
    return f"in {how.__name__}, line {frames[-1].lineno}: " if frames else ""
