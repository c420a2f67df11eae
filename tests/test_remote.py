"""Live modules whose compiled code runs on a remote device, through real TVM RPC servers.

Servers and a tracker run as subprocesses on 127.0.0.1 on free ports (`LocalRPC`), each in a
session of its own so that stopping one ends everything it started. A server that accepts and
never answers is a socket of this process (`SilentServer`).
"""

from __future__ import annotations

import fcntl
import gc
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import torch
from cells import ADD_TIR, MAIN_PYFUNC, MAIN_RELAX, MLP, RELAX_CALLS_BOTH, SCALE_PYFUNC
from tvm.rpc import base

from tvm_pyfunc_nb import (
    CallError,
    IllFormedModuleError,
    LiveModule,
    ScheduleError,
    TVMModuleError,
)
from tvm_pyfunc_nb._core.run import rpc_connection
from tvm_pyfunc_nb.testing import LocalRPC

pytestmark = pytest.mark.slow

X = torch.arange(5, dtype=torch.float32)
Y = torch.ones(5)
TWO_OUT = """
@R.function
def both(x: R.Tensor(("n",), "float32"), y: R.Tensor(("n",), "float32")):
    return (R.add(x, y), R.multiply(x, y))
"""


@pytest.fixture(scope="module")
def server():
    with LocalRPC() as running:
        yield running


def remote_cell(shell, server, body, more_options="", name="demo", **kwargs):
    """Run `%%tvmmodule NAME --rpc SERVER [more options]` with `body`."""
    options = f"--rpc {server.address} {more_options}".strip()
    return shell.cell(name, body, options=options, **kwargs)


def test_every_call_direction_that_can_run_remotely(shell, server):
    remote_cell(shell, server, ADD_TIR + MAIN_PYFUNC + MAIN_RELAX + TWO_OUT)
    demo = shell.ns["demo"]
    out = torch.empty(5)
    demo.add_tir(X, Y, out)  # a PrimFunc, destination-passing style: the output comes back
    assert torch.equal(out, X + Y)
    assert torch.equal(demo.main_relax(X, Y), X + Y)  # a Relax function
    assert torch.equal(demo.main(X, Y), (X + Y) * 2)  # a pyfunc here, its call_tir there
    total, product = demo.both(X, Y)  # a tuple comes back too
    assert torch.equal(total, X + Y) and torch.equal(product, X * Y)
    assert torch.equal(demo.call_tir("add_tir", [X, Y], out_ty=(5,)), X + Y)
    assert demo.options.rpc == server.address
    names = [name for name, _ in demo.stats.uploads]
    assert "add_tir" in names and "relax_vm" in names


def test_a_relax_function_that_calls_a_pyfunc_is_refused_at_the_cell(shell, server):
    body = ADD_TIR + SCALE_PYFUNC + RELAX_CALLS_BOTH
    err = remote_cell(shell, server, body, expect_error=IllFormedModuleError)
    assert err.function == "pipeline" and "remote" in str(err) and "scale" in str(err)
    # the line of the binding at fault, not of `@R.function` (the `%%tvmmodule` line is line 1)
    calls = [n for n, text in enumerate(body.splitlines(), 2) if 'R.call_py_func("scale"' in text]
    assert err.line == calls[0] and f"cell line {calls[0]}:" in str(err)
    assert "demo" not in shell.ns or "pipeline" not in shell.ns["demo"].functions


def test_uploads_are_incremental(shell, server):
    remote_cell(shell, server, ADD_TIR, cell_id="kernel")
    remote_cell(shell, server, MAIN_PYFUNC, cell_id="py")
    demo = shell.ns["demo"]
    demo.main(X, Y)
    first = list(demo.stats.uploads)
    assert [name for name, _ in first] == ["add_tir"]

    remote_cell(shell, server, MAIN_PYFUNC.replace("z * 2", "z * 3"), cell_id="py")
    assert torch.equal(demo.main(X, Y), (X + Y) * 3)
    assert demo.stats.uploads == first  # a pyfunc edit uploads nothing

    remote_cell(shell, server, ADD_TIR.replace("A[i] + B[i]", "A[i] - B[i]"), cell_id="kernel")
    assert torch.equal(demo.main(X, Y), (X - Y) * 3)
    assert [name for name, _ in demo.stats.uploads[len(first) :]] == ["add_tir"]  # one artifact

    remote_cell(shell, server, ADD_TIR, cell_id="kernel")  # the first version again
    assert torch.equal(demo.main(X, Y), (X + Y) * 3)
    assert len(demo.stats.uploads) == 2  # already there in this session: not sent again


