"""What a cell shows: the widget (script beside the latest call), its text/HTML twins, escaping.

A real IPython shell runs real cells against real TVM compiles; the checks
read the widgets' model values — what the front end receives.
"""

from __future__ import annotations

import html.parser
import re
import time

import ipywidgets
from cells import ADD_TIR, MAIN_PYFUNC, MAIN_RELAX, SCALE_PYFUNC
from IPython.utils.capture import capture_output

from tvm_pyfunc_nb import LiveModule
from tvm_pyfunc_nb._core import front_end_port
from tvm_pyfunc_nb._views import notebook_front_end, widgets

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
PAYLOAD = "<img src=x onerror=alert(1)>"
INPUTS = "import torch\nx = torch.arange(4.0)\ny = torch.ones(4)\n"


class _Text(html.parser.HTMLParser):
    """The text a browser shows for some HTML, and every tag it would create."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)

    def handle_data(self, data):
        self.parts.append(data)


def parse(markup: str) -> _Text:
    parser = _Text()
    parser.feed(markup)
    parser.close()
    return parser


def visible(markup: str) -> str:
    return "".join(parse(markup).parts)


def html_values(widget) -> list[str]:
    """The `value` of every HTML widget in a view, from its model state: what the page gets."""
    if isinstance(widget, ipywidgets.HTML):
        return [widget.get_state()["value"]]
    return [value for child in getattr(widget, "children", ()) for value in html_values(child)]


def pane(view, name: str) -> widgets.FunctionPane:
    (found,) = [p for p in view.panes if p.name == name]
    return found


def results_text(view, name: str) -> str:
    return visible(pane(view, name).results.get_state()["value"])


# -- the cell widget --------------------------------------------------------------------
def test_cell_widget_shows_each_functions_script_beside_its_latest_call(shell):
    view = shell.cell("demo", ADD_TIR + MAIN_PYFUNC)
    assert isinstance(view, widgets.CellWidget)
    assert [p.name for p in view.panes] == ["add_tir", "main"]
    assert "C[i] = A[i] + B[i]" in visible(pane(view, "add_tir").script.get_state()["value"])
    assert "return z * 2" in visible(pane(view, "main").script.get_state()["value"])
    assert "not called yet" in results_text(view, "main")

    shell.run(INPUTS + "demo.main(x, y)")
    main = results_text(view, "main")
    assert "float32[4]" in main and "[2, 4, 6, 8]" in main and "min 2 · max 8 · mean 5" in main
    assert "compiled on this call: tir add_tir" in main and "cache hits" in main  # through call_tir
    assert re.search(r"latest call \d\d:\d\d:\d\d · [\d.]+ (µs|ms|s)", main)
    add_tir = results_text(view, "add_tir")  # called by main; a PrimFunc writes its output in place
    assert "compiled on this call: tir add_tir" in add_tir and "[1, 2, 3, 4]" in add_tir

    shell.run("demo.main(torch.full((3,), 5.0), torch.ones(3))")
    main = results_text(view, "main")
    assert "float32[3]" in main and "[12, 12, 12]" in main and "[2, 4, 6, 8]" not in main
    assert "compiled on this call: nothing" in main
    assert "compiled on this call: nothing" in results_text(view, "add_tir")


def test_only_the_pane_of_the_called_function_changes(shell):
    view = shell.cell("demo", SCALE_PYFUNC + MAIN_PYFUNC + ADD_TIR)
    shell.run(INPUTS + "demo.scale(x)")
    changes = []
    for p in view.panes:
        p.results.observe(lambda change, name=p.name: changes.append(name), "value")
    shell.run("z = 1")
    assert changes == []
    shell.run("demo.scale(y)")
    assert changes == ["scale"]


def test_a_failed_call_shows_its_error(shell):
    view = shell.cell("demo", ADD_TIR)
    shell.run(INPUTS + "demo.add_tir(x, y)", expect_error=Exception)
    text = results_text(view, "add_tir")
    assert "CallError" in text and "takes 3 argument(s)" in text


def test_notices_say_which_definition_the_cell_replaced(shell):
    first = shell.cell("demo", SCALE_PYFUNC + ADD_TIR)
    shell.run(INPUTS + "demo.scale(x)")
    second = shell.cell("demo", SCALE_PYFUNC.replace("x * 10", "x * 100"))
    assert re.search(r"scale replaces the definition from cell In\[\d+\]", visible(second.html()))
    assert "is now defined by a later cell" in results_text(first, "scale")
    shell.run("demo.scale(x)")
    assert "[0, 100, 200, 300]" in results_text(second, "scale")
    assert "[0, 10, 20, 30]" not in results_text(first, "scale")  # the older pane stopped updating


def test_running_a_cell_again_says_what_left_and_closes_its_previous_view(shell):
    before = shell.cell("demo", SCALE_PYFUNC + ADD_TIR, cell_id="edited")
    after = shell.cell("demo", ADD_TIR, cell_id="edited")
    assert "removed from demo: scale" in after._repr_mimebundle_()["text/plain"]
    assert before.comm is None and after.comm is not None


def test_a_long_compile_shows_in_the_views_of_its_module(shell, monkeypatch):
    monkeypatch.setattr(notebook_front_end, "SHOW_COMPILE_AFTER", 0.0)
    monkeypatch.setattr(notebook_front_end, "TICK", 0.01)
    view = shell.cell("demo", ADD_TIR + MAIN_RELAX)
    seen = []
    view.progress.observe(lambda change: seen.append(visible(change["new"])), "value")
    shell.run("demo.recompile()")
    assert any(re.search(r"compiling (tir add_tir|vm main_relax)", text) for text in seen), seen
    deadline = time.monotonic() + 5
    while view.progress.layout.display != "none" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert view.progress.layout.display == "none" and view.progress.value == ""


def test_the_static_html_shows_each_pane_as_its_cell_ended(shell):
    """A front end without widgets (GitHub, a saved notebook) shows the text and HTML of the
    cell's output: each pane as the user saw it when that cell ended. A later call never shows
    early; a later cell that replaces the function is said, under the cell's display id."""
    with capture_output() as shown:
        view = shell.cell("demo", ADD_TIR + MAIN_PYFUNC)
        shell.run(INPUTS + "z = 1")  # a cell that calls nothing changes nothing
        shell.run("demo.main(x, y)")  # a later call: the widget follows, the static HTML does not
        assert "[2, 4, 6, 8]" in results_text(view, "main")
        drawn_only = len(shown.outputs)
        shell.cell("demo", MAIN_PYFUNC.replace("z * 2", "z * 3"), cell_id="later")
    drawn = shown.outputs[0]
    updates = [o for o in shown.outputs[1:] if o.update]  # the later cell's own view aside
    assert {WIDGET_MIME, "text/plain", "text/html"} <= set(drawn.data) and not drawn.update
    assert drawn_only == 1 and "not called yet" in visible(drawn.data["text/html"])
    (update,) = updates  # main was replaced: said once; add_tir stays as its cell ended
    assert update.update and update.transient["display_id"] == drawn.transient["display_id"]
    static = visible(update.data["text/html"])
    assert "is now defined by a later cell" in static and "[2, 4, 6, 8]" not in static
    assert static.count("not called yet") == 1, static  # add_tir, as its cell ended
    assert update.data[WIDGET_MIME] == drawn.data[WIDGET_MIME]  # the same widget, drawn again
    assert view.display_handle.display_id == drawn.transient["display_id"]


