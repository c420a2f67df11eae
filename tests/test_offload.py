"""`--offload torch` and the default CPU matmul schedule, as a user meets them in cells.

Offload: the heavy ops run as PyTorch calls and give PyTorch's numbers, `kernels` and `lowered`
say so, the module as written (`script`, `edit`) does not change, `trace` and `compare` still go
op by op (a module that runs elsewhere, `--rpc`, refuses it: test_remote.py). The default
schedule: a matmul a pipeline makes is no longer three loops, and its numbers stay right. Real
shells, real compiles, no timings.
"""

from __future__ import annotations

import inspect
import subprocess
import sys

import cells
import pytest
import torch
import torch.nn.functional as F
import tvm
import tvm_ffi
from torch import nn

from tvm_pyfunc_nb import LiveModule, TVMModuleError
from tvm_pyfunc_nb._core.build import offload
from tvm_pyfunc_nb._core.build.offload import (
    PREFIX,
    TORCH,
    check_offload,
    offload_to_torch,
    torch_calls,
)
from tvm_pyfunc_nb.testing import parts_of

# The shared MLP, its last layer without relu: the output is a linear layer's (one addmm)
MLP = cells.MLP.replace(
    "y = R.nn.relu(R.add(R.matmul(h, w2), b2))", "y = R.add(R.matmul(h, w2), b2)"
)

ATTENTION = """
@R.function
def attend(
    q: R.Tensor((1, 8, 2, 4), "float32"),
    k: R.Tensor((1, 8, 2, 4), "float32"),
    v: R.Tensor((1, 8, 2, 4), "float32"),
) -> R.Tensor((1, 8, 2, 4), "float32"):
    return R.nn.attention(q, k, v, causal_mask="TopLeft")
"""

BATCHED = """
@R.function
def bmm(a: R.Tensor(("n", 8, 12), "float32"), b: R.Tensor((12, 16), "float32")):
    return R.matmul(a, b)
"""

USER_MATMUL = """
@T.prim_func(s_tir=True)
def mm(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32"),
       C: T.Buffer((16, 16), "float32")):
    for i, j, k in T.grid(16, 16, 16):
        with T.sblock("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]

@R.function
def via_relax(a: R.Tensor((16, 16), "float32"), b: R.Tensor((16, 16), "float32")):
    cls = demo
    return R.call_tir(cls.mm, (a, b), out_ty=R.Tensor((16, 16), "float32"))
"""


class ConvNet(nn.Module):
    """What a vision model is made of: conv + bias, batch norm, ReLU, a residual, a linear."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.norm = nn.BatchNorm2d(8)
        self.conv = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        y = torch.relu(self.norm(self.stem(x)))
        y = torch.relu(self.conv(y) + y)
        return self.head(y.mean(dim=(2, 3)))


def mlp_args():
    torch.manual_seed(0)
    return [
        torch.randn(4, 16),
        torch.randn(16, 32),
        torch.randn(32),
        torch.randn(32, 8),
        torch.randn(8),
    ]


def torch_mlp(x, w1, b1, w2, b2):
    return F.linear(F.relu(F.linear(x, w1.T, b1)), w2.T, b2)


def test_offload_runs_the_matmuls_as_pytorch_calls_and_leaves_the_module_as_written(shell):
    shell.cell("plain", MLP)
    shell.cell("fast", MLP, options="--offload torch")
    fast, args = shell.ns["fast"], mlp_args()
    assert torch.allclose(fast.mlp(*args), torch_mlp(*args), atol=1e-5)
    assert fast.options.offload == "torch"
    # the bias adds went into torch.addmm with their matmuls; the ReLU is a TVM kernel
    assert fast.kernels("mlp") == ["torch.addmm", "relu", "torch.addmm"]
    lowered = fast.lowered("mlp")
    assert "--offload torch: 2 PyTorch calls (torch.addmm)" in lowered.splitlines()[0]
    assert 'R.call_packed("tvm_pyfunc_nb.torch.addmm"' in lowered
    # what the user wrote is untouched: script and edit text are those of the plain module
    assert fast.script().replace("fast", "plain") == shell.ns["plain"].script()
    assert "call_dps_packed" not in fast.edit_text("mlp")
    assert "torch" not in " ".join(shell.ns["plain"].kernels("mlp"))


def test_trace_still_shows_every_binding_of_an_offloaded_function(shell):
    shell.cell("fast", MLP, options="--offload torch")
    fast, args = shell.ns["fast"], mlp_args()
    trace = fast.trace("mlp", *args)
    x, w1 = args[:2]
    assert [row[1] for row in trace.rows()] == ["matmul", "add", "nn.relu", "matmul", "add"]
    assert torch.allclose(trace["lv"], x @ w1, atol=1e-5)
    assert torch.allclose(trace.output, torch_mlp(*args), atol=1e-5)


def convnet_module(shell, model: torch.nn.Module, image: torch.Tensor, options: str = ""):
    """Live module `net` made with `options`, `model` added to it, its numbers `model`'s."""
    shell.run(f"%tvmmodule net {options}")
    net = shell.ns["net"]
    net.add_torch(model, (image,))
    with torch.no_grad():
        assert torch.allclose(net.main(image)[0], model(image), atol=1e-5)
    return net


