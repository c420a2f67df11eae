"""`NAME.graph("fn", overlay=None, by="binding")`: a Relax function as a dataflow graph, as data.

What the views draw, computed here without them:

- nodes: the function's parameters and bindings (`by="binding"`), or each launch of its
  compiled, fused function (`by="kernel"`: a call site of a kernel, a PyTorch call or a pyfunc,
  with the bindings fused into it, as `kernels` and `compare(by="kernel")` see them);
- edges: what each node reads; a launch reads through the bindings no launch computes
  (views, aliases, tuples), so its edges come from the launches that made its inputs;
- groups: the `nn.Module` path each node came from (a function from `add_torch`), every
  enclosing module a group too, named by its class (`blocks (Sequential)`, `0 (Block)`);
- what an overlay says of each node, a `Mark` (graph_marks.py): a `compare` result (by
  binding or by kernel) its verdict and error, a `profile` its time, a `trace` its values
  and whether they are finite, and the node the overlay names (the first divergence, where a
  trace stopped).

A node carries what a reader asks of it: its binding, op, TVMScript line (numbered as the
cell `edit_text` gives), source line (`file:line: code`) and values. Nothing in it depends on
the CPU or on timing, except a profile's times (and a compare's digits beyond rounding).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

import tvm
from tvm import relax

from ...errors import CallError
from ..build.offload import PREFIX
from ..live import script_text
from ..live.cells import RELAX
from ..models.source_sites import module_classes
from ..module_parts import ModuleParts
from .graph_marks import (
    Launch,
    Mark,
    Marks,
    check_overlay,
    marks_of,
    overlay_kind,
)
from .profiling import Profile
from .tracing import input_vars, op_of, summary, unique_names

BY = ("binding", "kernel")  # what a node is: a binding of the function, or a launch of a kernel

INPUT, BINDING, KERNEL = "input", "binding", "kernel"


@dataclass(frozen=True)
class Node:
    """A parameter, a binding, or a launch of the compiled function (the bindings fused in)."""

    key: str  # a parameter's or binding's name; `kernel#k` for the k-th launch of a kernel
    kind: str  # INPUT, BINDING or KERNEL
    op: str  # `matmul`, `call_tir add_tir`; a launch: the kernel's name
    group: str  # the module path ("" for the model itself, or a function not from PyTorch)
    bindings: tuple[str, ...]  # those it computes: itself, or those fused into a launch
    shape: str  # `float32[2, 16]`
    script: tuple[tuple[int, str], ...] = ()  # (cell line, text) of each binding, as edit_text
    sources: tuple[str, ...] = ()  # `blocks.0.fc (Linear), net.py:6: return self.fc(x)`
    values: str = ""  # `min / max / mean` from a trace
    mark: Mark | None = None

    @property
    def title(self) -> str:
        """`lv1 = matmul`, `x (input)`, `fused_matmul_add (lv1, lv2)`."""
        if self.kind == INPUT:
            return f"{self.key} (input)"
        if self.kind == KERNEL:
            return f"{self.op} ({', '.join(self.bindings)})" if self.bindings else self.op
        return f"{self.key} = {self.op}"


@dataclass(frozen=True)
class Group:
    """An `nn.Module` some nodes came from: a group that folds."""

    path: str  # `blocks.0.fc`
    module: str  # its class: `Linear` ("" where not known)
    parent: str | None  # the enclosing group's path (None: at the top)

    @property
    def label(self) -> str:
        """`fc (Linear)`: its path below its parent's, and its class."""
        name = self.path.removeprefix(f"{self.parent}.") if self.parent else self.path
        return f"{name} ({self.module})" if self.module else name


@dataclass
class Graph:
    """What `NAME.graph` returns: the nodes, edges and groups of one Relax function, an overlay's
    marks on the nodes; shown as a picture that folds by group (text: a summary)."""

    module: str
    function: str
    by: str  # "binding" or "kernel"
    nodes: list[Node]
    edges: list[tuple[str, str]]  # (from, to) by node key
    groups: dict[str, Group] = field(default_factory=dict)
    overlay: str = ""  # "compare", "compare by kernel", "profile", "trace" or ""
    verdict: str = ""  # what the overlay says in one line

    def node(self, key: str) -> Node:
        """The node `key` names (a binding, a parameter, `kernel#k`)."""
        found = [n for n in self.nodes if n.key == key]
        if not found:
            raise KeyError(key)
        return found[0]

    @property
    def focus(self) -> Node | None:
        """The node the overlay names: the first divergence, where a trace stopped."""
        return next((n for n in self.nodes if n.mark is not None and n.mark.first), None)

    def members(self, path: str) -> list[Node]:
        """The nodes inside group `path`, its nested groups' included."""
        return [n for n in self.nodes if n.group == path or n.group.startswith(f"{path}.")]

    def worst(self, nodes: Iterable[Node]) -> Mark | None:
        """The mark most worth a look among `nodes` (what a folded group shows)."""
        found = None
        for node in nodes:
            if node.mark is not None and node.mark.worse_than(found):
                found = node.mark
        return found

    def summary(self) -> str:
        """`graph of main: 18 bindings in 6 groups`."""
        count = sum(n.kind != INPUT for n in self.nodes)
        what = _counted(count, "launch" if self.by == KERNEL else "binding")
        groups = f" in {_counted(len(self.groups), 'group')}" if self.groups else ""
        return f"graph of {self.function}: {what}{groups}"

    def __repr__(self) -> str:
        lines = [self.summary()]
        if self.groups:
            top = [g.label for g in self.groups.values() if g.parent is None]
            lines.append(f"groups: {', '.join(top)}")
        if self.overlay:
            focus = self.focus
            named = f"; marked: {focus.title}" if focus is not None else ""
            lines.append(f"overlay: {self.overlay}: {self.verdict}{named}")
        return "\n".join(lines)


