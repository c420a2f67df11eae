"""The benchmark module written twice: `%%tvmmodule` cells (ours), one `@I.ir_module` (upstream).

N PrimFuncs `k0..k{N-1}` (`C = A + B + k`), two Relax functions that call
PrimFuncs and TVM ops, and two pyfuncs: one calling a PrimFunc through
`self.call_tir`, one calling a Relax function. An edit changes one constant,
so every edit is new to every cache.
"""

from __future__ import annotations

import textwrap

MODULE = "bench"
EDITED_PRIMFUNC = "k3"  # used by Relax `main` and by pyfunc `py_tir`


def primfunc(k: int, constant: float | None = None) -> str:
    value = float(k) if constant is None else constant
    return textwrap.dedent(f"""
        @T.prim_func
        def k{k}(a: T.handle, b: T.handle, c: T.handle):
            n = T.int64()
            A = T.match_buffer(a, (n,), "float32")
            B = T.match_buffer(b, (n,), "float32")
            C = T.match_buffer(c, (n,), "float32")
            for i in range(n):
                C[i] = A[i] + B[i] + T.float32({value!r})
        """)


def relax_functions(cls: str) -> str:
    return textwrap.dedent(f"""
        @R.function
        def main(
            x: R.Tensor(("n",), "float32"), y: R.Tensor(("n",), "float32")
        ) -> R.Tensor(("n",), "float32"):
            n = T.int64()
            cls = {cls}
            z = R.call_tir(cls.k3, (x, y), out_ty=R.Tensor((n,), "float32"))
            return R.multiply(z, y)

        @R.function
        def main2(
            x: R.Tensor(("n",), "float32"), y: R.Tensor(("n",), "float32")
        ) -> R.Tensor(("n",), "float32"):
            n = T.int64()
            cls = {cls}
            z = R.call_tir(cls.k1, (x, y), out_ty=R.Tensor((n,), "float32"))
            return R.add(z, x)
        """)


def pyfunc_tir(scale: float = 2.0) -> str:
    return textwrap.dedent(f"""
        @I.pyfunc
        def py_tir(self, x, y):
            z = self.call_tir(self.k3, [x, y], out_ty=R.Tensor((x.shape[0],), "float32"))
            return z * {scale!r}
        """)


def pyfunc_relax() -> str:
    return textwrap.dedent("""
        @I.pyfunc
        def py_relax(self, x, y):
            return self.main2(x, y) + 1
        """)


def our_cells(n: int, module: str = MODULE) -> dict[str, str]:
    """Cell id -> body of `%%tvmmodule <module>`: one PrimFunc per cell, as a user exploring would
    have it.
    """
    cells = {f"k{k}": primfunc(k) for k in range(n)}
    cells["relax"] = relax_functions(module)
    cells["py_tir"] = pyfunc_tir()
    cells["py_relax"] = pyfunc_relax()
    return cells


def upstream_class(n: int, *, edited: dict[str, str] | None = None) -> str:
    """The same module as one `@I.ir_module class Bench(BasePyModule)`; `edited` replaces bodies by
    cell id.
    """
    cells = {**our_cells(n), **(edited or {})}
    cells["relax"] = relax_functions("Bench")
    body = "".join(cells.values())
    return (
        "from tvm.script import ir as I, relax as R, tirx as T\n"
        "from tvm.relax.base_py_module import BasePyModule\n\n"
        "@I.ir_module\nclass Bench(BasePyModule):\n" + textwrap.indent(body, "    ")
    )


def expected_main(x, y, constant: float):
    return (x + y + constant) * y
