"""`ModuleParts`: the door every feature takes into a live module, without a shell.

A feature is a function of the parts (test_structure.py checks that none takes the facade or a
private name); here, what the parts answer: entries by kind, the callables `NAME.fn` runs, the
weights by name, long work reported to whichever front end is installed.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from cells import ADD_TIR, MAIN_RELAX

from tvm_pyfunc_nb import CallError, LiveModule, UnknownFunctionError
from tvm_pyfunc_nb._core import front_end_port
from tvm_pyfunc_nb._core.module_parts import ModuleParts
from tvm_pyfunc_nb.testing import parts_of

X = torch.arange(4, dtype=torch.float32)


@pytest.fixture(scope="module")
def demo():
    live = LiveModule("demo")
    live.run_cell(ADD_TIR + MAIN_RELAX)
    yield live
    live.close()


def test_the_parts_are_made_once_and_cannot_be_swapped(demo):
    parts = parts_of(demo)
    assert isinstance(parts, ModuleParts) and parts.name == "demo"
    assert not any(part is demo for part in vars(parts).values())  # the facade is no part
    with pytest.raises(dataclasses.FrozenInstanceError):
        parts.runner = None
    demo.run_cell("# a change makes a new version of the module, not new parts\n")
    assert parts_of(demo) is parts and parts.state is parts.assembly.state


def test_an_entry_is_asked_for_by_kind_and_a_mistake_names_what_needed_it(demo):
    parts = parts_of(demo)
    assert parts.entry("main_relax", kind="relax").kind == "relax"
    with pytest.raises(CallError, match="profile needs a Relax function, but `add_tir` is a tir"):
        parts.entry("add_tir", kind="relax", needed_by="profile")
    with pytest.raises(UnknownFunctionError, match="module `demo` has no function `nope`"):
        parts.entry("nope")


def test_a_function_is_the_callable_the_module_publishes(demo):
    parts = parts_of(demo)
    function = parts.function("main_relax")
    assert torch.equal(function(X, X), X * 2)
    assert demo.main_relax is function  # the same fast path as `NAME.main_relax`


def test_a_feature_is_a_function_of_the_parts(demo):
    """What a new feature (`profile`, `bisect`...) is made of: the parts' public names only."""

    def kernels_run_by(parts: ModuleParts, fn: str) -> list[str]:
        parts.entry(fn, kind="relax", needed_by="kernels_run_by")
        linked = parts.compiler.linked_for(parts.state, fn)
        return sorted(linked.kernels)

    assert kernels_run_by(parts_of(demo), "main_relax") == sorted(demo.kernels("main_relax"))


def test_weights_are_named_as_the_model_named_them():
    live = LiveModule("net")
    live.add_torch(torch.nn.Linear(3, 2).eval(), (torch.randn(1, 3),))
    parts = parts_of(live)
    assert sorted(parts.consts) == ["bias", "weight"]
    assert sorted(parts.constant_names().values()) == ["bias", "weight"]
    assert live.consts is parts.consts
    live.close()


def test_long_work_is_reported_to_the_installed_front_end(demo):
    reported = []

    class Recording(front_end_port.FrontEnd):
        def progress(self, live, title, total, unit=""):
            reported.append((live, title, total, unit))
            return front_end_port.Progress()

    previous = front_end_port.install(Recording())
    try:
        parts_of(demo).progress("tuning k", 8, "trials").step(1)
    finally:
        front_end_port.install(previous)
    assert reported == [(demo, "tuning k", 8, "trials")]


def test_a_function_named_like_the_modules_own_attribute_is_still_the_one_timed_and_compared():
    """`NAME.kernels` is the method; `time`, `compare` and `get_function` of a function named
    `kernels` are the function's (they called the method, which raised TVM's own error)."""
    live = LiveModule("shadow")
    result = live.run_cell("@I.pyfunc\ndef kernels(self, x):\n    return x * 3\n")
    assert result.shadowed == ["kernels"]
    assert torch.equal(live.get_function("kernels")(X), X * 3)
    assert live.compare("kernels", lambda t: t * 3, X).passed
    assert live.time("kernels", X, number=1, repeat=1).function.what == "kernels"
    live.close()
