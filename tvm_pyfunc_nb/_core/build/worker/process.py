"""The parent's side of the build worker: one child process, its channel, its jobs, its death.

A job runs in the child and its result comes back; an exception the job
raised comes back as the same exception. A death (a signal, an abort, an
exit, a job past its time) comes back as `WorkerCrash`, naming the signal,
the last stage the job reported and the last lines the child wrote to
stderr (where LLVM writes its fatal error and TVM its backtrace); a fresh
child is started at once, so that the next job finds it ready.

No child outlives this process: the child ends when its channel closes (this
process closed it or died), and on Linux the kernel kills it with SIGKILL
when this process dies, even in the middle of a job (`PR_SET_PDEATHSIG`,
which fires when the *thread* that started the child ends: children are
started from one thread kept for that, which ends only with the process).
The child runs in a session of its own, so that interrupting the notebook's
kernel (SIGINT to its process group) does not kill a build; an interrupted
wait kills the child instead.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import itertools
import os
import pickle
import queue
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import IO, Any

from ....errors import TVMModuleError, WorkerCrash
from ..trust import directory_problem, files_problem, temporary_directory
from .child import DONE, FAILED, JOB, STAGE, rebuild_error

DEFAULT_TIMEOUT = 600.0  # seconds a job may take before the worker is stopped
START_TIMEOUT = 120.0  # seconds a new worker may take to answer (it may import TVM meanwhile)
POLL_SECONDS = 0.1  # how often a wait for the worker lets an interrupt through
OUTPUT_LINES = 20  # lines of the worker's stderr kept in a crash report
OUTPUT_BYTES = 16384  # at most this much of it is read
CHILD = Path(__file__).with_name("child.py")  # run by path: see child.py
JOBS = f"{__package__}.jobs"  # what a warm worker imports before its first job
_DIED, _TIMED_OUT = "died", "timed out"
STARTING = "its start"  # the stage of a worker that dies before it is ready: not started again
_NOISE = ("Extension modules:",)  # Python's list of loaded C extensions after a fatal error


@dataclass(frozen=True)
class Crash:
    """How the worker died during a job: what it was doing and what it said last."""

    job: str  # what the job was (its `describe()` or its type)
    stage: str  # the last stage the job reported ("tir pass tirx.VectorizeLoop", "codegen"...)
    signal: str | None  # the signal that ended it ("SIGSEGV", "SIGABRT"...), None if it exited
    exit_code: int | None  # its exit status, when no signal ended it
    output: str  # the last lines it wrote to stderr
    seconds: float  # how long the job had run
    timed_out: bool = False  # it ran past its time and was stopped (with SIGKILL)

    @property
    def cause(self) -> str:
        """ "was killed by SIGSEGV (segmentation fault)", "exited with status 1", "was stopped
        after 600 s, its time limit"."""
        if self.timed_out:
            return f"was stopped after {self.seconds:.0f} s, its time limit"
        if self.signal:
            number = getattr(signal, self.signal, None)
            described = signal.strsignal(number) if number else None
            return f"was killed by {self.signal}" + (f" ({described.lower()})" if described else "")
        return f"exited with status {self.exit_code}"

    def __str__(self) -> str:
        said = f"\n{self.output}" if self.output else ""
        return f"the build worker {self.cause} during {self.stage} ({self.job}){said}"


