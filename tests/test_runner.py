"""Where a module's compiled code runs, asked directly of its local runner (no shell): a name
resolves to a callable that compiles what it needs, code is timed on the device, a dropped
module says so. The remote runner is tested against a real server in test_remote.py."""

from __future__ import annotations

import pytest
import torch
import tvm
from cells import ADD_TIR, MAIN_RELAX, SCALE_PYFUNC

from tvm_pyfunc_nb import CallError, LiveModule
from tvm_pyfunc_nb._core.run.runner import LocalRunner, Runner
from tvm_pyfunc_nb.testing import parts_of

X = torch.arange(5, dtype=torch.float32)
Y = torch.ones(5)


@pytest.fixture(scope="module")
def live():
    live = LiveModule("demo")
    live.run_cell(ADD_TIR + MAIN_RELAX + SCALE_PYFUNC)
    return live


def test_a_local_runner_resolves_each_kind_and_compiles_only_what_a_call_needs(live):
    runner = parts_of(live).runner
    assert isinstance(runner, LocalRunner) and isinstance(runner, Runner)
    assert runner.on_this_cpu and runner.where == str(tvm.cpu())
    assert torch.equal(runner.resolve("scale")(X), X * 10)  # a pyfunc: nothing compiled
    assert live.stats.compiles == []
    out = torch.empty(5)
    runner.resolve("add_tir")(X, Y, out)
    assert torch.equal(out, X + Y)
    assert [c.kind for c in live.stats.compiles] == ["tir"]
    assert torch.equal(runner.resolve("main_relax")(X, Y), X + Y)
    with pytest.raises(CallError) as caught:
        runner.resolve("no_such_function")
    assert "no_such_function" in str(caught.value)


def test_code_is_timed_on_the_device_once_per_repeat(live):
    runner, entries = parts_of(live).runner, parts_of(live).state.entries
    samples = runner.time(entries["add_tir"], (X, Y, torch.empty(5)), number=3, repeat=4)
    assert len(samples) == 4 and all(s > 0 for s in samples)
    assert len(runner.time(entries["main_relax"], (X, Y), number=2, repeat=2)) == 2
    with pytest.raises(CallError) as caught:  # a wrong call: the package's error, not TVM's
        runner.time(entries["add_tir"], (X,), number=1, repeat=1)
    assert caught.value.function == "add_tir"


def test_a_closed_runner_says_the_module_was_dropped():
    live = LiveModule("gone")
    live.run_cell(SCALE_PYFUNC)
    runner = parts_of(live).runner
    runner.close()
    with pytest.raises(CallError, match="module `gone` was dropped; run its cells again"):
        runner.resolve("scale")
