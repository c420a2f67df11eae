"""Split a `%%tvmmodule` cell into the functions it contributes.

A cell body is the *body* of an `@I.ir_module` class: top-level function
definitions decorated with `@I.pyfunc`, `@T.prim_func` or `@R.function`,
plus comments and docstrings. It may instead be one complete
`@I.ir_module class NAME(BasePyModule):` definition.

Line numbers are cell lines: the `%%tvmmodule` line is line 1, so the first
line of the body is line 2 (`first_line`).
"""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import dataclass, field

from ...errors import CellSyntaxError

PYFUNC, PRIMFUNC, RELAX = "pyfunc", "tir", "relax"
_DECORATOR_KINDS = {("I", "pyfunc"): PYFUNC, ("T", "prim_func"): PRIMFUNC, ("R", "function"): RELAX}
_KIND_DECORATORS = {kind: f"@{ns}.{attr}" for (ns, attr), kind in _DECORATOR_KINDS.items()}


@dataclass(frozen=True)
class FunctionSource:
    """One function as the user typed it."""

    name: str
    kind: str  # PYFUNC, PRIMFUNC or RELAX
    source: str  # decorators + def, dedented to column 0, multi-line strings untouched
    first_line: int  # cell line of the first decorator


@dataclass
class CellFragment:
    """What one cell contributes to a live module."""

    key: object
    first_line: int
    functions: dict[str, FunctionSource] = field(default_factory=dict)
    full_class: str | None = None  # the class name when the body is a full `@I.ir_module` class
    # (statement, cell line), run before the functions
    preamble: list[tuple[str, int]] = field(default_factory=list)
    # `I.module_attrs({...})` of a full class (as `script()` prints it): (its argument, cell line)
    module_attrs: tuple[str, int] | None = None


def split_cell(text: str, key: object = None, first_line: int = 2) -> CellFragment:
    """Parse a cell body into a `CellFragment`, or raise `CellSyntaxError` naming the line."""
    tree = _parse_python(text, first_line)
    body, offset, class_name = _module_body(tree, text, first_line)
    lines = text.splitlines(keepends=True)
    fragment = CellFragment(key=key, first_line=first_line, full_class=class_name)
    for node in [*tree.body, *body] if class_name else body:
        line = node.lineno + first_line - 1
        if _is_module_attrs(node):
            fragment.module_attrs = (ast.get_source_segment(text, node.value.args[0]), line)
            continue
        if _is_docstring_or_ignorable(node) or isinstance(node, ast.ClassDef):
            continue
        if _is_preamble(node):
            if not (isinstance(node, ast.ImportFrom) and node.module == "__future__"):
                fragment.preamble.append((ast.get_source_segment(text, node), line))
            continue
        if not isinstance(node, ast.FunctionDef):
            what = type(node).__name__
            hint = (
                "async functions are not supported"
                if isinstance(node, ast.AsyncFunctionDef)
                else (
                    f"only functions decorated with {', '.join(_KIND_DECORATORS.values())} "
                    "may appear at the top level of a %%tvmmodule cell"
                )
            )
            raise CellSyntaxError(f"unexpected {what} statement: {hint}", line=line)
        kind = _kind_of(node, line)
        if node.name in fragment.functions:
            raise CellSyntaxError(
                f"`{node.name}` is defined twice in this cell", function=node.name, line=line
            )
        start = min([d.lineno for d in node.decorator_list] + [node.lineno])
        src_lines = lines[start - 1 + offset : node.end_lineno + offset]
        source = reindent("".join(src_lines), -_indent_of(src_lines[0]))
        fragment.functions[node.name] = FunctionSource(
            node.name, kind, source.rstrip() + "\n", start + offset + first_line - 1
        )
    return fragment


def _parse_python(text: str, first_line: int) -> ast.Module:
    try:
        return ast.parse(text)
    except SyntaxError as err:
        line = (err.lineno or 1) + first_line - 1
        raise CellSyntaxError(f"invalid Python syntax: {err.msg}", line=line) from None


def _module_body(tree: ast.Module, text: str, first_line: int):
    """The statements to read, the line offset of their text, and the class name if any."""
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    if not classes:
        return tree.body, 0, None
    cls = classes[0]
    others = [
        n
        for n in tree.body
        if n is not cls and not _is_docstring_or_ignorable(n) and not _is_preamble(n)
    ]
    if len(classes) > 1 or others:
        extra = classes[1] if len(classes) > 1 else others[0]
        raise CellSyntaxError(
            "a cell that defines an `@I.ir_module` class may contain nothing else",
            line=extra.lineno + first_line - 1,
        )
    if not any(_decorator_path(d) == ("I", "ir_module") for d in cls.decorator_list):
        raise CellSyntaxError(
            f"class `{cls.name}` must be decorated with @I.ir_module",
            line=cls.lineno + first_line - 1,
        )
    return cls.body, 0, cls.name


def _is_docstring_or_ignorable(node: ast.stmt) -> bool:
    if isinstance(node, ast.Pass):
        return True
    if (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    ):
        return True
    return _is_module_attrs(node)


def _is_module_attrs(node: ast.stmt) -> bool:
    """`I.module_attrs({...})`, as TVM's printer writes a module's attributes."""
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and _decorator_path(node.value) == ("I", "module_attrs")
        and len(node.value.args) == 1
    )


def _is_preamble(node: ast.stmt) -> bool:
    """Imports, and `n = TypeVar("n")` as TVM's printer writes for symbolic shapes: run, not
    functions.
    """
    if isinstance(node, ast.Import | ast.ImportFrom):
        return True
    return (
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id == "TypeVar"
    )


def _decorator_path(node: ast.expr) -> tuple[str, str] | None:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return node.value.id, node.attr
    return None


def _kind_of(node: ast.FunctionDef, line: int) -> str:
    kinds = [
        _DECORATOR_KINDS[p]
        for p in map(_decorator_path, node.decorator_list)
        if p in _DECORATOR_KINDS
    ]
    if len(kinds) != 1:
        wanted = " or ".join(_KIND_DECORATORS.values())
        problem = "has no" if not kinds else "has more than one"
        raise CellSyntaxError(
            f"function `{node.name}` {problem} decorator {wanted}", function=node.name, line=line
        )
    return kinds[0]


def _indent_of(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def reindent(source: str, delta: int) -> str:
    """Shift every line by `delta` columns, leaving the inside of multi-line strings alone.

    Docstrings and string constants keep their exact content, which a plain
    `textwrap.indent`/`dedent` would change.
    """
    lines = source.splitlines(keepends=True)
    frozen = _string_continuation_lines(source)
    out = []
    for number, line in enumerate(lines, start=1):
        if number in frozen or not line.strip():
            out.append(line)
        elif delta >= 0:
            out.append(" " * delta + line)
        else:
            cut = min(-delta, _indent_of(line))
            out.append(line[cut:])
    return "".join(out)


def _string_continuation_lines(source: str) -> set[int]:
    """Line numbers (1-based) that lie inside a token spanning several lines."""
    frozen: set[int] = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.end[0] > tok.start[0] and tok.type != tokenize.NEWLINE:
                frozen.update(range(tok.start[0] + 1, tok.end[0] + 1))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return frozen
