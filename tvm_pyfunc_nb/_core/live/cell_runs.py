"""What a cell run brings to a live module: its text, made a contribution.

A function of the module's parts (module_parts.py), as a feature is: the
module's name, the namespace its cells read, its weights by name (edit text
writes them `NAME.consts.<name>`) and the functions other contributions
define, which the cell's functions may call.
"""

from __future__ import annotations

from ..module_parts import ModuleParts
from .cells import split_cell
from .contributions import Contribution, from_cell, owners


def cell_contribution(
    parts: ModuleParts, text: str, key, run: int, filename: str, origin, reset: bool
) -> tuple[Contribution, bool]:
    """What a cell run of `text` brings to the module, and whether it replaces the whole
    module (`reset`, or the cell is one whole class)."""
    fragment = split_cell(text, key)
    reset = reset or bool(fragment.full_class)
    contributions = parts.state.contributions
    others = {} if reset else owners(c for k, c in contributions.items() if k != key)
    contribution = from_cell(
        fragment,
        run=run,
        filename=filename,
        origin=origin or f"cell run {run}",
        module_name=parts.name,
        others=others,
        namespace=parts.namespace,
        consts=parts.consts,
    )
    return contribution, reset
