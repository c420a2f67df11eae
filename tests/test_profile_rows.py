"""The profile's result object on its own (`inspect/profiling.py`): what its table says about rows
it is given, without compiling anything. The runs themselves are in test_profiling.py."""

from __future__ import annotations

from tvm_pyfunc_nb._core.inspect.profiling import VM, KernelTime, Profile

ROWS = [
    KernelTime("fused_matmul_add", "kernel", 4, 0.003, 0.6, ("lv1", "lv2"), ("linear",), "m.py:3"),
    KernelTime("torch.cumsum", "PyTorch call", 1, 0.001, 0.2),
    KernelTime("VM", VM, 1, 0.001, 0.2),
]


def test_the_total_is_the_rows_sum_and_the_vm_row_is_not_a_kernel():
    profile = Profile("main", ROWS, whole=0.0052, how="")
    assert abs(profile.total - 0.005) < 1e-12
    assert [r.kernel for r in profile.kernels] == ["fused_matmul_add", "torch.cumsum"]
    assert ROWS[0].mean == 0.003 / 4
    assert KernelTime("k", "kernel", 0, 0.0, 0.0).mean == 0.0


def test_the_table_counts_kernels_and_launches_and_shows_where_only_when_known():
    text = repr(Profile("main", ROWS, whole=0.0052, how=""))
    first = text.splitlines()[0]
    assert first.startswith("profile of main: 2 kernels, 5 launches")
    assert "60.0%" in text and "m.py:3" in text and "where" in text
    unsited = Profile("main", ROWS[1:], whole=0.002, how="")
    assert "where" not in unsited.table_header()
    assert all(len(row) == len(unsited.table_header()) for row in unsited.table_rows())


def test_a_row_names_every_binding_fused_into_its_kernel_and_says_how_many_it_leaves_out():
    bindings = tuple(f"lv{i}" for i in range(10))
    ops = ("permute", "addmm", "gelu")
    row = KernelTime("fused_matmul_add_gelu", "kernel", 5, 0.002, 0.8, bindings, ops, "m.py:3")
    profile = Profile("main", [row], whole=0.0025, how="")
    (cells,) = profile.table_rows()
    assert "lv0, lv1, lv2, lv3, lv4, lv5 (+4 more)" in cells and "permute, addmm, gelu" in cells
    assert profile.rows[0].bindings == bindings  # .rows keeps them all
    few = KernelTime("add", "kernel", 1, 0.001, 0.2, ("lv1", "lv2"))
    assert "lv1, lv2" in Profile("main", [few], whole=0.001, how="").table_rows()[0]
