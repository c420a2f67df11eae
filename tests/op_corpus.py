"""A small model for every op TVM's PyTorch importer translates, and the variants users write.

The importer's own table decides what "every op" is: `convert_map_entries()` reads the
installed `ExportedProgramImporter`'s convert map (about 300 ATen ops, `relu.default`,
`slice_scatter.default`, `sym_size.int`...), and each `OpCase` says which of its entries it is
written for. An entry no case names is a gap (`gaps()`): a new TVM version's ops show up so,
by themselves. Cases are written here from what users write, not taken from TVM's tests: realistic
shapes (a batch of activations, an NCHW image, token ids), the dtypes the op takes (floats,
integers, bools, half precision), and the variants (`inplace=True`, strides, negative dims,
steps, broadcasting, writes into an input). A few ops whose output shape depends on the data
(`nonzero`, `unique`) are here too, though the importer has no entry for them.

Shared by the op tests (`tests/test_op_corpus.py`, a fast slice) and `benchmarks/ops_report.py`
(`make ops`, the whole corpus under both CPU targets):

    from op_corpus import CASES
    model, args = CASES["slice_scatter_step"].build()

Each `build()` seeds torch first, so two builds give the same weights and inputs. `same(ours,
expected)` is how both judge a result against PyTorch's.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim


@dataclass(frozen=True)
class OpCase:
    """A model around one op (or a few that come together) and an example input for it."""

    name: str
    ops: tuple[str, ...]  # the convert-map entries it is written for
    make: Callable[[], nn.Module]
    example: Callable[[], tuple]
    dynamic: Callable[[], tuple] | None = None  # a dynamic-shape spec per positional argument
    random: bool = False  # the op draws random numbers: only shapes and dtypes can agree
    train: bool = False  # the model runs in training mode (batch statistics, dropout)

    def build(self, seed: int = 0) -> tuple[nn.Module, tuple]:
        """The model (in eval mode unless `train`) and its example arguments, the same for the
        same seed."""
        torch.manual_seed(seed)
        model = self.make().train(self.train)
        return model, self.example()

    def dynamic_shapes(self) -> Any:
        """What `torch.export` (and `add_torch`) take as `dynamic_shapes` (a case with dynamic
        shapes is a function of its inputs: `Fn`), or None."""
        return None if self.dynamic is None else {"args": self.dynamic()}


class Fn(nn.Module):
    """A model whose forward is one function of its inputs (no weights)."""

    def __init__(self, forward: Callable):
        super().__init__()
        self.function = forward

    def forward(self, *args):
        return self.function(*args)


CASES: dict[str, OpCase] = {}


def case(name: str, ops: str | tuple[str, ...], forward: Callable, example, **options) -> None:
    """Add a case: `forward` is a function of the inputs, or, taking no arguments, makes the
    model (a layer with weights); `example` makes the inputs."""
    if name in CASES:
        raise ValueError(f"two cases named {name}")
    ops = (ops,) if isinstance(ops, str) else tuple(ops)
    make = forward if _takes_nothing(forward) else lambda: Fn(forward)
    CASES[name] = OpCase(name, ops, make, example, **options)


def _takes_nothing(function: Callable) -> bool:
    try:
        return not inspect.signature(function).parameters
    except (TypeError, ValueError):  # a builtin such as torch.abs: a function of its inputs
        return False


# -- inputs ---------------------------------------------------------------------------------------
def randn(*shape, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape).to(dtype)


def uniform(low: float, high: float, *shape, dtype=torch.float32) -> torch.Tensor:
    return (low + (high - low) * torch.rand(*shape)).to(dtype)


def ints(low: int, high: int, *shape, dtype=torch.int64) -> torch.Tensor:
    return torch.randint(low, high, shape, dtype=dtype)


def nonzero_ints(low: int, high: int, *shape, dtype=torch.int64) -> torch.Tensor:
    value = ints(low, high, *shape, dtype=dtype)
    return value.masked_fill(value == 0, 3)


def mask(*shape, p: float = 0.5) -> torch.Tensor:
    return torch.rand(*shape) < p


def away_from_zero(*shape) -> torch.Tensor:
    """Values with |x| in [0.5, 2]: a divisor, a reciprocal."""
    return uniform(0.5, 2.0, *shape) * torch.where(mask(*shape), 1.0, -1.0)


def with_specials(*shape) -> torch.Tensor:
    """Normal values with inf, -inf and nan among them."""
    value = randn(*shape).flatten()
    value[::7], value[3::11], value[5::13] = float("inf"), float("-inf"), float("nan")
    return value.reshape(shape)


def distinct(*shape) -> torch.Tensor:
    """A permutation of evenly spaced values: sorting gives no ties (indices are determined)."""
    return (torch.randperm(math.prod(shape)).float() * 0.25 - 3.0).reshape(shape)


def rows_permuted(rows: int, cols: int, take: int) -> torch.Tensor:
    """Per row, `take` distinct column indices: a scatter that writes each place once."""
    return torch.stack([torch.randperm(cols)[:take] for _ in range(rows)])


ACTIVATIONS = (4, 32)  # a batch of 4 rows of 32 features: vectorized on every CPU
SEQUENCE = (2, 8, 16)  # batch, tokens, features
IMAGE = (1, 4, 8, 8)  # N, C, H, W


def act(dtype=torch.float32):
    return lambda: (randn(*ACTIVATIONS, dtype=dtype),)


def seq():
    return lambda: (randn(*SEQUENCE),)


def image(*shape):
    return lambda: (randn(*(shape or IMAGE)),)


def n_rows(low: int = 4, high: int = 64):
    """A dynamic first dimension (a batch or a sequence of any length in [low, high])."""
    return {0: Dim("n", min=low, max=high)}


# -- unary ops ------------------------------------------------------------------------------------
# (name, convert-map entry, function, domain of its inputs)
UNARY = [
    ("abs", "abs.default", torch.abs, None),
    ("acos", "acos.default", torch.acos, (-0.95, 0.95)),
    ("acosh", "acosh.default", torch.acosh, (1.05, 4.0)),
    ("asin", "asin.default", torch.asin, (-0.95, 0.95)),
    ("asinh", "asinh.default", torch.asinh, None),
    ("atan", "atan.default", torch.atan, None),
    ("atanh", "atanh.default", torch.atanh, (-0.95, 0.95)),
    ("ceil", "ceil.default", torch.ceil, (-4.0, 4.0)),
    ("cos", "cos.default", torch.cos, None),
    ("cosh", "cosh.default", torch.cosh, (-3.0, 3.0)),
    ("erf", "erf.default", torch.erf, None),
    ("exp", "exp.default", torch.exp, None),
    ("expm1", "expm1.default", torch.expm1, (-2.0, 2.0)),
    ("floor", "floor.default", torch.floor, (-4.0, 4.0)),
    ("log", "log.default", torch.log, (0.05, 10.0)),
    ("log2", "log2.default", torch.log2, (0.05, 10.0)),
    ("log10", "log10.default", torch.log10, (0.05, 10.0)),
    ("log1p", "log1p.default", torch.log1p, (-0.9, 5.0)),
    ("neg", "neg.default", torch.neg, None),
    ("reciprocal", "reciprocal.default", torch.reciprocal, "away_from_zero"),
    ("round", "round.default", torch.round, (-4.0, 4.0)),
    ("rsqrt", "rsqrt.default", torch.rsqrt, (0.05, 10.0)),
    ("sigmoid", "sigmoid.default", torch.sigmoid, None),
    ("sign", "sign.default", torch.sign, None),
    ("sin", "sin.default", torch.sin, None),
    ("sinh", "sinh.default", torch.sinh, (-3.0, 3.0)),
    ("sqrt", "sqrt.default", torch.sqrt, (0.0, 10.0)),
    ("square", "square.default", torch.square, None),
    ("tan", "tan.default", torch.tan, (-1.3, 1.3)),
    ("tanh", "tanh.default", torch.tanh, None),
    ("trunc", "trunc.default", torch.trunc, (-4.0, 4.0)),
    ("relu", "relu.default", torch.relu, None),
    ("relu6", "relu6.default", F.relu6, (-8.0, 8.0)),
    ("selu", "selu.default", torch.selu, None),
    ("silu", "silu.default", F.silu, None),
    ("gelu", "gelu.default", F.gelu, None),
    ("gelu_tanh", "gelu.default", lambda x: F.gelu(x, approximate="tanh"), None),
    ("celu", "celu.default", lambda x: F.celu(x, alpha=1.5), None),
    ("elu", "elu.default", lambda x: F.elu(x, alpha=0.7), None),
    ("hardsigmoid", "hardsigmoid.default", F.hardsigmoid, (-5.0, 5.0)),
    ("hardswish", "hardswish.default", F.hardswish, (-5.0, 5.0)),
    ("hardtanh", "hardtanh.default", lambda x: F.hardtanh(x, -0.5, 1.5), None),
    ("leaky_relu", "leaky_relu.default", lambda x: F.leaky_relu(x, 0.1), None),
    ("softplus", "softplus.default", lambda x: F.softplus(x, beta=2.0, threshold=3.0), None),
    ("softshrink", "softshrink.default", lambda x: F.softshrink(x, 0.3), None),
    ("softsign", "softsign.default", F.softsign, None),
    ("isfinite", "isfinite.default", torch.isfinite, "with_specials"),
    ("isinf", "isinf.default", torch.isinf, "with_specials"),
    ("isnan", "isnan.default", torch.isnan, "with_specials"),
    ("logical_not", "logical_not.default", torch.logical_not, None),
]


def _unary_input(domain, dtype=torch.float32):
    if domain is None:
        return lambda: (randn(*ACTIVATIONS, dtype=dtype),)
    if isinstance(domain, str):
        return lambda: (globals()[domain](*ACTIVATIONS).to(dtype),)
    return lambda: (uniform(*domain, *ACTIVATIONS, dtype=dtype),)


for _name, _op, _fn, _domain in UNARY:
    case(_name, _op, _fn, _unary_input(_domain))

# the same ops in other dtypes, and on the layouts users pass (a strided view, a 3-D batch)
case("abs_int", "abs.default", torch.abs, lambda: (ints(-50, 50, *ACTIVATIONS, dtype=torch.int32),))
case("neg_int64", "neg.default", torch.neg, lambda: (ints(-50, 50, *ACTIVATIONS),))
case("sign_int", "sign.default", torch.sign, lambda: (ints(-3, 4, *ACTIVATIONS),))
case("exp_half", "exp.default", torch.exp, act(torch.float16))
case("tanh_bfloat16", "tanh.default", torch.tanh, act(torch.bfloat16))
case(
    "sqrt_float64", "sqrt.default", torch.sqrt, lambda: (uniform(0, 9, 4, 32, dtype=torch.float64),)
)
case("sigmoid_strided", "sigmoid.default", lambda x: torch.sigmoid(x[:, ::2]), act())
case("gelu_sequence", "gelu.default", F.gelu, seq())
case("cosh_sequence", "cosh.default", torch.cosh, seq())
case("sinh_sequence", "sinh.default", torch.sinh, seq())
case("bitwise_not_int", "bitwise_not.default", torch.bitwise_not, lambda: (ints(-99, 99, 4, 32),))
case("bitwise_not_bool", "bitwise_not.default", torch.bitwise_not, lambda: (mask(4, 32),))
case("logical_not_bool", "logical_not.default", torch.logical_not, lambda: (mask(4, 32),))
case("round_decimals", "round.decimals", lambda x: torch.round(x, decimals=2), act())
case("square_int", "square.default", torch.square, lambda: (ints(-20, 20, 4, 32),))

# in place, as users write them: on an intermediate (`inplace=True`) and on an input
INPLACE = [
    ("relu_inplace", "relu_.default", lambda x: F.relu(x * 2, inplace=True)),
    ("relu6_inplace", "relu6_.default", lambda x: F.relu6(x * 4, inplace=True)),
    ("silu_inplace", "silu_.default", lambda x: F.silu(x + 1, inplace=True)),
    ("hardswish_inplace", "hardswish_.default", lambda x: F.hardswish(x * 3, inplace=True)),
    ("hardtanh_inplace", "hardtanh_.default", lambda x: F.hardtanh(x * 2, inplace=True)),
    ("leaky_relu_inplace", "leaky_relu_.default", lambda x: F.leaky_relu(x - 1, 0.2, True)),
    ("dropout_inplace", "dropout_.default", lambda x: F.dropout(x + 1, 0.5, False, True)),
]
for _name, _op, _fn in INPLACE:
    case(_name, _op, _fn, act())
case("relu_on_input", "relu_.default", lambda x: torch.relu_(x), act())
case(
    "leaky_relu_on_input",
    "leaky_relu_.default",
    lambda x: torch.ops.aten.leaky_relu_(x, 0.02),
    act(),
)
case("hardswish_on_input", "hardswish_.default", lambda x: torch.ops.aten.hardswish_(x), act())
case("add_on_input", "add_.Tensor", lambda x, y: x.add_(y), lambda: (randn(4, 32), randn(32)))
case("mul_on_input", "mul_.Tensor", lambda x, y: x.mul_(y), lambda: (randn(4, 32), randn(4, 32)))
case(
    "add_inplace",
    "add_.Tensor",
    lambda x, y: (x * 2).add_(y, alpha=3),
    lambda: (randn(4, 32), randn(4, 32)),
)
case("mul_inplace", "mul_.Tensor", lambda x: (x + 1).mul_(0.5), act())

# clamps
case("clamp", "clamp.default", lambda x: torch.clamp(x, -0.5, 0.75), act())
case("clamp_min_only", "clamp.default", lambda x: torch.clamp(x, min=0.1), act())
case("clamp_int", "clamp.default", lambda x: torch.clamp(x, -3, 3), lambda: (ints(-9, 9, 4, 32),))
case("clamp_min", "clamp_min.default", lambda x: torch.clamp_min(x, -0.2), act())
case("clamp_max", "clamp_max.default", lambda x: torch.clamp_max(x, 0.3), act())
case(
    "clamp_tensor",
    "clamp.Tensor",
    lambda x, low, high: torch.clamp(x, low, high),
    lambda: (randn(4, 32), uniform(-1, -0.2, 32), uniform(0.2, 1, 4, 1)),
)

# -- binary ops, with broadcasting and scalars ----------------------------------------------------
ROW, COL = (4, 32), (32,)


def pair(a=ROW, b=ROW, make=randn):
    return lambda: (make(*a), make(*b))


BINARY = [
    ("add", "add.Tensor", torch.add, pair(ROW, COL)),
    ("add_alpha", "add.Tensor", lambda x, y: torch.add(x, y, alpha=-2), pair()),
    ("add_scalar", "add.Scalar", lambda x: torch.ops.aten.add.Scalar(x, 2.5), act()),
    ("add_int", "add.Tensor", torch.add, pair((4, 32), (4, 1), lambda *s: ints(-9, 9, *s))),
    ("sub", "sub.Tensor", torch.sub, pair((4, 1), ROW)),
    ("sub_scalar", "sub.Scalar", lambda x: torch.ops.aten.sub.Scalar(x, 1.5), act()),
    ("rsub", "rsub.Tensor", lambda x, y: torch.rsub(x, y, alpha=2), pair()),
    ("rsub_scalar", "rsub.Scalar", lambda x: 1 - x, act()),
    ("mul", "mul.Tensor", torch.mul, pair(ROW, COL)),
    ("mul_scalar", "mul.Scalar", lambda x: torch.ops.aten.mul.Scalar(x, -3.0), act()),
    ("mul_bool", "mul.Tensor", torch.mul, pair(ROW, ROW, lambda *s: mask(*s))),
    ("div", "div.Tensor", torch.div, lambda: (randn(4, 32), away_from_zero(32))),
    ("div_scalar", "div.Scalar", lambda x: torch.ops.aten.div.Scalar(x, 4.0), act()),
    ("div_int_true", "div.Tensor", torch.div, pair(ROW, ROW, lambda *s: nonzero_ints(-9, 9, *s))),
    (
        "div_floor",
        "div.Tensor_mode",
        lambda x, y: torch.div(x, y, rounding_mode="floor"),
        lambda: (randn(4, 32) * 4, away_from_zero(4, 32)),
    ),
    (
        "div_trunc",
        "div.Tensor_mode",
        lambda x, y: torch.div(x, y, rounding_mode="trunc"),
        lambda: (randn(4, 32) * 4, away_from_zero(4, 32)),
    ),
    (
        "div_floor_int",
        "div.Tensor_mode",
        lambda x, y: torch.div(x, y, rounding_mode="floor"),
        pair(ROW, ROW, lambda *s: nonzero_ints(-20, 20, *s)),
    ),
    (
        "div_trunc_int",
        "div.Tensor_mode",
        lambda x, y: torch.div(x, y, rounding_mode="trunc"),
        pair(ROW, ROW, lambda *s: nonzero_ints(-20, 20, *s)),
    ),
    (
        "floor_divide",
        "floor_divide.default",
        torch.floor_divide,
        lambda: (randn(4, 32) * 5, away_from_zero(4, 32)),
    ),
    (
        "floor_divide_int",
        "floor_divide.default",
        torch.floor_divide,
        pair(ROW, COL, lambda *s: nonzero_ints(-20, 20, *s)),
    ),
    ("fmod", "fmod.Tensor", torch.fmod, lambda: (randn(4, 32) * 5, away_from_zero(4, 32))),
    ("fmod_scalar", "fmod.Scalar", lambda x: torch.fmod(x, 1.5), lambda: (randn(4, 32) * 5,)),
    ("fmod_int", "fmod.Tensor", torch.fmod, pair(ROW, ROW, lambda *s: nonzero_ints(-20, 20, *s))),
    (
        "remainder",
        "remainder.Tensor",
        torch.remainder,
        lambda: (randn(4, 32) * 5, away_from_zero(4, 32)),
    ),
    (
        "remainder_scalar",
        "remainder.Scalar",
        lambda x: torch.remainder(x, 0.75),
        lambda: (randn(4, 32) * 5,),
    ),
    (
        "remainder_int",
        "remainder.Tensor",
        torch.remainder,
        pair(ROW, ROW, lambda *s: nonzero_ints(-20, 20, *s)),
    ),
    ("pow", "pow.Tensor_Tensor", torch.pow, lambda: (uniform(0.1, 3, 4, 32), randn(4, 32))),
    ("pow_scalar_exponent", "pow.Tensor_Scalar", lambda x: x**3, act()),
    ("pow_sqrt", "pow.Tensor_Scalar", lambda x: x**0.5, lambda: (uniform(0, 4, 4, 32),)),
    ("pow_scalar_base", "pow.Scalar", lambda x: 2.0**x, act()),
    ("pow_int", "pow.Tensor_Scalar", lambda x: x**2, lambda: (ints(-9, 9, 4, 32),)),
    ("atan2", "atan2.default", torch.atan2, pair()),
    ("logaddexp", "logaddexp.default", torch.logaddexp, pair(ROW, COL)),
    ("maximum", "maximum.default", torch.maximum, pair(ROW, COL)),
    ("minimum", "minimum.default", torch.minimum, pair(ROW, COL)),
    ("max_other", "max.other", torch.max, pair()),
    ("min_other", "min.other", torch.min, pair()),
    ("maximum_int", "maximum.default", torch.maximum, pair(ROW, ROW, lambda *s: ints(-9, 9, *s))),
    ("outer", "outer.default", torch.outer, lambda: (randn(16), randn(24))),
]
for _name, _op, _fn, _example in BINARY:
    case(_name, _op, _fn, _example)

COMPARISONS = [
    ("eq", torch.eq),
    ("ne", torch.ne),
    ("ge", torch.ge),
    ("gt", torch.gt),
    ("le", torch.le),
    ("lt", torch.lt),
]
for _name, _fn in COMPARISONS:
    # integers: equal values happen; a float row against a broadcast column; a scalar
    case(f"{_name}_int", f"{_name}.Tensor", _fn, pair(ROW, ROW, lambda *s: ints(-3, 3, *s)))
    case(
        f"{_name}_broadcast",
        f"{_name}.Tensor",
        _fn,
        lambda: (randn(4, 32).round(), randn(4, 1).round()),
    )
    case(
        f"{_name}_scalar",
        f"{_name}.Scalar",
        lambda x, f=_fn: f(x, 0.5),
        lambda: ((randn(4, 32) * 2).round() / 2,),
    )

case("ne_nan", "ne.Tensor", torch.ne, lambda: (with_specials(4, 32), with_specials(4, 32).flip(0)))
case("ne_self_finds_nan", "ne.Tensor", lambda x: x != x, lambda: (with_specials(4, 32),))

LOGICAL = [
    ("logical_and", torch.logical_and),
    ("logical_or", torch.logical_or),
    ("logical_xor", torch.logical_xor),
]
for _name, _fn in LOGICAL:
    case(_name, f"{_name}.default", _fn, pair(ROW, ROW, lambda *s: mask(*s)))
    case(
        f"{_name}_floats", f"{_name}.default", _fn, lambda: (randn(4, 32).round(), mask(32).float())
    )

ints_pair = pair(ROW, ROW, lambda *s: ints(-64, 64, *s))


def bits():
    """Small non-negative integers: what bit masks and flags hold."""
    return lambda: (ints(0, 64, 4, 32),)


BITWISE = [
    ("bitwise_and", "bitwise_and.Tensor", torch.bitwise_and, ints_pair),
    (
        "bitwise_and_scalar",
        "bitwise_and.Scalar",
        lambda x: torch.bitwise_and(x, 6),
        bits(),
    ),
    ("bitwise_or", "bitwise_or.Tensor", torch.bitwise_or, ints_pair),
    (
        "bitwise_or_scalar",
        "bitwise_or.Scalar",
        lambda x: torch.bitwise_or(x, 5),
        bits(),
    ),
    ("bitwise_or_inplace", "bitwise_or_.Tensor", lambda x, y: (x * 1).bitwise_or_(y), ints_pair),
    (
        "bitwise_or_scalar_inplace",
        "bitwise_or_.Scalar",
        lambda x: (x + 0).bitwise_or_(9),
        bits(),
    ),
    ("bitwise_xor", "bitwise_xor.Tensor", torch.bitwise_xor, ints_pair),
    (
        "bitwise_xor_scalar",
        "bitwise_xor.Scalar",
        lambda x: torch.bitwise_xor(x, 3),
        bits(),
    ),
    ("and_masks", "__and__.Tensor", lambda a, b: a & b, pair(ROW, ROW, lambda *s: mask(*s))),
    ("and_scalar", "__and__.Scalar", lambda x: x & 12, bits()),
    ("or_masks", "__or__.Tensor", lambda a, b: a | b, pair(ROW, COL, lambda *s: mask(*s))),
    ("or_scalar", "__or__.Scalar", lambda x: x | 1, bits()),
    ("xor_ints", "__xor__.Tensor", lambda a, b: a ^ b, ints_pair),
    ("xor_scalar", "__xor__.Scalar", lambda x: x ^ 7, bits()),
    (
        "and_ints_int32",
        "bitwise_and.Tensor",
        torch.bitwise_and,
        pair(ROW, ROW, lambda *s: ints(-64, 64, *s, dtype=torch.int32)),
    ),
]
for _name, _op, _fn, _example in BITWISE:
    case(_name, _op, _fn, _example)

# -- matrix products ------------------------------------------------------------------------------
case("matmul", "matmul.default", torch.matmul, lambda: (randn(4, 16), randn(16, 24)))
case(
    "matmul_batched_broadcast",
    "matmul.default",
    torch.matmul,
    lambda: (randn(2, 3, 8, 16), randn(16, 12)),
)
case("matmul_vector", "matmul.default", torch.matmul, lambda: (randn(16), randn(2, 16, 8)))
case("mm", "mm.default", torch.mm, lambda: (randn(8, 16), randn(16, 32)))
case("bmm", "bmm.default", torch.bmm, lambda: (randn(2, 8, 16), randn(2, 16, 12)))
case(
    "addmm",
    "addmm.default",
    lambda b, x, w: torch.addmm(b, x, w, beta=0.5, alpha=2.0),
    lambda: (randn(32), randn(8, 16), randn(16, 32)),
)
case(
    "baddbmm",
    "baddbmm.default",
    lambda b, x, y: torch.baddbmm(b, x, y, beta=0.25, alpha=1.5),
    lambda: (randn(2, 8, 12), randn(2, 8, 16), randn(2, 16, 12)),
)
case("linear", "linear.default", lambda: nn.Linear(32, 16), act())
case("linear_no_bias_sequence", "linear.default", lambda: nn.Linear(16, 24, bias=False), seq())
case(
    "einsum_attention",
    "einsum.default",
    lambda q, k: torch.einsum("bqd,bkd->bqk", q, k),
    lambda: (randn(2, 8, 16), randn(2, 6, 16)),
)
case("einsum_transpose_sum", "einsum.default", lambda x: torch.einsum("ij->j", x), act())
case(
    "linalg_vector_norm",
    "linalg_vector_norm.default",
    lambda x: torch.linalg.vector_norm(x, dim=-1),
    act(),
)
case(
    "linalg_vector_norm_l1_keepdim",
    "linalg_vector_norm.default",
    lambda x: torch.linalg.vector_norm(x, ord=1, dim=(0, 1), keepdim=True),
    seq(),
)
case(
    "norm_inf",
    "linalg_vector_norm.default",
    lambda x: torch.linalg.vector_norm(x, ord=float("inf"), dim=1),
    act(),
)


# -- layers with weights --------------------------------------------------------------------------
case(
    "conv1d",
    ("conv1d.default", "convolution.default"),
    lambda: nn.Conv1d(4, 8, 3, stride=2, padding=1),
    lambda: (randn(2, 4, 16),),
)
case(
    "conv2d",
    ("conv2d.default", "convolution.default"),
    lambda: nn.Conv2d(4, 8, 3, padding=1),
    image(),
)
case(
    "conv2d_strided_dilated_grouped",
    "conv2d.default",
    lambda: nn.Conv2d(4, 8, 3, stride=2, padding=2, dilation=2, groups=2, bias=False),
    image(1, 4, 9, 9),
)
case(
    "conv2d_depthwise",
    "conv2d.default",
    lambda: nn.Conv2d(4, 4, 3, padding="same", groups=4),
    image(),
)
case(
    "conv3d",
    "conv3d.default",
    lambda: nn.Conv3d(2, 4, 3, padding=1, stride=(1, 2, 2)),
    lambda: (randn(1, 2, 4, 6, 6),),
)
case(
    "conv_transpose1d",
    "conv_transpose1d.default",
    lambda: nn.ConvTranspose1d(4, 6, 3, stride=2, padding=1, output_padding=1),
    lambda: (randn(2, 4, 8),),
)
case(
    "conv_transpose2d",
    "conv_transpose2d.input",
    lambda: nn.ConvTranspose2d(4, 2, 4, stride=2, padding=1),
    image(),
)
case(
    "conv_transpose2d_groups",
    "conv_transpose2d.input",
    lambda: nn.ConvTranspose2d(4, 4, 3, stride=2, groups=2, bias=False),
    image(),
)
case(
    "convolution",
    "convolution.default",
    lambda x, w: torch.ops.aten.convolution(x, w, None, [1, 1], [1, 0], [1, 1], False, [0, 0], 1),
    lambda: (randn(*IMAGE), randn(6, 4, 3, 3)),
)
case("embedding", "embedding.default", lambda: nn.Embedding(50, 16), lambda: (ints(0, 50, 2, 7),))
case(
    "embedding_padding_idx",
    "embedding.default",
    lambda: nn.Embedding(20, 8, padding_idx=0),
    lambda: (ints(0, 20, 3, 5),),
)
case(
    "layer_norm",
    ("layer_norm.default", "native_layer_norm.default"),
    lambda: nn.LayerNorm(16),
    seq(),
)
case(
    "layer_norm_two_axes_no_affine",
    "layer_norm.default",
    lambda: nn.LayerNorm((8, 16), elementwise_affine=False),
    seq(),
)
case(
    "native_layer_norm_outputs",
    "native_layer_norm.default",
    lambda x, w, b: torch.native_layer_norm(x, [16], w, b, 1e-5),
    lambda: (randn(*SEQUENCE), randn(16), randn(16)),
)
case(
    "group_norm",
    ("group_norm.default", "native_group_norm.default"),
    lambda: nn.GroupNorm(2, 4),
    image(),
)
case(
    "native_group_norm",
    "native_group_norm.default",
    lambda x, w, b: torch.native_group_norm(x, w, b, 1, 4, 64, 2, 1e-5),  # with its mean and rstd
    lambda: (randn(*IMAGE), randn(4), randn(4)),
)
case("instance_norm", "instance_norm.default", lambda: nn.InstanceNorm2d(4, affine=True), image())
case(
    "batch_norm_eval",
    ("batch_norm.default", "_native_batch_norm_legit_no_training.default"),
    lambda: _with_running_stats(nn.BatchNorm2d(4)),
    image(),
)
case(
    "batch_norm_1d_eval",
    "_native_batch_norm_legit_no_training.default",
    lambda: _with_running_stats(nn.BatchNorm1d(16)),
    lambda: (randn(4, 16, 8),),
)
case(
    "batch_norm_train",
    "_native_batch_norm_legit_functional.default",
    lambda: nn.BatchNorm2d(4),
    image(2, 4, 8, 8),
    train=True,
)
case(
    "batch_norm_no_stats",
    "_native_batch_norm_legit.no_stats",
    lambda: nn.BatchNorm2d(4, track_running_stats=False),
    image(2, 4, 8, 8),
)
case(
    "batch_norm_functional",
    "batch_norm.default",
    lambda x, m, v: F.batch_norm(x, m, v, training=False, eps=1e-3),
    lambda: (randn(*IMAGE), randn(4), uniform(0.5, 2, 4)),
)
case("prelu", "prelu.default", lambda: nn.PReLU(4), image())
case("prelu_shared", "prelu.default", lambda: nn.PReLU(), act())
case("lstm", "lstm.input", lambda: nn.LSTM(8, 16, batch_first=True), lambda: (randn(2, 5, 8),))
case(
    "lstm_two_layers", "lstm.input", lambda: nn.LSTM(8, 12, num_layers=2), lambda: (randn(5, 2, 8),)
)
case("gru", "gru.input", lambda: nn.GRU(8, 16, batch_first=True), lambda: (randn(2, 5, 8),))
case(
    "rnn_tanh", "rnn_tanh.input", lambda: nn.RNN(8, 16, batch_first=True), lambda: (randn(2, 5, 8),)
)
case(
    "cross_entropy",
    "cross_entropy_loss.default",
    lambda x, t: F.cross_entropy(x, t),
    lambda: (randn(6, 10), ints(0, 10, 6)),
)
case(
    "cross_entropy_smoothing",
    "cross_entropy_loss.default",
    lambda x, t: F.cross_entropy(x, t, reduction="sum", label_smoothing=0.1),
    lambda: (randn(6, 10), ints(0, 10, 6)),
)
case(
    "sdpa",
    "scaled_dot_product_attention.default",
    F.scaled_dot_product_attention,
    lambda: (randn(1, 2, 8, 16), randn(1, 2, 8, 16), randn(1, 2, 8, 16)),
)
case(
    "sdpa_causal",
    "scaled_dot_product_attention.default",
    lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    lambda: (randn(2, 2, 8, 16), randn(2, 2, 8, 16), randn(2, 2, 8, 16)),
)
case(
    "sdpa_mask",
    "scaled_dot_product_attention.default",
    lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
    lambda: (randn(1, 2, 8, 16), randn(1, 2, 6, 16), randn(1, 2, 6, 16), randn(8, 6)),
)


def _with_running_stats(norm: nn.Module) -> nn.Module:
    """A batch norm as after training: running statistics that are not 0 and 1."""
    with torch.no_grad():
        norm.running_mean.uniform_(-1, 1)
        norm.running_var.uniform_(0.5, 2)
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-0.5, 0.5)
    return norm


# -- pools and resampling -------------------------------------------------------------------------
POOLS = [
    (
        "avg_pool1d",
        "avg_pool1d.default",
        lambda x: F.avg_pool1d(x, 3, stride=2, padding=1),
        lambda: (randn(2, 4, 16),),
    ),
    ("avg_pool2d", "avg_pool2d.default", lambda x: F.avg_pool2d(x, 2), image()),
    (
        "avg_pool2d_ceil_no_pad_count",
        "avg_pool2d.default",
        lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
        image(1, 4, 9, 9),
    ),
    (
        "avg_pool3d",
        "avg_pool3d.default",
        lambda x: F.avg_pool3d(x, 2, stride=(1, 2, 2)),
        lambda: (randn(1, 2, 4, 6, 6),),
    ),
    (
        "max_pool1d",
        "max_pool1d.default",
        lambda x: F.max_pool1d(x, 3, stride=2),
        lambda: (randn(2, 4, 16),),
    ),
    (
        "max_pool2d",
        ("max_pool2d.default", "max_pool2d_with_indices.default"),
        lambda x: F.max_pool2d(x, 3, stride=2, padding=1),
        image(),
    ),
    (
        "max_pool2d_ceil_dilated",
        "max_pool2d.default",
        lambda x: F.max_pool2d(x, 2, stride=2, dilation=2, ceil_mode=True),
        image(1, 4, 9, 9),
    ),
    (
        "max_pool2d_indices",
        "max_pool2d_with_indices.default",
        lambda x: F.max_pool2d(x, 2, return_indices=True),
        lambda: (distinct(*IMAGE),),
    ),
    (
        "max_pool3d",
        ("max_pool3d.default", "max_pool3d_with_indices.default"),
        lambda x: F.max_pool3d(x, 2),
        lambda: (randn(1, 2, 4, 6, 6),),
    ),
    (
        "max_pool3d_indices",
        "max_pool3d_with_indices.default",
        lambda x: F.max_pool3d(x, 2, return_indices=True),
        lambda: (distinct(1, 2, 4, 6, 6),),
    ),
    (
        "adaptive_avg_pool1d",
        ("adaptive_avg_pool1d.default", "_adaptive_avg_pool1d.default"),
        lambda x: F.adaptive_avg_pool1d(x, 5),
        lambda: (randn(2, 4, 16),),
    ),
    (
        "adaptive_avg_pool2d",
        ("adaptive_avg_pool2d.default", "_adaptive_avg_pool2d.default"),
        lambda x: F.adaptive_avg_pool2d(x, (3, 5)),
        image(1, 4, 9, 10),
    ),
    (
        "adaptive_avg_pool2d_global",
        "_adaptive_avg_pool2d.default",
        lambda x: F.adaptive_avg_pool2d(x, 1).flatten(1),
        image(),
    ),
    (
        "adaptive_avg_pool3d",
        ("adaptive_avg_pool3d.default", "_adaptive_avg_pool3d.default"),
        lambda x: F.adaptive_avg_pool3d(x, (2, 3, 3)),
        lambda: (randn(1, 2, 4, 6, 6),),
    ),
    (
        "upsample_nearest",
        "upsample_nearest2d.vec",
        lambda x: F.interpolate(x, scale_factor=2, mode="nearest"),
        image(),
    ),
    (
        "upsample_nearest_size",
        "upsample_nearest2d.vec",
        lambda x: F.interpolate(x, size=(12, 5)),
        image(),
    ),
    (
        "upsample_bilinear",
        "upsample_bilinear2d.vec",
        lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"),
        image(),
    ),
    (
        "upsample_bilinear_align_corners",
        "upsample_bilinear2d.vec",
        lambda x: F.interpolate(x, size=(11, 13), mode="bilinear", align_corners=True),
        image(),
    ),
    (
        "upsample_bilinear_antialias",
        "_upsample_bilinear2d_aa.default",
        lambda x: F.interpolate(x, size=(4, 5), mode="bilinear", antialias=True),
        image(),
    ),
    (
        "upsample_bicubic",
        "upsample_bicubic2d.vec",
        lambda x: F.interpolate(x, scale_factor=1.5, mode="bicubic"),
        image(),
    ),
    ("pixel_shuffle", "pixel_shuffle.default", lambda x: F.pixel_shuffle(x, 2), image(1, 8, 4, 4)),
    (
        "grid_sample",
        "grid_sampler_2d.default",
        lambda x, g: F.grid_sample(x, g, align_corners=False),
        lambda: (randn(1, 4, 8, 8), uniform(-1.1, 1.1, 1, 6, 5, 2)),
    ),
    (
        "grid_sample_nearest_border",
        "grid_sampler_2d.default",
        lambda x, g: F.grid_sample(x, g, mode="nearest", padding_mode="border", align_corners=True),
        lambda: (randn(1, 4, 8, 8), uniform(-1.2, 1.2, 1, 6, 5, 2)),
    ),
    (
        "affine_grid",
        "affine_grid_generator.default",
        lambda t: F.affine_grid(t, [2, 3, 6, 8], align_corners=False),
        lambda: (randn(2, 2, 3),),
    ),
]
for _name, _op, _fn, _example in POOLS:
    case(_name, _op, _fn, _example)

# -- reductions and search ------------------------------------------------------------------------
REDUCTIONS = [
    ("sum", "sum.default", torch.sum, act()),
    ("sum_dims_keepdim", "sum.dim_IntList", lambda x: x.sum(dim=(0, -1), keepdim=True), seq()),
    (
        "sum_int_to_float",
        "sum.dim_IntList",
        lambda x: x.sum(1, dtype=torch.float32),
        lambda: (ints(-9, 9, 4, 32),),
    ),
    ("sum_bool", "sum.dim_IntList", lambda m: m.sum(-1), lambda: (mask(4, 32),)),
    ("mean", "mean.default", torch.mean, act()),
    ("mean_dim", "mean.dim", lambda x: x.mean(-2), seq()),
    ("prod", "prod.default", torch.prod, lambda: (uniform(0.9, 1.1, 4, 8),)),
    ("prod_dim", "prod.default", lambda x: x.prod(1), lambda: (uniform(0.5, 1.5, 4, 8),)),
    ("std", "std.correction", lambda x: x.std(dim=1), act()),
    ("std_all_unbiased_false", "std.correction", lambda x: torch.std(x, unbiased=False), act()),
    ("var", "var.correction", lambda x: x.var(dim=-1, keepdim=True), seq()),
    ("var_correction0", "var.correction", lambda x: torch.var(x, dim=(0, 2), correction=0), seq()),
    ("max_all", "max.default", torch.max, act()),
    ("min_all", "min.default", torch.min, act()),
    ("max_dim", ("max.dim", "getitem"), lambda x: torch.max(x, dim=1), lambda: (distinct(4, 32),)),
    ("max_dim_values", "max.dim", lambda x: x.max(dim=-1, keepdim=True).values, seq()),
    ("median", "median.default", torch.median, lambda: (distinct(5, 7),)),
    ("median_dim", "median.dim", lambda x: torch.median(x, dim=1), lambda: (distinct(4, 9),)),
    ("argmax", "argmax.default", lambda x: x.argmax(-1), lambda: (distinct(4, 32),)),
    ("argmax_all", "argmax.default", torch.argmax, lambda: (distinct(4, 32),)),
    (
        "argmin_keepdim",
        "argmin.default",
        lambda x: x.argmin(0, keepdim=True),
        lambda: (distinct(4, 32),),
    ),
    ("any", "any.dim", lambda m: m.any(1), lambda: (mask(4, 32, p=0.05),)),
    ("any_dims", "any.dims", lambda m: torch.any(m, dim=(0, 2)), lambda: (mask(2, 8, 16, p=0.05),)),
    ("any_floats", "any.dim", lambda x: x.any(-1), lambda: (torch.relu(randn(4, 32) - 2),)),
    ("cumsum", "cumsum.default", lambda x: x.cumsum(1), act()),
    ("cumsum_int", "cumsum.default", lambda x: x.cumsum(-1), lambda: (ints(-9, 9, 4, 32),)),
    ("cumsum_bool_mask", "cumsum.default", lambda m: m.cumsum(1), lambda: (mask(2, 16),)),
    ("cumprod", "cumprod.default", lambda x: x.cumprod(0), lambda: (uniform(0.5, 1.5, 6, 8),)),
    ("softmax", ("softmax.int", "_softmax.default"), lambda x: F.softmax(x, dim=-1), seq()),
    ("softmax_dim0", "_softmax.default", lambda x: torch.softmax(x, 0), act()),
    (
        "log_softmax",
        ("log_softmax.int", "_log_softmax.default"),
        lambda x: F.log_softmax(x, dim=1),
        act(),
    ),
    (
        "log_softmax_half",
        "_log_softmax.default",
        lambda x: F.log_softmax(x, -1),
        act(torch.float16),
    ),
    ("where", "where.self", torch.where, lambda: (mask(4, 32), randn(4, 32), randn(32))),
    (
        "where_scalar",
        "where.self",
        lambda m, x: torch.where(m, x, 0.0),
        lambda: (mask(4, 32), randn(4, 32)),
    ),
    ("where_condition", "where.self", lambda x: torch.where(x > 0, x, x * 0.1), act()),
    (
        "bucketize",
        "bucketize.Tensor",
        lambda x, b: torch.bucketize(x, b),
        lambda: (randn(4, 32), torch.linspace(-2, 2, 9)),
    ),
    (
        "bucketize_right_int32",
        "bucketize.Tensor",
        lambda x, b: torch.bucketize(x, b, right=True, out_int32=True),
        lambda: (randn(4, 32).round(), torch.tensor([-1.0, 0.0, 1.0])),
    ),
    ("isin", "isin.Tensor_Tensor", torch.isin, lambda: (ints(0, 20, 4, 32), ints(0, 20, 6))),
    (
        "isin_invert",
        "isin.Tensor_Tensor",
        lambda x, t: torch.isin(x, t, invert=True),
        lambda: (ints(0, 10, 4, 8), ints(0, 10, 3)),
    ),
    ("sort", "sort.default", lambda x: torch.sort(x, dim=-1), lambda: (distinct(4, 32),)),
    (
        "sort_descending_dim0",
        "sort.default",
        lambda x: torch.sort(x, dim=0, descending=True),
        lambda: (distinct(6, 4),),
    ),
    (
        "argsort",
        "argsort.default",
        lambda x: torch.argsort(x, dim=1, descending=True),
        lambda: (distinct(4, 32),),
    ),
    ("topk", "topk.default", lambda x: torch.topk(x, 5), lambda: (distinct(4, 32),)),
    (
        "topk_smallest_dim0",
        "topk.default",
        lambda x: torch.topk(x, 2, dim=0, largest=False),
        lambda: (distinct(6, 8),),
    ),
]
for _name, _op, _fn, _example in REDUCTIONS:
    case(_name, _op, _fn, _example)


# -- moving data: views, copies, gathers and scatters ---------------------------------------------
def _setitem(x):
    """`out[:, 4:12] = 0` and a block copied in: what `x[...] = ...` on a copy exports as."""
    out = x * 1
    out[:, 4:12] = 0.0
    out[1:3, -2:] = x[:2, :2]
    return out


def _index_put_in_place(x, i, v):
    out = x * 1
    out[i] = v
    return out


MANIPULATION = [
    ("reshape", "reshape.default", lambda x: x.reshape(8, -1), act()),
    ("view", "view.default", lambda x: x.view(2, 2, 32), act()),
    (
        "view_after_transpose",
        ("view.default", "contiguous.default"),
        lambda x: x.transpose(0, 1).contiguous().view(-1),
        act(),
    ),
    (
        "reshape_as",
        "reshape_as.default",
        lambda x, y: x.reshape_as(y),
        lambda: (randn(4, 32), randn(8, 16)),
    ),
    ("flatten", "flatten.using_ints", lambda x: torch.flatten(x, start_dim=1), seq()),
    ("unflatten", "unflatten.int", lambda x: x.unflatten(-1, (4, -1)), seq()),
    ("permute", "permute.default", lambda x: x.permute(2, 0, 1), seq()),
    ("transpose", "transpose.int", lambda x: x.transpose(-1, -2), seq()),
    ("squeeze_all", "squeeze.default", torch.squeeze, lambda: (randn(1, 4, 1, 8),)),
    ("squeeze_dim", "squeeze.dim", lambda x: x.squeeze(-2), lambda: (randn(4, 1, 8),)),
    ("squeeze_dims", "squeeze.dims", lambda x: x.squeeze((0, 2)), lambda: (randn(1, 4, 1, 8),)),
    (
        "unsqueeze",
        "unsqueeze.default",
        lambda x: x.unsqueeze(-1) * x.unsqueeze(1),
        lambda: (randn(4, 8),),
    ),
    ("expand", "expand.default", lambda x: x.expand(3, 4, 8), lambda: (randn(4, 1),)),
    (
        "expand_as",
        "expand_as.default",
        lambda x, y: x.expand_as(y) + y,
        lambda: (randn(1, 32), randn(4, 32)),
    ),
    (
        "broadcast_to",
        "broadcast_to.default",
        lambda x: torch.broadcast_to(x, (2, 4, 32)),
        lambda: (randn(32),),
    ),
    (
        "cat",
        "cat.default",
        lambda x, y: torch.cat([x, y, x], dim=-1),
        lambda: (randn(4, 8), randn(4, 16)),
    ),
    (
        "cat_dim0_int",
        "cat.default",
        lambda x, y: torch.cat((x, y)),
        lambda: (ints(0, 9, 2, 8), ints(0, 9, 3, 8)),
    ),
    (
        "concat",
        "concat.default",
        lambda x, y: torch.concat([x, y], 1),
        lambda: (randn(2, 3, 8), randn(2, 5, 8)),
    ),
    ("stack", "stack.default", lambda x, y: torch.stack([x, y], dim=-1), pair()),
    ("stack_dim0", "stack.default", lambda x, y: torch.stack((x, y)), pair((3, 8), (3, 8))),
    ("split", "split.Tensor", lambda x: torch.split(x, 12, dim=1), act()),
    ("split_with_sizes", "split_with_sizes.default", lambda x: x.split([4, 20, 8], dim=-1), act()),
    ("chunk", "chunk.default", lambda x: torch.chunk(x, 3, dim=1), act()),
    ("unbind", "unbind.int", lambda x: torch.unbind(x, dim=1), lambda: (randn(4, 3, 8),)),
    ("narrow", "narrow.default", lambda x: x.narrow(1, 4, 10), act()),
    ("select", "select.int", lambda x: x[:, 3], act()),
    ("select_negative", "select.int", lambda x: x[-1], seq()),
    ("slice", "slice.Tensor", lambda x: x[:, 1:30:3], act()),
    ("slice_negative", "slice.Tensor", lambda x: x[..., -5:-1], seq()),
    (
        "slice_scatter_step",
        "slice_scatter.default",
        lambda x, s: torch.slice_scatter(x, s, dim=1, start=1, end=7, step=2),
        lambda: (randn(8, 8), randn(8, 3)),
    ),
    (
        "slice_scatter_small",  # too few elements for the CPU schedule to vectorize
        "slice_scatter.default",
        lambda x, s: torch.slice_scatter(x, s, dim=1, start=0, end=4, step=2),
        lambda: (randn(4, 4), randn(4, 2)),
    ),
    (
        "slice_scatter_rows",
        "slice_scatter.default",
        lambda x, s: torch.slice_scatter(x, s, dim=0, start=2, end=6),
        lambda: (randn(8, 16), randn(4, 16)),
    ),
    (
        "slice_scatter_strided_tail",
        "slice_scatter.default",
        lambda x, s: torch.slice_scatter(x, s, dim=-1, start=3, step=4),
        lambda: (randn(4, 32), randn(4, 8)),
    ),
    ("setitem_slice", ("slice_scatter.default", "copy.default"), _setitem, act()),
    ("flip", "flip.default", lambda x: torch.flip(x, dims=(0, -1)), act()),
    ("roll", "roll.default", lambda x: torch.roll(x, shifts=(1, -3), dims=(0, 1)), act()),
    ("roll_flat", "roll.default", lambda x: torch.roll(x, 5), act()),
    ("repeat", "repeat.default", lambda x: x.repeat(2, 1, 3), lambda: (randn(4, 8),)),
    ("tile", "tile.default", lambda x: torch.tile(x, (2, 2)), lambda: (randn(3, 8),)),
    ("tril", "tril.default", lambda x: torch.tril(x, diagonal=-1), lambda: (randn(2, 8, 8),)),
    ("triu", "triu.default", lambda x: torch.triu(x, 1), lambda: (randn(6, 9),)),
    (
        "triu_causal_mask",
        "triu.default",
        lambda x: x.masked_fill(torch.ones(8, 8, dtype=torch.bool).triu(1), float("-inf")).softmax(
            -1
        ),
        lambda: (randn(2, 8, 8),),
    ),
    (
        "diagonal",
        "diagonal.default",
        lambda x: torch.diagonal(x, offset=1, dim1=-2, dim2=-1),
        lambda: (randn(2, 6, 7),),
    ),
    (
        "gather",
        "gather.default",
        lambda x, i: torch.gather(x, 1, i),
        lambda: (randn(4, 32), ints(0, 32, 4, 10)),
    ),
    (
        "gather_negative_dim",
        "gather.default",
        lambda x, i: torch.gather(x, -1, i),
        lambda: (randn(2, 3, 8), ints(0, 8, 2, 3, 8)),
    ),
    (
        "gather_masked",
        "gather.default",
        lambda x, i, m: torch.where(m, torch.gather(x, 1, i.clamp(0, 31)), 0.0),
        lambda: (randn(4, 32), ints(0, 32, 4, 32), mask(4, 32)),
    ),
    (
        "index_select",
        "index_select.default",
        lambda x, i: torch.index_select(x, 1, i),
        lambda: (randn(4, 32), ints(0, 32, 9)),
    ),
    (
        "take",
        "take.default",
        lambda x, i: torch.take(x, i),
        lambda: (randn(4, 32), ints(0, 128, 3, 5)),
    ),
    ("index_tensor", "index.Tensor", lambda x, i: x[i], lambda: (randn(10, 8), ints(0, 10, 6))),
    (
        "index_tensor_columns",
        "index.Tensor",
        lambda x, i: x[:, i],
        lambda: (randn(4, 32), ints(0, 32, 2, 3)),
    ),
    (
        "index_tensor_two",
        "index.Tensor",
        lambda x, i, j: x[i, j],
        lambda: (randn(6, 8), ints(0, 6, 5), ints(0, 8, 5)),
    ),
    (
        "index_tensor_negative",
        "index.Tensor",
        lambda x, i: x[i],
        lambda: (randn(10, 8), ints(-10, 0, 6)),
    ),
    (
        "index_put",
        "index_put.default",
        lambda x, i, v: torch.index_put(x, (i,), v),
        lambda: (randn(10, 8), torch.randperm(10)[:4], randn(4, 8)),
    ),
    (
        "index_put_accumulate",
        "index_put.default",
        lambda x, i, v: x.index_put((i,), v, accumulate=True),
        lambda: (randn(10, 8), ints(0, 10, 6), randn(6, 8)),
    ),
    (
        "index_put_inplace",
        "index_put_.default",
        _index_put_in_place,
        lambda: (randn(10, 8), torch.randperm(10)[:3], randn(3, 8)),
    ),
    (
        "scatter",
        "scatter.src",
        lambda x, i, s: torch.scatter(x, 1, i, s),
        lambda: (randn(4, 32), rows_permuted(4, 32, 6), randn(4, 6)),
    ),
    (
        "scatter_value",
        "scatter.value",
        lambda x, i: x.scatter(1, i, -1.0),
        lambda: (randn(4, 32), rows_permuted(4, 32, 6)),
    ),
    (
        "masked_fill",
        "masked_fill.Scalar",
        lambda x, m: x.masked_fill(m, -1e4),
        lambda: (randn(4, 32), mask(4, 32)),
    ),
    (
        "masked_fill_broadcast",
        "masked_fill.Scalar",
        lambda x, m: x.masked_fill(m, float("-inf")).softmax(-1),
        lambda: (randn(2, 8, 8), mask(8, 8, p=0.3)),
    ),
    (
        "masked_fill_inplace",
        "masked_fill_.Scalar",
        lambda x, m: (x * 1).masked_fill_(m, 0.0),
        lambda: (randn(4, 32), mask(4, 32)),
    ),
    (
        "masked_select",
        "masked_select.default",
        torch.masked_select,
        lambda: (randn(4, 8), mask(4, 8)),
    ),
    (
        "masked_select_condition",
        "masked_select.default",
        lambda x: x.masked_select(x > 0.5) * 2,
        lambda: (randn(4, 8),),
    ),
    (
        "meshgrid",
        "meshgrid.indexing",
        lambda a, b: torch.meshgrid(a, b, indexing="ij"),
        lambda: (randn(4), randn(6)),
    ),
    (
        "meshgrid_xy",
        "meshgrid.indexing",
        lambda a, b: torch.meshgrid(a, b, indexing="xy"),
        lambda: (randn(4), randn(6)),
    ),
    (
        "meshgrid_default",
        "meshgrid.default",
        lambda a, b: torch.ops.aten.meshgrid.default([a, b]),
        lambda: (randn(3), randn(5)),
    ),
    ("as_strided", "as_strided.default", lambda x: torch.as_strided(x, (3, 4), (8, 2), 1), act()),
    ("alias", "alias.default", lambda x: torch.ops.aten.alias(x) * 2, act()),
    (
        "copy",
        "copy.default",
        lambda x, y: torch.ops.aten.copy(x, y),
        lambda: (randn(4, 32), randn(32)),
    ),
    (
        "copy_into_input",
        "copy_.default",
        lambda x, y: x.copy_(y) + 1,
        lambda: (randn(4, 32), randn(4, 32)),
    ),
    (
        "copy_dtype",
        "copy_.default",
        lambda x, y: torch.zeros(4, 32).copy_(y) * x,
        lambda: (randn(4, 32), ints(-5, 5, 4, 32)),
    ),
    (
        "pad_constant",
        ("pad.default", "constant_pad_nd.default"),
        lambda x: F.pad(x, (1, 2, 0, 1), value=0.5),
        image(),
    ),
    ("pad_reflect", "pad.default", lambda x: F.pad(x, (2, 1, 1, 2), mode="reflect"), image()),
    (
        "pad_replicate",
        "pad.default",
        lambda x: F.pad(x, (3, 0), mode="replicate"),
        lambda: (randn(2, 4, 16),),
    ),
    ("pad_circular", "pad.default", lambda x: F.pad(x, (1, 2, 2, 1), mode="circular"), image()),
    ("pad_negative", "constant_pad_nd.default", lambda x: F.pad(x, (-1, 2)), act()),
    (
        "constant_pad_nd",
        "constant_pad_nd.default",
        lambda x: torch.constant_pad_nd(x, (0, 0, 2, 3), -1.0),
        act(),
    ),
]

for _name, _op, _fn, _example in MANIPULATION:
    case(_name, _op, _fn, _example)

# -- making tensors -------------------------------------------------------------------------------
CREATION = [
    ("arange", "arange.default", lambda x: x * torch.arange(32), act()),
    ("arange_start", "arange.start", lambda x: x + torch.arange(-16, 16), act()),
    ("arange_start_step", "arange.start_step", lambda x: x[:, :11] * torch.arange(1, 32, 3), act()),
    (
        "arange_float_step",
        "arange.start_step",
        lambda x: x[:, :8] + torch.arange(0.0, 2.0, 0.25),
        act(),
    ),
    ("linspace", "linspace.default", lambda x: x * torch.linspace(-1, 1, 32), act()),
    ("eye", "eye.default", lambda x: x @ torch.eye(8), lambda: (randn(4, 8),)),
    ("eye_m", "eye.m", lambda x: x + torch.eye(4, 32), act()),
    ("full", "full.default", lambda x: x + torch.full((4, 32), 1.5), act()),
    (
        "full_int",
        "full.default",
        lambda x: x * torch.full((32,), 3, dtype=torch.int64),
        lambda: (ints(-5, 5, 4, 32),),
    ),
    ("full_like", "full_like.default", lambda x: torch.full_like(x, 7) - x, act()),
    ("ones", "ones.default", lambda x: x - torch.ones(4, 32), act()),
    ("ones_like", "ones_like.default", lambda x: torch.ones_like(x) / (1 + x.abs()), act()),
    ("zeros", "zeros.default", lambda x: torch.maximum(x, torch.zeros(32)), act()),
    (
        "zeros_like",
        "zeros_like.default",
        lambda x: torch.zeros_like(x, dtype=torch.int32) + x.argmax(-1, keepdim=True),
        act(),
    ),
    ("new_ones", "new_ones.default", lambda x: x.new_ones((4, 32)) * x, act()),
    ("new_zeros", "new_zeros.default", lambda x: x.new_zeros(32) + x, act()),
    (
        "empty",
        ("empty.default", "empty.memory_format"),
        lambda x: torch.empty(4, 32).fill_(2.0) * x,
        act(),
    ),
    ("empty_like", "empty_like.default", lambda x: torch.empty_like(x).copy_(x) * 3, act()),
    (
        "empty_permuted",
        "empty_permuted.default",
        lambda x: torch.empty_permuted((4, 32), (1, 0)).fill_(1) + x,
        act(),
    ),
    ("fill", "fill.Scalar", lambda x: torch.ops.aten.fill.Scalar(x, 0.25) + x, act()),
    ("fill_inplace", "fill_.Scalar", lambda x: (x * 1).fill_(-2.0) + x, act()),
    ("zero_inplace", "zero_.default", lambda x: (x + 1).zero_() + x, act()),
    ("scalar_tensor", "scalar_tensor.default", lambda x: x * torch.scalar_tensor(2.5), act()),
    (
        "lift_fresh_copy",
        "lift_fresh_copy.default",
        lambda x: x * torch.tensor([[0.5], [1.0], [1.5], [2.0]]),
        act(),
    ),
    ("one_hot", "one_hot.default", lambda i: F.one_hot(i, 10), lambda: (ints(0, 10, 4, 6),)),
    (
        "one_hot_float",
        "one_hot.default",
        lambda i, w: F.one_hot(i, 8).float() @ w,
        lambda: (ints(0, 8, 5), randn(8, 4)),
    ),
    ("hamming_window", "hamming_window.default", lambda x: x * torch.hamming_window(32), act()),
    (
        "hamming_window_symmetric",
        "hamming_window.periodic",
        lambda x: x * torch.hamming_window(32, periodic=False),
        act(),
    ),
    (
        "hamming_window_alpha",
        "hamming_window.periodic_alpha",
        lambda x: x * torch.hamming_window(32, True, 0.5),
        act(),
    ),
    (
        "hamming_window_alpha_beta",
        "hamming_window.periodic_alpha_beta",
        lambda x: x * torch.hamming_window(32, False, 0.54, 0.4),
        act(),
    ),
    ("to_dtype", ("to.dtype", "_to_copy.default"), lambda x: (x * 10).to(torch.int32), act()),
    ("to_half", "_to_copy.default", lambda x: x.half() * 2, act()),
    ("to_bfloat16", "_to_copy.default", lambda x: x.to(torch.bfloat16) + 1, act()),
    (
        "to_dtype_layout",
        "to.dtype_layout",
        lambda x: torch.ops.aten.to.dtype_layout(x, dtype=torch.float64, layout=torch.strided) / 3,
        act(),
    ),
    ("int_to_float", "_to_copy.default", lambda i: i.float() / 7, lambda: (ints(-50, 50, 4, 32),)),
    ("bool_to_float", "_to_copy.default", lambda m: m.float() * 2 - 1, lambda: (mask(4, 32),)),
    (
        "type_as",
        "type_as.default",
        lambda x, i: i.type_as(x) + x,
        lambda: (randn(4, 32), ints(0, 9, 4, 32)),
    ),
    ("clone", "clone.default", lambda x: x.clone() * 2, act()),
    ("contiguous", "contiguous.default", lambda x: x.t().contiguous() + 1, act()),
    ("detach", "detach.default", lambda x: x.detach() + x, act()),
    ("detach_inplace", "detach_.default", lambda x: torch.ops.aten.detach_(x * 2) + 1, act()),
    (
        "assert_tensor_metadata",
        "_assert_tensor_metadata.default",
        lambda x: x.to(torch.float64) * 2,
        act(),
    ),
]
for _name, _op, _fn, _example in CREATION:
    case(_name, _op, _fn, _example)

# random numbers (and memory never written): only the shape and dtype can match PyTorch's
case(
    "empty_unwritten",
    "empty.memory_format",
    lambda x: torch.empty(4, 32, dtype=torch.float16),
    act(),
    random=True,
)
case("randn", "randn.default", lambda x: torch.randn(4, 32) * 0.0 + x.shape[0], act(), random=True)
case("randn_like", "randn_like.default", lambda x: torch.randn_like(x), act(), random=True)
case("exponential", "exponential.default", lambda x: (x * 1).exponential_(), act(), random=True)
case(
    "bernoulli",
    "bernoulli.p",
    lambda x: torch.ops.aten.bernoulli.p(x, 0.5),
    lambda: (uniform(0, 1, 4, 32),),
    random=True,
)
case(
    "dropout_train",
    ("dropout.default", "native_dropout.default"),
    lambda x: torch.ops.aten.native_dropout(x, 0.0, True)[0],
    act(),
)
case(
    "dropout_eval",
    "dropout.default",
    lambda: nn.Sequential(nn.Linear(32, 32), nn.Dropout(0.1)),
    act(),
)
case(
    "dropout_functional",
    "dropout.default",
    lambda x: torch.ops.aten.dropout(x, 0.0, False) * 2,
    act(),
)

# -- symbolic shapes, data-dependent values, asserts, control flow --------------------------------
case(
    "dynamic_rows",
    ("sym_size.int", "mul"),
    lambda x: x.reshape(x.shape[0] * 32),
    act(),
    dynamic=lambda: (n_rows(),),
)
case(
    "dynamic_arange",
    ("sub", "arange.start_step"),
    lambda x: torch.arange(x.shape[0] - 1) * 2,
    act(),
    dynamic=lambda: (n_rows(),),
)
case(
    "dynamic_add", "add", lambda x: x.new_zeros(x.shape[0] + 2), act(), dynamic=lambda: (n_rows(),)
)
case(
    "dynamic_floordiv_neg",
    ("floordiv", "neg"),
    lambda x: torch.zeros(-(-x.shape[0] // 3)),
    act(),
    dynamic=lambda: (n_rows(),),
)
case(
    "dynamic_mod",
    "mod",
    lambda x: torch.ones(x.shape[0] % 3 + 2, 2),
    lambda: (randn(8, 4),),
    dynamic=lambda: (n_rows(),),
)
case(
    "dynamic_half",
    ("floordiv", "sym_size.int"),
    lambda x: x[: x.shape[0] // 2] * 2,
    lambda: (randn(8, 4),),
    dynamic=lambda: ({0: 2 * Dim("half", min=2, max=32)},),
)


def _item_length(x, k):
    """The first `k` rows, `k` read from data: a size checked at run time."""
    k = k.item()
    torch._check_is_size(k)
    torch._check(k <= x.shape[0])
    return x[:k] * 2


def _item_checks(k):
    """A size and a fill value from a number read from data, checked at run time."""
    k = k.item()
    torch._check(k > 0)
    torch._check(k < 16)
    return torch.ones(k) * k, torch.full((2,), k != 3)


case(
    "item_scales",
    ("item.default", "_local_scalar_dense.default"),
    lambda x, s: x * s.max().item(),
    lambda: (randn(4, 32), torch.tensor([2, 3])),
)
case(
    "item_length",
    ("_assert_scalar.default", "ge", "le", "sym_constrain_range_for_size.default"),
    _item_length,
    lambda: (randn(8, 4), torch.tensor(3)),
)
case("item_checks", ("gt", "lt", "eq", "ne"), _item_checks, lambda: (torch.tensor(5),))
case(
    "assert_async",
    "_assert_async.default",
    lambda x: (torch._assert_async((x.abs() < 1e9).all()), x * 2)[1],
    act(),
)
case(
    "assert_async_msg",
    "_assert_async.msg",
    lambda x: (torch.ops.aten._assert_async.msg((x == x).any(), "no values"), x + 1)[1],
    act(),
)
case(
    "cond",
    "cond",
    lambda x: torch.cond(x.sum() > 0, lambda y: y.sin(), lambda y: y.cos(), (x,)),
    act(),
)
case("nonzero", (), lambda x: torch.nonzero(x > 0.5), lambda: (randn(4, 8),))
case("unique", (), lambda x: torch.unique(x), lambda: (ints(0, 10, 4, 8),))
case("unique_counts", (), lambda x: torch.unique(x, return_counts=True), lambda: (ints(0, 6, 20),))

# -- sparse tensors -------------------------------------------------------------------------------
case("to_sparse", "to_sparse.default", lambda x: x.to_sparse().to_dense() * 2, act())


def _sparse_linear() -> nn.Module:
    """A linear layer whose weight is a sparse COO buffer: `torch.sparse.mm(w, x)`."""

    class SparseLinear(nn.Module):
        def __init__(self):
            super().__init__()
            weight = torch.randn(16, 32) * (torch.rand(16, 32) < 0.2)
            self.register_buffer("weight", weight.to_sparse())
            self.register_buffer("bias", torch.randn(16, 1))

        def forward(self, x):
            return torch.sparse.mm(self.weight, x), torch.sparse.addmm(self.bias, self.weight, x)

    return SparseLinear()


case(
    "sparse_mm",
    ("_sparse_mm.default", "_sparse_addmm.default"),
    _sparse_linear,
    lambda: (randn(32, 8),),
)


# -- torchvision's roi_align, as its op is called: the importer translates `roi_align.default` ----
@torch.library.custom_op("op_corpus::roi_align", mutates_args=())
def roi_align(
    data: torch.Tensor,
    rois: torch.Tensor,
    spatial_scale: float,
    pooled_height: int,
    pooled_width: int,
    sampling_ratio: int,
    aligned: bool,
) -> torch.Tensor:
    """torchvision's `roi_align` (average of bilinear samples in each bin), written out for a
    fixed `sampling_ratio`: each of `rois` (`[batch, x1, y1, x2, y2]`) becomes
    `pooled_height x pooled_width` values per channel."""
    height, width = data.shape[-2:]
    offset = 0.5 if aligned else 0.0
    out = []
    for roi in rois:
        image, box = data[int(roi[0])], roi[1:] * spatial_scale - offset
        size_w, size_h = box[2] - box[0], box[3] - box[1]
        if not aligned:
            size_w, size_h = max(float(size_w), 1.0), max(float(size_h), 1.0)
        bin_h, bin_w = size_h / pooled_height, size_w / pooled_width
        steps = (torch.arange(sampling_ratio) + 0.5) / sampling_ratio
        ys = box[1] + (torch.arange(pooled_height)[:, None] + steps) * bin_h
        xs = box[0] + (torch.arange(pooled_width)[:, None] + steps) * bin_w
        samples = _bilinear(image, ys.reshape(-1), xs.reshape(-1), height, width)
        pooled = samples.reshape(-1, pooled_height, sampling_ratio, pooled_width, sampling_ratio)
        out.append(pooled.mean(dim=(2, 4)))
    return torch.stack(out)


@roi_align.register_fake
def _(data, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned):
    return data.new_empty(rois.shape[0], data.shape[1], pooled_height, pooled_width)


def _bilinear(image: torch.Tensor, ys: torch.Tensor, xs: torch.Tensor, height: int, width: int):
    """`image` (C, H, W) at every (y, x) of the grid `ys` x `xs`, as torchvision interpolates: 0
    outside [-1, size], edges clamped."""

    def corners(coords: torch.Tensor, size: int):
        outside = (coords < -1) | (coords > size)
        coords = coords.clamp(min=0)
        low = coords.floor().long().clamp(max=size - 1)
        high = (low + 1).clamp(max=size - 1)
        coords = torch.where(low >= size - 1, low.to(coords.dtype), coords)
        frac = coords - low
        return low, high, frac, outside

    y0, y1, fy, out_y = corners(ys, height)
    x0, x1, fx, out_x = corners(xs, width)
    rows = lambda y: image[:, y]  # noqa: E731 (C, len(ys), W)
    top = rows(y0)[:, :, x0] * (1 - fx) + rows(y0)[:, :, x1] * fx
    bottom = rows(y1)[:, :, x0] * (1 - fx) + rows(y1)[:, :, x1] * fx
    value = top * (1 - fy)[:, None] + bottom * fy[:, None]
    return value.masked_fill(out_y[:, None] | out_x[None, :], 0.0)


case(
    "roi_align",
    "roi_align.default",
    lambda x, rois: torch.ops.op_corpus.roi_align(x, rois, 0.5, 3, 3, 2, False),
    lambda: (
        randn(2, 4, 16, 16),
        torch.tensor(
            [[0, 2.0, 3.0, 20.0, 18.0], [1, 0.0, 0.0, 31.0, 31.0], [0, 10.0, 4.0, 13.0, 9.0]]
        ),
    ),
)
case(
    "roi_align_aligned",
    "roi_align.default",
    lambda x, rois: torch.ops.op_corpus.roi_align(x, rois, 1.0, 2, 4, 2, True),
    lambda: (
        randn(1, 4, 16, 16),
        torch.tensor([[0, 1.0, 1.5, 12.0, 9.0], [0, 4.0, 4.0, 6.5, 15.0]]),
    ),
)


# -- what the importer translates, and how results are judged -------------------------------------
def convert_map_entries() -> list[str]:
    """Every op the installed TVM's PyTorch importer translates: the keys of
    `ExportedProgramImporter`'s convert map, as `create_convert_map` builds it."""
    from tvm.relax.frontend.torch.exported_program_translator import ExportedProgramImporter

    return list(ExportedProgramImporter().convert_map)


