"""The live module itself: cells and contributions in, one checked IRModule out, the facade.

- `live_module.py`: `LiveModule`, the facade: makes the parts once, delegates, commits changes;
- `cells.py`, `tvmscript_parse.py`, `pyfunc_loader.py`: a cell's text -> its functions;
- `contributions.py`, `assembly.py`: what a module is made of, and the checked module;
- `editing.py`, `printer.py`, `script_text.py`: the module as text that parses back;
- `relax_rewrite.py`, `fault_lines.py`, `upstream.py`: rewrites assembly needs, the cell line
  of a fault, what upstream `BasePyModule` code expects of `self`.
"""
