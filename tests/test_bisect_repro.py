"""bisect's repro writer on its own (`faults/bisect_repro.py`, its shared parts in
`repro_files.py`): passes made by name, IR written
as TVMScript that parses with its weights, inputs that travel in the file, and the reasons a
repro cannot be written. The whole search and a repro run in a fresh process: test_bisect.py."""

from __future__ import annotations

import base64
import io
import runpy
import types

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_pyfunc_nb import CallError
from tvm_pyfunc_nb._core.faults import bisect_repro, repro_files


def test_a_pass_tvm_makes_without_arguments_is_written_by_name():
    assert bisect_repro._tvm_pass("FoldConstant") == "relax.transform.FoldConstant()"
    assert bisect_repro._tvm_pass("NoSuchPass") is None
    assert bisect_repro._tvm_pass("tirx.NoSuchPass") is None


def test_the_ir_is_tvmscript_that_parses_with_its_weights_apart(tmp_path):
    weight = np.arange(4, dtype="float32")

    @I.ir_module
    class Module:
        @R.function
        def main(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
            return R.add(x, R.const(weight))

    text, weights = repro_files.script("Before", Module, "consts.")
    assert "class Before" in text and next(iter(weights.values())).tolist() == weight.tolist()
    # what the repro file binds to `consts`: each weight a Relax constant
    consts = types.SimpleNamespace(**{k: relax.const(a) for k, a in weights.items()})
    path = tmp_path / "before.py"  # TVMScript parses from a file's source
    path.write_text("from tvm.script import ir as I, relax as R, tirx as T\n" + text)
    scope = runpy.run_path(str(path), init_globals={"consts": consts, "np": np, "tvm": tvm})
    tvm.ir.assert_structural_equal(scope["Before"], Module)


def test_inputs_travel_in_the_file_as_text():
    arrays = {"a0": np.ones((2, 3), "float32"), "a1": np.arange(3)}
    loaded = np.load(io.BytesIO(base64.b64decode(repro_files.npz(arrays))))
    assert all((loaded[k] == v).all() for k, v in arrays.items())


def test_a_repro_that_cannot_be_written_says_why(tmp_path):
    missing = repro_files.Repro(missing="the IR before X was not kept")
    with pytest.raises(CallError, match="bisect cannot write a repro: the IR before X"):
        missing.write(str(tmp_path / "repro.py"))
    assert not (tmp_path / "repro.py").exists()
    assert repro_files.Repro(text="print(1)\n").write(str(tmp_path / "r.py")) == str(
        tmp_path / "r.py"
    )