def test_kernels_the_compile_cache_holds_are_built_again_to_be_sent(shell, server, tmp_path):
    shell.run(f"%config TVMModuleMagics.cache_dir = {str(tmp_path)!r}")
    try:
        cached_kernels_reach_the_server(shell, server)
    finally:
        shell.run("%config TVMModuleMagics.cache_dir = ''")


def cached_kernels_reach_the_server(shell, server):
    shell.cell("here", ADD_TIR + MAIN_RELAX)  # a local module fills the cache
    here = shell.ns["here"]
    here.add_tir(X, Y, torch.empty(5))
    here.main_relax(X, Y)
    shell.flush_cache()
    cache = shell.magics.compile_cache()
    entries = cache.summary().entries
    assert entries >= 2
    remote_cell(shell, server, ADD_TIR + MAIN_RELAX)  # same target, same kernels
    demo = shell.ns["demo"]
    out = torch.empty(5)
    demo.add_tir(X, Y, out)  # a library loaded from a file could not be exported to be sent
    assert torch.equal(out, X + Y)
    assert torch.equal(demo.main_relax(X, Y), X + Y)
    assert {name for name, _ in demo.stats.uploads} == {"add_tir", "relax_vm"}
    shell.flush_cache()  # and what was built for the server is not kept on disk, never to be read
    assert cache.summary().entries == entries


class AddsOne(torch.nn.Module):
    def forward(self, x):
        x.add_(1.0)
        return x * 2


def test_a_model_that_writes_into_its_input_writes_into_the_callers_tensor(shell, server):
    """The remote device wrote into its copy, and the caller's tensor stayed as it was."""
    demo = shell.run(f"%tvmmodule demo --rpc {server.address}")
    demo.add_torch(AddsOne(), (X.clone(),))
    x = X.clone()
    assert torch.equal(demo.main(x), (X + 1) * 2) and torch.equal(x, X + 1)
    comparison = demo.compare("main", AddsOne(), X)
    assert comparison.passed and [name for name, _ in comparison.written] == ["x"]


def test_time_measures_on_the_remote_device(shell, server):
    remote_cell(shell, server, MAIN_RELAX)
    timing = shell.ns["demo"].time("main_relax", X, Y, number=20, repeat=3)
    assert 0 < timing.median < 0.1 and "remote" in timing.function.how
    assert server.address in timing.function.how


def test_a_server_that_dies_then_one_that_hangs_give_errors_naming_them_and_nothing_is_lost(
    shell, server
):
    shell.run("%config TVMModuleMagics.rpc_timeout = 3.0")  # read when a module connects
    try:
        dies_then_hangs(shell, server)
    finally:
        shell.run("%config TVMModuleMagics.rpc_timeout = 60.0")


