"""`NAME.script()` and `NAME.edit_text("fn")`: the module, or one function, as cell text.

Both parse back: pyfuncs keep their own source, and each weight is written
`NAME.consts.<name>` (editing.py), named as the importer knew it.
"""

from __future__ import annotations

from ..module_parts import ModuleParts
from .cells import PYFUNC
from .editing import function_text, module_text


def script(parts: ModuleParts) -> str:
    """TVMScript of the whole module, every pyfunc's source included."""
    consts, names = parts.consts, parts.constant_names()
    return module_text(parts.name, parts.state.ir_mod, consts, names, f"{parts.name}.consts.")


def edit_text(parts: ModuleParts, fn: str) -> str:
    """The cell that defines `fn` as it is now: `%%tvmmodule NAME` and its TVMScript (a pyfunc's
    source), weights named `NAME.consts.<name>`."""
    entry = parts.entry(fn)
    if entry.kind == PYFUNC:
        text = entry.source.source
    else:
        ir_mod, consts = parts.state.ir_mod, parts.consts
        text = function_text(parts.name, ir_mod, fn, consts, parts.constant_names())
    return f"%%tvmmodule {parts.name}\n{text}"
