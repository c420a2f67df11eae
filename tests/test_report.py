"""`NAME.report`: one HTML file for an upstream report, that names nothing of this machine.

(tests/browser/test_report.py opens such a file in Chromium.)"""

from __future__ import annotations

import getpass
import html
import os
import re
import socket
import tempfile
from pathlib import Path

import pytest
import torch
from cells import tensor_to_shape_then_add
from torch import nn

from tvm_pyfunc_nb import LiveModule
from tvm_pyfunc_nb._core.faults import report_page, reporting
from tvm_pyfunc_nb.errors import CallError, FileWriteError

SECTIONS = ("environment", "function", "passes", "kernels", "compare", "profile")


def planted_report(path: Path) -> Path:
    """The report of a model whose pipeline turns its adds into subtracts, bisected and
    minimized (shared with the browser test)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4)).eval()
    x = torch.randn(2, 8)
    live = LiveModule("planted", pipeline="add_becomes_subtract")
    live.add_torch(model, (x,))
    bisected = live.bisect("main", x)
    minimized = bisected.minimize()
    return Path(live.report("main", x, path=str(path), bisect=bisected, minimize=minimized))


def test_the_report_holds_every_section_and_nothing_of_this_machine(
    pipelines, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # the working folder: a path that must not show
    path = planted_report(tmp_path / "report.html")
    text = path.read_text()
    assert text.startswith("<!DOCTYPE html>") and path.stat().st_size < 2_000_000
    for key in (*SECTIONS, "bisect", "minimize"):
        assert f'<section id="{key}">' in text, key
    plain = html.unescape(re.sub(r"<[^>]+>", "", text))
    assert "AddBecomesSubtract: changes main" in plain  # the pass, as a diff
    assert "R.subtract(" in plain and "kernel" in plain
    assert "output 0" in plain and "FAIL" in plain  # compare's table: the numbers are wrong
    assert "def with_pass():" in plain and "class Before:" in plain  # the repros, inline
    assert plain.count("Exit status: 1 while the fault shows") == 2  # bisect's and minimize's
    assert "Linear" in plain and torch.__version__ in plain
    # nothing that places this machine or its user; no address to fetch anything from
    for private in (os.getcwd(), str(Path.home()), tempfile.gettempdir()):
        assert private not in text, private
    host, user = re.escape(socket.gethostname()), re.escape(getpass.getuser())
    assert not re.search(rf"@{host}\b|\b{host}:\d", text)  # a short host name is a common word
    assert len(host) < 4 or not re.search(rf"\b{host}\b", text)
    assert not re.search(rf"[/\\]{user}[/\\]|\b{user}@", text)
    assert not re.search(r"(src|href)=\"?(https?:)?//", text)


def test_a_build_that_crashes_or_fails_is_reported_without_running_it(pipelines, tmp_path):
    live = LiveModule("crashing", pipeline="aborts")
    live.run_cell(
        """
@R.function
def f(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
    return R.nn.relu(x)
"""
    )
    path = live.report("f", torch.ones(4), path=str(tmp_path / "crash.html"))
    text = Path(path).read_text()
    assert "The build crashes: the worker was killed by SIGABRT" in text
    assert "pipeline pass Aborts" in text
    assert text.count("not run: the build crashes") == 3  # kernels, compare, profile
    with pytest.raises(CallError, match="report: bisect= takes what bisect returned"):
        live.report("f", torch.ones(4), path=str(tmp_path / "x.html"), bisect="no")
    failing = LiveModule("failing", pipeline="default")  # tvm.compile fails, with its error
    failing.add(tensor_to_shape_then_add()["main"], name="fails")
    text = Path(failing.report("fails", torch.ones(2, 8), torch.ones(2, 8), path=path)).read_text()
    assert "The build fails" in text and "CodeGenVM cannot emit" in text
    assert text.count("not run: the build fails") == 3
    (tmp_path / "elsewhere.html").write_text("keep me")
    (tmp_path / "link.html").symlink_to(tmp_path / "elsewhere.html")
    with pytest.raises(FileWriteError, match="symbolic link"):
        live.report("f", torch.ones(4), path=str(tmp_path / "link.html"))
    assert (tmp_path / "elsewhere.html").read_text() == "keep me"


def test_what_a_message_lets_through_of_this_machine_is_scrubbed(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(socket, "gethostname", lambda: "build-box-17")
    monkeypatch.setattr(getpass, "getuser", lambda: "alice")
    home = str(Path.home())
    text = report_page.scrubbed(
        f"{tmp_path}/a.py {home}/b build-box-17 x /srv/alice/c alice@build-box-17 the alice"
    )
    assert text == "<cwd>/a.py ~/b <host> x /srv/<user>/c <user>@<host> the alice"


def test_a_repro_on_the_page_leaves_its_long_arrays_to_the_file():
    short, long = "QUJD", "A" * (reporting.MAX_ARRAY_TEXT + 10)
    text = reporting.summarized(f'INPUTS = _load("{short}")\nconsts = _constants("{long}")')
    assert f'_load("{short}")' in text and long not in text
    assert '_constants("… 64 KB of base64 .npz: in the file .save() writes")' in text