def test_an_imported_model_offloaded_matches_pytorch_op_by_op(shell):
    torch.manual_seed(0)
    model = ConvNet().eval()
    with torch.no_grad():  # batch norm statistics that are not the identity
        model.norm.running_mean.uniform_(-0.5, 0.5)
        model.norm.running_var.uniform_(0.5, 1.5)
    image = torch.randn(1, 3, 16, 16)
    net = convnet_module(shell, model, image, "--offload torch")
    kernels = net.kernels("main")
    assert kernels.count("torch.conv2d") == 2 and kernels.count("torch.linear") == 1
    assert any("batch_norm" in k and "relu" in k for k in kernels)  # TVM fused the rest
    comparison = net.compare("main", model, image)
    assert comparison.passed and comparison.first_divergence is None
    assert comparison.ops is not None and sum(c.diff is not None for c in comparison.ops) > 5
    # edit text runs as a cell of the offloaded module and gives the same numbers
    shell.run(net.edit_text("main"), cell_id="edit-net")
    with torch.no_grad():
        assert torch.allclose(net.main(image)[0], model(image), atol=1e-5)
    assert "torch.conv2d" in net.kernels("main")


def test_attention_runs_as_pytorchs_scaled_dot_product_attention(shell):
    shell.cell("att", ATTENTION, options="--offload torch")
    att = shell.ns["att"]
    q, k, v = (torch.randn(1, 8, 2, 4) for _ in range(3))
    expected = F.scaled_dot_product_attention(
        *(t.transpose(1, 2) for t in (q, k, v)), is_causal=True
    ).transpose(1, 2)
    assert torch.allclose(att.attend(q, k, v), expected, atol=1e-5)
    assert att.kernels("attend") == ["torch.attention"]


def test_offload_from_config_and_its_mistakes(shell):
    shell.run("%config TVMModuleMagics.offload = 'torch'")
    try:
        shell.cell("configured", MLP)
        assert shell.ns["configured"].options.offload == "torch"
        # never mixed in the cache
        assert "offload torch" in parts_of(shell.ns["configured"]).build.key
    finally:
        shell.run("%config TVMModuleMagics.offload = 'none'")
    err = shell.cell("typo", MLP, options="--offload pytorch", expect_error=TVMModuleError)
    assert "--offload must be one of none, torch" in str(err)


def test_the_default_schedules_a_matmul_the_pipeline_makes(shell):
    shell.cell("plain", MLP)
    plain, args = shell.ns["plain"], mlp_args()
    assert torch.allclose(plain.mlp(*args), torch_mlp(*args), atol=1e-5)
    lowered = plain.lowered("mlp")
    matmul = lowered[lowered.index("def matmul(") :]
    matmul = matmul[: matmul.index("@T.prim_func") if "@T.prim_func" in matmul else None]
    assert "T.parallel" in matmul and "T.vectorized" in matmul
    # fused with its bias and ReLU (--pipeline target): still scheduled, still right
    shell.cell("fused", MLP, options="--pipeline target")
    fused = shell.ns["fused"]
    assert torch.allclose(fused.mlp(*args), torch_mlp(*args), atol=1e-5)
    assert "T.parallel" in fused.lowered("mlp")


