"""The package's modules on the stack during one call: does a call enter any module twice?

Run alone (`.venv/bin/python benchmarks/call_chain.py`): it prints the deepest chain of the
package's modules that the first call of a Relax function (which compiles it and its kernel)
goes through, every chain that enters a module it is already in, and the same for the next call.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import torch
from cells import ADD_TIR

from tvm_pyfunc_nb import LiveModule

CELL = (
    ADD_TIR
    + """
@R.function
def main(x: R.Tensor((5,), "float32"), y: R.Tensor((5,), "float32")) -> R.Tensor((5,), "float32"):
    cls = demo
    return R.call_tir(cls.add_tir, (x, y), out_ty=R.Tensor((5,), "float32"))
"""
)
PACKAGE = "tvm_pyfunc_nb."
ACCESSORS = {"kind", "name", "line"}  # a function entry's properties: data, not a step


def chain_of(frame) -> tuple[str, ...]:
    """The package modules on the stack under `frame`, outermost first, repeats collapsed."""
    stack = []
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith(PACKAGE) and frame.f_code.co_name not in ACCESSORS:
            module = module.rpartition(".")[2]
            if not stack or stack[-1] != module:
                stack.append(module)
        frame = frame.f_back
    return tuple(reversed(stack))


def chains(call) -> tuple[tuple[str, ...], set[tuple[str, ...]]]:
    """The deepest chain `call()` goes through, and the chains that enter a module twice."""
    deepest: tuple[str, ...] = ()
    again: set[tuple[str, ...]] = set()

    def profile(frame, event, arg):
        nonlocal deepest
        if event == "call":
            chain = chain_of(frame)
            if len(set(chain)) < len(chain):
                again.add(chain)
            deepest = max(deepest, chain, key=len)

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return deepest, again


def main() -> None:
    demo = LiveModule("demo")
    demo.run_cell(CELL)
    x, y = torch.arange(5.0), torch.ones(5)
    for which in ("first call", "next call"):
        deepest, again = chains(lambda: demo.main(x, y))
        print(f"{which}: {' -> '.join(deepest)}; chains entering a module twice: {len(again)}")
        for chain in sorted(again):
            print("   ", " -> ".join(chain))


if __name__ == "__main__":
    main()
