"""Cell bodies shared by the tests: the seed example of the product, as a user types it."""

import textwrap

import numpy as np
import tvm
from tvm import relax


def elementwise_kernel(
    name: str, value: str, *, b_dtype: str = "float32", decorator: str = "@T.prim_func"
) -> str:
    """PrimFunc `name(a, b, c)` over `n` elements: `C[i] = value`, of `A`, `B` and `i`."""
    return f"""
{decorator}
def {name}(a: T.handle, b: T.handle, c: T.handle):
    n = T.int64()
    A = T.match_buffer(a, (n,), "float32")
    B = T.match_buffer(b, (n,), "{b_dtype}")
    C = T.match_buffer(c, (n,), "float32")
    for i in range(n):
        C[i] = {value}
"""


def ir_module_class(name: str, *members: str) -> str:
    """One cell of the class form: `@I.ir_module class name(BasePyModule):` holding the
    functions of `members` (cell bodies)."""
    body = "".join(textwrap.indent(member, "    ") for member in members)
    return f"\n@I.ir_module\nclass {name}(BasePyModule):{body}"


def vector_relax(name: str, body: str) -> str:
    """Relax function `name(x, y)` of two float32 vectors of `n` elements, returning one such;
    `body` holds its statements (at column 0)."""
    head = f"""
@R.function
def {name}(
    x: R.Tensor(("n",), "float32"), y: R.Tensor(("n",), "float32")
) -> R.Tensor(("n",), "float32"):
"""
    return head + textwrap.indent(body.strip("\n") + "\n", "    ")


ADD_TIR = elementwise_kernel("add_tir", "A[i] + B[i]")

MAIN_PYFUNC = '''
@I.pyfunc
def main(self, x, y):
    """Add on the TIR kernel, then double in PyTorch."""
    z = self.call_tir(self.add_tir, [x, y], out_ty=R.Tensor((x.shape[0],), "float32"))
    return z * 2
'''

MAIN_RELAX = vector_relax("main_relax", "return R.add(x, y)")

SCALE_PYFUNC = """
@I.pyfunc
def scale(self, x):
    return x * 10
"""


def kernel_then_pyfunc(
    name: str, module: str, kernel: str = "add_tir", pyfunc: str = "scale", then: str = "return w"
) -> str:
    """Relax function `name(x, y)`: `z` = PrimFunc `kernel` of module `module` on x and y, `w` =
    pyfunc `pyfunc` of z, then the statements `then`."""
    return vector_relax(
        name,
        f"""
n = T.int64()
cls = {module}
z = R.call_tir(cls.{kernel}, (x, y), out_ty=R.Tensor((n,), "float32"))
w = R.call_py_func("{pyfunc}", z, out_ty=R.Tensor((n,), "float32"))
{then}
""",
    )


RELAX_CALLS_BOTH = kernel_then_pyfunc("pipeline", "demo")

# A loop over `n` into a buffer of size `m`: TVM cannot prove its writes in bounds, so the crash
# guards check them
SYMBOLIC_LOOP = """
@T.prim_func
def copy(a: T.handle, b: T.handle):
    n = T.int64()
    m = T.int64()
    A = T.match_buffer(a, (n,), "float32")
    B = T.match_buffer(b, (m,), "float32")
    for i in range(n):
        B[i] = A[i]
"""

# A Relax function of two outputs, for comparing by position and by field
PAIR = """
@R.function
def pair(
    x: R.Tensor((3,), "float32")
) -> R.Tuple(R.Tensor((3,), "float32"), R.Tensor((3,), "float32")):
    a = R.add(x, x)
    b = R.multiply(x, x)
    return (a, b)
"""

# Two dense layers with relu, the Relax function the pipeline, schedule and offload tests compile
MLP = """
@R.function
def mlp(
    x: R.Tensor((4, 16), "float32"),
    w1: R.Tensor((16, 32), "float32"),
    b1: R.Tensor((32,), "float32"),
    w2: R.Tensor((32, 8), "float32"),
    b2: R.Tensor((8,), "float32"),
) -> R.Tensor((4, 8), "float32"):
    with R.dataflow():
        h = R.nn.relu(R.add(R.matmul(x, w1), b1))
        y = R.nn.relu(R.add(R.matmul(h, w2), b2))
        R.output(y)
    return y
"""


# A kernel LLVM aborts on (TVM 0.27) when built for plain x86-64: AVX2's `pmadd.wd` on a CPU
# without AVX2 ("Do not know how to split the result of this operator!")
LLVM_ABORTS_IN_CODEGEN = """
@T.prim_func
def pmadd(a: T.handle, b: T.handle):
    A = T.match_buffer(a, (4,), "int16x16")
    B = T.match_buffer(b, (4,), "int32x8")
    for i in range(4):
        B[i] = T.call_llvm_pure_intrin("int32x8", "llvm.x86.avx2.pmadd.wd", A[i], A[i])
"""


# TVM 0.27's RewriteDataflowReshape makes `y = R.reshape(x)` a view of the argument `x`, so the
# call_tir_inplace on `y` writes into the caller's `x` (and `v` is 2x + 2 where 2x + 1 is right).
# The module must be named `reshape` (`cls = reshape`).
RESHAPE_THEN_IN_PLACE = """
@T.prim_func
def add_one(a: T.Buffer((8,), "float32")):
    for i in range(8):
        a[i] = a[i] + T.float32(1)

@R.function
def main(
    x: R.Tensor((2, 4), "float32"), w: R.Tensor((8,), "float32")
) -> R.Tensor((8,), "float32"):
    cls = reshape
    with R.dataflow():
        h = R.nn.relu(R.multiply(w, w))
        g = R.add(h, w)
        y = R.reshape(x, (8,))
        z = R.call_tir_inplace(
            cls.add_one, (y,), out_ty=R.Tensor((8,), "float32"), inplace_indices=[0]
        )
        v = R.add(z, R.reshape(x, (8,)))
        o = R.multiply(v, g)
        q = R.nn.softmax(o)
        R.output(q)
    return q
"""


def tensor_to_shape_then_add() -> tvm.IRModule:
    """apache/tvm#20192's pattern after a few bindings of a model: a reshape to
    `R.tensor_to_shape` of a tensor computed from constants, then an add, which TVM 0.27's default
    pipeline leaves to VM codegen ("CodeGenVM cannot emit this Relax operator directly")."""
    bb = relax.BlockBuilder()
    x = relax.Var("data", relax.TensorType([2, 8], "float32"))
    w = relax.Var("w", relax.TensorType([2, 8], "float32"))
    with bb.function("main", [x, w]):
        h = bb.emit(relax.op.add(relax.op.nn.relu(relax.op.multiply(x, w)), w))
        t = bb.emit(relax.op.add(relax.const(np.array([4, 4])), relax.const(np.array([0, 0]))))
        y = bb.emit(relax.op.reshape(h, bb.emit(relax.op.tensor_to_shape(t))))
        z = bb.emit(relax.op.add(y, y))
        bb.emit_func_output(bb.emit(relax.op.nn.softmax(z)))
    return bb.get()
