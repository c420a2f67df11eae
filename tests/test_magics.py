"""The magics' own surface: options, %config defaults, listing, dropping, loading and unloading."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from cells import ADD_TIR, MAIN_RELAX, SCALE_PYFUNC
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

from tvm_pyfunc_nb import CallError, TVMModuleError
from tvm_pyfunc_nb._core.build.disk_cache import CompileCache
from tvm_pyfunc_nb._core.options import OPTIONS, ModuleOptions, default_of
from tvm_pyfunc_nb._magics import TVMModuleMagics

X = torch.arange(5, dtype=torch.float32)


def test_config_sets_defaults_and_options_override_them(shell):
    magics = shell.ip.magics_manager.registry["TVMModuleMagics"]
    shell.run("%config TVMModuleMagics.eager = True")
    try:
        assert magics.eager is True
        shell.cell("demo", ADD_TIR)
        assert [c.kind for c in shell.ns["demo"].stats.compiles] == ["tir"]
    finally:
        shell.run("%config TVMModuleMagics.eager = False")
    shell.cell("other", ADD_TIR, options="--eager")
    assert shell.ns["other"].stats.compiles


def test_quiet_shows_nothing(shell):
    with capture_output() as quiet:
        shell.cell("demo", SCALE_PYFUNC, options="--quiet")
    with capture_output() as shown:
        shell.cell("demo", SCALE_PYFUNC)
    assert quiet.outputs == [] and quiet.stdout == "" and quiet.stderr == ""
    assert len(shown.outputs) == 1  # without --quiet, the cell's view


def test_device_and_target_options(shell):
    shell.cell("demo", MAIN_RELAX, options="--target llvm --device cpu:0")
    demo = shell.ns["demo"]
    assert demo.target == "llvm" and demo.device_name == "cpu:0"
    assert torch.equal(demo.main_relax(X, X), X * 2)
    err = shell.cell("demo", MAIN_RELAX, options="--device cpu:1", expect_error=TVMModuleError)
    assert "--reset" in str(err)


def test_bad_options_are_usage_errors(shell):
    shell.run("%%tvmmodule\n" + SCALE_PYFUNC, expect_error=UsageError)
    shell.run("%%tvmmodule demo --no-such-option\n" + SCALE_PYFUNC, expect_error=UsageError)
    err = shell.run("%%tvmmodule 1bad\n" + SCALE_PYFUNC, expect_error=TVMModuleError)
    assert "1bad" in str(err)


def test_tvmmodules_lists_functions_by_kind_and_state(shell):
    assert "no live modules" in shell.text(shell.run("%tvmmodules"))
    shell.cell("demo", ADD_TIR + SCALE_PYFUNC)
    listing = shell.text(shell.run("%tvmmodules"))
    assert "demo" in listing and "1 pyfunc" in listing and "1 tir" in listing and "stale" in listing
    shell.ns["demo"].compile()
    assert "compiled" in shell.text(shell.run("%tvmmodules"))


def test_drop_removes_the_module_and_unknown_names_are_errors(shell):
    shell.cell("demo", SCALE_PYFUNC)
    shell.run("%tvmmodule_drop demo")
    assert "demo" not in shell.ns
    err = shell.run("%tvmmodule_drop demo", expect_error=TVMModuleError)
    assert "no live module named `demo`" in str(err)


def test_loading_twice_is_harmless_and_unload_removes_the_magics(shell):
    shell.run("%load_ext tvm_pyfunc_nb")
    shell.cell("demo", SCALE_PYFUNC)
    assert torch.equal(shell.ns["demo"].scale(X), X * 10)
    shell.run("%unload_ext tvm_pyfunc_nb")
    try:
        assert "demo" not in shell.ns
        shell.run("%%tvmmodule demo\n" + SCALE_PYFUNC, expect_error=UsageError)
    finally:
        shell.run("%load_ext tvm_pyfunc_nb")
    shell.cell("demo", SCALE_PYFUNC)


def test_package_errors_show_as_one_short_message(shell, capsys):
    shell.cell("demo", "x = 1\n", expect_error=TVMModuleError)
    out = capsys.readouterr()
    text = out.out + out.err
    assert "CellSyntaxError: cell line 2" in text
    assert "Traceback" not in text and len(text.strip().splitlines()) <= 3


def test_a_blank_cell_defines_nothing(shell):
    view = shell.cell("demo", "   \n# only a comment\n")
    assert "nothing" in shell.text(view)
    assert shell.ns["demo"].functions == {}


def test_every_option_is_declared_once_and_the_process_wide_ones_are_no_modules(tmp_path):
    """The traits come from OPTIONS; the compile cache's two are the process's, not a module's;
    their defaults are written in one place (the cache's size bound is read from there)."""
    traits = TVMModuleMagics.class_traits(config=True)
    assert sorted(traits) == sorted(o.name for o in OPTIONS)
    for option in OPTIONS:
        assert option.help[1:] in traits[option.name].help
        if option.name != "cache_dir":  # its default is where IPython keeps caches
            assert traits[option.name].default_value == option.default, option.name
    process_wide = {o.name for o in OPTIONS if o.process_wide}
    assert process_wide == {"cache_dir", "cache_max_mb"}
    per_module = {f.name for f in dataclasses.fields(ModuleOptions)}
    assert not per_module & process_wide and not per_module & {"eager", "quiet"}
    assert CompileCache(tmp_path).max_bytes == default_of("cache_max_mb") * 2**20


def test_a_cell_that_fails_changes_nothing_even_with_reset(shell):
    shell.cell("demo", SCALE_PYFUNC)
    demo = shell.ns["demo"]
    scale = demo.scale  # a handle taken before: it must keep working
    bad = ["--target nonsense", "--device nowhere", "--pipeline nonsense", "--offload nonsense"]
    for options in [*bad, "--rpc nonsense", "--unchecked", ""]:
        # wrong options, or good ones (other than NAME's, or the same) and a body that fails
        body = "x = 1\n" if options in ("--unchecked", "") else ADD_TIR
        shell.cell("demo", body, options=f"--reset {options}", expect_error=TVMModuleError)
        assert shell.ns["demo"] is demo and shell.magics.modules["demo"] is demo, options
        assert demo.options.checked and set(demo.functions) == {"scale"}
        assert torch.equal(scale(X), X * 10), options
    shell.cell("demo", ADD_TIR, options="--reset --unchecked")  # a good cell replaces it
    assert shell.ns["demo"] is not demo and set(shell.ns["demo"].functions) == {"add_tir"}
    with pytest.raises(CallError, match="dropped"):  # the module it replaced is closed
        scale(X)
    shell.cell("fresh", "x = 1\n", expect_error=TVMModuleError)  # a first cell that fails
    assert "fresh" not in shell.ns and "fresh" not in shell.magics.modules
