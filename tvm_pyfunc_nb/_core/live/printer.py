"""TVMScript text of a live module that parses back, pyfunc sources included.

Upstream's `IRModule.script()` does most of the work; this module repairs what
it cannot round-trip:

- a pyfunc prints as `f = R.ExternFunc("f")`: it is replaced by the function's
  own source (its `python_source` attr), re-indented into the class body
  without touching the inside of multi-line strings;
- `R.call_py_func(R.str("f"), (x, y), ty_args=(T,))`, which the parser
  rejects, becomes `R.call_py_func("f", x, y, out_ty=T)`;
- a non-finite scalar, printed `R.const("-inf", "float32")`, which the parser
  rejects ("value has to be scalar or Tensor"), becomes
  `R.const(float("-inf"), "float32")` (every attention mask has one);
- the import header, which upstream prints commented out, becomes real, and
  the class inherits `BasePyModule` when it holds pyfuncs. The parser then
  adds the `base_py_module` module attr itself and rejects a second
  `I.module_attrs(...)`, so that line goes.

Functions keep upstream's order: PrimFuncs, then pyfuncs (and any other
`ExternFunc`), then Relax functions, each group sorted by name.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

import tvm
from tvm import relax

from .cells import reindent

# PEP 695 output (`class Module[n]`-style) is chosen by default on Python >= 3.12
# and does not parse on 3.10/3.11; `n = TypeVar("n")` parses everywhere.
_PRINTER_CONFIG = {"script.use_pep695": False}
_INDENT = 4
# Names a `%%tvmmodule` cell sees without importing them; the script imports
# the ones its pyfuncs use, so they run when the script is executed on its own.
_CELL_MODULES = ("tvm", "torch")


def module_script(name: str, ir_mod: tvm.IRModule, *, py_module: bool = False) -> str:
    """The whole module as runnable TVMScript: an `@I.ir_module class NAME`.

    Executing the text (registered in `linecache`, since TVMScript reads its
    source through `inspect`) gives back equal PrimFuncs and Relax functions
    and the same pyfuncs, whose sources `member_sources` recovers exactly.
    The class inherits `BasePyModule` when it holds pyfuncs, or if `py_module`
    (then executing it gives upstream's module factory, even without pyfuncs).
    """
    pyfuncs = _pyfunc_sources(ir_mod)
    py_module = py_module or bool(pyfuncs)
    printed = ir_mod.script(name=name, extra_config=_PRINTER_CONFIG)
    text = _uncomment_imports(_fix_calls(printed))
    lines = text.splitlines(keepends=True)
    cls = _module_class(ast.parse(text))
    edits = []
    if py_module:
        edits.append((cls.lineno, cls.lineno, f"class {name}(BasePyModule):\n"))
    for stmt in cls.body:
        if py_module and _is_call(getattr(stmt, "value", None), "I", "module_attrs"):
            edits.append((stmt.lineno, stmt.end_lineno, ""))
        elif _extern_func_name(stmt) in pyfuncs:
            source = _reindent(pyfuncs[_extern_func_name(stmt)], _INDENT)
            follows = lines[stmt.end_lineno] if stmt.end_lineno < len(lines) else ""
            edits.append((stmt.lineno, stmt.end_lineno, source + ("\n" if follows.strip() else "")))
    for first, last, new in sorted(edits, reverse=True):
        lines[first - 1 : last] = [new]
    return _extra_imports(pyfuncs, py_module) + "".join(lines)


def member_sources(script: str) -> dict[str, str]:
    """The text of each function of the script's `@I.ir_module` class, by name.

    Each runs from its first decorator to its last statement, dedented to
    column 0 and ending in a newline; it is the inverse of how
    `module_script` embeds a pyfunc's source.
    """
    lines = script.splitlines(keepends=True)
    members = {}
    for stmt in _module_class(ast.parse(script)).body:
        if isinstance(stmt, ast.FunctionDef):
            name = stmt.name
        elif isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
            name = stmt.targets[0].id
        else:
            continue
        first = min([d.lineno for d in getattr(stmt, "decorator_list", [])] + [stmt.lineno])
        members[name] = _reindent("".join(lines[first - 1 : stmt.end_lineno]), -stmt.col_offset)
    return members


def _pyfunc_sources(ir_mod: tvm.IRModule) -> dict[str, str]:
    return {
        gv.name_hint: str(func.attrs["python_source"])
        for gv, func in ir_mod.functions_items()
        if isinstance(func, relax.ExternFunc) and func.attrs.get("is_pyfunc", False)
    }


def _module_class(tree: ast.Module) -> ast.ClassDef:
    (cls,) = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    return cls


def _uncomment_imports(text: str) -> str:
    """Upstream prints its import header commented out (`# from tvm.script import ir as I`)."""
    lines = text.splitlines(keepends=True)
    for number, line in enumerate(lines):
        if not line.startswith(("# from ", "# import ")):
            break
        lines[number] = line[2:]
    return "".join(lines)


def _extra_imports(pyfuncs: dict[str, str], py_module: bool) -> str:
    """The imports upstream's header lacks.

    Python evaluates annotations when it runs a `def`, and `T.Buffer((n,), ...)`
    fails for `n = TypeVar("n")`; postponed annotations leave them to
    TVMScript, which reads them from the source anyway.
    """
    imports = ["from __future__ import annotations\n"]
    if pyfuncs:
        used = {
            node.id
            for source in pyfuncs.values()
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Name)
        }
        imports += [f"import {module}\n" for module in _CELL_MODULES if module in used]
    if py_module:
        imports.append("from tvm.relax.base_py_module import BasePyModule\n")
    return "".join(imports)


def _extern_func_name(stmt: ast.stmt) -> str | None:
    if isinstance(stmt, ast.Assign) and _is_call(stmt.value, "R", "ExternFunc"):
        return stmt.targets[0].id
    return None


def _is_call(node: ast.AST | None, namespace: str, attr: str) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and (node.func.value.id, node.func.attr) == (namespace, attr)
    )


def _fix_calls(text: str) -> str:
    """Rewrite the calls upstream prints in a form its parser rejects into one it accepts.

    `R.call_py_func`: the IR holds the arguments as one tuple and the output
    as one type (an `R.Tuple` for several outputs); the parser takes the
    arguments as varargs (a tuple argument would be wrapped once more) and
    `out_ty` as a tensor type or a list of them. `R.const("nan", ...)`: the
    parser takes a number, and `float("nan")` is one.
    """

    def non_finite(node: ast.AST) -> tuple[ast.AST, str] | None:
        if _is_call(node, "R", "const") and node.args and _is_str(node.args[0]):
            return node.args[0], f"float({ast.get_source_segment(text, node.args[0])})"
        return None

    text = _rewrite(text, non_finite)

    def py_func_call(node: ast.AST) -> tuple[ast.AST, str] | None:
        if _is_call(node, "R", "call_py_func") and [k.arg for k in node.keywords] == ["ty_args"]:
            return node, _call_py_func_text(text, node)
        return None

    return _rewrite(text, py_func_call)


def _rewrite(text: str, pick: Callable[[ast.AST], tuple[ast.AST, str] | None]) -> str:
    """`text` with each node `pick` chooses replaced by the text it gives (no two may overlap).

    Edits go through the AST's positions, so nothing else on the line can be
    mistaken for what is rewritten.
    """
    data = text.encode()
    line_starts = [0]
    for line in data.splitlines(keepends=True):
        line_starts.append(line_starts[-1] + len(line))
    edits = []
    for node in ast.walk(ast.parse(text)):
        picked = pick(node)
        if picked is not None:
            old, new = picked
            start = line_starts[old.lineno - 1] + old.col_offset
            end = line_starts[old.end_lineno - 1] + old.end_col_offset
            edits.append((start, end, new))
    for start, end, new in sorted(edits, reverse=True):
        data = data[:start] + new.encode() + data[end:]
    return data.decode()


def _is_str(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _call_py_func_text(text: str, call: ast.Call) -> str:
    def segment(node: ast.AST) -> str:
        return ast.get_source_segment(text, node)

    name, args = call.args
    if _is_call(name, "R", "str"):
        name = name.args[0]
    # The op only takes a `relax.Tuple`: printed `(x, y)`, or `R.tuple()` when empty.
    arg_nodes = args.args if _is_call(args, "R", "tuple") else args.elts
    (out,) = call.keywords[0].value.elts
    if _is_call(out, "R", "Tuple"):
        out_ty = "[" + ", ".join(map(segment, out.args)) + "]"
    else:
        out_ty = segment(out)
    return f"R.call_py_func({', '.join(map(segment, [name, *arg_nodes]))}, out_ty={out_ty})"


def _reindent(source: str, delta: int) -> str:
    text = reindent(source, delta)
    return text if text.endswith("\n") else text + "\n"
