"""Targets as users write them: TVM's string form from before 0.27 (`llvm -mcpu=haswell`), read
as its JSON form; a CPU LLVM does not know, refused; and `$TVM_PYFUNC_NB_TARGET`, the default
target of every module.
"""

from __future__ import annotations

import pytest
import torch
import tvm
from cells import ADD_TIR

from tvm_pyfunc_nb import LiveModule, TVMModuleError
from tvm_pyfunc_nb._core.build.target_text import target_config
from tvm_pyfunc_nb._core.options import TARGET_ENV, default_target


@pytest.mark.parametrize(
    ("text", "config"),
    [
        ("llvm -mcpu=haswell", {"kind": "llvm", "mcpu": "haswell"}),
        (
            "llvm -mtriple=aarch64-linux-gnu -mattr=+neon,+v8.2a",
            {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon", "+v8.2a"]},
        ),
        ("cuda -arch=sm_80", {"kind": "cuda", "arch": "sm_80"}),
        # `-key value`, a flag, an integer, and a list of keys
        (
            "llvm -mcpu x86-64 -fast-math -num-cores=4 -keys=cpu,arm_cpu",
            {
                "kind": "llvm",
                "mcpu": "x86-64",
                "fast-math": True,
                "num-cores": 4,
                "keys": ["cpu", "arm_cpu"],
            },
        ),
        ("llvm -fast-math=false", {"kind": "llvm", "fast-math": False}),
        ("llvm", "llvm"),
        ('{"kind": "llvm", "mcpu": "haswell"}', {"kind": "llvm", "mcpu": "haswell"}),
    ],
)
def test_the_string_form_of_tvm_before_0_27_is_read_as_tvm_read_it(text, config):
    assert target_config(text) == config
    assert str(tvm.target.Target(target_config(text))) == str(tvm.target.Target(config))


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("llvm -mcpu", "`-mcpu` needs a value"),
        ("llvm -mcpuu=haswell", "`-mcpuu` is not an option of llvm targets; did you mean -mcpu?"),
        ("llvm -colour=red", "options_from_name('llvm')"),
        ("cuda -mattr=+neon", "`-mattr` is not an option of cuda targets"),
        ("lvm -mcpu=haswell", "unknown kind `lvm` (kinds: "),
        ("llvm mcpu=haswell", "`mcpu=haswell` is not an option"),
        ("llvm -num-cores=four", "num-cores is a whole number"),
        ("llvm -fast-math=maybe", "`-fast-math` is a flag"),
        ("llvm -mcpu=haswell -mcpu=skylake", "`-mcpu` is given twice"),
        ("-mcpu=haswell", "a target starts with its kind"),
        ("llvm -mcpu='haswell", "No closing quotation"),
        # LLVM itself would compile generic SSE2 code for a CPU it does not know, saying so on
        # stderr only
        ("llvm -mcpu=haswel", "LLVM knows no CPU `haswel` for x86_64; did you mean haswell?"),
        (
            '{"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "haswell"}',
            "LLVM knows no CPU `haswell` for aarch64",
        ),
    ],
)
def test_a_wrong_target_string_says_what_is_wrong_with_it(text, says):
    with pytest.raises(TVMModuleError) as info:
        LiveModule("m", target=text)
    assert str(info.value).startswith(f"target `{text}` is not a TVM target: ")
    assert says in str(info.value)


@pytest.mark.parametrize("quote", ['"', "'"])
def test_a_cell_takes_the_string_form_and_compiles_for_it(shell, quote):
    target = "llvm -mcpu=x86-64 -num-cores=1"
    shell.cell("m", ADD_TIR, options=f"--target {quote}{target}{quote}")
    m, x, out = shell.ns["m"], torch.arange(4.0), torch.empty(4)
    assert m.target == target
    m.add_tir(x, x, out)
    assert torch.equal(out, x * 2)


def test_the_default_target_is_the_environment_variable(monkeypatch):
    monkeypatch.delenv(TARGET_ENV, raising=False)
    assert default_target() == "llvm"
    monkeypatch.setenv(TARGET_ENV, "  ")
    assert default_target() == "llvm"
    monkeypatch.setenv(TARGET_ENV, "llvm -mcpu=x86-64-v3")
    assert default_target() == "llvm -mcpu=x86-64-v3"
    # a wrong one names where it came from: no cell of the notebook says it
    monkeypatch.setenv(TARGET_ENV, "lvm")
    with pytest.raises(TVMModuleError) as info:
        LiveModule("m", target=default_target())
    assert str(info.value).startswith(f"target `lvm` (the default, from ${TARGET_ENV})")
