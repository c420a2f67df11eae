"""The build worker's own process: reads jobs from its channel, runs them, answers.

Started by `process.BuildWorker` as `python <this file> FD PARENT_PID [--warm MODULE]`,
by path and not as `-m tvm_pyfunc_nb...`: importing the package imports TVM
and PyTorch (seconds), and a worker that only has to die for a test, or that
a job will make import them anyway, should not wait for that at its start.
So this file imports nothing but the standard library; a job's own module
(jobs.py, TVM) is imported when its first job is unpickled. With `--warm`
that module is imported before the first job, while the parent has other
things to do.

The channel is a socket (FD) inherited from the parent, with
`multiprocessing.connection`'s framing; stdout and stderr stay TVM's and
LLVM's, and the parent keeps the stderr as the error report of a death.
Every message is a tuple whose first item says what it is:

- parent to worker: `(JOB, job_id, pickled_job)`; a job is an object with a
  `run(log)` method, or a callable of no arguments;
- worker to parent: `(READY, pid)` once; `(STAGE, job_id, text)` before each
  stage of a job; then `(DONE, job_id, result)` or `(FAILED, job_id,
  pickled_error, traceback_text)`.

A crash needs no message: the parent sees the channel close and the exit
status. The worker ends when the channel closes (the parent closed it or
died) and, on Linux, when the parent dies even in the middle of a job
(`PR_SET_PDEATHSIG`: SIGKILL).
"""

from __future__ import annotations

import os
import pickle
import sys
import traceback
from multiprocessing.connection import Connection

JOB, READY, STAGE, DONE, FAILED = "job", "ready", "stage", "done", "failed"
_PR_SET_PDEATHSIG = 1


class StageLog:
    """What a running job says about where it is: each `stage(text)` reaches the parent at once,
    so that a crash is reported with the last stage the job entered."""

    def __init__(self, channel: Connection, job_id: int):
        self._channel = channel
        self.job_id = job_id
        self.last = "start"

    def stage(self, text: str) -> None:
        self.last = text
        self._channel.send((STAGE, self.job_id, text))


def error_payload(err: BaseException) -> bytes:
    """`err` as bytes the parent turns back into an exception of the same class, with its
    arguments and attributes (most exceptions, TVM's and this package's among them, do not
    survive plain pickling: their `__init__` takes other arguments than `args`)."""
    state = {}
    for key, value in vars(err).items():
        try:
            pickle.dumps(value)
        except Exception:  # an attribute that cannot travel (a TVM object): left behind
            continue
        state[key] = value
    cls = type(err)
    args = err.args
    try:
        pickle.dumps(args)
    except Exception:  # arguments that cannot travel: their text does
        args = tuple(str(a) for a in args)
    return pickle.dumps((cls.__module__, cls.__qualname__, args, state, str(err)))


def rebuild_error(payload: bytes) -> BaseException:
    """The exception `error_payload` described, as an instance of its own class if this process
    has that class, else a `RuntimeError` carrying its text."""
    import importlib

    module, qualname, args, state, text = pickle.loads(payload)
    try:
        cls = importlib.import_module(module)
        for part in qualname.split("."):
            cls = getattr(cls, part)
        err = cls.__new__(cls)
        err.args = args
        vars(err).update(state)
        return err
    except Exception:  # the class is not here (a module of the worker's own)
        return RuntimeError(f"{qualname}: {text}")


def serve(channel: Connection) -> None:
    """Run jobs until the channel closes."""
    while True:
        try:
            kind, job_id, pickled = channel.recv()
        except (EOFError, OSError):
            return
        if kind != JOB:
            continue
        log = StageLog(channel, job_id)
        try:
            job = pickle.loads(pickled)
            result = job.run(log) if hasattr(job, "run") else job()
            answer = pickle.dumps((DONE, job_id, result))  # a result that cannot travel fails
        except BaseException as err:
            answer = pickle.dumps((FAILED, job_id, error_payload(err), traceback.format_exc()))
        channel.send_bytes(answer)


def _die_with(parent: int) -> None:
    """SIGKILL when the parent dies (Linux), even while a job runs; exit now if it is gone."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # it died before the line above took effect
        os._exit(1)


def main(argv: list[str]) -> None:
    fd, parent = int(argv[0]), int(argv[1])
    _die_with(parent)
    import faulthandler

    faulthandler.enable()  # a segfault's Python stack goes to stderr, the parent's report
    channel = Connection(fd)
    channel.send((READY, os.getpid()))
    if "--warm" in argv:  # the module its jobs will need (TVM, PyTorch, the package), now
        import importlib

        importlib.import_module(argv[argv.index("--warm") + 1])
    serve(channel)


if __name__ == "__main__":
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]  # run by path: this folder's modules must not shadow top-level ones
    main(sys.argv[1:])