def test_a_progress_line_ends_saying_where_the_work_ended(shell):
    """What `tune` shows while it runs; a saved notebook keeps the line as it ended, not as it
    started."""
    shell.cell("demo", ADD_TIR)
    with capture_output() as shown:
        progress = front_end_port.current().progress(shell.ns["demo"], "tuning add_tir", 8)
        for done in range(1, 9):
            progress.step(done, f"best {done} ms")
        progress.close()
    started, ended = shown.outputs
    assert started.data["text/plain"] == "tuning add_tir: 0 of 8"
    assert ended.update and ended.transient["display_id"] == started.transient["display_id"]
    assert ended.data["text/plain"] == "tuning add_tir: 8 of 8 · best 8 ms"
    assert "8 of 8 · best 8 ms" in visible(ended.data["text/html"])
    assert "width:100%" in ended.data["text/html"]  # the bar is full


# -- the module view -----------------------------------------------------------------------
def test_show_and_last_expression_give_the_module_widget_with_text_and_html(shell):
    shell.cell("demo", ADD_TIR + MAIN_PYFUNC)
    shell.run(INPUTS + "demo.main(x, y)")
    with capture_output() as shown:
        shell.run("demo.show()")
    (output,) = shown.outputs
    assert {WIDGET_MIME, "text/plain", "text/html"} <= set(output.data)
    assert output.data["text/plain"].splitlines()[0] == repr(shell.ns["demo"])
    assert "[2, 4, 6, 8]" in visible(output.data["text/html"])

    data, _ = shell.ip.display_formatter.format(shell.run("demo"))
    assert {WIDGET_MIME, "text/plain", "text/html"} <= set(data)
    assert "\n" not in repr(shell.ns["demo"])


