"""TVM's thread pool runs as many threads as PyTorch in the same process, unless the user set
`TVM_NUM_THREADS`; `time` and `profile` say both counts.

TVM's own default is half the cores on x86 (one thread on this project's 2-core machines while
PyTorch runs two), so a comparison with PyTorch compared one core with two. Each test asks what
a user sees: the thread counts `time` and `profile` print, in a real shell, or in a fresh
process for what happens before the package is imported.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from cells import MLP

from tvm_pyfunc_nb._core.run.thread_pool import OURS, THREADS

CORES = os.cpu_count() or 1
ARGS = tuple(torch.randn(*shape) for shape in ((4, 16), (16, 32), (32,), (32, 8), (8,)))


@pytest.fixture
def torch_threads():
    """PyTorch's thread count, as it was again after the test."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def threads_of(timing) -> tuple[int, int]:
    """(TVM's, the reference's) thread counts, as `time` reports them."""
    return timing.function.threads, timing.against.threads


def test_tvm_runs_as_many_threads_as_pytorch_and_follows_it(shell, torch_threads):
    shell.cell("demo", MLP)
    demo = shell.ns["demo"]
    for width in sorted({CORES, 1}):
        torch.set_num_threads(width)
        timing = demo.time("mlp", *ARGS, number=2, repeat=2, against=demo.mlp)
        assert threads_of(timing) == (width, width), repr(timing)
        assert f"{width} thread" in repr(timing)
        profile = demo.profile("mlp", *ARGS, number=2, repeat=2)
        summary = profile.summary()
        assert f"TVM {width} thread" in summary and f"PyTorch {width})" in summary, summary
    # a plain call follows PyTorch too: TVM reads the count at each parallel loop
    torch.set_num_threads(1)
    demo.mlp(*ARGS)
    assert os.environ[THREADS] == "1"


USER_SET = """
import os, torch
from tvm_pyfunc_nb import LiveModule
from cells import MLP
torch.set_num_threads(2)
live = LiveModule("demo")
live.run_cell(MLP)
args = [torch.randn(*s) for s in ((4, 16), (16, 32), (32,), (32, 8), (8,))]
timing = live.time("mlp", *args, number=2, repeat=2, against=live.mlp)
print(timing.function.threads, torch.get_num_threads(), os.environ["TVM_NUM_THREADS"])
"""


@pytest.mark.skipif(CORES < 2, reason="one core: both counts are one")
def test_tvm_num_threads_set_by_the_user_wins():
    env = {**os.environ, THREADS: "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop(OURS, None)
    done = subprocess.run(
        [sys.executable, "-c", USER_SET], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    tvm_count, torch_count, setting = done.stdout.split()
    assert (tvm_count, torch_count, setting) == ("1", "2", "1"), done.stdout