def covering() -> dict[str, list[str]]:
    """Each convert-map entry -> the cases written for it (an empty list: a gap)."""
    found: dict[str, list[str]] = {entry: [] for entry in convert_map_entries()}
    for name, op_case in CASES.items():
        for entry in op_case.ops:
            found.setdefault(entry, []).append(name)
    return found


def gaps() -> list[str]:
    """Convert-map entries no case is written for (a new TVM version's ops, until written)."""
    return [entry for entry, names in covering().items() if not names]


def graph_ops(exported) -> list[str]:
    """The ops of an exported (and decomposed) program, by the names the importer looks up."""
    return sorted({str(n.target.__name__) for n in exported.graph.nodes if n.op == "call_function"})


def flat(value) -> list:
    """Every tensor (or number) of an output, in order: tuples and lists unpacked."""
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in flat(v)]
    return [value]


# Tolerances by dtype: what rounding allows (a few units in the last place, over the size of the
# values), far below what a wrong kernel gives
TOLERANCE = {
    torch.float64: 1e-9,
    torch.float32: 1e-4,
    torch.float16: 1e-2,
    torch.bfloat16: 2e-2,
}


def same(actual, expected, *, random: bool = False) -> str:
    """'' when `actual` (what TVM gave, as torch tensors) is PyTorch's `expected`; else why not,
    in a few words. Floats within `TOLERANCE` of their dtype (relative, and absolute in proportion
    to the largest value), NaN where PyTorch has NaN; other dtypes exactly; `random` outputs only
    in shape and dtype."""
    ours, theirs = flat(actual), flat(expected)
    if len(ours) != len(theirs):
        return f"{len(ours)} outputs, PyTorch gives {len(theirs)}"
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        which = f"output {i}: " if len(theirs) > 1 else ""
        a = torch.as_tensor(a)
        b = torch.as_tensor(b)
        if a.shape != b.shape:
            return f"{which}shape {list(a.shape)}, PyTorch {list(b.shape)}"
        if a.dtype != b.dtype:
            return f"{which}dtype {a.dtype}, PyTorch {b.dtype}".replace("torch.", "")
        if random or a.numel() == 0:
            continue
        if not b.dtype.is_floating_point:
            if not torch.equal(a, b):
                return f"{which}{int((a != b).sum())} of {a.numel()} values differ"
            continue
        a, b = a.double(), b.double()
        tolerance = TOLERANCE.get(expected_dtype := theirs[i].dtype, 1e-4)
        finite = b[b.isfinite()].abs()
        scale = max(1.0, float(finite.max())) if finite.numel() else 1.0
        same_special = (a == b) | (a.isnan() & b.isnan())
        close = same_special | ((a - b).abs() <= tolerance * (scale + b.abs()))
        if not bool(close.all()):
            gap = torch.where(same_special, 0.0, (a - b).abs()).nan_to_num(float("inf"))
            return (
                f"{which}{int((~close).sum())} of {a.numel()} values differ, max abs error "
                f"{float(gap.max()):.3g} ({str(expected_dtype).removeprefix('torch.')})"
            )
    return ""
