"""The loop the product promises, on the models people bring (SPEC: "Models people bring").

Hugging Face ViT, BERT, GPT-2, Llama, ResNet, MobileNet and Whisper's encoder from tiny
configs with random weights, `torch.nn` LSTM and GRU, and four small models around an op
TVM's importer cannot translate (`tests/real_models.py`), each taken through what a user
does with a model: `add_torch`, a call that matches PyTorch, `compare`, `trace`, `edit_text`
run as a cell, `script()` run as a cell, and the `export()` file run by plain Python, without
TVM's warnings (the files of a class in one interpreter, after its models). One test per
model, so that a model compiles once, in two classes that parallel workers run at once; a
step that fails is reported with every other failing step of its model. More families (Qwen2,
Mistral, T5, Swin, CLIP, ConvNeXt) take the cheapest steps here, `make models` the whole
loop. Two models with data-dependent control flow check what the import error says.
"""

from __future__ import annotations

import contextlib
import inspect
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
import torch
import tvm_ffi
from real_models import CONTROL_FLOW, FAMILIES, SEQ, UNSUPPORTED, UNSUPPORTED_OPS, VOCAB, ZOO, flat

from tvm_pyfunc_nb import LiveModule
from tvm_pyfunc_nb.errors import ModelImportError
from tvm_pyfunc_nb.testing import AVX2_TARGET, cannot_run_here

TOL = {"rtol": 1e-5, "atol": 1e-5}  # float32, tiny models: errors here are about 1e-7


pytestmark = pytest.mark.usefixtures("frozen_heap")


class Steps:
    """The steps of the loop on one model, run in order. A step that fails is recorded and the
    next one still runs (each starts from the module as the user has it), so that one failure
    does not hide another; `check()` fails with all of them."""

    def __init__(self, model: str):
        self.model = model
        self.failed: dict[str, str] = {}

    @contextlib.contextmanager
    def step(self, name: str):
        try:
            yield
        except Exception as error:  # AssertionError and the product's errors alike
            where = traceback.extract_tb(error.__traceback__)[-1]
            lines = str(error).splitlines() or [""]
            more = f" [{len(lines) - 4} more lines]" if len(lines) > 4 else ""
            self.failed[name] = (
                f"{type(error).__name__} at line {where.lineno}: " + "\n    ".join(lines[:4]) + more
            )

    def check(self) -> None:
        if self.failed:
            pytest.fail(
                f"{self.model} fails at:\n"
                + "\n".join(f"- {step}: {reason}" for step, reason in self.failed.items()),
                pytrace=False,
            )


def reference(model: torch.nn.Module, *args) -> list[torch.Tensor]:
    with torch.no_grad():
        return flat(model(*args))


def same_numbers(ours, expected: list[torch.Tensor], **tol) -> None:
    ours = flat(ours)
    assert len(ours) == len(expected), f"{len(ours)} outputs, PyTorch gives {len(expected)}"
    for i, (a, b) in enumerate(zip(ours, expected, strict=True)):
        if tol:
            torch.testing.assert_close(a, b, **tol, msg=lambda m, i=i: f"output {i}: {m}")
        else:
            assert torch.equal(a, b), f"output {i} changed"


# Heaviest first, in two halves of about equal time (seconds in a `make test` run: mobilenet 27,
# bert 19, gpt2 16, llama 16, gru 15, vit 14, whisper_encoder 11, lstm 10, resnet 9; the models
# around an op TVM cannot import 1-3). Each half is a class, and `--dist loadscope` runs a class
# as a scope of its own: the halves run on two workers at once (the module as one scope put all
# eight models on one worker, 210 s alone).
LOOPED = {**ZOO, **UNSUPPORTED, "whisper_encoder": FAMILIES["whisper_encoder"]}
HALVES = (
    ["mobilenet", "gpt2", "llama", "resnet", "running_max", "spectrum"],
    ["bert", "gru", "vit", "whisper_encoder", "lstm", "buckets", "histogram"],
)
assert sorted(HALVES[0] + HALVES[1]) == sorted(LOOPED)
# Compiled for AVX2 as well: the three transformers that did not compile on AVX2 CPUs (their
# guarded gathers vectorized 8 wide), a conv net and the vision transformer (the op corpus runs
# every op under both targets: tests/test_as_torch_runs.py)
AVX2_MODELS = ["bert", "gpt2", "llama", "resnet", "vit"]
# What TVM's C++ side says while it compiles its own legalized code: noise in an exported file
TVM_NOTES = ("Fast mode segfaults", "Detected pow(x, y)")


# The `export()` files of each half, run by one plain Python after the half's loops: one
# interpreter importing torch and TVM instead of one per model (5-10 s each).
EXPORTS: dict[int, dict[str, Path]] = {0: {}, 1: {}}

