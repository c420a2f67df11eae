"""Inputs a model writes into (`x.add_(1)`, `x[:, 0] = 0`), written as PyTorch writes them.

torch.export records such writes as `user_inputs_to_mutate`: the graph returns
each input's new value among its outputs, and TVM's importer drops those
outputs. The imported function writes them back itself, after everything
else, with the runtime's own copy between tensors (`TVMTensorCopyFromTo`): a
call of it is impure, so no pass removes it, and plain TVM runs it too
(`export()`, a library). A caller's tensor that DLPack takes as it is (a
contiguous one) is written in place; the call path writes back into one it
had to copy (`writes_inputs`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tvm import relax

# The runtime's own copy between tensors: a write into an input is a call of it, which plain
# TVM runs too (export(), a library), and which no pass removes (it is not pure).
COPY_INTO = "runtime.TVMTensorCopyFromTo"


def written_inputs(exported, translated: Mapping[Any, Any]) -> list[tuple[str, Any]]:
    """`(input, its new value)` for each input the model writes into (`x.add_(1)`, `x[:, 0] =
    0`): torch.export's `user_inputs_to_mutate`, as Relax values."""
    from torch.export.graph_signature import OutputKind

    output = next(n for n in exported.graph.nodes if n.op == "output")
    specs = exported.graph_signature.output_specs
    return [
        (spec.target, translated[node])
        for node, spec in zip(output.args[0], specs, strict=True)
        if spec.kind == OutputKind.USER_INPUT_MUTATION
    ]


def with_input_writes(func: relax.Function, writes: list[tuple[str, Any]]) -> relax.Function:
    """`func` writing, after everything else, each value of `writes` into the input it names,
    as PyTorch does: `x_written = lv3` leaves the dataflow block, and
    `R.call_packed("runtime.TVMTensorCopyFromTo", x_written, x)` copies it into the caller's
    tensor (the function is then impure: no pass drops the write)."""
    if not writes:
        return func
    params = {p.name: p for p in func.params}
    blocks = list(func.body.blocks)
    out, copies = [], []
    for target, value in writes:
        written = relax.Var(f"{target}_written", value.ty)
        out.append(relax.VarBinding(written, value))
        call = relax.Call(
            relax.ExternFunc(COPY_INTO), [written, params[target]], None, [relax.TupleType([])]
        )
        copies.append(relax.VarBinding(relax.Var("_", relax.TupleType([])), call))
    last = blocks[-1]
    if isinstance(last, relax.DataflowBlock):
        blocks[-1] = relax.DataflowBlock([*last.bindings, *out])
    else:
        blocks[-1] = relax.BindingBlock([*last.bindings, *out])
    body = relax.SeqExpr([*blocks, relax.BindingBlock(copies)], func.body.body)
    body = relax.BlockBuilder().normalize(body)
    return relax.Function(func.params, body, func.ret_ty, False, func.attrs)


def writes_inputs(func) -> bool:
    """Whether Relax function `func` writes into its inputs (`with_input_writes`)."""
    found = []

    def visit(expr) -> None:
        if isinstance(expr, relax.ExternFunc) and str(expr.global_symbol) == COPY_INTO:
            found.append(expr)

    relax.analysis.post_order_visit(func.body, visit)
    return bool(found)
