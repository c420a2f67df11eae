"""What the persistent compile cache costs and saves, per PrimFunc: build, export (background),
verified load.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from harness import scratch
from workload import primfunc

from tvm_pyfunc_nb import LiveModule
from tvm_pyfunc_nb.compile_cache import CompileCache
from tvm_pyfunc_nb.compiler import Compiler, CompileStats


def measure(count: int) -> dict:
    live = LiveModule("costs")
    live.run_cell("".join(primfunc(k, 500.0 + k) for k in range(count + 1)))
    funcs = {name: live.ir_mod[name] for name in live.functions}
    compiler = Compiler("llvm", CompileStats())
    warmup = f"k{count}"  # LLVM's one-time start-up is not a per-PrimFunc cost
    compiler.prim_func(warmup, funcs.pop(warmup))
    cache = CompileCache(scratch("costs-cache-"))
    build, export, store, load = [], [], [], []
    for name, func in funcs.items():
        start = time.perf_counter()
        lib = compiler.prim_func(name, func)
        build.append(time.perf_counter() - start)
        start = time.perf_counter()
        cache.store(name, func, compiler.target_key, lib)
        store.append(time.perf_counter() - start)
        start = time.perf_counter()
        cache.flush()
        export.append(time.perf_counter() - start)
    for name, func in funcs.items():
        start = time.perf_counter()
        assert cache.load(name, func, compiler.target_key) is not None
        load.append(time.perf_counter() - start)
    return {
        key: statistics.median(values)
        for key, values in {
            "build": build,
            "store_call": store,
            "export": export,
            "load": load,
        }.items()
    }


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]))))
