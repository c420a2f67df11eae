"""Ops TVM's PyTorch importer cannot translate, run by PyTorch: any model `torch.export` takes
comes in.

TVM 0.27's `from_exported_program` refuses a whole model for one op it has no
converter for (`torch.fft.rfft`, `torch.searchsorted`, `torch.cummax`,
`torch.histc`...), or for one its converter fails on (an `index_put` of rows, a
`slice_scatter` to the end); and it translates some ops wrong
(`mistranslations.py`). Here each such node becomes a call to a pyfunc of the
module (`R.call_py_func`) that runs the very same ATen op with PyTorch on the
tensors TVM hands it (DLPack: the same memory), its output's shape and dtype
from the node's `meta["val"]`. A node whose value TVM cannot hold (a complex
tensor: `rfft`'s) takes the nodes that read that value with it, until the
values are real again, so the pyfunc runs a few ops (`_fft_r2c`, then `abs`).

The pyfunc is a real one, with source text (`torch.ops.aten.cummax.default(x,
1)`), added with the imported function: `trace`, `compare`, `edit`, `script()`
and `export()` treat it like any pyfunc, and its call like any binding.
"""

from __future__ import annotations

import keyword
import math
import operator
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
import tvm
from tvm import relax

from ...errors import ModelImportError
from ..live.contributions import pyfunc_extern
from .mistranslations import mistranslation


@dataclass
class Region:
    """Nodes one pyfunc runs: an op TVM lacks, and the nodes that read a value TVM cannot hold."""

    nodes: list  # fx Nodes, in graph order
    inputs: list = field(default_factory=list)  # fx Nodes outside it that it reads
    outputs: list = field(default_factory=list)  # its nodes read outside it (or returned)
    pyfunc: str = ""
    why: str = ""  # why TVM's translation of its first node is not used ("": it has none)

    @property
    def op(self) -> str:
        return str(self.nodes[0].target)

    @property
    def kind(self) -> str:
        """What TVM's importer does with its op: `cannot translate`, `fails on`, `translates
        wrong`."""
        return self.why.split(":")[0] if self.why else CANNOT


CANNOT, FAILS_ON, WRONG = "cannot translate", "fails on", "translates wrong"


@dataclass
class Fallbacks:
    """The regions of one model, their pyfuncs' source text by name, and the notices to give."""

    regions: list[Region]
    sources: dict[str, str]
    wrong: list[Region] = field(default_factory=list)  # translated wrong, left to TVM

    def notices(self, function: str) -> list[str]:
        """`main runs 2 ops TVM's importer cannot translate as PyTorch calls: ...`, and a line
        for the ops it fails on, and one for those it translates wrong, each saying why; and
        one for each node TVM translates wrong that cannot run as a PyTorch call."""
        lines = []
        for kind in (CANNOT, FAILS_ON, WRONG):
            regions = [r for r in self.regions if r.kind == kind]
            if regions:
                lines.append(_notice(function, kind, regions))
        return lines + [
            f"{function}: TVM's importer translates node `{r.nodes[0].name}` ({r.op}) wrong"
            f"{_told(r)}, and it cannot run as a PyTorch call: its numbers may not be PyTorch's"
            for r in self.wrong
        ]


def _notice(function: str, kind: str, regions: list[Region]) -> str:
    counts = Counter(r.op for r in regions)
    about: dict[str, list[str]] = {}
    for region in regions:
        about.setdefault(region.op, []).append(region.pyfunc)
    whys = {r.op: r.why.split(": ", 1)[1] for r in regions if r.why}
    ops = "; ".join(
        f"{op} ×{n} (pyfunc {', '.join(about[op])}" + (f": {whys[op]})" if op in whys else ")")
        for op, n in counts.items()
    )
    what = "an op" if len(counts) == 1 else f"{len(counts)} ops"
    return f"{function} runs {what} TVM's importer {kind} as PyTorch calls: {ops}"


def fallbacks(
    exported, convert_map: dict, function: str, model: str, refused: dict[str, str] | None = None
) -> Fallbacks:
    """Every node of `exported` whose op TVM's importer has no converter for (`convert_map`, by
    `target.__name__` as the importer looks it up), whose converter failed (`refused`: node
    name -> TVM's error) or translates it wrong (`mistranslation`), grouped into regions with a
    pyfunc each; a `ModelImportError` (naming `model`) for a region that cannot run as a
    PyTorch call."""
    nodes = list(exported.graph.nodes)
    why = {
        n: reason
        for n in nodes
        if n.op == "call_function"
        and isinstance(n.target, torch._ops.OpOverload)
        and (reason := _why(n, convert_map, refused or {})) is not None
    }
    position = {n: i for i, n in enumerate(nodes)}
    regions: list[Region] = []
    taken: set = set()
    for node, reason in why.items():
        if node not in taken:
            region = _region(node, position, nodes)
            region.why = reason
            taken.update(region.nodes)
            regions.append(region)
    sources: dict[str, str] = {}
    kept: list[Region] = []
    left: list[Region] = []
    for region in regions:
        try:
            _connect(region, model)
        except ModelImportError:
            if region.kind != WRONG:
                raise
            left.append(region)  # TVM's translation stays: the notice says it is wrong
            continue
        kept.append(region)
        region.pyfunc = _pyfunc_name(function, region, sources)
        sources[region.pyfunc] = _pyfunc_source(region.pyfunc, function, region)
    return Fallbacks(kept, sources, left)


