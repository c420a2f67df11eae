"""`printer`: the module's TVMScript parses back to an equal module, pyfunc sources intact."""

from __future__ import annotations

import ast
import html.parser
import itertools
import linecache
import sys
import textwrap
import types

import pytest
import torch
import tvm
import tvm_ffi
from cells import elementwise_kernel, kernel_then_pyfunc
from hypothesis import given, settings
from hypothesis import strategies as st
from tvm import relax
from tvm.relax.base_py_module import BasePyModule
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T
from tvm.script.parser.core.entry import parse

from tvm_pyfunc_nb import CallError
from tvm_pyfunc_nb._core.live.printer import member_sources, module_script
from tvm_pyfunc_nb._views.render import escape, highlight_html


def function_script(name: str, ir_mod: tvm.IRModule, fn_name: str) -> str:
    """One function's text at column 0, as a pane shows it: its slice of the module script."""
    members = member_sources(module_script(name, ir_mod))
    if fn_name not in members:
        raise CallError(f"module `{name}` has no function `{fn_name}`", function=fn_name)
    return members[fn_name]


# What a `%%tvmmodule` cell holds: decorated functions at column 0.
PYFUNC_SCALE = '''\
@torch.no_grad()
@I.pyfunc
def scale(self, x, factor=2):
    """Scale `x`, the slow way.

        This line is indented inside the docstring.
    This one is not.
    """
    note = """first
  second, indented by two
        third"""
    if x is not None:
        for i in range(factor - 1):
            if i % 2 == 0:
                x = x + x
            else:
                x = x * 1
    return x
'''

PYFUNC_PAIR = """\
@I.pyfunc
def pair(self, a, b):
    return a + b, a - b  # somme et différence
"""

PYFUNC_NOISE = """\
@I.pyfunc
def noise(self):
    return torch.zeros(4)
"""

ADD_TIR = elementwise_kernel(
    "add_tir", "A[i] + B[i]", decorator="@T.prim_func(private=True)"
).lstrip("\n")

COPY_TIR = """\
@T.prim_func
def copy(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
    for i in range(8):
        if i < 4:
            B[i] = A[i]
        else:
            B[i] = A[i] * T.float32(2)
"""

SBLOCK_TIR = """\
@T.prim_func(s_tir=True)
def double(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
    for i in range(16):
        with T.sblock("double"):
            vi = T.axis.remap("S", [i])
            B[vi] = A[vi] * T.float32(2)
"""

MAIN = kernel_then_pyfunc(
    "main",
    "Mod",
    then="""\
p = R.call_py_func("pair", w, y, out_ty=[R.Tensor((n,), "float32"), R.Tensor((n,), "float32")])
r = R.call_py_func("noise", out_ty=R.Tensor((4,), "float32"))
return p[0]""",
).lstrip("\n")

HELPER = """\
@R.function(private=True)
def helper(x: R.Tensor((8,), "float32")) -> R.Tensor((8,), "float32"):
    cls = Mod
    y = R.call_tir(cls.copy, (x,), out_ty=R.Tensor((8,), "float32"))
    return y
"""

EVERYTHING = [PYFUNC_SCALE, PYFUNC_PAIR, PYFUNC_NOISE, ADD_TIR, COPY_TIR, SBLOCK_TIR, MAIN, HELPER]
PYFUNCS = {"scale": PYFUNC_SCALE, "pair": PYFUNC_PAIR, "noise": PYFUNC_NOISE}


def build_module(*functions: str, check_well_formed: bool = True) -> tvm.IRModule:
    """Parse cell-style functions into a module whose pyfuncs carry their exact source."""
    body = "\n".join(functions)
    cls = "class Mod(BasePyModule):\n" + textwrap.indent(body, "    ")
    names = {"I": I, "R": R, "T": T, "BasePyModule": BasePyModule, "tvm": tvm, "torch": torch}
    mod = parse(cls, names, check_well_formed=check_well_formed)
    for function in functions:
        node = ast.parse(function).body[0]
        if "@I.pyfunc" in function:
            extern = relax.ExternFunc(node.name)
            for key, value in [
                ("is_pyfunc", True),
                ("function_type", "python"),
                ("python_function_name", node.name),
                ("python_source", function),
            ]:
                extern = extern.with_attr(key, value)
            mod[mod.get_global_var(node.name)] = extern
    return mod


