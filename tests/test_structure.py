"""The package's shape: no import cycles, a core free of IPython and views, no shadowed names,
features that reach the live module only through its parts.

Read from the source (every `import` statement, those inside functions and
under `if TYPE_CHECKING:` too), so neither a lazy import nor one for type
annotations alone can hide a dependency: a module that needs another's types
depends on it as much as one that calls it.
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


def imports_of(path: Path) -> set[str]:
    """Every module `path` imports, absolute names (`from . import x` gives `package.x`)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
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
        name: {m for m in imports_of(path) if m in modules and m != name}
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


def test_only_the_facade_knows_the_live_module_inside_the_core():
    """Features take the module's parts (`ModuleParts`), never the facade, so that no import
    circle runs through it and a new feature plugs in beside the others."""
    facade = f"{ROOT}._core.live.live_module"
    assert facade in package_graph()  # the check names a module that exists
    offenders = [
        module_name(path)
        for path in PACKAGE.rglob("*.py")
        if module_name(path).startswith(CORE)
        and module_name(path) != facade
        and {facade, f"{facade}.LiveModule"} & imports_of(path)
    ]
    assert not offenders, offenders


# Private names of TVM's, PyTorch's and the standard library's that have no public equivalent;
# each entry is (module, the attribute as written).
PRIVATE_READS_ALLOWED = {
    # namedtuple's own API is underscored so as not to clash with field names
    ("call_table", "CallRecord._make"),
    # TVM's own slice conversion, called when the bounds cannot be proven (no public handle)
    ("dynamic_shapes", "ExportedProgramImporter._slice"),
    # TVM's tracker client has no timeout; its socket is the only place to set one
    ("remote", "tracker._sock"),
    # the caller frames of the tensor intrinsics' import (inspect.stack() would be the slow path)
    ("measuring", "sys._getframe"),
    # the Relax op -> PyTorch table of TVM's converter; it offers no public accessor
    ("torch_source", "RelaxToPyFuncConverter._get_op_map"),
    # what TVM's own export_library walks to find a library's code; it has no public name
    ("library_files", "lib._collect_dso_modules"),
    # a build worker whose parent is gone ends at once, without Python's clean-up
    ("child", "os._exit"),
    # the class of ATen ops in an exported graph (torch has no public alias for it)
    ("torch_fallback", "torch._ops"),
    # TVM's importer's own torch -> TVM dtype table, so a PyTorch call's type matches its import
    ("torch_fallback", "importer._convert_data_type"),
    # IPython's rich display protocol, on a widget of our own
    ("notebook_front_end", "module_view(live)._repr_mimebundle_"),
}


def private_reads(path: Path) -> list[str]:
    """Each `obj._name` in `path` whose `obj` is not `self`, `cls` or `super()` (dunders aside)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")):
            continue
        if node.attr.startswith("__") and node.attr.endswith("__"):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            continue
        if isinstance(owner, ast.Call) and ast.unparse(owner.func) == "super":
            continue
        if (path.stem, ast.unparse(node)) not in PRIVATE_READS_ALLOWED:
            found.append(f"{module_name(path)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_of_the_core_or_views_reads_a_private_attribute_of_another_object():
    """What one part may use of another is public; a feature that needs more asks for it on
    `ModuleParts` instead of reaching for it."""
    paths = [*(PACKAGE / "_core").rglob("*.py"), *(PACKAGE / "_views").rglob("*.py")]
    offenders = [line for path in paths for line in private_reads(path)]
    assert not offenders, offenders
    assert {stem for stem, _ in PRIVATE_READS_ALLOWED} <= {path.stem for path in paths}


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


TUNING = f"{ROOT}._core.tuning"


def test_tuning_is_one_package_that_others_enter_by_public_names():
    """Scheduling and tuning, of a PrimFunc or a Relax function, live in `_core/tuning/`, a
    feature over the parts: the build imports nothing of it (what a build applies, the tuned
    and DLight schedules and their records, is the build's own). DLight runs in one place,
    `SCHEDULED` is written once (below the build, which marks what its CPU schedules did), and
    nothing outside reads tuning's privates."""
    everywhere = [p.read_text() for p in (PACKAGE / "_core").rglob("*.py")]
    assert sum(s.count("ApplyDefaultSchedule(") for s in everywhere) == 1
    assert sum(s.count('SCHEDULED = "') for s in everywhere) == 1
    build = PACKAGE / "_core" / "build"
    back = [
        f"{module_name(path)} imports {name}"
        for path in build.rglob("*.py")
        for name in imports_of(path)
        if name.startswith(TUNING)
    ]
    assert not back, back
    tuning = PACKAGE / "_core" / "tuning"
    outside = [p for p in PACKAGE.rglob("*.py") if tuning not in p.parents]
    outside += [*PACKAGE.parent.glob("tests/*.py"), *PACKAGE.parent.glob("benchmarks/*.py")]
    offenders = [
        f"{path.name}: {name}"
        for path in outside
        for name in imports_of(path)
        if name.startswith(TUNING) and name.rpartition(".")[2].startswith("_")
    ]
    assert not offenders, offenders


# modules without tests of their own would hide there; these are named by the issue that asked
NEEDS_DIRECT_TESTS = ("arguments", "call_errors", "crash_guards", "fault_lines", "in_memory")
NEEDS_DIRECT_TESTS += ("offload",)


def test_every_large_module_of_the_core_has_tests_that_import_it():
    """A module of the core over 150 lines (and each named above) is imported by name by a test
    file: its logic is tested directly, not only through a shell."""
    tests = PACKAGE.parent / "tests"
    imported = {name for path in tests.glob("test_*.py") for name in imports_of(path)}
    core = PACKAGE / "_core"
    untested = [
        name
        for path in sorted(core.rglob("*.py"))
        if (name := module_name(path)) not in imported
        and (
            len(path.read_text().splitlines()) > 150
            or name.rpartition(".")[2] in NEEDS_DIRECT_TESTS
        )
    ]
    assert not untested, untested


# -- the floor plan ---------------------------------------------------------------------------
def packages_above(name: str) -> list[str]:
    """The packages whose `__init__` runs before module `name` (the root's aside: it is the
    entry point, imported before anything else, and imports the whole surface)."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(2, len(parts))]


def import_graph_with_packages() -> dict[str, set[str]]:
    """`package_graph`, where importing `a.b.c` also imports `a.b` (its `__init__` runs first)."""
    graph = package_graph()
    return {
        name: {p for m in imported for p in [*packages_above(m), m] if p in graph and p != name}
        | {p for p in packages_above(name) if p in graph}
        for name, imported in graph.items()
    }


def test_no_import_cycles_counting_package_inits():
    """Importing `a.b.c` runs `a/__init__` and `a/b/__init__` first: a package `__init__` that
    imports its modules closes a circle that module-level imports alone do not show."""
    graph = import_graph_with_packages()
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            raise AssertionError("import cycle: " + " -> ".join([*path[path.index(name) :], name]))
        if name in done:
            return
        for imported in sorted(graph[name]):
            if imported != ROOT and not name.startswith(f"{imported}."):
                visit(imported, [*path, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])


CORE_DIR = PACKAGE / "_core"


def test_the_core_is_a_few_modules_over_folders_by_concern():
    top = [p.stem for p in CORE_DIR.glob("*.py") if p.stem != "__init__"]
    folders = [p for p in CORE_DIR.iterdir() if (p / "__init__.py").is_file()]
    assert len(top) <= 12, sorted(top)
    assert len(folders) >= 4, folders


def folder_of(name: str) -> str:
    """The folder of `_core` a module is in (`build`), or the module itself at the top."""
    parts = name.split(".")
    return parts[2] if len(parts) > 3 and parts[1] == "_core" else name


def test_no_module_imports_a_private_name_of_another_folder():
    """A folder's private modules and names are its own; others use what it exports."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        name = module_name(path)
        for imported in imports_of(path):
            inside = imported.split(".")[3:]  # below a folder of `_core`
            if not imported.startswith(f"{ROOT}._core.") or folder_of(imported) == folder_of(name):
                continue
            if any(p.startswith("_") and not p.startswith("__") for p in inside):
                offenders.append(f"{name} imports {imported}")
    assert not offenders, offenders


def method_names() -> set[str]:
    return {
        node.name
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef)
    }


