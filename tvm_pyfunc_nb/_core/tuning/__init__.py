"""Making a function fast, whatever its kind: `schedule(parts, fn, how)` and
`tune(parts, fn, trials)` give a `Scheduled` for the live module to commit.

- entry.py: the entry point; a PrimFunc becomes a contribution of its own, a
  Relax function's kernels get their schedules after the pipeline;
- schedules.py: DLight (the one place it runs) and a schedule by hand;
- primfunc.py: MetaSchedule on one PrimFunc;
- relax_kernels.py: the kernels of a Relax function, tuned together (what the
  build applies after its pipeline, `KernelSchedules`, and the records, are
  the build's: build/kernel_schedules.py, build/tuning_records.py);
- measuring.py: candidates built and run in this process;
- report.py: `TuningReport`, a row per kernel.
"""
