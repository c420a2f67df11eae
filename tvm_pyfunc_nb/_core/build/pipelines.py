"""The Relax pipeline of a module, by name: `auto`, `fused`, `target`, `default`, or one
`relax.get_pipeline` knows.

`auto`, the default, fuses and schedules on every target: on a CPU it is `fused`, this
package's pipeline (below); elsewhere `target`, TVM's own pipeline for the target (on a GPU,
fusion and DLight schedules). `default` is exactly what `tvm.compile` builds: on a CPU, every
op a kernel of its own, no schedule at all (TVM's CPU pipeline neither fuses nor schedules). After
every other pipeline, the build gives the kernels it made the CPU schedules of cpu_schedules.py.

`fused` is TVM's CPU pipeline (`relax.get_default_pipeline`: legalize, fold constants, fuse, lower
for the VM), the module's own PrimFuncs kept out of fusion (a kernel written in a cell keeps the
loops its author wrote), with passes first for what the CPU schedules do best
(conv_rewrites.py):
- a batch norm with running statistics (what a model in `eval()` runs) after a convolution folds
  into its weights and a bias; any other becomes the element-wise ops it computes
  (`DecomposeOpsForInference`), which fuse with what is around them;
- a convolution's constant weights are stored HWIO, so that a row of output channels is one
  vector load: the convolution schedule computes a tile of output pixels times output channels
  as the matmul schedule does (the transpose is folded at compile time).
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import tvm
from tvm import relax

from ...errors import ScheduleWarning, TVMModuleError, last_reason
from .conv_rewrites import conv_weights_hwio, fold_batch_norms

AUTO_PIPELINE = "auto"
FUSED_PIPELINE = "fused"
TARGET_PIPELINE = "target"
EXACT_PIPELINES = frozenset({"default", "default_build"})  # tvm.compile's, with nothing added


@dataclass(frozen=True)
class Pipeline:
    """The Relax pipeline of a module: its name as `--pipeline` takes it (`auto` resolved),
    what it puts in every cache key, the pass, and whether the build schedules its kernels."""

    name: str
    key: str
    make: Callable[[], tvm.transform.Pass]
    scheduled: bool = True


def pipeline_for(name: str | None, target: tvm.target.Target) -> Pipeline:
    """`auto`, `fused`, `target`, `default` or another `relax.get_pipeline` name, for `target`."""
    name = name or AUTO_PIPELINE
    is_cpu = target.kind.name == "llvm"
    if name == AUTO_PIPELINE:
        name = FUSED_PIPELINE if is_cpu else TARGET_PIPELINE
    if name == FUSED_PIPELINE:
        if not is_cpu:
            raise TVMModuleError(
                f"pipeline `{FUSED_PIPELINE}` is for CPU (llvm) targets; on target "
                f"`{target.kind.name}` use `{TARGET_PIPELINE}` or `auto`"
            )
        return Pipeline(name, f"{FUSED_PIPELINE}:{FUSED_VERSION}", lambda: fused_pipeline(target))
    if name == TARGET_PIPELINE:
        try:
            relax.get_default_pipeline(target)
        except ValueError as err:
            raise TVMModuleError(f"pipeline `target`: {last_reason(err)}") from None
        return Pipeline(
            name,
            f"{TARGET_PIPELINE}:{target.kind.name}",
            lambda: relax.get_default_pipeline(target),
        )
    known = _named_pipelines()
    if name not in known:
        names = ", ".join([AUTO_PIPELINE, FUSED_PIPELINE, TARGET_PIPELINE, *sorted(known)])
        raise TVMModuleError(f"unknown Relax pipeline `{name}` (known: {names})")
    if name in EXACT_PIPELINES:
        return Pipeline(name, name, lambda: relax.get_pipeline(name), scheduled=False)
    # `zero` and other partial pipelines legalize and fuse; `default` lowers the rest for the VM
    return Pipeline(
        name,
        name,
        lambda: tvm.transform.Sequential([relax.get_pipeline(name), relax.get_pipeline("default")]),
    )


# Part of the cache key of `fused`: a change to its passes must not reuse what the last one built.
FUSED_VERSION = 2


def fused_pipeline(target: tvm.target.Target) -> tvm.transform.Pass:
    """TVM's CPU pipeline, batch norms folded or decomposed and convolution weights stored HWIO
    first, the module's own PrimFuncs kept out of fusion."""
    own: dict[str, tvm.tirx.PrimFunc] = {}

    @tvm.transform.module_pass(opt_level=0, name="OwnKernelsApart")
    def apart(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        """The module's own PrimFuncs opaque to fusion: a kernel written in a cell keeps the
        loops its author wrote (and TVM 0.27's FuseTIR fails on some: "Inconsistent buffers")."""
        own.update((gv.name_hint, f) for gv, f in mod.functions_items() if _kernel(f))
        return own_kernels_opaque(mod)

    @tvm.transform.module_pass(opt_level=0, name="OwnKernelsAsWritten")
    def as_written(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        """The module's own PrimFuncs as they were (the kernels a call of them alone uses)."""
        present = {gv.name_hint for gv in mod.get_global_vars()}
        return _with_functions(mod, {n: f for n, f in own.items() if n in present})

    fused = tvm.transform.Sequential(
        [
            apart,
            fold_batch_norms,
            relax.transform.DecomposeOpsForInference(),
            relax.transform.CanonicalizeBindings(),  # `(y, mean, var)[0]` is `y`: it fuses
            conv_weights_hwio,
            relax.get_default_pipeline(target),
            as_written,
        ],
        name="fused_pipeline",
    )

    @tvm.transform.module_pass(opt_level=0, name="fused_pipeline_unless_unfusable")  # a container
    def fused_unless_unfusable(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        """`fused`; for a module TVM cannot fuse, what `tvm.compile` builds, with a warning
        saying so, so that a module plain TVM runs runs here too (decided before any pass runs:
        bisect and minimize switch passes off by their order)."""
        why = unfusable(mod)
        if why is None:
            return fused(mod)
        warnings.warn(
            f"TVM 0.27 cannot fuse this module ({why}): it is built as `--pipeline default` "
            "builds it, every op a kernel of its own",
            ScheduleWarning,
            stacklevel=2,
        )
        return relax.get_pipeline("default")(mod)

    return fused_unless_unfusable


def unfusable(mod: tvm.IRModule) -> str | None:
    """Why TVM 0.27's FuseOps fails on `mod`, if it does: a tensor whose shape takes the smaller
    or larger of two sizes (`x[:k]` with `k` read from data: `T.min(k, 8)` rows) becomes a
    `T.if_then_else` it cannot type ("Cannot find the FInferType attribute registered to op:
    tirx.if_then_else")."""
    for gv, func in mod.functions_items():
        if not isinstance(func, relax.Function):
            continue
        for block in func.body.blocks:
            for binding in block.bindings:
                shape = getattr(binding.var.ty, "shape", None)
                values = getattr(shape, "values", None) or []
                if any(_chooses(v) for v in values):
                    return f"`{binding.var.name}` of `{gv.name_hint}` has the shape {shape}"
    return None


def _chooses(expr) -> bool:
    """Whether a size takes one of two values (`T.min`, `T.max`, a select), anywhere in it."""
    if isinstance(expr, (tvm.tirx.Min, tvm.tirx.Max, tvm.tirx.Select)):
        return True
    parts = [getattr(expr, name, None) for name in ("a", "b", "value")]
    parts += list(getattr(expr, "args", None) or [])
    return any(_chooses(part) for part in parts if isinstance(part, tvm.ir.expr.Expr))


OPAQUE = 8  # relax's OpPatternKind.kOpaque: FuseOps leaves the call alone


def own_kernels_opaque(mod: tvm.IRModule) -> tvm.IRModule:
    """`mod` with its PrimFuncs marked opaque to fusion (what `fused` does before it fuses; a
    repro written for plain TVM carries the mark in its IR)."""
    kernels = {gv.name_hint: f for gv, f in mod.functions_items() if _kernel(f)}
    return _with_functions(mod, {n: f.with_attr("op_pattern", OPAQUE) for n, f in kernels.items()})


def _kernel(func) -> bool:
    return isinstance(func, tvm.tirx.PrimFunc)


def _with_functions(mod: tvm.IRModule, functions: dict) -> tvm.IRModule:
    """`mod` with the functions named in `functions` replaced."""
    if not functions:
        return mod
    mod = mod.clone()
    for gv in mod.get_global_vars():
        if gv.name_hint in functions:
            mod.update_func(gv, functions[gv.name_hint])
    return mod


def _named_pipelines() -> list[str]:
    """`relax.get_pipeline` names that need no arguments (`static_shape_tuning` needs a tuner's)."""
    from tvm.relax.pipeline import PIPELINE_MAP

    def ready(make) -> bool:
        params = inspect.signature(make).parameters.values()
        return all(
            p.default is not inspect.Parameter.empty or p.kind == p.VAR_KEYWORD for p in params
        )

    return [name for name, make in PIPELINE_MAP.items() if ready(make)]
