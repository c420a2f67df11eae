"""The Relax rewrites assembly and compiling need, on a module parsed here: which functions a
Relax function reaches, and calls renamed or rebound without changing anything else."""

from __future__ import annotations

import tvm_ffi
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from tvm_pyfunc_nb._core.live.relax_rewrite import (
    dps_packed_calls,
    py_func_calls,
    rebind_global_vars,
    referenced_global_vars,
    relax_closure,
    rename_dps_packed_calls,
    rename_py_func_calls,
    sub_module,
)
from tvm_pyfunc_nb._core.models.importing import typed_global_var


@I.ir_module
class Module:
    @T.prim_func
    def add_tir(a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32")):
        for i in range(4):
            b[i] = a[i] + T.float32(1)

    @R.function
    def helper(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        cls = Module
        return R.call_tir(cls.add_tir, (x,), out_ty=R.Tensor((4,), "float32"))

    @R.function
    def main(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        cls = Module
        y = cls.helper(x)
        z = R.call_py_func("scale", y, out_ty=R.Tensor((4,), "float32"))
        return R.call_dps_packed("packed_one", (z,), out_ty=R.Tensor((4,), "float32"))

    @R.function
    def alone(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        return x


def test_the_calls_of_a_function_are_found_in_order():
    main = Module["main"]
    assert {gv.name_hint for gv in referenced_global_vars(main)} == {"helper"}
    [(name, out_ty)] = py_func_calls(main)
    assert name == "scale" and len(out_ty) == 1
    assert dps_packed_calls(main) == ["packed_one"]
    assert py_func_calls(Module["alone"]) == [] and dps_packed_calls(Module["helper"]) == []


def test_a_closure_reaches_through_calls_and_its_sub_module_holds_just_those():
    assert relax_closure(["main"], Module) == {"main", "helper", "add_tir"}
    assert relax_closure(["alone"], Module) == {"alone"}
    sub = sub_module(Module, relax_closure(["helper"], Module))
    assert sorted(gv.name_hint for gv in sub.get_global_vars()) == ["add_tir", "helper"]


def test_renamed_calls_name_the_new_target_and_keep_the_rest():
    main = Module["main"]
    seen = []

    def new_name(name, out_ty, arg_types):
        seen.append((name, len(out_ty), len(arg_types)))
        return f"site.{name}"

    renamed = rename_py_func_calls(rename_dps_packed_calls(main, lambda n: f"fw.{n}"), new_name)
    assert seen == [("scale", 1, 1)]
    assert [n for n, _ in py_func_calls(renamed)] == ["site.scale"]
    assert dps_packed_calls(renamed) == ["fw.packed_one"]
    # nothing to rename: the very same function comes back
    alone = Module["alone"]
    assert rename_py_func_calls(alone, new_name).same_as(alone)
    assert rename_dps_packed_calls(alone, str).same_as(alone)


def test_rebinding_makes_each_reference_the_canonical_global_var():
    main = Module["main"]
    canonical = {"helper": typed_global_var("helper", Module["helper"])}  # as assembly makes one
    rebound = rebind_global_vars(main, canonical)
    [gv] = referenced_global_vars(rebound)
    assert gv.same_as(canonical["helper"]) and not gv.same_as(Module.get_global_var("helper"))
    # already canonical: unchanged
    own = {gv.name_hint: gv for gv in Module.get_global_vars()}
    assert rebind_global_vars(main, own).same_as(main)
    assert isinstance(rebound, relax.Function) and tvm_ffi.structural_equal(
        rebound.params[0].ty, main.params[0].ty
    )