def test_the_default_schedule_takes_a_symbolic_batch_and_leaves_written_kernels_alone(shell):
    shell.cell("dyn", BATCHED)
    a, b = torch.randn(3, 8, 12), torch.randn(12, 16)
    assert torch.allclose(shell.ns["dyn"].bmm(a, b), a @ b, atol=1e-5)
    assert torch.allclose(shell.ns["dyn"].bmm(a[:1], b), a[:1] @ b, atol=1e-5)
    assert "T.parallel" in shell.ns["dyn"].lowered("bmm")
    shell.cell("demo", USER_MATMUL)
    demo = shell.ns["demo"]
    x, y = torch.randn(16, 16), torch.randn(16, 16)
    assert torch.allclose(demo.via_relax(x, y), x @ y, atol=1e-5)
    assert "T.parallel" not in demo.lowered("via_relax")  # the user's loops, as written


def test_an_offloaded_module_exports_a_library_of_tvms_own_kernels(shell, tmp_path):
    shell.cell("fast", MLP, options="--offload torch")
    path = tmp_path / "mlp.so"
    report = shell.ns["fast"].export_library(str(path))
    assert report.relax == ["mlp"]
    script = f"""
import torch, tvm
from tvm import relax
torch.manual_seed(0)
args = {mlp_args.__name__}()
vm = relax.VirtualMachine(tvm.runtime.load_module({str(path)!r}), tvm.cpu())
print(torch.from_dlpack(vm["mlp"](*args)).sum().item())
"""
    source = f"import torch\n{inspect.getsource(mlp_args)}\n{script}"
    done = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert abs(float(done.stdout) - torch_mlp(*mlp_args()).sum().item()) < 1e-3


def test_the_default_schedules_a_convolution_too(shell):
    torch.manual_seed(0)
    model, image = ConvNet().eval(), torch.randn(1, 3, 16, 16)
    net = convnet_module(shell, model, image)
    lowered = net.lowered("main")
    conv = lowered[lowered.index("def conv2d(") :]
    conv = conv[: conv.index("@T.prim_func")] if "@T.prim_func" in conv else conv
    assert "T.parallel" in conv and "T.vectorized" in conv


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ((5, 7), (7, 9)),
        ((2, 3, 4), (4, 5)),
        ((2, 8, 4), (4, 5)),
        ((3, 4), (2, 4, 5)),
        ((2, 6, 8), (2, 8, 16)),
    ],
    ids=["plain", "batch-in-a", "batch-in-a-whole-tiles", "batch-in-b", "batched"],
)
def test_the_default_schedule_gives_pytorchs_numbers_for_every_matmul_shape(a, b):
    live = LiveModule("shapes")
    live.run_cell(
        f"""
@R.function
def mm(x: R.Tensor({a}, "float32"), y: R.Tensor({b}, "float32")):
    return R.matmul(x, y)
"""
    )
    x, y = torch.randn(*a), torch.randn(*b)
    assert torch.allclose(live.mm(x, y), torch.matmul(x, y), atol=1e-5)
    live.close()


# -- the transform itself, without a shell ---------------------------------------------------------
def offloaded(params: str, body: str) -> list[str]:
    """The PyTorch calls Relax function `f(params)` returning `body` makes after the transform."""
    live = LiveModule("rewrites")
    live.run_cell(f"@R.function\ndef f({params}):\n    return {body}\n")
    try:
        return torch_calls(offload_to_torch(live.ir_mod)["f"])
    finally:
        live.close()


X = 'x: R.Tensor((4, 8), "float32")'
W = 'w: R.Tensor((8, 6), "float32"), b: R.Tensor((6,), "float32")'
IMAGE = 'x: R.Tensor((1, 3, 8, 8), "float32"), w: R.Tensor((4, 3, 3, 3), "float32")'


