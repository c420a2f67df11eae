"""The package's shape: no import cycles, a core free of IPython and views, no shadowed names.

Read from the source (every `import` statement, those inside functions too),
so a lazy import cannot hide a dependency. Imports for type annotations alone
(`if TYPE_CHECKING:`) never run, so they make no cycle; they still count as
what the core may not import.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import tvm_pyfunc_nb

PACKAGE = Path(tvm_pyfunc_nb.__file__).parent
ROOT = "tvm_pyfunc_nb"
CORE = (f"{ROOT}._core", f"{ROOT}.errors", f"{ROOT}._version")
FORBIDDEN_IN_CORE = (
    "IPython",
    "ipywidgets",
    f"{ROOT}._views",
    f"{ROOT}._magics",
    f"{ROOT}.testing",
)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, *, at_run_time: bool = False) -> set[str]:
    """Every module `path` imports, absolute names (`from . import x` gives `package.x`); with
    `at_run_time`, not those for type annotations alone."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    skipped = set()
    if at_run_time:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
                skipped.update(id(n) for n in ast.walk(node))
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def package_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {
        name: {m for m in imports_of(path, at_run_time=True) if m in modules and m != name}
        for name, path in modules.items()
    }


def test_no_import_cycles_inside_the_package():
    graph = package_graph()
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            raise AssertionError("import cycle: " + " -> ".join([*path[path.index(name) :], name]))
        if name in done:
            return
        for imported in sorted(graph[name]):
            if imported != ROOT:  # a submodule's package is imported first anyway
                visit(imported, [*path, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])


def test_the_core_imports_nothing_of_ipython_widgets_or_views():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        name = module_name(path)
        if not name.startswith(CORE):
            continue
        bad = sorted(m for m in imports_of(path) if m.startswith(FORBIDDEN_IN_CORE) or m == ROOT)
        offenders += [f"{name} imports {m}" for m in bad]
    assert not offenders, offenders


def test_no_module_shadows_a_standard_library_name():
    names = {path.stem for path in PACKAGE.rglob("*.py")} | {p.name for p in PACKAGE.iterdir()}
    assert not names & set(sys.stdlib_module_names)


def test_the_package_exports_a_short_documented_surface():
    assert all(hasattr(tvm_pyfunc_nb, name) for name in tvm_pyfunc_nb.__all__)
    public = [m for m in PACKAGE.glob("*.py") if not m.stem.startswith("_")]
    assert sorted(p.stem for p in public) == ["errors", "testing"]
