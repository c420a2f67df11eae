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
