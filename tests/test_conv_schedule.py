"""The CPU schedule of convolutions gives PyTorch's numbers, for the strides, paddings and
groups that ResNet, MobileNet and a small conv net use, in code for AVX2 (8 floats to a vector,
16 registers) and for this machine's CPU (16 floats and 32 registers with AVX-512): tiles of
output pixels × vectors of output channels (the fused pipeline stores constant weights HWIO), or
output channels × a row of pixels in vectors where a row fills whole vectors.

Each convolution is imported from PyTorch with its batch norm and ReLU (what the fused pipeline
folds and fuses into one kernel), checked against PyTorch, and its kernel must be scheduled.
Speed is `make bench`'s (benchmarks/speed.py): a test never times.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tvm_pyfunc_nb import LiveModule
from tvm_pyfunc_nb.testing import AVX2_TARGET, second_run_here

# (in channels, out channels, kernel, stride, padding, groups, image side)
CONVS = {
    "resnet-stem-7x7-s2": (3, 16, 7, 2, 3, 1, 32),
    "3x3-s1-56": (16, 32, 3, 1, 1, 1, 56),
    "3x3-s1-32": (16, 32, 3, 1, 1, 1, 32),
    "3x3-s2": (16, 32, 3, 2, 1, 1, 16),
    "1x1-s2-downsample": (16, 32, 1, 2, 0, 1, 16),
    "small-image-4x4": (64, 64, 3, 1, 1, 1, 4),
    "depthwise-3x3-s1": (32, 32, 3, 1, 1, 32, 28),
    "depthwise-3x3-s2": (32, 32, 3, 2, 1, 32, 28),
    "pointwise-1x1": (32, 64, 1, 1, 0, 1, 28),
}
TARGETS = {"this-cpu": "llvm", "avx2": AVX2_TARGET}


def conv_block(fan_in, fan_out, kernel, stride, padding, groups) -> nn.Module:
    torch.manual_seed(0)
    norm = nn.BatchNorm2d(fan_out)
    with torch.no_grad():  # statistics that are not the identity
        norm.running_mean.uniform_(-0.5, 0.5)
        norm.running_var.uniform_(0.5, 1.5)
    conv = nn.Conv2d(fan_in, fan_out, kernel, stride, padding, groups=groups, bias=False)
    return nn.Sequential(conv, norm, nn.ReLU()).eval()


@pytest.mark.parametrize("target", TARGETS, ids=list(TARGETS))
@pytest.mark.parametrize("shape", CONVS, ids=list(CONVS))
def test_the_conv_schedule_gives_pytorchs_numbers(shape, target):
    if target != "this-cpu" and second_run_here(TARGETS[target]):
        pytest.skip(second_run_here(TARGETS[target]))
    *conv, side = CONVS[shape]
    model = conv_block(*conv)
    image = torch.randn(1, conv[0], side, side)
    live = LiveModule("conv", target=TARGETS[target])
    try:
        live.add_torch(model, (image,))
        with torch.inference_mode():
            expected = model(image)
        assert torch.allclose(live.main(image), expected, atol=1e-4, rtol=1e-4)
        # the convolution, its folded batch norm and its ReLU: one kernel
        (kernel,) = live.kernels("main")
        assert "conv2d" in kernel and "relu" in kernel, kernel
        if conv[-1] == 1:  # a depthwise one keeps the loops LLVM vectorizes itself
            lowered = live.lowered("main")
            assert "T.parallel" in lowered and "T.vectorized" in lowered, lowered[-3000:]
    finally:
        live.close()


def test_the_conv_rewrites_keep_the_functions_binding_names():
    """A folded convolution is named as the one it replaces, every other binding keeps its
    name, and no name stands for another op than in the user's function (kernel compare,
    profile and the graph take the user's names)."""
    import tvm
    from tvm.relax.frontend.torch import from_exported_program

    from tvm_pyfunc_nb._core.build.conv_rewrites import conv_weights_hwio, fold_batch_norms

    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.bn1 = nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4)
            self.c2, self.bn2 = nn.Conv2d(4, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4)

        def forward(self, x):
            y = torch.relu(self.bn1(self.c1(x)))
            return torch.relu(x[:, :1] + self.bn2(self.c2(y)))

    x = torch.randn(1, 3, 8, 8)
    mod = from_exported_program(torch.export.export(Two().eval(), (x,)))

    def ops(m: tvm.IRModule) -> dict[str, str]:
        bindings = [b for block in m["main"].body.blocks for b in block.bindings]
        return {b.var.name: getattr(getattr(b.value, "op", None), "name", "") for b in bindings}

    before, after = ops(mod), ops(conv_weights_hwio(fold_batch_norms(mod)))
    assert len(after) == len(before) - 4  # the batch norms, the first conv bias and its reshape
    convs = [n for n, op in before.items() if op == "relax.nn.conv2d"]
    assert [n for n, op in after.items() if op == "relax.nn.conv2d"] == convs
    assert all(before[n] == op or before[n] == "" for n, op in after.items()), (before, after)
