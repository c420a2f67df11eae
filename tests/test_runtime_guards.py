"""A kernel's own run-time checks (the crash guards' asserts) stop it with a clear error, not the
process.
"""

from __future__ import annotations

import pytest
import torch

from tvm_pyfunc_nb import CallError

RUNTIME_CHECKED = """
@T.prim_func
def gather(A: T.Buffer((4,), "float32"), I: T.Buffer((4,), "int32"), C: T.Buffer((4,), "float32")):
    for i in range(4):
        C[i] = A[I[i]]

@T.prim_func
def divide(A: T.Buffer((4,), "int32"), B: T.Buffer((4,), "int32"), C: T.Buffer((4,), "int32")):
    for i in range(4):
        C[i] = A[i] // B[i]
"""


@pytest.mark.parametrize(
    "call, says",
    [
        (
            "guarded.gather(torch.ones(4), torch.tensor([0, 1, 2, 9], dtype=torch.int32), "
            "torch.empty(4))",
            "index out of bounds in `gather`",
        ),
        (
            "guarded.divide(torch.ones(4, dtype=torch.int32), "
            "torch.tensor([1, 0, 1, 1], dtype=torch.int32), torch.empty(4, dtype=torch.int32))",
            "integer division or remainder by zero in `divide`",
        ),
    ],
)
def test_a_kernels_own_run_time_check_says_the_kernel_stopped(shell, call, says):
    shell.cell("guarded", RUNTIME_CHECKED)
    shell.run("import torch")
    err = shell.run(call, expect_error=CallError)
    assert "stopped while running" in str(err) and says in str(err)
    shell.run(
        "out = torch.empty(4)\n"
        "guarded.gather(torch.arange(4.), torch.tensor([3, 2, 1, 0], dtype=torch.int32), out)"
    )
    # the module still works
    assert torch.equal(shell.ns["out"], torch.tensor([3.0, 2.0, 1.0, 0.0]))
