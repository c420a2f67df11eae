"""The tutorials keep their word, read from their saved files (no kernel, no TVM compile).

- A saved output never shows a machine's path: a reader's machine has other ones, and a
  temporary file's name changes on every run.
- Every speed figure follows one convention, `× the other's speed, above 1 is faster`
  (`Timing.speed`): no "N× faster", "N× slower" or time ratio, which read the other way.
- Every public method of a live module and every option is used in a tutorial's code (an option by
  its flag or its `%config` line), and listed in the cheat sheet (docs/cheatsheet.md); every
  method, magic and result attribute the cheat sheet names is used in a tutorial's code.
- No output nbval compares (a saved output, after nbval_sanitize.cfg) says what depends on timing,
  load or the machine's size: which kernel was slowest, a thread count, how close two timings
  came. No saved output holds a terminal's colour codes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from nbval.plugin import get_sanitize_patterns

from tvm_pyfunc_nb import LiveModule
from tvm_pyfunc_nb._core.options import OPTIONS

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
CHEATSHEET = REPO / "docs" / "cheatsheet.md"
SANITIZE = REPO / "notebooks" / "nbval_sanitize.cfg"

MACHINE_PATH = re.compile(r"/tmp/|/home/|/root/|site-packages|ipykernel_")
# "2.9× faster", "3x slower", "4 times faster", "1.35× the time": ratios that read the other way
OTHER_RATIO = re.compile(
    r"\d(?:\.\d+)?\s*(?:×|x|times)\s+(?:faster|slower|the time|as long)\b", re.IGNORECASE
)
# A live module's attributes set per instance, public all the same.
INSTANCE_ATTRIBUTES = ("options", "stats")
# Taught by branches not merged yet: the lead empties this list after merging them (the last
# test fails while a name here is already taught, so that the list cannot go stale).
# A feature is taught when a code cell uses it.
SIBLING_FEATURES = {
    "bisect": r"\.bisect\(",
    "profile": r"\.profile\(",
    "isolate": r"--isolate|TVMModuleMagics\.isolate",
    'by="kernel"': r"by=\"kernel\"",
    'stop_at="nonfinite"': r"stop_at=\"nonfinite\"",
    "graph": r"\.graph\(",
}
PENDING: set[str] = set()
# Attributes of result objects the cheat sheet names that no tutorial's code uses yet: `Minimized`'s
# fields (11), `TuningReport`'s counts (08), `Comparison.full()` (07, 10 or 12). Teach each, or
# drop it from the cheat sheet (`help()` has it); a test fails while one here is used.
PENDING_ATTRIBUTES = {
    *("fault", "size", "original", "steps", "values"),
    *("best_seconds", "trials_kept", "full"),
}
# IPython's own magics, taught in prose (06): their output shows this machine's file paths
# (`%tb`) or waits for someone to type (`%debug`).
IN_PROSE = {"%tb", "%debug"}
# What an output compared by nbval must not say: it changes with load, timing or the machine.
MACHINE_DEPENDENT = {
    "which kernel was slowest": re.compile(r"slowest kernel *: *\w"),
    # (one thread is what a tutorial that sets `torch.set_num_threads(1)` shows on any machine)
    "a thread count": re.compile(r"\b(?:\d{2,}|[02-9]) threads?\b|\bthread\(s\)"),
    "how close two timings came": re.compile(r"within a (?:quarter|third|half|tenth)\b"),
}
ANSI = re.compile(r"\x1b\[")


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def output_texts(cell: dict):
    for output in cell.get("outputs", []):
        if output["output_type"] == "stream":
            yield "".join(output["text"])
        elif output["output_type"] == "error":
            yield f"{output['ename']}: {output['evalue']}"
        for data in output.get("data", {}).values():
            yield data if isinstance(data, str) else "".join(data) if isinstance(data, list) else ""


def everything_taught() -> str:
    """The source of every cell of every tutorial, markdown and code."""
    return "\n".join("".join(c["source"]) for path in NOTEBOOKS for c in cells(path))


def code_taught() -> str:
    """The source of every code cell of every tutorial: what a reader runs."""
    return "\n".join(
        "".join(c["source"]) for path in NOTEBOOKS for c in cells(path) if c["cell_type"] == "code"
    )


def as_compared(text: str) -> str:
    """`text` as nbval compares it: after every pattern of nbval_sanitize.cfg."""
    for regex, replace in get_sanitize_patterns(SANITIZE.read_text()):
        text = re.sub(regex, replace, text)
    return text


def option_spellings(option) -> list[str]:
    """How a tutorial's code sets `option`: its `%config` line, or its flag."""
    flag = [re.escape(option.flag)] if option.flag else []
    return [rf"TVMModuleMagics\.{option.name}\b", *flag]


def sheet_section(title: str) -> str:
    """The cheat sheet's section `## title`, up to the next."""
    return CHEATSHEET.read_text().split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def public_names() -> list[str]:
    names = {n for n in dir(LiveModule) if not n.startswith("_")}
    return sorted(names | set(INSTANCE_ATTRIBUTES))


