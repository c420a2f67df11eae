"""What the persistent compile cache costs and saves, per PrimFunc: build, export (background),
verified load.

Each PrimFunc is built by the package's own `Build` (crash guards in, as a default module
has them), stored under `Build.key` (target, pipeline, checks: what the cache is keyed by),
and loaded back.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from harness import scratch
from workload import primfunc

from tvm_pyfunc_nb import CompileCache, LiveModule
from tvm_pyfunc_nb._core.build.build import Build
from tvm_pyfunc_nb._core.build.stats import CompileStats
from tvm_pyfunc_nb._core.options import ModuleOptions


def measure(count: int) -> dict:
    live = LiveModule("costs")
    live.run_cell("".join(primfunc(k, 500.0 + k) for k in range(count + 1)))
    funcs = {name: live.ir_mod[name] for name in live.functions}
    build = Build(ModuleOptions(), CompileStats())  # no persistent cache: this file drives it
    warmup = f"k{count}"  # LLVM's one-time start-up is not a per-PrimFunc cost
    build.kernels({warmup: funcs.pop(warmup)}, use_cache=False)
    cache = CompileCache(scratch("costs-cache-"))
    built, export, store, load = [], [], [], []
    for name, func in funcs.items():
        start = time.perf_counter()
        lib = build.kernels({name: func}, use_cache=False)[name]
        built.append(time.perf_counter() - start)
        start = time.perf_counter()
        cache.store({name: func}, build.key, lib)
        store.append(time.perf_counter() - start)
        start = time.perf_counter()
        cache.flush()
        export.append(time.perf_counter() - start)
    assert len(build.stats.compiles) == count + 1  # every build above was a TVM compile
    for name, func in funcs.items():
        start = time.perf_counter()
        assert cache.load(name, func, build.key) is not None
        load.append(time.perf_counter() - start)
    return {
        key: statistics.median(values)
        for key, values in {
            "build": built,
            "store_call": store,
            "export": export,
            "load": load,
        }.items()
    }


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]))))
