"""An interrupt (Ctrl-C, the kernel's stop button) stays a `KeyboardInterrupt` wherever it lands.

Two things in TVM 0.27 would make it something else, or make it late:
- TVM's FFI turns a Python exception it does not know, raised in Python code
  that C++ called (a pyfunc through `R.call_py_func`, a legalization, a pass),
  into an empty `RuntimeError`: a build then failed "for" `RuntimeError`, and
  that failure was remembered as the function's. `KeyboardInterrupt` is
  registered with the FFI here, so it crosses C++ as itself.
- The Z3 prover linked into TVM's analyzer takes SIGINT while it proves and
  gives Python's handler back with `signal()`, that is with `SA_RESTART`: a
  wait in a system call (a subprocess, a socket, a pipe) then resumes after
  Ctrl-C instead of raising, until it ends by itself. `python_sigint` puts
  Python's own disposition back; the build calls it after each compile, the
  magics after each cell.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import tvm_ffi

tvm_ffi.register_error("KeyboardInterrupt", KeyboardInterrupt)


def is_interrupt(err: BaseException) -> bool:
    """An interrupt (`KeyboardInterrupt`, `SystemExit`): never made into the package's error,
    so that a user's `except Exception` does not go on through Ctrl-C."""
    return not isinstance(err, Exception)


def python_sigint() -> None:
    """SIGINT handled as Python installs its handler (no `SA_RESTART`), whatever C code did
    to it since; the Python-level handler stays what it is. A no-op outside the main thread
    (only it can set a handler) or where SIGINT is not Python's (ignored, or the default)."""
    if threading.current_thread() is not threading.main_thread():
        return
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        signal.signal(signal.SIGINT, handler)


def giving_sigint_back(compiling: Callable[[str, tuple[str, ...]], AbstractContextManager]):
    """`compiling(kind, names)` (the context manager a build runs each TVM compile in), which
    then hands SIGINT back as Python handles it (the compile may have run Z3)."""

    @contextlib.contextmanager
    def given_back(kind: str, names: tuple[str, ...]) -> Iterator[None]:
        try:
            with compiling(kind, names):
                yield
        finally:
            python_sigint()

    return given_back