_scripts = itertools.count()


def run_script(text: str, name: str) -> tvm.IRModule:
    """Execute `text` as a fresh module, as if a user had saved it to a file and imported it.

    TVMScript reads the class's source through `inspect`, which needs the
    lines in `linecache` and, for a class, a module with a `__file__`.
    """
    module = types.ModuleType(f"printer_test_{next(_scripts)}")
    module.__file__ = f"<{module.__name__}>"
    linecache.cache[module.__file__] = (len(text), None, text.splitlines(True), module.__file__)
    sys.modules[module.__name__] = module
    exec(compile(text, module.__file__, "exec"), module.__dict__)
    parsed = getattr(module, name)
    return parsed.ir_module if hasattr(parsed, "ir_module") else parsed


def without_pyfunc_sources(mod: tvm.IRModule) -> tvm.IRModule:
    """The module with bare `ExternFunc`s and no module attrs, for structural comparison."""
    return tvm.IRModule(
        {
            gv: relax.ExternFunc(gv.name_hint) if isinstance(func, relax.ExternFunc) else func
            for gv, func in mod.functions_items()
        }
    )


def kinds(mod: tvm.IRModule) -> dict[str, str]:
    return {gv.name_hint: type(func).__name__ for gv, func in mod.functions_items()}


def assert_round_trips(mod: tvm.IRModule, name: str) -> str:
    text = module_script(name, mod)
    back = run_script(text, name)
    assert kinds(back) == kinds(mod)
    assert tvm_ffi.structural_equal(without_pyfunc_sources(back), without_pyfunc_sources(mod))
    members = member_sources(text)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.ExternFunc):
            assert members[gv.name_hint] == func.attrs["python_source"]
    return text


def test_module_with_every_kind_of_function_round_trips():
    text = assert_round_trips(build_module(*EVERYTHING), "Mod")
    assert "class Mod(BasePyModule):" in text
    assert "import torch\n" in text  # `scale` and `noise` use it


def test_each_function_is_printed_once_pyfuncs_between_primfuncs_and_relax():
    text = module_script("Mod", build_module(*EVERYTHING))
    order = [line.split("def ")[1].split("(")[0] for line in text.splitlines() if "def " in line]
    assert order == ["add_tir", "copy", "double", "noise", "pair", "scale", "helper", "main"]
    assert "R.ExternFunc" not in text


def test_printing_is_deterministic_whatever_the_order_functions_were_added():
    forward = build_module(*EVERYTHING)
    backward = tvm.IRModule()
    for gv, func in reversed(list(forward.functions_items())):
        backward[gv] = func
    assert module_script("Mod", backward) == module_script("Mod", forward)


def test_call_py_func_is_printed_in_the_varargs_form_the_parser_accepts():
    text = module_script("Mod", build_module(*EVERYTHING))
    tensor = 'R.Tensor((n,), dtype="float32")'
    assert f'R.call_py_func("scale", z, out_ty={tensor})' in text
    assert f'R.call_py_func("pair", w, y, out_ty=[{tensor}, {tensor}])' in text
    assert 'R.call_py_func("noise", out_ty=R.Tensor((4,), dtype="float32"))' in text
    assert "ty_args" not in text and "R.str(" not in text


def test_a_tuple_argument_stays_one_argument():
    call_with_tuple = """\
@R.function
def main(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
    y = R.call_py_func("noise", (x, x), out_ty=R.Tensor((4,), "float32"))
    return y
"""
    mod = build_module(PYFUNC_NOISE, call_with_tuple)
    text = assert_round_trips(mod, "Mod")
    assert 'R.call_py_func("noise", (x, x), out_ty=' in text


def test_module_without_pyfuncs_is_a_plain_class():
    mod = build_module(COPY_TIR, SBLOCK_TIR, HELPER)
    text = assert_round_trips(mod, "Kernels")
    assert "class Kernels:" in text
    assert "BasePyModule" not in text and "import torch" not in text