def test_module_view_has_a_tab_per_function_and_follows_the_module(shell):
    shell.cell("demo", ADD_TIR + MAIN_PYFUNC)
    view = notebook_front_end.module_view(shell.ns["demo"])
    assert view.tabs.titles == ("add_tir · tir", "main · pyfunc", "module")
    module_tab = visible(view.tabs.children[2].get_state()["value"])
    assert "class demo(BasePyModule)" in module_tab and "C[i] = A[i] + B[i]" in module_tab

    shell.cell("demo", MAIN_RELAX)
    titles = view.tabs.titles
    assert titles[:4] == ("add_tir · tir", "main · pyfunc", "main_relax · relax", "module")
    assert ("PyTorch" in titles) == hasattr(LiveModule, "as_torch")
    shell.run(INPUTS + "demo.main_relax(x, y)")
    assert "[1, 2, 3, 4]" in results_text(view, "main_relax")


def test_tvmmodules_lists_modules_as_text_and_html(shell):
    shell.cell("demo", ADD_TIR + SCALE_PYFUNC)
    data, _ = shell.ip.display_formatter.format(shell.run("%tvmmodules"))
    expected = "demo: 1 pyfunc (scale), 1 tir (add_tir), 0 relax; stale; target llvm"
    assert data["text/plain"] == expected
    assert "add_tir" in visible(data["text/html"]) and "stale" in visible(data["text/html"])


# -- text/plain is deterministic ----------------------------------------------------------
def _session(shell) -> list[str]:
    """A short notebook; the text/plain of everything it shows."""
    shell.ip.history_manager.reset(new_session=True)  # cell numbers start again, as in a new kernel
    shell.ip.execution_count = 1
    texts = []
    for body in (ADD_TIR + MAIN_PYFUNC, SCALE_PYFUNC, SCALE_PYFUNC.replace("10", "20")):
        texts.append(shell.cell("demo", body)._repr_mimebundle_()["text/plain"])
    shell.run(INPUTS + "demo.main(x, y)\ndemo.scale(torch.rand(3))")
    shell.run("demo.add_tir(x)", expect_error=Exception)
    texts.append(shell.ip.display_formatter.format(shell.run("demo"))[0]["text/plain"])
    texts.append(shell.ip.display_formatter.format(shell.run("%tvmmodules"))[0]["text/plain"])
    shell.run("%tvmmodule_drop demo")
    return texts


def test_text_plain_is_the_same_on_every_run(shell):
    first, second = _session(shell), _session(shell)
    assert first == second
    everything = "\n".join(first)
    assert "scale replaces the definition from cell In[" in everything
    assert "main     pyfunc  latest call (float32[4], float32[4]) -> float32[4]" in everything
    assert "latest call failed (CallError)" in everything
    assert not re.search(r"0x[0-9a-f]{4,}|\d+(\.\d+)? ?(ms|µs|s\b)|\d\d:\d\d", everything)


# -- escaping ----------------------------------------------------------------------------
HOSTILE = f'''
@I.pyfunc
def hostile(self, x):
    """Docstring with {PAYLOAD} in it."""
    label = "{PAYLOAD}"
    if x == label:
        raise ValueError("{PAYLOAD}")
    return label
'''


def test_user_text_never_reaches_html_unescaped(shell):
    view = shell.cell("demo", HOSTILE + ADD_TIR)
    shell.run(f"demo.hostile({PAYLOAD!r})", expect_error=Exception)
    failed = results_text(view, "hostile")
    assert f"ValueError: {PAYLOAD}" in failed and f"'{PAYLOAD}'" in failed
    shell.run("demo.hostile(1)")
    assert PAYLOAD in results_text(view, "hostile")  # the return value, shown as text

    module = notebook_front_end.module_view(shell.ns["demo"])
    pages = [
        *html_values(view),
        *html_values(module),
        view.html(),
        module.html(),
        view._repr_mimebundle_()["text/html"],
        shell.ip.display_formatter.format(shell.ns["demo"])[0]["text/html"],
        shell.ip.display_formatter.format(shell.run("%tvmmodules"))[0]["text/html"],
    ]
    escaped = PAYLOAD.replace("<", "&lt;").replace(">", "&gt;")
    assert any(escaped in page for page in pages)
    for page in pages:
        assert PAYLOAD not in page
        assert "img" not in parse(page).tags
    assert any(f"Docstring with {PAYLOAD}" in visible(page) for page in pages)