def _why(node, convert_map: dict, refused: dict[str, str]) -> str | None:
    """Why `node` runs as a PyTorch call ("": TVM's importer has no converter for it), or
    None if TVM translates it."""
    if node.target.__name__ not in convert_map:
        return ""
    if node.name in refused:
        return f"{FAILS_ON}: {refused[node.name]}"
    wrong = mistranslation(node)
    return f"{WRONG}: {wrong}" if wrong else None


def _region(start, position: dict, nodes: list) -> Region:
    """`start`, and the nodes after it that read a value TVM cannot hold (complex) from the
    region; then every node between two of its nodes that reads from it, so that the region
    can run as one call where its last node is (nothing outside reads it earlier)."""
    members = {start}
    grow = [start]
    while grow:
        node = grow.pop()
        if _holdable(node):
            continue
        for user in node.users:
            if user.op == "call_function" and user not in members:
                members.add(user)
                grow.append(user)
    while True:
        last = max(position[n] for n in members)
        between = [
            n
            for n in nodes[position[start] : last]
            if n not in members and any(a in members for a in n.all_input_nodes)
        ]
        if not between:
            return Region(sorted(members, key=position.get))
        members.update(between)


def _connect(region: Region, model: str) -> None:
    members = set(region.nodes)
    inputs: dict = {}
    for node in region.nodes:
        for arg in node.all_input_nodes:
            if arg not in members:
                inputs.setdefault(arg, None)
    region.inputs = list(inputs)
    region.outputs = [n for n in region.nodes if any(u not in members for u in n.users)]
    for node in region.outputs:
        if not _holdable(node):
            raise ModelImportError(
                f"{model} cannot come in: node `{node.name}` ({node.target}) gives a "
                f"{_dtype_of(node)} value to the rest of the model, and TVM has no such dtype"
            )
    for node in region.inputs:
        if not isinstance(node.meta.get("val"), torch.Tensor):
            raise ModelImportError(
                f"{model} cannot come in: node `{region.nodes[0].name}` ({region.op}), which "
                f"TVM's importer {region.kind}{_told(region)}, reads `{node.name}`, which is not "
                "a tensor, so it cannot run as a PyTorch call either"
            )
    known = {str(d) for n in region.inputs for d in n.meta["val"].shape if not isinstance(d, int)}
    for node in region.outputs:
        for value in _tensors(node.meta.get("val")):
            unknown = [str(d) for d in value.shape if not isinstance(d, int)]
            unknown = [d for d in unknown if d not in known]
            if unknown:
                raise ModelImportError(
                    f"{model} cannot come in: node `{node.name}` ({node.target}), which TVM's "
                    f"importer cannot translate, gives a value of size {', '.join(unknown)}, "
                    "which its inputs' sizes do not tell (it depends on the data), and a PyTorch "
                    "call inside TVM must say its size before it runs"
                )


def _told(region: Region) -> str:
    return f" ({region.why.split(': ', 1)[1]})" if region.why else ""


def _holdable(node) -> bool:
    """Whether every tensor in `node`'s value has a dtype TVM has (complex ones it has not)."""
    return all(not t.dtype.is_complex for t in _tensors(node.meta.get("val")))


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return []


def _dtype_of(node) -> str:
    return ", ".join(str(t.dtype).removeprefix("torch.") for t in _tensors(node.meta.get("val")))


# -- the pyfunc's source ---------------------------------------------------------------------
def _pyfunc_name(function: str, region: Region, taken: Iterable[str]) -> str:
    base = f"{function}_{region.nodes[0].target.__name__.split('.')[0].strip('_')}"
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    return name


def _names(region: Region) -> dict:
    """Each input and member node -> its name in the pyfunc (the FX node's, made safe)."""
    reserved = {"self", "torch", "I", "R", "T", "tvm"}
    names = {}
    for node in [*region.inputs, *region.nodes]:
        name = node.name
        names[node] = f"{name}_" if name in reserved or keyword.iskeyword(name) else name
    return names


def _body(region: Region) -> str:
    """The pyfunc's lines after its signature: each node's op, then what it returns."""
    names = _names(region)
    lines = []
    for node in region.nodes:
        if node.target is operator.getitem:
            value = f"{names[node.args[0]]}[{node.args[1]!r}]"
        else:
            args = [_literal(a, names) for a in node.args]
            args += [f"{k}={_literal(v, names)}" for k, v in node.kwargs.items()]
            value = f"torch.ops.{node.target}({', '.join(args)})"
        lines.append(f"    {names[node]} = {value}")
    outputs = [_returned(node, names) for node in region.outputs]
    lines.append(f"    return {', '.join(outputs)}")
    params = ", ".join(["self", *(names[n] for n in region.inputs)])
    return f"({params}):\n" + "\n".join(lines) + "\n"