def test_empty_module_round_trips():
    assert_round_trips(tvm.IRModule(), "Empty")


def test_module_with_only_pyfuncs_round_trips():
    text = assert_round_trips(build_module(PYFUNC_PAIR, PYFUNC_SCALE), "Py")
    assert text.rstrip().endswith("return x")


def test_symbolic_dims_of_relax_only_module_round_trip():
    relax_only = """\
@R.function
def grow(x: R.Tensor(("m", 4), "float32")) -> R.Tensor(("m", 8), "float32"):
    y = R.concat((x, x), axis=1)
    return y
"""
    assert_round_trips(build_module(relax_only), "Grow")


def test_pyfunc_source_survives_exactly_and_is_its_own_pane():
    mod = build_module(*EVERYTHING)
    assert function_script("Mod", mod, "scale") == PYFUNC_SCALE
    text = module_script("Mod", mod)
    assert "\n        This line is indented inside the docstring.\n    This one is not.\n" in text
    assert '\n  second, indented by two\n        third"""\n' in text


def test_function_pane_is_the_functions_slice_of_the_module_script():
    mod = build_module(*EVERYTHING)
    pane = function_script("Mod", mod, "copy")
    assert pane.startswith("@T.prim_func\ndef copy(")
    assert textwrap.indent(pane, "    ") in module_script("Mod", mod)
    assert tvm_ffi.structural_equal(tvm.script.from_source(pane), mod["copy"])
    assert function_script("Mod", mod, "main").startswith("@R.function\ndef main(")


def test_unknown_function_pane_is_a_package_error():
    with pytest.raises(CallError, match="nope"):
        function_script("Mod", build_module(COPY_TIR), "nope")


def test_sblock_artefacts_of_unchecked_parses_round_trip():
    # A non-s_tir PrimFunc with a block only parses with check_well_formed=False;
    # upstream then prints empty T.reads()/T.writes() and an access-detection
    # attr. They parse back to the same function, so they are left alone.
    unchecked = SBLOCK_TIR.replace("(s_tir=True)", "")
    mod = build_module(unchecked, check_well_formed=False)
    pane = function_script("Mod", mod, "double")
    assert "tirx.script_parsing_detect_access" in pane
    back = tvm.script.from_source(pane, check_well_formed=False)
    assert tvm_ffi.structural_equal(back, mod["double"])


@settings(max_examples=40, deadline=None)
@given(
    doc_lines=st.lists(st.text(alphabet=" \tab<#'", max_size=12), max_size=5),
    indent=st.integers(min_value=0, max_value=12),
)
def test_any_docstring_indentation_survives(doc_lines, indent):
    body = "".join(" " * indent + line + "\n" for line in doc_lines)
    source = f'@I.pyfunc\ndef f(self):\n    """Doc.\n{body}"""\n    return 1\n'
    mod = build_module(source)
    assert member_sources(module_script("Mod", mod))["f"] == source


HOSTILE = "<img src=x onerror=alert(1)></pre><script>alert(2)</script>"


class _Tags(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: set[str] = set()
        self.text = ""

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)

    def handle_data(self, data):
        self.text += data


def test_highlighted_code_cannot_inject_html():
    code = f'def f(self):\n    """{HOSTILE}"""\n    return "{HOSTILE}"  # {HOSTILE}\n'
    out = highlight_html(code)
    assert "<img" not in out and "<script" not in out and "</pre><script" not in out
    tags = _Tags()
    tags.feed(out)
    assert tags.tags <= {"div", "pre", "span"}
    assert tags.text.rstrip("\n") == code.rstrip("\n")  # the user reads exactly the code
    assert 'style="' in out and "class=" not in out.replace('class="highlight"', "")


def test_escape_makes_text_inert_in_content_and_attributes():
    assert escape(HOSTILE) == (
        "&lt;img src=x onerror=alert(1)&gt;&lt;/pre&gt;&lt;script&gt;alert(2)&lt;/script&gt;"
    )
    assert escape("a \"quoted\" 'name'") == "a &quot;quoted&quot; &#x27;name&#x27;"
