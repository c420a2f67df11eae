"""Building: PrimFuncs into libraries and Relax functions into linked VMs, and keeping them.

- `build.py`: `Build`, one module's builds for its target and pipeline, and
  `lower_and_link`, the one path from Relax functions to a linked VM;
  `compiler.py`: which version of the module is compiled;
- `builder.py`: where the heavy steps run (here; the build worker's side is
  `worker/` and faults/isolation.py), chosen once; `pass_contexts.py`: the
  caller's `PassContext`, wherever they run;
- `kernel_builds.py`, `linking.py`, `kernel_sites.py`: PrimFuncs built in
  batches, the VM codegen and link, what each kernel computes;
- `pipelines.py`, `offload.py`, `cpu_schedules.py`, `kernel_schedules.py`,
  `tuning_records.py`: the pipeline, what goes to PyTorch, the schedules its
  kernels get (default, tuned, DLight) and the tuning records they come from;
- `reuse.py`, `in_memory.py`, `disk_cache.py` and its `cache_*.py`,
  `trust.py`, `library_files.py`, `stats.py`: what is kept, in memory and on
  disk, read back only if no one else could have written it;
- `crash_guards.py`, `vectorized_checks.py`, `failed_bindings.py`,
  `target_text.py`: guards in the kernels, and what a failure says.
"""