def _returned(node, names: dict) -> str:
    """A tuple-valued node (cummax's values and indices) returns its items: the pyfunc returns
    tensors, flat."""
    value = node.meta.get("val")
    if isinstance(value, (tuple, list)):
        return ", ".join(f"{names[node]}[{i}]" for i in range(len(value)))
    return names[node]


def _pyfunc_source(name: str, function: str, region: Region) -> str:
    readers = ", ".join(dict.fromkeys(str(n.target) for n in region.nodes[1:]))
    also = f" (and what reads its value, which TVM cannot hold: {readers})" if readers else ""
    signature, rest = _body(region).split("\n", 1)
    said = {CANNOT: "cannot translate it", FAILS_ON: "fails on it", WRONG: "translates it wrong"}
    doc = f"`{function}`'s {region.op}{also}, run by PyTorch: TVM's importer {said[region.kind]}"
    if region.kind == WRONG:
        doc += f" ({region.why.split(': ', 1)[1]})"
    return f'@I.pyfunc\ndef {name}{signature}\n    """{doc}."""\n{rest}'


def _literal(value, names: dict) -> str:
    if isinstance(value, torch.fx.Node):
        return names[value]
    if isinstance(value, (list, tuple)):
        items = [_literal(v, names) for v in value]
        return f"[{', '.join(items)}]" if isinstance(value, list) else f"({', '.join(items)},)"
    if isinstance(value, float) and not math.isfinite(value):
        return f"float('{value}')"
    if isinstance(value, torch.device):
        return f"torch.device({str(value)!r})"
    if isinstance(value, (bool, int, float, str, type(None), torch.dtype, torch.layout)):
        return repr(value)
    if isinstance(value, torch.memory_format):
        return repr(value)
    raise ModelImportError(
        f"an argument of type {type(value).__name__} ({value!r}) of an op TVM's importer cannot "
        "translate has no Python form to run it with"
    )


# -- the call, in TVM's importer -------------------------------------------------------------
def install(importer, found: Fallbacks) -> None:
    """Make `importer` translate the regions' nodes: nothing at each, and at a region's last
    node the call of its pyfunc, whose outputs become the values of the region's outputs."""
    at: dict = {}
    for region in found.regions:
        for node in region.nodes:
            at[node] = region
    wrapped = {n.target.__name__ for n in at if n.op == "call_function"}
    for target in wrapped:
        original = importer.convert_map.get(target)
        importer.convert_map[target] = _dispatch(importer, at, original)


def _dispatch(importer, at: dict, original: Callable | None) -> Callable:
    def convert(node):
        region = at.get(node)
        if region is None:
            return original(node)
        if node is not region.nodes[-1]:
            return None  # its value lives only inside the pyfunc
        return _call(importer, region)

    return convert


def _call(importer, region: Region):
    """Emit `R.call_py_func(pyfunc, inputs..., out_ty=...)` and give each output its value."""
    args = [importer.env[n] for n in region.inputs]
    sizes = _size_vars(args)
    flat = [t for node in region.outputs for t in _tensors(node.meta.get("val"))]
    types = [_tensor_type(importer, t, sizes) for t in flat]
    call = relax.op.call_py_func(region.pyfunc, relax.Tuple(args), types)
    out = importer.block_builder.emit(call)
    if len(types) == 1 and not isinstance(region.outputs[0].meta.get("val"), (tuple, list)):
        importer.env[region.outputs[0]] = out
        return out
    items = iter(range(len(types)))
    value = None
    for node in region.outputs:
        val = node.meta.get("val")
        if isinstance(val, (tuple, list)):
            fields = [relax.TupleGetItem(out, next(items)) for _ in val]
            value = importer.block_builder.emit(relax.Tuple(fields))
        else:
            value = importer.block_builder.emit(relax.TupleGetItem(out, next(items)))
        importer.env[node] = value
    return importer.env[region.nodes[-1]] if region.nodes[-1] in region.outputs else value


def _size_vars(args: list) -> dict[str, tvm.tirx.Var]:
    """The symbolic sizes (`s77`) in the inputs' shapes, by name."""
    found = {}
    for arg in args:
        shape = getattr(getattr(arg, "ty", None), "shape", None)
        for dim in getattr(shape, "values", None) or ():
            for var in tvm.tirx.analysis.undefined_vars(dim):
                found[var.name] = var
    return found


def _tensor_type(importer, value: torch.Tensor, sizes: dict) -> relax.TensorType:
    """The type of a fake tensor: each size a number or a size of the inputs (`_connect` made
    sure of that)."""
    dims = [size if isinstance(size, int) else sizes[str(size)] for size in value.shape]
    return relax.TensorType(dims, importer._convert_data_type(value.dtype))


def pyfunc_externs(found: Fallbacks) -> dict[str, relax.ExternFunc]:
    """The pyfuncs as an IRModule holds them (what `add` of a module with pyfuncs takes)."""
    return {name: pyfunc_extern(name, text) for name, text in found.sources.items()}