def _counted(count: int, what: str) -> str:
    return f"{count} {what}{'es' if what.endswith('h') else 's'}" if count != 1 else f"1 {what}"


def graph(parts: ModuleParts, fn: str, overlay, by: str) -> Graph:
    """Relax function `fn` of the module as a `Graph`: by binding or by kernel launch, grouped by
    `nn.Module` path, `overlay` (what compare, profile or trace returned for `fn`) marking it."""
    if by not in BY:
        raise CallError(
            f"graph: by must be one of {', '.join(map(repr, BY))}, not {by!r}", function=fn
        )
    func = parts.entry(fn, kind=RELAX, needed_by="graph").func
    check_overlay(parts.name, fn, overlay)
    origin = parts.torch_origins.get(fn)
    site_of = origin.site if origin is not None else (lambda binding: None)
    nodes, reads = _binding_nodes(func, _script_lines(script_text.edit_text(parts, fn)), site_of)
    bindings = {n.key for n in nodes if n.kind == BINDING}
    # a profile's marks are by launch: they need the compiled function whatever is drawn
    launches = _launches(parts, fn, nodes) if by == KERNEL or isinstance(overlay, Profile) else []
    if by == KERNEL:
        nodes, reads = _kernel_nodes(nodes, reads, launches, site_of)
    classes = module_classes(origin.exported.graph.nodes) if origin is not None else {}
    made = Graph(parts.name, fn, by, nodes, _edges(reads), _groups(nodes, classes))
    return _overlaid(made, overlay, launches, bindings) if overlay is not None else made


# -- nodes by binding ------------------------------------------------------------------
def _script_lines(text: str) -> dict[str, tuple[int, str]]:
    """Each binding's line in the cell text (line 1 is `%%tvmmodule`), and the `def` line (the
    parameters') under `DEF`."""
    found: dict[str, tuple[int, str]] = {}
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        head, eq, _ = stripped.partition(" = ")
        name = head.split(":", 1)[0].strip()
        if eq and name.isidentifier():
            found.setdefault(name, (number, stripped))
        elif stripped.startswith("def "):
            found.setdefault(DEF, (number, stripped))
    return found


DEF = "def"  # a keyword: no binding has that name


def _binding_nodes(func: relax.Function, lines, site_of) -> tuple[list[Node], dict]:
    """A node per parameter and per binding, and the node keys each binding reads."""
    params = list(func.params)
    bindings = [b for block in func.body.blocks for b in block.bindings]
    variables = [*params, *(b.var for b in bindings)]
    key_of = dict(zip(variables, unique_names(variables), strict=True))
    nodes = [
        Node(key_of[p], INPUT, "", "", (), _type_text(p.ty), _line(lines, DEF)) for p in params
    ]
    reads: dict[str, list[str]] = {}
    for binding in bindings:
        key, value = key_of[binding.var], binding.value
        site = site_of(key)
        nodes.append(
            Node(
                key,
                BINDING,
                key_of.get(value, "?") if isinstance(value, relax.Var) else op_of(value),
                site.path if site is not None else "",
                (key,),
                _type_text(binding.var.ty),
                _line(lines, key),
                (str(site),) if site is not None else (),
            )
        )
        reads[key] = [key_of[v] for v in dict.fromkeys(input_vars(value)) if v in key_of]
    return nodes, reads


def _line(lines: Mapping[str, tuple[int, str]], key: str) -> tuple[tuple[int, str], ...]:
    return (lines[key],) if key in lines else ()


def _type_text(ty) -> str:
    """`float32[2, 16]`, `float32[n, 4]`; `tuple` for a tuple."""
    if isinstance(ty, relax.TensorType):
        shape = getattr(ty.shape, "values", None)
        dims = ", ".join(_dim(d) for d in shape) if shape is not None else "?"
        return f"{ty.dtype}[{dims}]"
    if isinstance(ty, relax.TupleType):
        return "tuple"
    return type(ty).__name__.removesuffix("Type").lower()


def _dim(d) -> str:
    return str(int(d)) if isinstance(d, tvm.tirx.IntImm) else str(d)