def hooks_patched_in(path: Path, functions: set[str]) -> list[str]:
    """Each `x.y = <a function>` in `path` whose `x` is not `self` or `cls`: a lambda, a
    `partial`, a `..._hook(...)`, a function or method of the package (`obj.method`)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            if not isinstance(target, ast.Attribute) or target.attr.startswith("__"):
                continue
            root = target.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in ("self", "cls"):
                continue
            value = node.value
            called = ast.unparse(value.func) if isinstance(value, ast.Call) else ""
            if (
                isinstance(value, ast.Lambda)
                or called.rpartition(".")[2] == "partial"
                or called.endswith("hook")
                or (isinstance(value, ast.Attribute) and value.attr in functions)
                or (isinstance(value, ast.Name) and value.id in functions)
            ):
                found.append(f"{module_name(path)}:{node.lineno}: {ast.unparse(node)}")
    return found


# a function's own attribute, set where the function is made (not a hook of another object)
HOOKS_ALLOWED = {("callables", "call.release")}


def test_no_hook_is_patched_into_another_object_after_it_is_made():
    """What a part does (where it builds, what it calls around a compile, how it resolves a
    name) is given when it is made, like the runner; never assigned from outside later."""
    functions = method_names()
    offenders = [
        line
        for path in PACKAGE.rglob("*.py")
        for line in hooks_patched_in(path, functions)
        if (path.stem, line.split(": ", 1)[1].split(" = ")[0]) not in HOOKS_ALLOWED
    ]
    assert not offenders, offenders


FACADE_NAMES = ("live", "owner", "facade")


def test_the_parts_hold_no_facade():
    """`ModuleParts` and the parts it holds reach the live module through no field: progress
    and notices go through a reporter."""
    source = (CORE_DIR / "module_parts.py").read_text()
    (parts,) = [
        n
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.ClassDef) and n.name == "ModuleParts"
    ]
    fields = [n for n in parts.body if isinstance(n, ast.AnnAssign)]
    assert fields, "ModuleParts has no fields to check"
    offenders = [
        ast.unparse(f)
        for f in fields
        if f.target.id in FACADE_NAMES or "LiveModule" in ast.unparse(f.annotation)
    ]
    kept = [
        f"{module_name(path)}: self.{node.attr}"
        for path in CORE_DIR.rglob("*.py")
        if path.stem != "live_module"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and node.attr in FACADE_NAMES
    ]
    assert not offenders + kept, offenders + kept


MAX_CLASS_LINES = 300


def test_no_class_is_longer_than_300_lines():
    sizes = {
        f"{module_name(path)}.{node.name}": node.end_lineno - node.lineno + 1
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
    }
    assert max(sizes.values()) <= MAX_CLASS_LINES, sorted(sizes.items(), key=lambda s: -s[1])[:3]