@pytest.mark.parametrize(
    "params, body, calls",
    [
        (f"{X}, {W}", "R.add(R.matmul(x, w), b)", ["torch.addmm"]),
        (
            f'{X}, w: R.Tensor((6, 8), "float32"), b: R.Tensor((6,), "float32")',
            "R.add(b, R.matmul(x, R.permute_dims(w)))",  # nn.Linear as imported, bias first
            ["torch.linear"],
        ),
        (
            'x: R.Tensor((2, 4, 8), "float32"), w: R.Tensor((2, 8, 6), "float32")',
            "R.matmul(x, w)",
            ["torch.matmul"],
        ),
        (
            f'{IMAGE}, b: R.Tensor((1, 4, 1, 1), "float32")',
            "R.add(R.nn.conv2d(x, w, padding=[1, 1, 1, 1]), b)",
            ["torch.conv2d"],
        ),
        # what PyTorch would compute otherwise stays TVM's
        (IMAGE, "R.nn.conv2d(x, w, padding=[1, 0, 0, 1])", []),
        ('x: R.Tensor((4, 8), "int32"), w: R.Tensor((8, 6), "int32")', "R.matmul(x, w)", []),
        (f"{X}, {W}", 'R.matmul(x, w, out_dtype="float64")', []),
        (f"{X}, {W}", "R.nn.relu(R.matmul(x, w))", ["torch.matmul"]),
    ],
    ids=["addmm", "linear", "batched", "conv-bias", "asymmetric", "int", "out-dtype", "no-bias"],
)
def test_the_transform_sends_each_heavy_op_pytorch_computes_alike_to_it(params, body, calls):
    assert offloaded(params, body) == calls


def test_the_option_is_checked_against_the_target_and_the_device():
    llvm = tvm.target.Target("llvm")
    with pytest.raises(TVMModuleError, match="must be one of none, torch, not `pytorch`"):
        check_offload("pytorch", llvm, remote=False)
    with pytest.raises(TVMModuleError, match="use one or the other"):
        check_offload(TORCH, llvm, remote=True)
    with pytest.raises(TVMModuleError, match="target `cuda` runs elsewhere"):
        check_offload(TORCH, tvm.target.Target("cuda"), remote=False)
    assert check_offload(TORCH, llvm, remote=False) == TORCH
    assert tvm_ffi.get_global_func(f"{PREFIX}torch.linear", allow_missing=True) is not None


def test_the_pytorch_side_writes_into_the_output_tvm_allocated():
    torch.manual_seed(0)
    a, b, bias = torch.randn(2, 3, 8), torch.randn(8, 6), torch.randn(6)
    out = torch.empty(2, 3, 6)
    offload._addmm_torch(a, b, bias, out)  # the rows of `a` over two axes
    torch.testing.assert_close(out, a @ b + bias)
    weight, out = torch.randn(6, 8), torch.empty(2, 3, 6)
    offload._linear_torch(a, weight, out)
    torch.testing.assert_close(out, F.linear(a, weight))


CONV_GELU = """
@R.function
def conv_gelu(x: R.Tensor((1, 8, 32), "float32"), w: R.Tensor((16, 8, 3), "float32"),
              b: R.Tensor((1, 16, 1), "float32")):
    with R.dataflow():
        y = R.nn.gelu(R.add(R.nn.conv1d(x, w, padding=1), b))
        R.output(y)
    return y
"""


def test_a_convolution_fused_with_a_gelu_is_scheduled_and_compiles(shell):
    """GELU reads its input twice; folding both reads into the convolution's tile lost a buffer
    ("Buffer T_add_intermediate is used before its definition", Whisper's first layer)."""
    shell.cell("audio", CONV_GELU, options="--pipeline target")
    x, w, b = torch.randn(1, 8, 32), torch.randn(16, 8, 3), torch.randn(1, 16, 1)
    expected = F.gelu(F.conv1d(x, w, padding=1) + b)
    assert torch.allclose(shell.ns["audio"].conv_gelu(x, w, b), expected, atol=1e-5)
    assert shell.ns["audio"].kernels("conv_gelu") == ["fused_conv1d_add_gelu"]
    assert "T.parallel" in shell.ns["audio"].lowered("conv_gelu")


def test_whisper_encoder_compiles_with_offload(shell):
    """Its first layer is the convolution and GELU above (--pipeline target fuses them too)."""
    from real_models import FAMILIES

    model, args = FAMILIES["whisper_encoder"].build()
    with torch.no_grad():
        expected = model(*args).last_hidden_state
    live = shell.run("%tvmmodule whisper --offload torch")
    live.add_torch(model, args)
    assert torch.allclose(live.main(*args)[0], expected, atol=1e-5)
