"""Making a function fast, whatever its kind: `schedule(parts, fn, how)` and
`tune(parts, fn, trials)` give a `Scheduled` for the live module to commit.

- entry.py: the entry point; a PrimFunc becomes a contribution of its own, a
  Relax function's kernels get their schedules after the pipeline;
- schedules.py: DLight (the one place it runs) and a schedule by hand;
- primfunc.py: MetaSchedule on one PrimFunc;
- relax_kernels.py: the kernels of a Relax function, tuned together, and
  `KernelSchedules`, what the build applies after the pipeline;
- cpu_schedules.py: the CPU schedule written once for matmuls, convolutions
  and element-wise kernels, every module's default;
- records.py: the one place tuning records live (trusted, or in memory);
- measuring.py: candidates built and run in this process;
- report.py: `TuningReport`, a row per kernel.
"""

from __future__ import annotations

import tvm

from .cpu_schedules import default_schedule_of, schedule_kernels, vector_lanes
from .entry import Scheduled, refuse_unless_measured_here, schedule, tune, unscheduled
from .measuring import import_tensor_intrinsics, tuning_target
from .records import RECORD_FILES, TuningRecords, open_database, target_digest
from .relax_kernels import KernelSchedules, default_schedule, kernel_tasks
from .report import KernelRow, TuningReport
from .schedules import SCHEDULED


def kernel_schedules(persistent, module_name: str, target: tvm.target.Target) -> KernelSchedules:
    """What module `module_name` applies to its pipeline's kernels, with its tuning records in
    the compile cache `persistent` (None: in memory)."""
    return KernelSchedules(TuningRecords(persistent, module_name, target))


__all__ = [
    "RECORD_FILES",
    "SCHEDULED",
    "KernelRow",
    "KernelSchedules",
    "Scheduled",
    "TuningRecords",
    "TuningReport",
    "default_schedule",
    "default_schedule_of",
    "import_tensor_intrinsics",
    "kernel_schedules",
    "kernel_tasks",
    "open_database",
    "refuse_unless_measured_here",
    "schedule",
    "schedule_kernels",
    "target_digest",
    "tune",
    "tuning_target",
    "unscheduled",
    "vector_lanes",
]