def dies_then_hangs(shell, server):
    """The shared server, restarted then stopped a while: it is running again afterwards."""
    remote_cell(shell, server, ADD_TIR + MAIN_RELAX)
    demo = shell.ns["demo"]
    assert torch.equal(demo.main_relax(X, Y), X + Y)
    uploads = len(demo.stats.uploads)
    server.restart()  # killed, and started again on the same port
    started = time.monotonic()
    with pytest.raises(CallError) as caught:
        demo.main_relax(X, Y)
    assert time.monotonic() - started < 10
    assert server.address in str(caught.value) and caught.value.function == "main_relax"
    assert torch.equal(demo.main_relax(X, Y), X + Y)  # reconnected and uploaded again
    assert len(demo.stats.uploads) == uploads + 1
    assert set(demo.functions) == {"add_tir", "main_relax"}  # nothing was lost

    # the same server, stopped (hung): an error within the timeout, never a hang, in the
    # session and then at connecting, and nothing left behind: no thread, no socket
    os.killpg(server.process.pid, signal.SIGSTOP)
    try:
        threads, sockets = left_behind(server.port)
        assert sockets == 1  # the session's
        for says in ("did not answer within 3 s", "no answer within 3 s"):
            started = time.monotonic()
            with pytest.raises(CallError, match=says):
                demo.main_relax(X, Y)
            assert time.monotonic() - started < 6, time.monotonic() - started
            assert left_behind(server.port) == (threads, 0)
    finally:
        os.killpg(server.process.pid, signal.SIGCONT)
    # back, the server is free for a new session: the one given up is closed
    assert torch.equal(demo.main_relax(X, Y), X + Y)

    # Ctrl-C while the server hangs gives the call up the same way
    os.killpg(server.process.pid, signal.SIGSTOP)
    try:
        gc.collect()  # earlier tests' garbage now: a finalizer running as Ctrl-C lands eats it
        main = threading.main_thread().ident  # the thread a terminal's Ctrl-C interrupts
        threading.Timer(0.5, signal.pthread_kill, (main, signal.SIGINT)).start()
        with pytest.raises(KeyboardInterrupt):
            demo.main_relax(X, Y)
        assert left_behind(server.port) == (threads, 0)
    finally:
        os.killpg(server.process.pid, signal.SIGCONT)
    assert torch.equal(demo.main_relax(X, Y), X + Y)


class SilentServer:
    """A socket that accepts connections and never answers; with `handshake`, it answers TVM's
    RPC handshake first (so a probe and a connect succeed), then nothing."""

    def __init__(self, *, handshake: bool):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.handshake = handshake
        self.accepted: list[socket.socket] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:  # closed
                return
            self.accepted.append(connection)
            if self.handshake:
                try:
                    _, size = struct.unpack("<ii", base.recvall(connection, 8))
                    base.recvall(connection, size)
                    connection.sendall(struct.pack("<ii", base.RPC_MAGIC, 0))
                except OSError:  # the client gave up meanwhile
                    pass

    def __enter__(self) -> SilentServer:
        return self

    def __exit__(self, *exc) -> None:
        self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept
        self.listener.close()
        self.thread.join()
        for connection in self.accepted:
            connection.close()


def left_behind(port: int) -> tuple[int, int]:
    """This process's threads, and its TCP connections to `port`."""
    connections = psutil.Process().net_connections("tcp")
    return threading.active_count(), sum(
        bool(c.raddr) and c.raddr.port == port for c in connections
    )


@pytest.mark.parametrize("through_tracker", [False, True], ids=["server", "tracker"])
def test_a_server_that_never_answers_costs_the_timeout_per_call_and_leaves_nothing_behind(
    through_tracker,
):
    with SilentServer(handshake=not through_tracker) as silent:
        where = f"127.0.0.1:{silent.port}"
        live = LiveModule(
            "hung", rpc=f"tracker={where}/board" if through_tracker else where, rpc_timeout=0.5
        )
        live.run_cell(ADD_TIR)
        before = left_behind(silent.port)
        for _ in range(3):
            started = time.monotonic()
            with pytest.raises(CallError, match=r"within 0\.5 s"):
                live.add_tir(X, Y, torch.empty(5))
            assert time.monotonic() - started < 5
            assert left_behind(silent.port) == before
        live.close()