class BuildWorker:
    """One child process that runs jobs, started on first use and again after each death.

    `directory` is private to this worker (made with `mkdtemp` in the process's private
    directory, `trust.temporary_directory`; removed by `close`): jobs write their files there
    (libraries, executables). It is checked before each file is handed out, and made again
    (under a new name) if it went away (a tmp cleaner) or someone else could change it; a
    file is loaded back only after `trusted_file` checked it again. The child's stderr goes
    to a file without a name (made there, unlinked at once), which only this process reads:
    no path of it can be replaced, by a symlink or otherwise. `warm` has the child import TVM
    and PyTorch as soon as it starts, before any job asks for them.

    Only the process that made it uses it: a process forked from this one that closes it (its
    `atexit`, inherited) leaves the child and the folder alone.
    """

    def __init__(self, *, warm: bool = True, name: str = "tvm-pyfunc-nb-worker"):
        self.warm = warm
        self._name = name
        self._owner = os.getpid()
        self.directory = self._new_directory()
        self.starts = 0  # children started so far
        self._log: IO[bytes] | None = None  # the child's stderr (see `_spawn`)
        self._lock = threading.RLock()  # one job at a time
        self._process: subprocess.Popen | None = None
        self._channel: Connection | None = None
        self._ready = False
        self._job_ids = itertools.count(1)  # a job's messages carry its id
        self._files = itertools.count(1)
        self._closed = False

    # -- what callers use ---------------------------------------------------------
    def run(
        self,
        job: Any,
        *,
        timeout: float | None = DEFAULT_TIMEOUT,
        on_stage: Callable[[str], None] | None = None,
    ) -> Any:
        """Run `job` in the worker and return its result.

        `job` is picklable and has a `run(log)` method (jobs.py), or is a callable of no
        arguments. An exception it raises there is raised here, as an instance of its own
        class with its attributes (`__cause__` holds the worker's traceback). A death raises
        `WorkerCrash`; so does a job that runs past `timeout` seconds (None: no limit), which
        is stopped. `on_stage(text)` hears each stage the job enters.
        """
        with self._lock:
            if self._closed:
                raise RuntimeError("the build worker is closed")
            self._ensure_started()
            described = getattr(job, "describe", lambda: type(job).__name__)()
            pickled = pickle.dumps(job)  # a job that cannot travel fails here, in the caller
            os.ftruncate(self._log.fileno(), 0)  # the report of a death: this job's output only
            started = time.monotonic()
            deadline = None if timeout is None else started + timeout
            try:
                kind, value, stage = self._exchange(pickled, deadline, on_stage)
            except BaseException:  # interrupted (KeyboardInterrupt): the job is abandoned
                self._stop()
                self._spawn()
                raise
            if kind == DONE:
                return value
            if kind == FAILED:
                raise value
            if kind == _TIMED_OUT:
                self._stop()
            raise self._crash(described, stage, started, timed_out=kind == _TIMED_OUT)

    def _exchange(
        self, job: bytes, deadline: float | None, on_stage: Callable[[str], None] | None
    ) -> tuple[str, Any, str]:
        """Send `job` (pickled) and read what the child says until it ends: `(DONE, result, stage)`,
        `(FAILED, exception, stage)`, or `(_DIED or _TIMED_OUT, None, the last stage)`."""
        job_id = next(self._job_ids)
        stage = "job start"
        try:
            self._channel.send((JOB, job_id, job))
            while True:
                message = self._receive(deadline)
                if message is None:
                    return _TIMED_OUT, None, stage
                kind, about, *rest = message
                if about != job_id:  # not this job's (none should be: a safeguard)
                    continue
                if kind == STAGE:
                    stage = rest[0]
                    if on_stage is not None:
                        on_stage(stage)
                elif kind == DONE:
                    return kind, rest[0], stage
                elif kind == FAILED:
                    return kind, _raised_there(*rest), stage
        except (EOFError, OSError):  # the channel closed: the child is gone
            return _DIED, None, stage

    def start(self) -> None:
        """Start the child now, without waiting for it (e.g. when a module that will need it
        is made); `run` waits for it to be ready."""
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._spawn()

    def new_file(self, suffix: str) -> Path:
        """A path in the worker's private directory (checked now) that no other job uses."""
        return self._private_directory() / f"job-{next(self._files)}{suffix}"

    def trusted_file(self, path: Path) -> Path:
        """`path`, a file a job wrote in the private directory, once no one else could have
        changed it or the directory (checked now, right before it is loaded)."""
        problem = directory_problem(self.directory) or files_problem(self.directory, [path.name])
        if problem:
            raise TVMModuleError(f"the build worker's file is not private, not loaded: {problem}")
        return path

    @property
    def pid(self) -> int | None:
        """The child's process id (None before it is started)."""
        return None if self._process is None else self._process.pid

    def close(self) -> None:
        """End the child (its channel closes; it is killed if it does not end within a
        second) and remove the private directory."""
        if os.getpid() != self._owner:  # a forked copy: the child and folder are the parent's
            return
        with self._lock:
            self._closed = True
            if self._process is not None:
                self._channel.close()
                try:
                    self._process.wait(timeout=1.0)
                except subprocess.TimeoutExpired:
                    self._stop()
                self._log.close()
            shutil.rmtree(self.directory, ignore_errors=True)

    # -- its folder ---------------------------------------------------------------------
    def _new_directory(self) -> Path:
        return Path(tempfile.mkdtemp(prefix=f"{self._name}-", dir=temporary_directory()))

    def _private_directory(self) -> Path:
        """The worker's folder, checked now: made again (under a new name) if it is gone, is
        not a directory of its own (a symlink) or someone else could change it."""
        try:
            real = stat.S_ISDIR(os.lstat(self.directory).st_mode)
        except FileNotFoundError:
            real = False
        if not real or directory_problem(self.directory):
            self.directory = self._new_directory()
        return self.directory

    # -- the child's life -----------------------------------------------------------
    def _ensure_started(self) -> None:
        if self._process is None or self._process.poll() is not None:
            self._spawn()  # never started, or died between jobs (out of memory...)
        if not self._ready:
            started = time.monotonic()
            try:
                message = self._receive(started + START_TIMEOUT)
            except (EOFError, OSError):  # it died before it could say it was ready
                raise self._crash("starting the worker", STARTING, started) from None
            if message is None:
                self._stop()
                raise self._crash("starting the worker", STARTING, started, timed_out=True)
            self._ready = True

    def _spawn(self) -> None:
        """A new child, connected by a socket pair; the previous one, if any, is let go."""
        if self._channel is not None:
            self._channel.close()
        ours, theirs = socket.socketpair()
        args = [sys.executable, str(CHILD), str(theirs.fileno()), str(os.getpid())]
        if self.warm:
            args += ["--warm", JOBS]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        if self._log is not None:  # the previous child's (it is gone: a new child, a new log)
            self._log.close()
        self._log = _unnamed_log(self._private_directory())
        self._process = _launcher.start(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            pass_fds=(theirs.fileno(),),
            env=env,
            start_new_session=True,
        )
        theirs.close()
        self._channel = Connection(ours.detach())
        self._ready = False
        self.starts += 1

    def _receive(self, deadline: float | None) -> tuple | None:
        """The next message from the child, or None if `deadline` passed first. Raises
        `EOFError` when the child is gone. Waits in slices, so that an interrupt (SIGINT, which
        any thread of the process may receive) is raised here within `POLL_SECONDS`."""
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            if self._channel.poll(POLL_SECONDS if left is None else min(left, POLL_SECONDS)):
                return self._channel.recv()

    def _stop(self) -> None:
        """Kill the child and whatever it started (its session), and reap it. A child already
        reaped is left alone: its number may be another process's by now."""
        if self._process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process.pid, signal.SIGKILL)
        self._process.wait()

    def _crash(self, job: str, stage: str, started: float, *, timed_out: bool = False):
        """The `WorkerCrash` of the child that just died (reaped here), and a fresh child
        started for the next job."""
        status = self._process.wait()
        crash = Crash(
            job=job,
            stage=stage,
            signal=None if status >= 0 or timed_out else signal.Signals(-status).name,
            exit_code=status if status >= 0 else None,
            output=_tail(self._log),
            seconds=time.monotonic() - started,
            timed_out=timed_out,
        )
        if stage != STARTING:
            self._spawn()
        return WorkerCrash(crash)


