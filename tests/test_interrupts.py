"""Ctrl-C stays a `KeyboardInterrupt` wherever it lands (SPEC "Nothing lost, nothing planted").

Real signals in a real IPython shell: the pyfunc (or the pass) sends SIGINT to the main thread
itself (as a terminal's Ctrl-C reaches it), so that it lands where the test means it to,
whatever the machine's load: sent to the process, it may land on another of its threads (TVM's
pool has several now), and the main thread's wait would run out its time. A user's
`except Exception` loop must stop; a build it lands in must not be remembered as the
function's failure; and after TVM's Z3 prover ran (it takes SIGINT while it proves and gives
Python's handler back with SA_RESTART), a wait in a system call must still be interrupted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest
import torch
from tvm import relax

# A pyfunc that is interrupted while it runs (SIGINT from a timer, a real signal), and a Relax
# function that calls it; `loops` counts the turns of a user's `except Exception` loop.
CELL = """
@I.pyfunc
def slow(self, x: torch.Tensor) -> torch.Tensor:
    main = threading.main_thread().ident
    threading.Timer(0.05, signal.pthread_kill, (main, signal.SIGINT)).start()
    threading.Event().wait(10)
    return x + 1

@R.function
def via(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
    y = R.call_py_func("slow", (x,), out_ty=R.Tensor((4,), "float32"))
    z = R.add(y, y)
    return z

@R.function
def twice(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
    y = R.add(x, x)
    return y
"""
WAYS = {
    "a direct call": "demo.slow(x)",
    "a Relax function calling it": "demo.via(x)",
    "trace": 'demo.trace("via", x)',
    "compare": 'demo.compare("via", lambda x: (x + 1) * 2, x)',
    "time": 'demo.time("via", x, number=1, repeat=1)',
    "time of the pyfunc": 'demo.time("slow", x, number=1, repeat=1)',
    "profile": 'demo.profile("via", x, number=1, repeat=1)',
}
USERS_LOOP = """
loops = 0
for _ in range(3):
    loops += 1
    try:
        {call}
    except Exception:
        pass
"""


@pytest.fixture
def interrupted(shell):
    shell.ns.update(os=os, signal=signal, threading=threading, torch=torch, x=torch.ones(4))
    shell.cell("demo", CELL)
    return shell


@pytest.mark.parametrize("way", WAYS)
def test_ctrl_c_in_a_pyfunc_stops_a_users_except_exception_loop(interrupted, way):
    error = interrupted.run(USERS_LOOP.format(call=WAYS[way]), expect_error=KeyboardInterrupt)
    assert type(error) is KeyboardInterrupt
    assert interrupted.ns["loops"] == 1
    assert torch.equal(interrupted.eval("demo.twice(x)"), torch.full((4,), 2.0))  # works on


# A Relax pipeline whose first build is interrupted: its pass sends SIGINT while TVM runs it
# (Python called from C++, as a legalization or a pass of the user's own is).
INTERRUPTED_ONCE = {"builds": 0}


def interrupted_once():
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="InterruptedOnce")
    def once(mod, ctx):
        INTERRUPTED_ONCE["builds"] += 1
        if INTERRUPTED_ONCE["builds"] == 1:
            signal.raise_signal(signal.SIGINT)
        return mod

    return tvm.transform.Sequential([once, relax.get_pipeline("default")])


ADD = """
@R.function
def double(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
    y = R.add(x, x)
    return y
"""


def test_ctrl_c_in_a_build_is_a_keyboard_interrupt_and_the_next_call_builds(shell):
    from tvm.relax.pipeline import PIPELINE_MAP

    relax.register_pipeline("interrupted_once")(interrupted_once)
    INTERRUPTED_ONCE["builds"] = 0
    try:
        shell.cell("demo", ADD, options="--pipeline interrupted_once")
        shell.ns["x"] = torch.ones(4)
        error = shell.run("demo.double(x)", expect_error=BaseException)
        assert type(error) is KeyboardInterrupt, repr(error)  # was CompileError("RuntimeError")
        assert torch.equal(shell.eval("demo.double(x)"), torch.full((4,), 2.0))  # not remembered
    finally:
        PIPELINE_MAP.pop("interrupted_once")


def sleeps_in_the_worker():
    import time

    import tvm

    @tvm.transform.module_pass(opt_level=0, name="Sleeps")
    def sleeps(mod, ctx):
        os.kill(os.getppid(), signal.SIGINT)  # Ctrl-C for the notebook, while it waits
        time.sleep(60)
        return mod

    return sleeps


def test_ctrl_c_while_a_worker_builds_is_a_keyboard_interrupt_and_the_module_works_on(shell):
    from tvm.relax.pipeline import PIPELINE_MAP

    relax.register_pipeline("sleeps_in_the_worker")(sleeps_in_the_worker)
    try:
        shell.cell("slow", ADD, options="--isolate --pipeline sleeps_in_the_worker")
        shell.cell("fine", ADD, options="--isolate")
        shell.ns["x"] = torch.ones(4)
        error = shell.run("slow.double(x)", expect_error=BaseException)
        assert type(error) is KeyboardInterrupt, repr(error)
        assert torch.equal(shell.eval("fine.double(x)"), torch.full((4,), 2.0))  # a fresh worker
    finally:
        PIPELINE_MAP.pop("sleeps_in_the_worker")


# What TVM's Z3 prover leaves behind: Python's SIGINT handler reinstalled with SA_RESTART, so
# that a wait in a system call (here a subprocess's) resumes after Ctrl-C instead of raising.
PROVES_WITH_Z3 = """
from tvm import tirx
from tvm.sym import Analyzer, ProofStrength
n, m = tirx.Var("n", "int64"), tirx.Var("m", "int64")
assert Analyzer().can_prove(n * m * n * m >= 0, strength=ProofStrength.SYMBOLIC_BOUND)
"""
# Ctrl-C while the cell waits for a child process that would, unless interrupted, end by itself
# and leave a file behind: a Ctrl-C that waited for the end of the wait leaves the file there
WAITS = """
threading.Timer(0.2, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT)).start()
subprocess.run([sys.executable, "-c", f"import time; time.sleep(20); open({str(ended)!r}, 'w')"])
"""


def proves_with_z3():
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="ProvesWithZ3")
    def proves(mod, ctx):
        exec(PROVES_WITH_Z3, {})
        return mod

    return tvm.transform.Sequential([proves, relax.get_pipeline("default")])


def test_after_tvms_z3_ran_in_a_cell_ctrl_c_still_interrupts_a_wait(shell, tmp_path):
    shell.ns.update(os=os, signal=signal, threading=threading, subprocess=subprocess, sys=sys)
    shell.ns["ended"] = tmp_path / "ended"
    shell.run(PROVES_WITH_Z3)  # the user's own TVM code, in a cell of its own
    error = shell.run(WAITS, expect_error=BaseException)
    assert type(error) is KeyboardInterrupt, repr(error)
    assert not (tmp_path / "ended").exists(), "Ctrl-C came only when the wait had ended"


def test_after_a_build_ran_z3_ctrl_c_still_interrupts_a_wait_in_the_same_cell(shell, tmp_path):
    from tvm.relax.pipeline import PIPELINE_MAP

    relax.register_pipeline("proves_with_z3")(proves_with_z3)
    try:
        shell.cell("demo", ADD, options="--pipeline proves_with_z3")
        shell.ns.update(os=os, signal=signal, threading=threading, subprocess=subprocess)
        shell.ns.update(sys=sys, x=torch.ones(4), ended=tmp_path / "ended")
        error = shell.run("demo.double(x)" + WAITS, expect_error=BaseException)
        assert type(error) is KeyboardInterrupt, repr(error)
        assert not (tmp_path / "ended").exists(), "Ctrl-C came only when the wait had ended"
    finally:
        PIPELINE_MAP.pop("proves_with_z3")
