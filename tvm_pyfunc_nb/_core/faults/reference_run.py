"""The reference run of `minimize`: every binding's value, to give the values that enter a cut
and to judge what a cut returns.

One run of the function, every tensor binding returned with its output
(`tracing.tapped`), built in the build worker with every optional pass off
(a crash there costs the worker, not the kernel). Where the function came
from a PyTorch model (`add_torch`), a binding that *is* an FX node's value
takes the model's value instead (what `compare` checks it against). When
even that build does not run (the fault is a crash every build has), the
values are zeros of the bindings' shapes, and the result says so: a build
that crashes does not look at them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import tvm

from ...errors import CallError
from ..inspect.tracing import tapped, written_in_place
from ..models.importing import TorchOrigin
from .cutting import PARAM, DataflowCut, enters, module_of
from .worker_builds import NEEDED, skip_keys, units


@dataclass(frozen=True)
class ReferenceValues:
    """The function's arguments, and its tensor bindings' values by index."""

    arguments: list[np.ndarray]
    bindings: dict[int, np.ndarray]
    outputs: list[np.ndarray] | None  # what the function returned (flat); None: it did not run
    described: str  # where the values came from, as the result says it

    def of(self, source: tuple[str, int]) -> np.ndarray:
        """The value of a parameter `(PARAM, i)` or a binding `(BINDING, i)`."""
        return values_of(source, self.arguments, self.bindings)


def reference_values(
    run, cut: DataflowCut, mod: tvm.IRModule, fn: str, inputs: list, relax_off, origin
) -> ReferenceValues:
    """The values of `fn`'s bindings (see the module's docstring). `run(mod, inputs, skip)` runs
    a build in the worker; `relax_off` switches the optional passes of the Relax pipeline off
    (their keys do not depend on the module); those of the TIR build are found in that build's
    own list of passes, and switched off in a second."""
    copy, taps = tapped(cut.func)
    traced = tvm.IRModule(
        {gv: copy if gv.name_hint == fn else f for gv, f in mod.functions_items()}, attrs=mod.attrs
    )
    ran = run(traced, inputs, relax_off)
    described = "the build with every optional pass off"
    if ran.outputs is not None:
        optional = {p.index for p in units(ran.passes) if p.name not in NEEDED}
        all_off = run(traced, inputs, skip_keys(ran.passes, optional))
        if all_off.outputs is not None:
            ran = all_off
        else:
            described = (
                "the build with every optional Relax pass off (with the TIR build's off too, it "
                f"does not build: {all_off.why})"
            )
    tensors = [i for i, b in enumerate(cut.bindings) if enters(b.var)]
    if ran.outputs is None:
        values = {i: v for i in tensors if (v := _zeros(cut, i)) is not None}
        described = f"zeros (the build with every optional pass off does not run: {ran.why})"
        outputs = None
    else:
        split = len(ran.outputs) - len(taps)
        values = dict(zip(tensors, ran.outputs[split:], strict=True))
        outputs = ran.outputs[:split]
        _before_written(run, cut, mod, fn, inputs, relax_off, values)
    if origin is not None:
        taken = _from_model(origin, taps, tensors, inputs, values)
        if taken:
            described = f"the PyTorch model {type(origin.model).__name__} ({taken} bindings), " + (
                f"else {described}"
            )
    return ReferenceValues(list(inputs), values, outputs, described)


def _before_written(run, cut: DataflowCut, mod, fn: str, inputs, off, values: dict) -> None:
    """The values a `call_tir_inplace` later writes into, as they were before: the run above
    returns them written. Each is the last binding of a run of the bindings up to it."""
    for var in written_in_place(cut.func):
        index = cut.producer(var)
        if index is None:  # an argument: its value is the caller's
            continue
        prefix = cut.cut(range(index + 1))
        reduced = module_of(mod, fn, prefix)
        ran = run(reduced, [values_of(s, inputs, values) for s in prefix.entering], off)
        if reduced is None or ran.outputs is None:
            raise CallError(
                f"minimize: the value of `{cut.names[index]}` before a call_tir_inplace writes "
                f"into it could not be had: {ran.why if reduced else 'its cut is ill-formed'}"
            )
        values[index] = ran.outputs[prefix.outputs.index(index)]  # tensors before it: one each


def values_of(source, inputs, values: dict) -> np.ndarray:
    kind, index = source
    return inputs[index] if kind == PARAM else values[index]


def _from_model(origin: TorchOrigin, taps, tensors: list[int], inputs, values: dict) -> int:
    """Put the model's value of each binding that is an FX node's into `values`; how many."""
    fx, _ = origin.fx_values([torch.from_numpy(np.array(a)) for a in inputs])
    taken = 0
    for index, tap in zip(tensors, taps, strict=True):
        node = origin.bindings.get(tap.name)
        if node is None or not node.exact or index not in values:
            continue
        value = next(
            (fx[n] for n in (node.node, *node.aliases) if isinstance(fx.get(n), torch.Tensor)), None
        )
        if value is not None and tuple(value.shape) == values[index].shape:
            values[index] = value.detach().cpu().numpy()
            taken += 1
    return taken


def _zeros(cut: DataflowCut, index: int) -> np.ndarray | None:
    """Zeros of binding `index`'s shape (None for a shape only a run knows)."""
    ty = cut.bindings[index].var.ty
    try:
        shape = tuple(int(d) for d in ty.shape)
    except (TypeError, ValueError):  # a symbolic shape, or one a value holds
        return None
    return np.zeros(shape, dtype=str(ty.dtype))