def test_looking_for_the_session_socket_leaves_every_socket_in_its_mode():
    mine, other = socket.socketpair()  # blocking, as TVM's socket is
    socket.setdefaulttimeout(5)  # a socket object made on a descriptor then turns it non-blocking
    try:
        rpc_connection._tcp_sockets()
    finally:
        socket.setdefaulttimeout(None)
    with mine, other:
        for sock in (mine, other):
            assert not fcntl.fcntl(sock.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK


def test_the_interpreter_exits_promptly_after_calls_to_servers_that_never_answer():
    with SilentServer(handshake=True) as server, SilentServer(handshake=False) as tracker:
        calls = f"""
import time, torch
from tvm_pyfunc_nb import CallError, LiveModule
for where in ("127.0.0.1:{server.port}", "tracker=127.0.0.1:{tracker.port}/board"):
    live = LiveModule("hung", rpc=where, rpc_timeout=0.5)
    live.run_cell({ADD_TIR!r})
    for _ in range(2):
        try:
            live.add_tir(torch.ones(5), torch.ones(5), torch.empty(5))
        except CallError:
            pass
print("called", time.monotonic(), flush=True)
"""
        child = subprocess.Popen([sys.executable, "-c", calls], stdout=subprocess.PIPE, text=True)
        try:
            out, _ = child.communicate(timeout=120)  # before, it waited for the stuck calls
        finally:
            child.kill()
        exited = time.monotonic()  # the same clock as the child's (CLOCK_MONOTONIC)
    assert child.returncode == 0 and out.startswith("called"), out
    assert exited - float(out.split()[1]) < 15


def test_through_a_tracker(shell):
    with LocalRPC(kind="tracker") as tracker, LocalRPC(tracker=tracker.port, key="board"):
        shell.cell("demo", MAIN_RELAX, options=f"--rpc tracker=127.0.0.1:{tracker.port}/board")
        assert torch.equal(shell.ns["demo"].main_relax(X, Y), X + Y)
        shell.run("%tvmmodule_drop demo")  # frees the tracker's one server for the next module
        shell.cell("other", MAIN_RELAX, options=f"--rpc tracker=127.0.0.1:{tracker.port}/nokey")
        with pytest.raises(CallError) as caught:
            shell.ns["other"].main_relax(X, Y)
        assert "no server with key `nokey`" in str(caught.value) and "board" in str(caught.value)


RMM = """
@R.function
def rmm(x: R.Tensor((64, 64), "float32"), y: R.Tensor((64, 64), "float32")):
    with R.dataflow():
        z = R.nn.relu(R.matmul(x, y))
        R.output(z)
    return z
"""


def candidates_loaded(server: LocalRPC) -> int:
    """How many built candidates the server loaded (MetaSchedule's RPC runner uploads each)."""
    return len(re.findall(r"load_module \S*/lib\.so", server.log()))


def test_tune_measures_on_every_server_a_tracker_has_and_keeps_those_records_apart(cached_shell):
    shell = cached_shell
    x, y = torch.randn(64, 64), torch.randn(64, 64)
    with (
        LocalRPC(kind="tracker") as tracker,
        LocalRPC(tracker=tracker.port, key="board") as first,
        LocalRPC(tracker=tracker.port, key="board") as second,
    ):
        shell.cell("demo", RMM, options=f"--rpc tracker=127.0.0.1:{tracker.port}/board")
        demo = shell.ns["demo"]
        report = demo.tune("rmm", trials=4)
        assert report.trials_run >= 4 and "(2 servers)" in report.measured_on, report
        assert "on remote tracker=" in report.summary(), report.summary()
        # the candidates went to both servers (two sessions at a time), none ran here
        assert candidates_loaded(first) > 0 and candidates_loaded(second) > 0
        (row,) = report.rows
        assert row.before and row.after <= row.before, row
        assert torch.allclose(demo.rmm(x, y), torch.relu(x @ y), atol=1e-4)  # runs there
        remote_where = Path(report.where)
        shell.run("%tvmmodule_drop demo")
    # the same function tuned here: its records are kept apart from the remote device's
    shell.cell("demo", RMM)
    local = shell.ns["demo"].tune("rmm", trials=2)
    assert local.measured_on == "here" and local.trials_run == 2, local
    assert remote_where.name.endswith("-remote") and Path(local.where) != remote_where


def test_tune_through_a_tracker_that_does_not_answer_is_a_schedule_error_in_bounded_time():
    from tvm_pyfunc_nb.testing import free_port

    live = LiveModule("lost", rpc=f"tracker=127.0.0.1:{free_port()}/board", rpc_timeout=2)
    live.run_cell(RMM)
    started = time.monotonic()
    with pytest.raises(ScheduleError) as caught:
        live.tune("rmm", trials=2)
    assert caught.value.function == "rmm" and "cannot reach" in str(caught.value), caught.value
    assert time.monotonic() - started < 30
    live.close()


def test_tune_measures_on_the_server_of_a_module_with_rpc(shell, server):
    remote_cell(shell, server, RMM)
    demo = shell.ns["demo"]
    loaded = candidates_loaded(server)
    report = demo.tune("rmm", trials=2)
    assert report.measured_on == f"remote {server.address}", report
    assert candidates_loaded(server) > loaded
    x, y = torch.randn(64, 64), torch.randn(64, 64)
    assert torch.allclose(demo.rmm(x, y), torch.relu(x @ y), atol=1e-4)


@pytest.mark.parametrize(
    "address, says",
    [
        ("127.0.0.1:1", "connection refused"),
        ("no-such-host.invalid:9090", "no such host"),
        ("nonsense", "write HOST:PORT"),
        ("tracker=127.0.0.1:9190", "write tracker=HOST:PORT/KEY"),
    ],
)
def test_bad_addresses_are_clear_errors(shell, address, says):
    def run():
        shell.cell("bad", MAIN_RELAX, options=f"--rpc {address}")
        shell.ns["bad"].main_relax(X, Y)

    with pytest.raises(TVMModuleError) as caught:
        run()
    assert says in str(caught.value)


def test_a_target_device_mismatch_is_refused(shell, server):
    err = remote_cell(shell, server, MAIN_RELAX, "--target cuda", expect_error=TVMModuleError)
    assert "runs on cuda devices" in str(err)


def test_offload_is_refused_with_rpc(shell, server):
    err = remote_cell(shell, server, MLP, "--offload torch", expect_error=TVMModuleError)
    assert "--offload torch" in str(err) and "--rpc" in str(err)
    assert "demo" not in shell.ns


def test_two_modules_share_one_server(shell, server):
    remote_cell(shell, server, MAIN_RELAX)
    remote_cell(shell, server, MAIN_RELAX, name="second")
    assert torch.equal(shell.ns["demo"].main_relax(X, Y), X + Y)
    assert torch.equal(shell.ns["second"].main_relax(X, Y), X + Y)


def test_a_local_server_ends_with_the_process_that_started_it_however_that_ends():
    starter = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from tvm_pyfunc_nb.testing import LocalRPC; import time; "
            "s = LocalRPC(); print(s.port, flush=True); time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    port = int(starter.stdout.readline())
    assert listening(port)
    starter.kill()  # SIGKILL: no Python runs on the way out, no atexit, no __exit__
    starter.wait()
    deadline = time.monotonic() + 10
    while listening(port) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not listening(port)


def test_every_rpc_server_the_docs_start_listens_on_this_machine_only():
    """A TVM RPC server (or tracker) runs any code it is sent: every one that the README and the
    tutorials start, or tell users to start, is bound to 127.0.0.1 (LocalRPC's command is in
    tutorial 09's output)."""
    root = Path(__file__).resolve().parent.parent
    texts = [(root / "README.md").read_text()]
    for notebook in sorted((root / "notebooks").glob("*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            texts.append("".join(cell["source"]))
            texts += ["".join(o.get("text", "")) for o in cell.get("outputs", [])]
    started = [
        (match.group(0), match.group(2))
        for text in texts
        for match in re.finditer(
            r"tvm\.exec\.rpc_(server|tracker)((?:(?!python )[^`\"#])*)", " ".join(text.split())
        )
    ]
    assert len(started) >= 5, started
    for command, options in started:
        assert "--host 127.0.0.1" in options, command


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False
