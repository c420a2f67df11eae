"""Where a binding of an imported function came from in the user's PyTorch code.

`torch.export` keeps, on every FX node, the stack of `nn.Module`s that ran it
(`nn_module_stack`) and the Python stack that made it (`stack_trace`). A
`SourceSite` is what a user reads of that: the module path
(`encoder.layer.0.attention.self.query`), its class, and the innermost line
outside torch itself (`modeling_bert.py:176: key_layer = self.key(...)`):
the line of the model's code, not the line of `F.linear` inside
`torch.nn.Linear`. Rows of a table show `short()` (`query ·
modeling_bert.py:176: q = self.query(x)`); errors and verdicts `str()`.
"""

from __future__ import annotations

import linecache
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

import torch

_FRAME = re.compile(r'File "([^"]+)", line (\d+), in [^\n]*(?:\n[ \t]+([^\n]*))?')
_TORCH = os.path.dirname(torch.__file__) + os.sep
SHORT_PATH = 30  # characters of a module path a table row shows (its last components)
SHORT_CODE = 48  # characters of a line's code a table row shows (its first)
# The file a Jupyter kernel (ipykernel) or a plain IPython shell compiles a cell's code under:
# a temporary path that says nothing to a reader, and differs on every run.
_NOTEBOOK_CELL = re.compile(r"ipykernel_\d+[/\\]\d+\.py$|^<ipython-input-\d+-[0-9a-f]+>$")


@dataclass(frozen=True)
class SourceSite:
    """The `nn.Module` and the line of the user's code one FX node (and its bindings) came from."""

    path: str  # `encoder.layer.0.attention.self.query`; "" for the model itself
    module: str  # the module's class: `Linear`
    file: str
    line: int
    code: str  # the line's text, stripped: `q = self.query(x)`

    @property
    def location(self) -> str:
        """`modeling_bert.py:312`"""
        return place(self.file, self.line) if self.file else ""

    @property
    def module_path(self) -> str:
        """The module path, or the model's class for the model itself."""
        return self.path or self.module

    def short(self, width: int = SHORT_PATH) -> str:
        """`layer.0.attention.self.query · modeling_bert.py:312: q = self.query(x)`: what a
        table row has room for (a long module path keeps its last components, long code its
        first characters)."""
        path = self.module_path
        parts = path.split(".")
        while len(parts) > 1 and len(".".join(parts)) > width:
            parts = parts[1:]
        shown = ".".join(parts) if len(parts) == len(path.split(".")) else "…" + ".".join(parts)
        code = self.code if len(self.code) <= SHORT_CODE else self.code[: SHORT_CODE - 1] + "…"
        line = f"{self.location}: {code}" if self.location and code else self.location
        return " · ".join(p for p in (shown, line) if p)

    def __str__(self) -> str:
        """`encoder.layer.0.attention.self.query (Linear), modeling_bert.py:312: q = ...`"""
        head = f"{self.path} ({self.module})" if self.path else self.module
        line = f"{self.location}: {self.code}" if self.code else self.location
        return ", ".join(p for p in (head, line) if p)


def place(path: str, line: int, whole_path: bool = False) -> str:
    """What a reader is told of a line of source: `modeling_bert.py:312` (the whole path if
    `whole_path`, as an error gives it), or `notebook cell, line 3` for code a notebook cell
    defined (never the kernel's temporary file, which differs on every run)."""
    if _NOTEBOOK_CELL.search(path):
        return f"notebook cell, line {line}"
    return f"{path if whole_path else os.path.basename(path)}:{line}"


def site_of(node: torch.fx.Node) -> SourceSite | None:
    """The site `torch.export` recorded for `node`, or None if it recorded neither module nor
    line (a node the exporter made itself)."""
    stack = node.meta.get("nn_module_stack") or {}
    path, kind = list(stack.values())[-1] if stack else ("", "")
    frame = innermost_user_frame(node.meta.get("stack_trace") or "")
    if not stack and frame is None:
        return None
    file, line, code = frame or ("", 0, "")
    return SourceSite(_module_path(path), _class_name(kind), file, line, code)


def module_classes(nodes: Iterable[torch.fx.Node]) -> dict[str, str]:
    """`{module path: class}` of every `nn.Module` that ran one of `nodes`, outer ones included
    (`blocks` -> `Sequential`, `blocks.0` -> `Block`): what a graph's groups are called."""
    found: dict[str, str] = {}
    for node in nodes:
        for path, kind in (node.meta.get("nn_module_stack") or {}).values():
            found.setdefault(_module_path(path), _class_name(kind))
    return found


def _class_name(kind) -> str:
    return str(kind).rsplit(".", 1)[-1]


def innermost_user_frame(stack_trace: str) -> tuple[str, int, str] | None:
    """`(file, line, code)` of the innermost frame of a quoted stack that is not torch's own;
    the code is read from the file where the stack does not quote it."""
    frames = [
        (file, int(line), (code or "").strip())
        for file, line, code in _FRAME.findall(stack_trace)
        if not file.startswith(_TORCH)
    ]
    if not frames:
        return None
    file, line, code = frames[-1]
    return file, line, code or linecache.getline(file, line).strip()


def _module_path(path: str) -> str:
    """`encoder.layer.0` as the user writes it (torch.export may write `L['self'].encoder...`
    or `encoder.layer[0]`)."""
    path = re.sub(r"^L\['self'\]\.?", "", str(path))
    return re.sub(r"\[(\d+)\]", r".\1", path)


def where_of(sites: Iterable[SourceSite | None]) -> str:
    """One cell of a table for several bindings (a kernel's): the first one's `short()`, and how
    many other places in the model's code the rest came from."""
    known = list(dict.fromkeys(s for s in sites if s is not None))
    if not known:
        return ""
    more = len({_place(s) for s in known[1:]} - {_place(known[0])})
    return known[0].short() + (f" (+{more} more)" if more else "")


def _place(site: SourceSite) -> tuple[str, str, int]:
    return site.path, site.file, site.line
