"""Cell bodies shared by the tests: the seed example of the product, as a user types it."""

ADD_TIR = """
@T.prim_func
def add_tir(a: T.handle, b: T.handle, c: T.handle):
    n = T.int64()
    A = T.match_buffer(a, (n,), "float32")
    B = T.match_buffer(b, (n,), "float32")
    C = T.match_buffer(c, (n,), "float32")
    for i in range(n):
        C[i] = A[i] + B[i]
"""

MAIN_PYFUNC = '''
@I.pyfunc
def main(self, x, y):
    """Add on the TIR kernel, then double in PyTorch."""
    z = self.call_tir(self.add_tir, [x, y], out_ty=R.Tensor((x.shape[0],), "float32"))
    return z * 2
'''

MAIN_RELAX = """
@R.function
def main_relax(
    x: R.Tensor(("n",), "float32"), y: R.Tensor(("n",), "float32")
) -> R.Tensor(("n",), "float32"):
    return R.add(x, y)
"""

SCALE_PYFUNC = """
@I.pyfunc
def scale(self, x):
    return x * 10
"""

RELAX_CALLS_BOTH = """
@R.function
def pipeline(
    x: R.Tensor(("n",), "float32"), y: R.Tensor(("n",), "float32")
) -> R.Tensor(("n",), "float32"):
    n = T.int64()
    cls = demo
    z = R.call_tir(cls.add_tir, (x, y), out_ty=R.Tensor((n,), "float32"))
    w = R.call_py_func("scale", z, out_ty=R.Tensor((n,), "float32"))
    return w
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
