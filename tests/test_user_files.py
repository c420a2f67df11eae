"""Files written for the user (`export`, a bisect's repro) are written whole or not at all, and a
symbolic link at the destination is refused, not followed (`_core/user_files.py`).

A full disk, honestly: a forked process whose file size limit is 4 KB (`RLIMIT_FSIZE`, SIGXFSZ
ignored), so that every write past it fails with EFBIG as on a full disk or over a quota.
Before, `export` left a 4 KB fragment and raised a raw `OSError`, and wrote through a link.
"""

from __future__ import annotations

import errno
import multiprocessing
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tvm_pyfunc_nb import LiveModule
from tvm_pyfunc_nb._core.faults.bisect_repro import Repro
from tvm_pyfunc_nb._core.user_files import write_whole
from tvm_pyfunc_nb.errors import FileWriteError, TVMModuleError

BIG = "x = 1\n" * 4000  # 24 KB: past the limit


def full_disk_export(report, folder: str) -> None:
    """In a forked process that may not grow a file past 4 KB: an export of a module whose
    text is larger, over an earlier export (reported: the error, and the folder's files)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    live = LiveModule("big")
    live.add_python_function("f", lambda x: x)
    path = os.path.join(folder, "big.py")
    live.export(path)
    before = Path(path).read_text()
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
    live.add_python_function("g", eval("lambda x: x  # " + "padding " * 3000))
    try:
        live.export(path)
        report.send(("written", None, None))
    except Exception as err:
        same = Path(path).read_text() == before
        report.send((type(err).__name__, getattr(err, "errno", None), (same, str(err))))
    report.send(sorted(os.listdir(folder)))


def test_an_export_on_a_full_disk_leaves_the_earlier_file_whole_and_says_so(tmp_path):
    fork = multiprocessing.get_context("fork")
    receive, report = fork.Pipe(duplex=False)
    process = fork.Process(target=full_disk_export, args=(report, str(tmp_path)))
    process.start()
    process.join(300)
    report.close()
    kind, number, (same, message) = receive.recv()
    files = receive.recv()
    assert process.exitcode == 0
    assert (kind, number) == ("FileWriteError", errno.EFBIG), message
    assert same, "the earlier export was damaged"
    assert "export: cannot write" in message and "nothing was written" in message
    assert files == ["big.py"]  # no fragment, no temporary file left


@pytest.mark.parametrize("writer", ["export", "repro"])
def test_a_symbolic_link_at_the_destination_is_refused_and_its_target_untouched(tmp_path, writer):
    elsewhere = tmp_path / "someone_elses.txt"
    elsewhere.write_text("theirs\n")
    link = tmp_path / "out.py"
    link.symlink_to(elsewhere)
    with pytest.raises(FileWriteError, match="is a symbolic link, which is not followed"):
        if writer == "export":
            live = LiveModule("small")
            live.add_python_function("f", lambda x: x)
            live.export(str(link))
        else:
            Repro(text="print(1)\n").write(str(link))
    assert elsewhere.read_text() == "theirs\n" and link.is_symlink()


def test_a_written_file_is_whole_with_the_mode_open_would_give_it(tmp_path):
    path = tmp_path / "whole.py"
    assert write_whole(path, BIG, "export") == str(path)
    assert path.read_text() == BIG
    umask = os.umask(0o022)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
    with pytest.raises(FileWriteError, match="cannot write") as raised:
        write_whole(tmp_path / "no" / "such" / "folder.py", BIG, "export")
    assert raised.value.errno == errno.ENOENT and isinstance(raised.value, TVMModuleError)


TUNE_ON_A_FULL_DISK = """
import resource, signal, sys, warnings
from tvm_pyfunc_nb import LiveModule
from tvm_pyfunc_nb._core.build.disk_cache import CompileCache

live = LiveModule("demo", persistent_cache=CompileCache(sys.argv[1]))
live.run_cell('''
@T.prim_func(s_tir=True)
def mm(a: T.Buffer((32, 32), "float32"), b: T.Buffer((32, 32), "float32"),
       c: T.Buffer((32, 32), "float32")):
    for i, j, k in T.grid(32, 32, 32):
        with T.sblock("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                c[vi, vj] = T.float32(0)
            c[vi, vj] = c[vi, vj] + a[vi, vk] * b[vk, vj]
''')
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (2048, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
with warnings.catch_warnings(record=True) as said:
    warnings.simplefilter("always")
    report = live.tune("mm", trials=2)
print("TRIALS", report.trials_run)
print("WARNED", [str(w.message) for w in said if w.category.__name__ == "CompileCacheWarning"])
"""


def test_a_tune_whose_records_a_full_disk_cut_short_says_so(tmp_path):
    """Before, MetaSchedule's failed appends went unseen: the tune reported its records kept."""
    done = subprocess.run(
        [sys.executable, "-c", TUNE_ON_A_FULL_DISK, str(tmp_path / "cache")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "TRIALS 2" in done.stdout  # the tuned schedule is used, from memory
    assert "the tuning records of `mm` were not all written to" in done.stdout, done.stdout
    assert "a full disk, a quota or a file size limit?" in done.stdout
