"""TVM's thread pool as wide as PyTorch's: compiled kernels run on as many threads as
`torch.get_num_threads()` in this process, unless `TVM_NUM_THREADS` was set before.

TVM's own default halves the cores on x86 (for hyperthreads): on a 2-core machine a notebook
ran TVM on one thread while PyTorch ran on two, and every comparison with PyTorch compared one
core with two. So before compiled code runs here (a call, `time`, `profile`, `tune`), the pool's
width follows PyTorch's: TVM reads `TVM_NUM_THREADS` at every parallel launch (one thread: the
kernel runs inline), and its pool, made once per calling thread with as many workers as the
machine has cores, uses that many of them (`runtime.config_threadpool`).

Two of TVM's habits are changed too, unless set in the environment, since PyTorch's threads and
TVM's share the same cores in one process (a model with `--offload torch` switches between them
many times a call, and a notebook times one against the other):
- `TVM_BIND_THREADS=0`: TVM pins each worker to a core (and a thread that asks for the pool's
  size to one core, when the pool has one thread): a pinned worker waits for its core while
  PyTorch's thread, or another process, holds it, and a pinned notebook thread takes every
  thread it starts (PyTorch's among them) to its core;
- `TVM_THREAD_POOL_SPIN_COUNT` (`SPIN_COUNT`): a worker spins this many yields for the next task
  before it sleeps: long enough to bridge the gaps between the kernels of one call, short
  enough not to take a core from PyTorch after it (TVM's 300 000 yields spun for tens of
  milliseconds: PyTorch eager right after ran several times slower).
"""

from __future__ import annotations

import os

import torch
import tvm

THREADS = "TVM_NUM_THREADS"
# What this package set THREADS to, in the environment, so that a child process (a build worker,
# a kernel a test starts) tells the user's setting from this package's
OURS = "TVM_PYFUNC_NB_POOL_THREADS"
SPIN_COUNT = 10_000
TVM_DEFAULTS = {"TVM_BIND_THREADS": "0", "TVM_THREAD_POOL_SPIN_COUNT": str(SPIN_COUNT)}
AFFINITY_BIG_CORES = 1  # TVM's ThreadGroup::kBig: every core, on a machine of one kind of core


class _Pool:
    """PyTorch's width when TVM's pool was last matched to it (None: never)."""

    width: int | None = None


def match_torch_threads() -> None:
    """TVM's pool as wide as PyTorch's, unless the user set `TVM_NUM_THREADS` (cheap enough for
    every call: one query of PyTorch's width when it has not changed)."""
    width = torch.get_num_threads()
    if width != _Pool.width:
        _Pool.width = width
        if not _set_by_user():
            _resize(width)


def _set_by_user() -> bool:
    value = os.environ.get(THREADS)
    return value is not None and value != os.environ.get(OURS)


def _resize(width: int) -> None:
    for name, value in TVM_DEFAULTS.items():
        os.environ.setdefault(name, value)
    if width > 1:  # one thread runs inline: no pool, which then starts with all cores
        _set_width(max(width, os.cpu_count() or 1))
        tvm.runtime.num_threads()  # the calling thread's pool, made now if it is not yet
        tvm.get_global_func("runtime.config_threadpool")(AFFINITY_BIG_CORES, width)
    _set_width(width)


def _set_width(width: int) -> None:
    os.environ[THREADS] = os.environ[OURS] = str(width)


def tvm_threads() -> int:
    """The threads compiled kernels run on here, now (after `match_torch_threads`, PyTorch's).

    With one, TVM runs a parallel loop inline, and its pool is not asked: a pool made then
    would have one worker for good, and TVM would pin the asking thread to one core."""
    match_torch_threads()
    if int(os.environ.get(THREADS, "0") or 0) == 1:
        return 1
    cores = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    try:
        return tvm.runtime.num_threads()
    finally:  # a pool made now by the user's TVM_NUM_THREADS may pin this thread: put it back
        if cores is not None:
            os.sched_setaffinity(0, cores)


def threads_text(tvm_count: int | None = None) -> str:
    """`TVM 2 threads, PyTorch 2`: both widths, as `time`, `profile` and `make bench` say them."""
    count = tvm_threads() if tvm_count is None else tvm_count
    return f"TVM {count} thread{'s' * (count != 1)}, PyTorch {torch.get_num_threads()}"
