"""Every bad argument of a feature gets the package's error, naming the function and what the
argument takes, before anything runs (`_core/feature_checks.py`).

Before: `time`/`profile` with `number=2**31` printed "-0.00 µs" (TVM counts in 32 bits),
`number="10"`, a reference that is a string or a number and a tolerance that is not a number
raised raw `TypeError`s, and `compare` or `bisect` on a meta tensor raised PyTorch's own
`RuntimeError` or `NotImplementedError`.
"""

from __future__ import annotations

import pytest
import torch

from tvm_pyfunc_nb import CallError, LiveModule

RELAX = """
@R.function
def main(x: R.Tensor((2, 4), "float32")) -> R.Tensor((2, 4), "float32"):
    y = R.add(x, x)
    return y
"""
X = torch.ones(2, 4)
META = torch.empty(2, 4, device="meta")
WHOLE = "must be a whole number, at least 1 and at most 2147483647"


@pytest.fixture(scope="module")
def demo():
    live = LiveModule("demo")
    live.run_cell(RELAX)
    yield live
    live.close()


@pytest.mark.parametrize("feature", ["time", "profile"])
@pytest.mark.parametrize(
    ("counts", "said"),
    [
        ({"number": 2**31}, f"number {WHOLE}, not 2147483648"),
        ({"number": "10"}, f"number {WHOLE}, not '10'"),
        ({"number": 1.5}, "not 1.5"),
        ({"number": True}, "not True"),
        ({"repeat": 0}, f"repeat {WHOLE}, not 0"),
    ],
)
def test_counts_are_whole_numbers_time_evaluator_can_count(demo, feature, counts, said):
    with pytest.raises(CallError, match=said) as raised:
        getattr(demo, feature)("main", X, **counts)
    assert raised.value.function == "main" and f"{feature}: " in str(raised.value)


@pytest.mark.parametrize(
    ("call", "said"),
    [
        (lambda d: d.compare("main", "x", X), "compare: the reference is a callable .* not str"),
        (lambda d: d.compare("main", lambda x: x + x, X, rtol="a"), "rtol is a number of 0 or"),
        (lambda d: d.compare("main", lambda x: x + x, X, atol=-1.0), "atol is a number of 0 or"),
        (lambda d: d.compare("main", lambda x: x + x, META), "argument 0 is a meta tensor"),
        (
            lambda d: d.compare("main", lambda x: x + x, META, by="kernel"),
            "argument 0 is a meta tensor",
        ),
        (lambda d: d.bisect("main", X, reference=5), "bisect: the reference is a callable"),
        (lambda d: d.bisect("main", X, rtol=float("nan")), "rtol is a number of 0 or more"),
        (lambda d: d.bisect("main", META), "bisect: argument 0 is a meta tensor"),
    ],
)
def test_compare_and_bisect_refuse_what_they_cannot_compare_with(demo, call, said):
    with pytest.raises(CallError, match=said) as raised:
        call(demo)
    assert raised.value.function == "main"


def test_a_meta_tensor_of_a_model_imported_from_pytorch_is_refused_too():
    """The op-by-op compare ran the PyTorch model on the meta tensor first, then failed."""
    live = LiveModule("model")
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval()
    live.add_torch(model, (X,))
    try:
        with pytest.raises(CallError, match="argument 0 is a meta tensor"):
            live.compare("main", model, META)
        assert live.compare("main", model, X).passed  # the right call still works
    finally:
        live.close()
