"""`NAME.compare("fn", reference, *args)`: where TVM's numbers leave PyTorch's.

Always per output: the largest absolute and relative error, and whether it
is within `rtol`/`atol` (as `torch.allclose` judges). When `fn` came from
`NAME.add_torch(reference, ...)`, also op by op: each binding of a traced
run against the value of the FX node it came from (captured with
`torch.fx.Interpreter` on the exported graph), and the first binding that
diverges is named with the PyTorch op behind it. A binding with no FX node
of its own (the matmul inside an `addmm`, a binding a cell added) is listed
as such, never matched by guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .importing import NodeRef, TorchOrigin
from .tracing import Trace, text_table


@dataclass(frozen=True)
class Difference:
    """How far `actual` is from `expected`: largest absolute and relative error, and the verdict."""

    max_abs: float
    max_rel: float
    passed: bool
    note: str = ""  # why they could not be compared element by element


def difference(actual: Any, expected: Any, rtol: float, atol: float) -> Difference:
    if not isinstance(actual, torch.Tensor) or not isinstance(expected, torch.Tensor):
        same = actual == expected
        return Difference(
            0.0 if same else float("inf"),
            0.0,
            bool(same),
            "" if same else f"{type(actual).__name__} vs {type(expected).__name__}",
        )
    if actual.shape != expected.shape:
        return Difference(
            float("inf"),
            float("inf"),
            False,
            f"shape {list(actual.shape)} vs {list(expected.shape)}",
        )
    a = actual.detach().to(torch.float64)
    b = expected.detach().to(torch.float64)
    if a.numel() == 0:
        return Difference(0.0, 0.0, True)
    gap = (a - b).abs()
    nonzero = b.abs() > atol
    max_rel = float((gap[nonzero] / b.abs()[nonzero]).max()) if bool(nonzero.any()) else 0.0
    passed = bool(torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True).all())
    return Difference(float(gap.max()), max_rel, passed)


@dataclass(frozen=True)
class OpCheck:
    """One binding against the PyTorch value it came from (or why it has none)."""

    binding: str
    op: str  # the Relax op or callee
    node: NodeRef | None
    diff: Difference | None  # None: nothing to compare with


@dataclass
class Comparison:
    """The result of `NAME.compare`: outputs, and op by op when the function came from PyTorch."""

    module: str
    function: str
    rtol: float
    atol: float
    outputs: list[Difference]
    ops: list[OpCheck] | None = None  # None: not compared op by op
    why_not_op_by_op: str = ""

    @property
    def passed(self) -> bool:
        return all(d.passed for d in self.outputs)

    @property
    def first_divergence(self) -> OpCheck | None:
        """The first binding whose value leaves PyTorch's (the ones after it inherit the gap)."""
        for check in self.ops or ():
            if check.diff is not None and not check.diff.passed:
                return check
        return None

    def output_rows(self) -> list[tuple[str, str, str, str]]:
        return [
            (
                f"output {i}",
                _number(d.max_abs),
                _number(d.max_rel),
                ("pass" if d.passed else "FAIL") + (f" ({d.note})" if d.note else ""),
            )
            for i, d in enumerate(self.outputs)
        ]

    def op_rows(self) -> list[tuple[str, str, str, str, str, str]]:
        rows = []
        for check in self.ops or ():
            node = check.node
            torch_op = f"{node.node} ({node.op})" if node else "no PyTorch counterpart"
            if check.diff is None:
                verdict = f"part of {node.node}, no value of its own" if node else "not compared"
                rows.append((check.binding, check.op, torch_op, "", "", verdict))
            else:
                d = check.diff
                rows.append(
                    (
                        check.binding,
                        check.op,
                        torch_op,
                        _number(d.max_abs),
                        _number(d.max_rel),
                        "pass" if d.passed else "FAIL",
                    )
                )
        return rows

    def verdict(self) -> str:
        """One line: where the numbers diverge first, and how to open that function."""
        first = self.first_divergence
        if first is not None:
            return (
                f"first divergence: `{first.binding}` = {first.op}, from PyTorch's "
                f"{first.node.op} (node `{first.node.node}`): max abs error "
                f"{_number(first.diff.max_abs)}; open it with "
                f"{self.module}.edit({self.function!r})"
            )
        if self.passed:
            return f"{self.function} matches within rtol={self.rtol}, atol={self.atol}"
        if self.ops is None:  # why not op by op is the line after the outputs
            return f"{self.function} does not match"
        return f"{self.function} does not match; no op diverges alone"

    def __repr__(self) -> str:
        lines = [
            f"compare {self.function}: {self.verdict()}",
            text_table(("output", "max abs", "max rel", ""), self.output_rows()),
        ]
        if self.ops is not None:
            compared = sum(c.diff is not None for c in self.ops)
            lines += [
                "",
                f"op by op: {compared} of {len(self.ops)} bindings have a PyTorch value",
                text_table(("binding", "op", "PyTorch", "max abs", "max rel", ""), self.op_rows()),
            ]
        elif self.why_not_op_by_op:
            lines.append(self.why_not_op_by_op)
        return "\n".join(lines)


def flat_outputs(value: Any) -> list:
    if isinstance(value, (tuple, list)):
        return [v for item in value for v in flat_outputs(item)]
    return [value]


def output_differences(actual: Any, expected: Any, rtol: float, atol: float) -> list[Difference]:
    mine, theirs = flat_outputs(actual), flat_outputs(expected)
    if len(mine) != len(theirs):
        return [
            Difference(
                float("inf"), float("inf"), False, f"{len(mine)} outputs vs PyTorch's {len(theirs)}"
            )
        ]
    return [difference(a, b, rtol, atol) for a, b in zip(mine, theirs, strict=True)]


def op_checks(trace: Trace, origin: TorchOrigin, args, rtol: float, atol: float) -> list[OpCheck]:
    """Each traced binding against its FX node's value, where it has one."""
    values, _ = origin.fx_values(args)
    checks = []
    for traced in trace.intermediates:
        node = origin.bindings.get(traced.name)
        expected = None
        if node is not None and node.exact:
            # the node, or a later one the importer gave the same value (`getitem` of a tuple op)
            candidates = [values.get(name) for name in (node.node, *node.aliases)]
            expected = next((v for v in candidates if isinstance(v, torch.Tensor)), None)
        diff = difference(traced.value, expected, rtol, atol) if expected is not None else None
        checks.append(OpCheck(traced.name, traced.op, node, diff))
    return checks


def _number(value: float) -> str:
    return f"{value:.3g}"