class _Launcher:
    """Starts children from one thread that lives as long as the process: the parent-death
    signal of a child fires when the thread that started it ends, and a caller's thread (a
    cache writer, a front end's) may end any time."""

    def __init__(self):
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self, args: list[str], **options) -> subprocess.Popen:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name="tvm-build-worker-launcher", daemon=True
                )
                self._thread.start()
        started: Future = Future()
        self._requests.put((started, args, options))
        return started.result()

    def _serve(self) -> None:
        while True:
            started, args, options = self._requests.get()
            try:
                started.set_result(subprocess.Popen(args, **options))
            except BaseException as err:
                started.set_exception(err)


_launcher = _Launcher()
_shared: BuildWorker | None = None
_shared_lock = threading.Lock()


def _after_fork_in_child() -> None:
    """A process forked from this one (multiprocessing, a DataLoader) has none of its threads
    and must not talk to its worker: it gets a launcher and, if it asks, a worker of its own."""
    global _launcher, _shared, _shared_lock
    _launcher, _shared, _shared_lock = _Launcher(), None, threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def shared_worker() -> BuildWorker:
    """The worker of this process, shared by every live module; made (not started) at the first
    call, closed when the interpreter exits."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = BuildWorker()
            atexit.register(_shared.close)
        return _shared


def _raised_there(payload: bytes, traceback_text: str) -> BaseException:
    err = rebuild_error(payload)
    err.__cause__ = WorkerTraceback(traceback_text)
    return err


class WorkerTraceback(Exception):
    """Where in the worker a job's exception was raised (its traceback, as text)."""

    def __str__(self) -> str:
        return "raised in the build worker:\n" + self.args[0]


def _unnamed_log(directory: Path) -> IO[bytes]:
    """A file for a child's stderr, unlinked as it is made (no name in the folder to replace),
    appended to (`run` truncates it for each job, and the child's next line lands at its
    start)."""
    log = tempfile.TemporaryFile(dir=directory)  # noqa: SIM115 (kept open for the child's life)
    fcntl.fcntl(log.fileno(), fcntl.F_SETFL, fcntl.fcntl(log.fileno(), fcntl.F_GETFL) | os.O_APPEND)
    return log


def _tail(log: IO[bytes]) -> str:
    """The last lines the child wrote to `log` (at most `OUTPUT_LINES`), without blank ones."""
    try:
        size = os.fstat(log.fileno()).st_size
        start = max(0, size - OUTPUT_BYTES)
        text = os.pread(log.fileno(), size - start, start).decode(errors="replace")
    except OSError:
        return ""
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith(_NOISE)]
    return "\n".join(lines[-OUTPUT_LINES:])
