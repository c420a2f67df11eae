"""What bisect, minimize and report share of their builds in the build worker.

- Which passes of a build are *needed* (`NEEDED`: they translate from one level
  to the next, and stay on in every build; bisecting.py says why each), which
  can be switched off alone (`units`), and the keys that switch them off
  (`skip_keys`);
- a function's closure as a module of its own, and the arguments as arrays, as
  the worker builds and runs them (`worker_inputs`), or a `CallError` saying
  why it cannot;
- what a pass changed, as a diff of TVMScript (`ir_changes`).
"""

from __future__ import annotations

import difflib
from collections import Counter
from typing import Any

import numpy as np
import torch
import tvm
import tvm_ffi

from ...errors import CallError
from ..build.worker.pass_log import PassKey, PassRun
from ..live.cells import PRIMFUNC, PYFUNC, RELAX
from ..live.relax_rewrite import py_func_calls, relax_closure, sub_module
from ..module_parts import ModuleParts
from ..run.tensors import to_torch

# Passes that translate from one level to the next (see the module's docstring): always on.
NEEDED = frozenset(
    {
        # Relax: legalization, and the lowering to the VM
        "DispatchSampling",
        "DispatchSortScan",
        "NormalizeGlobalVar",
        "LegalizeOps",
        "ToNonDataflow",
        "RemovePurityChecking",
        "CallTIRRewrite",
        "LowerAllocTensor",
        "LowerRuntimeBuiltin",
        "ComputePrimValue",
        "VMShapeLower",
        "AttachGlobalSymbol",
        # TIR: blocks and buffers lowered, dtypes the CPU lacks legalized
        "s_tir.LowerInitBlock",
        "s_tir.PlanAndUpdateBufferAllocationLocation",
        "s_tir.ConvertBlocksToOpaque",
        "s_tir.CompactBufferAllocation",
        "s_tir.LowerMatchBuffer",
        "s_tir.LowerOpaqueBlock",
        "tirx.FlattenBuffer",
        "tirx.BF16ComputeLegalize",
        "tirx.FP8ComputeLegalize",
        "tirx.BF16StorageLegalize",
        "tirx.FP8StorageLegalize",
        # TIR: kernels as functions the VM calls
        "tirx.BindTarget",
        "tirx.Filter",
        "tirx.SplitHostDevice",
        "tirx.MakePackedAPI",
        "tirx.LowerTVMBuiltin",
        "tirx.LowerIntrin",
    }
)


def is_container(name: str) -> bool:
    """A pass that only runs others: a `Sequential`, a pipeline."""
    return name == "sequential" or "pipeline" in name.lower()


def units(runs: tuple[PassRun, ...]) -> list[PassRun]:
    """The passes of `runs` that can be switched off as one: not containers, and held by
    containers only (what a pass runs inside itself goes with it)."""
    found, holders = [], []  # holders: the passes open at each depth
    for run in runs:
        del holders[run.depth :]
        if not is_container(run.name) and all(is_container(h.name) for h in holders):
            found.append(run)
        holders.append(run)
    return found


def skip_keys(runs: tuple[PassRun, ...], off: set[int]) -> frozenset[PassKey]:
    """The keys of the passes at indices `off` of `runs` in a build where they are off: the
    passes inside a pass switched off are never asked, so later runs of their names are
    counted without them."""
    seen: Counter = Counter()
    keys, holders = set(), []
    for run in runs:
        del holders[run.depth :]
        if any(h.index in off for h in holders):  # inside a pass that is off: never asked
            holders.append(run)
            continue
        if run.index in off:
            keys.add((run.name, seen[run.name]))
        seen[run.name] += 1
        holders.append(run)
    return frozenset(keys)


def worker_inputs(
    parts: ModuleParts, fn: str, args: tuple, feature: str = "bisect"
) -> tuple[tvm.IRModule, list[np.ndarray]]:
    """`fn`'s closure as a module of its own, and `args` as arrays: a `CallError` for what the
    worker cannot build or run (`feature` says which feature asked: `bisect`, `minimize`)."""
    entry = parts.entry(fn)
    if entry.kind not in (RELAX, PRIMFUNC):
        raise CallError(
            f"{feature} needs a Relax function or a PrimFunc, but `{fn}` is a {entry.kind}",
            function=fn,
        )
    if parts.options.rpc:
        raise CallError(f"{feature} builds and runs here; a --rpc module cannot", function=fn)
    params = entry.func.params
    if len(args) != len(params):
        raise CallError(
            f"{feature}: `{fn}` takes {len(params)} argument(s) "
            f"({', '.join(p.name for p in params)}), {len(args)} given",
            function=fn,
        )
    inputs = [_array(feature, fn, i, arg) for i, arg in enumerate(args)]
    state = parts.state
    if entry.kind == PRIMFUNC:
        return tvm.IRModule({fn: entry.func}), inputs
    closure = relax_closure([fn], state.ir_mod)
    calls_python = [
        n
        for n in sorted(closure)
        if state.entries[n].kind == PYFUNC
        or (state.entries[n].kind == RELAX and py_func_calls(state.entries[n].func))
    ]
    if calls_python:
        raise CallError(
            f"{feature}: `{fn}` calls Python ({', '.join(calls_python)}), which the build worker "
            "cannot run",
            function=fn,
        )
    return sub_module(state.ir_mod, closure), inputs


def _array(feature: str, fn: str, i: int, arg) -> np.ndarray:
    value = to_torch(arg)
    if not isinstance(value, torch.Tensor):
        raise CallError(f"{feature}: argument {i} of `{fn}` is not a tensor", function=fn)
    return value.detach().cpu().numpy()


def ir_changes(before: str, after: str) -> tuple[list[str], str]:
    """The functions the pass changed (all it was given, when it crashed), and their TVMScript
    before and after as a unified diff (JSON of the IR in, "" for none)."""
    if not before:
        return [], ""
    old = _functions(before)
    if not after:
        return list(old), ""
    new = _functions(after)
    changed = [
        name
        for name in dict.fromkeys([*old, *new])
        if name not in old or name not in new or not tvm_ffi.structural_equal(old[name], new[name])
    ]
    lines = []
    for name in changed:
        a = old[name].script().splitlines() if name in old else []
        b = new[name].script().splitlines() if name in new else []
        lines += difflib.unified_diff(a, b, f"{name} before", f"{name} after", lineterm="", n=2)
    return changed, "\n".join(lines)


def _functions(text: str) -> dict[str, Any]:
    return {gv.name_hint: f for gv, f in tvm.ir.load_json(text).functions_items()}