RUN_EACH = """
import runpy, sys, traceback
for path in sys.argv[1:]:
    print(f"== {path}", flush=True)
    try:
        runpy.run_path(path, run_name="__main__")  # as `python path` runs it
    except SystemExit as exit:
        if exit.code not in (None, 0):
            print(f"!! exited {exit.code}", flush=True)
    except BaseException:
        traceback.print_exc(file=sys.stdout)
        print("!! raised", flush=True)
"""


def exports_run(half: int) -> None:
    files = EXPORTS[half]
    assert sorted(files) == sorted(HALVES[half]), f"exported: {sorted(files)}"
    done = subprocess.run(
        [sys.executable, "-c", RUN_EACH, *map(str, files.values())],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    noise = [line for line in done.stderr.splitlines() if any(n in line for n in TVM_NOTES)]
    assert not noise, f"{len(noise)} lines of TVM's notes, the first: {noise[0]}"
    runs = dict(zip(map(str, files.values()), done.stdout.split("== ")[1:], strict=True))
    for name, path in files.items():
        said = runs[str(path)]
        assert "!! " not in said and f"{name}.main: gives the numbers of the live module" in said, (
            f"{name}: {said[-1500:]}"
        )


@pytest.mark.slow
class TestHalfTheZoo:
    @pytest.mark.parametrize("name", HALVES[0])
    def test_a_real_model_goes_through_the_whole_loop(self, shell, name, tmp_path):
        the_whole_loop(shell, name, tmp_path, EXPORTS[0])

    def test_their_exports_run_by_plain_python(self):
        exports_run(0)


@pytest.mark.slow
class TestTheOtherHalf:
    @pytest.mark.parametrize("name", HALVES[1])
    def test_a_real_model_goes_through_the_whole_loop(self, shell, name, tmp_path):
        the_whole_loop(shell, name, tmp_path, EXPORTS[1])

    def test_their_exports_run_by_plain_python(self):
        exports_run(1)


# Text models read 16 tokens here, twice the 8 floats of an AVX2 vector: enough for the CPU
# schedule to vectorize BERT's gather_elements and GPT-2's and Llama's index_tensor, whose crash
# guards did not compile so (with 8 tokens it leaves them alone on AVX2, and on AVX-512 below 32).
TEXT_MODELS = ("bert", "gpt2", "llama")


NO_AVX2 = cannot_run_here(AVX2_TARGET)


@pytest.mark.slow
@pytest.mark.skipif(NO_AVX2 is not None, reason=NO_AVX2 or "")
class TestOnAnAVX2CPU:
    """Every model compiled for an AVX2 CPU (`AVX2_TARGET`, 8 floats to a vector where this
    machine may have 16), with its crash guards, matches PyTorch. It runs on an AVX2 CPU too:
    the longer input of the text models is what makes their guarded kernels vectorized."""

    @pytest.mark.parametrize("name", AVX2_MODELS)
    def test_a_real_model_compiles_for_an_avx2_cpu_and_matches_pytorch(self, name):
        model, args = LOOPED[name].build()
        if name in TEXT_MODELS:
            args = (torch.randint(0, VOCAB, (1, 2 * SEQ)),)
        live = LiveModule(name, target=AVX2_TARGET)
        try:
            live.add_torch(model, args)
            assert live.options.checked
            same_numbers(live.main(*args), reference(model, *args), **TOL)
        finally:
            live.close()


def the_whole_loop(shell, name: str, tmp_path, exports: dict) -> None:
    model, args = LOOPED[name].build()
    cls = type(model).__name__
    expected = reference(model, *args)
    steps = Steps(name)

    live = shell.run(f"%tvmmodule {name}")
    result = live.add_torch(model, args)
    pyfuncs = [n for n, kind in result.kinds.items() if kind == "pyfunc"]
    assert result.kinds == {"main": "relax", **dict.fromkeys(pyfuncs, "pyfunc")}
    assert f"{name}.add_torch({cls}) defines main" in shell.text(result)
    if name in UNSUPPORTED:  # its op runs as a PyTorch call, and the import says so
        assert pyfuncs == [f"main_{UNSUPPORTED_OPS[name].split('.')[1].strip('_')}"]
        notice = "main runs an op TVM's importer cannot translate as PyTorch calls: "
        assert f"{notice}{UNSUPPORTED_OPS[name]} ×1 (pyfunc {pyfuncs[0]})" in shell.text(result)
    else:
        assert not pyfuncs

    with steps.step("a call matching PyTorch"):
        same_numbers(live.main(*args), expected, **TOL)
        torch.manual_seed(1)
        other = LOOPED[name].example()  # new inputs of the example's shape
        same_numbers(live.main(*other), reference(model, *other), **TOL)

    with steps.step("compare"):
        comparison = live.compare("main", model, *args)
        assert comparison.ops, "not compared op by op"
        assert comparison.passed and comparison.first_divergence is None, repr(comparison)
        assert comparison.verdict().startswith("main matches"), comparison.verdict()
        assert all(c.diff.passed for c in comparison.ops if c.diff is not None)
        calls = [c for c in comparison.ops if c.op.startswith("call_py_func")]
        # a PyTorch call that gives a tensor is compared like any other binding
        assert all(c.diff is not None and c.node.exact for c in calls)
        assert len(calls) == (name in UNSUPPORTED and name != "running_max")  # its tuple: items

    with steps.step("trace"):
        trace = live.trace("main", *args)
        assert len(trace) > (10 if name in ZOO else 1)
        assert all(isinstance(trace[b], torch.Tensor) for b in trace)
        assert trace.rows()[0][0] == next(iter(trace))
        # the taps keep bindings apart: a traced run fuses less than the call, its sums round
        # in another order (tracing.py)
        same_numbers(trace.output, flat(live.main(*args)), rtol=1e-4, atol=1e-4)

    ours = flat(live.main(*args))
    with steps.step("edit_text run as a cell"):
        before = live.ir_mod["main"]
        text = live.edit_text("main")
        assert text.startswith(f"%%tvmmodule {name}\n@R.function\ndef main(")
        assert "metadata" not in text
        assert (f"{name}.consts." in text) == bool(len(live.consts))
        view = shell.run(text, cell_id=f"edit-{name}")
        assert f"main replaces the definition from {name}.add_torch({cls})" in shell.text(view)
        assert live.origin_of("main").startswith("cell In[")
        assert tvm_ffi.structural_equal(before, live.ir_mod["main"])
        same_numbers(live.main(*args), ours)

    with steps.step("script() run as a cell"):
        before = live.ir_mod
        shell.run(f"%%tvmmodule {name}\n{live.script()}", cell_id=f"script-{name}")
        assert tvm_ffi.structural_equal(before, live.ir_mod)
        same_numbers(live.main(*args), ours)

    with steps.step("export()"):  # run by plain Python after the half (`exports_run`)
        path = tmp_path / f"{name}_module.py"
        live.export(str(path), example=("main", args))
        assert "tvm_pyfunc_nb" not in path.read_text().split('"""', 2)[2]
        exports[name] = path

    steps.check()


# -- more families: the cheapest steps (make models takes each through the whole loop) --------
# import: torch.export and TVM's importer take it; call: it compiles and gives PyTorch's numbers
# (seconds here: swin 15 for both, qwen2 8, t5_encoder 6, convnext 6; an import alone 2-5)
FAMILY_STEPS = {
    "qwen2": ("import", "call"),
    "t5_encoder": ("import", "call"),
    "convnext": ("import", "call"),
    "mistral": ("import",),
    "swin": ("import",),
    "clip_vision": ("import",),
    "clip_text": ("import",),
}
assert sorted([*FAMILY_STEPS, "whisper_encoder"]) == sorted(FAMILIES)


@pytest.mark.slow
class TestMoreFamilies:
    @pytest.mark.parametrize("name", FAMILY_STEPS)
    def test_a_family_comes_in_and_gives_pytorchs_numbers(self, shell, name):
        model, args = FAMILIES[name].build()
        live = shell.run(f"%tvmmodule {name}")
        assert live.add_torch(model, args).kinds == {"main": "relax"}
        if "call" in FAMILY_STEPS[name]:
            same_numbers(live.main(*args), reference(model, *args), **TOL)


# -- what an import of data-dependent control flow says ---------------------------------------
def line_of(model: torch.nn.Module, code: str) -> str:
    """`file:line: code` of the line of `model.forward` that holds `code`."""
    lines, first = inspect.getsourcelines(type(model).forward)
    (offset,) = [i for i, line in enumerate(lines) if code in line]
    return f"{inspect.getsourcefile(type(model))}:{first + offset}: {code}"


@pytest.mark.parametrize(
    ("name", "code"),
    [("sign_branch", "if y.sum() > 0:"), ("halve_until_small", "while x.norm() > 1:")],
)
def test_control_flow_on_values_fails_import_with_pytorchs_reason_and_the_users_line(
    shell, name, code
):
    model, args = CONTROL_FLOW[name].build()
    live = shell.run(f"%tvmmodule {name}")
    with pytest.raises(ModelImportError) as info:
        live.add_torch(model, args)
    message = str(info.value)
    assert "could not guard on data-dependent expression" in message.lower(), message
    assert line_of(model, code) in message, message
    assert "The error above occurred" not in message  # PyTorch's trailer, without what is above
    assert info.value.__cause__ is not None  # %tb has PyTorch's whole story
    assert live.functions == {}
