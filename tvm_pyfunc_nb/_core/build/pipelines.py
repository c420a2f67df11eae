"""The Relax pipeline of a module, by name: `auto`, `target`, or one `relax.get_pipeline` knows."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

import tvm
from tvm import relax

from ...errors import TVMModuleError, last_reason

AUTO_PIPELINE = "auto"
COMPLETE_PIPELINES = frozenset({"default", "default_build"})  # the others are followed by "default"
TARGET_PIPELINE = "target"


@dataclass(frozen=True)
class Pipeline:
    """The Relax pipeline of a module: its name (part of every cache key) and the pass."""

    name: str
    make: Callable[[], tvm.transform.Pass]


def pipeline_for(name: str | None, target: tvm.target.Target) -> Pipeline:
    """`auto` (what `tvm.compile` picks for the target), `target`, or a `relax.get_pipeline` name"""
    name = name or AUTO_PIPELINE
    is_gpu = "gpu" in target.keys
    if name == AUTO_PIPELINE:
        name = TARGET_PIPELINE if is_gpu else "default"
    if name == TARGET_PIPELINE:
        try:
            relax.get_default_pipeline(target)
        except ValueError as err:
            raise TVMModuleError(f"pipeline `target`: {last_reason(err)}") from None
        return Pipeline(
            f"{TARGET_PIPELINE}:{target.kind.name}", lambda: relax.get_default_pipeline(target)
        )
    known = _named_pipelines()
    if name not in known:
        names = ", ".join([AUTO_PIPELINE, TARGET_PIPELINE, *sorted(known)])
        raise TVMModuleError(f"unknown Relax pipeline `{name}` (known: {names})")
    if name in COMPLETE_PIPELINES:
        return Pipeline(name, lambda: relax.get_pipeline(name))
    # `zero` and other partial pipelines legalize and fuse; `default` lowers the rest for the VM
    return Pipeline(
        name,
        lambda: tvm.transform.Sequential([relax.get_pipeline(name), relax.get_pipeline("default")]),
    )


def _named_pipelines() -> list[str]:
    """`relax.get_pipeline` names that need no arguments (`static_shape_tuning` needs a tuner's)."""
    from tvm.relax.pipeline import PIPELINE_MAP

    def ready(make) -> bool:
        params = inspect.signature(make).parameters.values()
        return all(
            p.default is not inspect.Parameter.empty or p.kind == p.VAR_KEYWORD for p in params
        )

    return [name for name, make in PIPELINE_MAP.items() if ready(make)]