def first_output_saying(path: Path, patterns: dict[str, re.Pattern], as_seen=lambda t: t) -> str:
    """Where an output of `path`, as `as_seen` makes it, first matches one of `patterns`
    (`"cell 5 saves a thread count: '...'"`), or "" if none does."""
    for n, cell in enumerate(cells(path)):
        for text in map(as_seen, output_texts(cell)):
            for what, pattern in patterns.items():
                if found := pattern.search(text):
                    around = text[max(0, found.start() - 60) : found.end() + 60]
                    return f"cell {n} saves {what}: {around!r}"
    return ""


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_saved_output_shows_a_machines_path(path):
    found = first_output_saying(path, {"a path of this machine": MACHINE_PATH})
    assert not found, f"{path.name} {found}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_ratio_is_a_speed_above_1_faster(path):
    for n, cell in enumerate(cells(path)):
        for text in ["".join(cell["source"]), *output_texts(cell)]:
            found = OTHER_RATIO.search(text)
            assert found is None, f"{path.name} cell {n}: {found.group(0)!r}: say × its speed"


def test_every_public_method_and_option_is_taught_in_code_and_in_the_cheat_sheet():
    code, taught, sheet = code_taught(), everything_taught(), CHEATSHEET.read_text()
    untaught = [n for n in public_names() if n not in PENDING and not re.search(rf"\.{n}\b", code)]
    assert untaught == [], f"no tutorial's code uses NAME.{untaught[0]}"
    missing = [n for n in public_names() if not re.search(rf"\.{n}\b", sheet)]
    assert missing == [], f"the cheat sheet lacks NAME.{missing[0]}"
    for option in OPTIONS:
        spellings = option_spellings(option)
        assert any(re.search(s, sheet) for s in spellings), f"the cheat sheet lacks {option.name}"
        if option.process_wide:  # the compile cache's settings: its `%config` line in prose will do
            found = re.search(rf"%config TVMModuleMagics\.{option.name}\b", taught)
        else:
            found = any(re.search(s, code) for s in spellings)
        assert found, f"no tutorial's code sets {option.name} (flag or %config)"


def test_every_method_magic_and_attribute_of_the_cheat_sheet_is_taught():
    code, taught, sheet = code_taught(), everything_taught(), CHEATSHEET.read_text()
    methods = set(re.findall(r"`NAME\.(\w+)", sheet)) - PENDING - {"fn"}  # `NAME.fn(*args)`: a call
    unused = sorted(m for m in methods if not re.search(rf"\.{m}\b", code))
    assert unused == [], f"the cheat sheet names NAME.{unused[0]}, which no tutorial's code uses"
    magics = set(re.findall(r"`(%%?\w+)", sheet_section("Magics")))
    for magic in sorted(magics):
        where = taught if magic in IN_PROSE else code
        assert re.search(rf"{magic}(?!\w)", where), f"no tutorial teaches {magic}"
    # `.median`, `.verdict()`, `.culprit` (`.name`, `.phase`): what a result object answers
    attributes = set(re.findall(r"`\.(\w+)", sheet_section("Result objects"))) - PENDING_ATTRIBUTES
    unused = sorted(a for a in attributes if not re.search(rf"\.{a}\b", code))
    assert unused == [], f"the cheat sheet names result attribute .{unused[0]}, untaught"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_compared_output_depends_on_timing_or_the_machine(path):
    found = first_output_saying(path, MACHINE_DEPENDENT, as_compared)
    assert not found, f"{path.name} {found}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_saved_output_holds_colour_codes(path):
    found = first_output_saying(path, {"a terminal's colour codes": ANSI})
    assert not found, f"{path.name} {found}"


def test_pending_attributes_are_in_the_cheat_sheet_and_pending_until_taught():
    code, attributes = code_taught(), sheet_section("Result objects")
    for name in sorted(PENDING_ATTRIBUTES):
        assert f"`.{name}" in attributes, f"the cheat sheet names no result attribute .{name}"
        assert not re.search(rf"\.{name}\b", code), (
            f".{name}: a tutorial's code uses it now, remove it from PENDING_ATTRIBUTES"
        )


def test_the_sibling_features_are_in_the_cheat_sheet_and_pending_until_taught():
    code = "\n".join(
        "".join(c["source"]) for path in NOTEBOOKS for c in cells(path) if c["cell_type"] == "code"
    )
    sheet = CHEATSHEET.read_text()
    for feature, used in SIBLING_FEATURES.items():
        assert re.search(used, sheet), f"the cheat sheet lacks {feature}"
        taught = re.search(used, code) is not None
        assert taught != (feature in PENDING), (
            f"{feature}: taught now, remove it from PENDING"
            if taught
            else f"{feature}: teach it in a tutorial's code (or list it in PENDING)"
        )