def _edges(reads: Mapping[str, list[str]]) -> list[tuple[str, str]]:
    return [(source, target) for target, sources in reads.items() for source in sources]


# -- nodes by kernel launch ------------------------------------------------------------
def _launches(parts: ModuleParts, fn: str, nodes: list[Node]) -> list[Launch]:
    """Every call site of the compiled `fn` (compiled now if needed), in the order of the
    bindings they compute."""
    linked = parts.compiler.linked_for(parts.state, fn)
    pyfuncs = parts.compiler.bridge.names
    order = {n.key: i for i, n in enumerate(nodes)}
    found = [
        Launch(f"{callee}#{k}", callee, pyfuncs.get(callee, callee.removeprefix(PREFIX)), site)
        for callee, sites in linked.sites.of(fn).items()
        for k, site in enumerate(sites)
    ]
    return sorted(
        found, key=lambda launch: max((order.get(b, 0) for b in launch.bindings), default=0)
    )


def _kernel_nodes(
    nodes: list[Node], reads: dict[str, list[str]], launches: list[Launch], site_of
) -> tuple[list[Node], dict]:
    """A node per launch, reading the launches (or parameters) that made what its bindings read,
    through the bindings no launch computes."""
    by_key = {n.key: n for n in nodes}
    launch_of = {b: launch.key for launch in launches for b in launch.bindings}

    known: dict[str, list[str]] = {}

    def makers(binding: str) -> list[str]:
        """The launches (or parameters) that made `binding`'s value (bindings read earlier ones
        only: no cycles)."""
        if binding in launch_of or by_key[binding].kind == INPUT:
            return [launch_of.get(binding, binding)]
        if binding not in known:
            known[binding] = [m for b in reads.get(binding, ()) for m in makers(b)]
        return known[binding]

    made = [n for n in nodes if n.kind == INPUT]
    kernel_reads: dict[str, list[str]] = {}
    for launch in launches:
        inside = [by_key[b] for b in launch.bindings if b in by_key]
        sites = [s for b in launch.bindings if (s := site_of(b)) is not None]
        made.append(
            Node(
                launch.key,
                KERNEL,
                launch.name,
                _common_path([s.path for s in sites]),
                launch.bindings,
                inside[-1].shape if inside else "",
                tuple(line for n in inside for line in n.script),
                tuple(dict.fromkeys(str(s) for s in sites)),
            )
        )
        sources = [m for b in launch.bindings for r in reads.get(b, ()) for m in makers(r)]
        kernel_reads[launch.key] = [m for m in dict.fromkeys(sources) if m != launch.key]
    return made, kernel_reads


def _common_path(paths: list[str]) -> str:
    """`encoder.layer.0` for `encoder.layer.0.attention` and `encoder.layer.0.output`."""
    if not paths:
        return ""
    common = paths[0].split(".")
    for path in paths[1:]:
        parts = path.split(".")
        while common and parts[: len(common)] != common:
            common = common[:-1]
    return ".".join(common)


# -- groups ------------------------------------------------------------------------------
def _groups(nodes: list[Node], classes: Mapping[str, str]) -> dict[str, Group]:
    """Every module path a node came from, and every path enclosing one, in the order met."""
    groups: dict[str, Group] = {}
    for node in nodes:
        parts = node.group.split(".") if node.group else []
        for depth in range(1, len(parts) + 1):
            path = ".".join(parts[:depth])
            parent = ".".join(parts[: depth - 1]) or None
            groups.setdefault(path, Group(path, classes.get(path, ""), parent))
    return groups


# -- an overlay's marks on the nodes ----------------------------------------------------
def _overlaid(made: Graph, overlay, launches: list[Launch], bindings: set[str]) -> Graph:
    """`made` with the marks of `overlay`, checked to name only `bindings` of the function (and
    launches it has)."""
    kind = overlay_kind(overlay)
    marks = marks_of(overlay, launches)
    stale = marks.unknown + [b for b in marks.bindings if b not in bindings]
    if stale:
        raise CallError(
            f"graph: the {kind} names what `{made.function}` no longer has "
            f"({', '.join(stale[:4])}{', …' if len(stale) > 4 else ''}): it was made before "
            f"`{made.function}` changed; run {kind.split()[0]} again",
            function=made.function,
        )
    values = overlay if kind == "trace" else {}
    nodes = [_marked(n, marks, values) for n in made.nodes]
    return replace(made, nodes=nodes, overlay=kind, verdict=marks.verdict)


def _marked(node: Node, marks: Marks, values: Mapping) -> Node:
    """`node` with its mark: a launch's own, else the worst of its bindings'."""
    mark = marks.launches.get(node.key)
    if mark is None:
        for binding in node.bindings:
            found = marks.bindings.get(binding)
            if found is not None and found.worse_than(mark):
                mark = found
    shown = next((b for b in reversed(node.bindings) if b in values), None)
    text = summary(values[shown]) if shown is not None else ""
    return replace(node, mark=mark, values=text)
