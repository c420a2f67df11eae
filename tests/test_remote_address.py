"""An RPC address and what answers at it, without a server of TVM's: the forms `--rpc` takes, a
refused port, something that is not a TVM server, one that never answers (within the timeout),
and one session per address, shared. The calls on a real server are in test_remote.py."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from tvm_pyfunc_nb import CallError, TVMModuleError
from tvm_pyfunc_nb._core.run.remote import Address, RemoteSession, probe, release, session_for


def test_an_address_is_host_port_or_a_trackers_with_a_key():
    assert Address.parse(" 127.0.0.1:9090 ") == Address("127.0.0.1", 9090)
    tracked = Address.parse("tracker=10.0.0.2:9190/rasp4")
    assert tracked == Address("10.0.0.2", 9190, "rasp4")
    assert str(tracked) == "tracker 10.0.0.2:9190, key rasp4"
    for wrong, form in [("9090", "HOST:PORT"), ("h:0", "HOST:PORT"), ("tracker=h:1", "/KEY")]:
        with pytest.raises(TVMModuleError, match=form):
            Address.parse(wrong)


@pytest.fixture
def listening():
    """A socket listening on 127.0.0.1, and what it does with each connection (a function of
    the accepted socket), run on a thread."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(5)
    behaviours = []

    def serve():
        try:
            conn, _ = server.accept()
        except OSError:
            return
        with conn:
            behaviours[0](conn)

    def start(behaviour):
        behaviours.append(behaviour)
        threading.Thread(target=serve, daemon=True).start()
        return Address("127.0.0.1", server.getsockname()[1])

    yield start
    server.close()


def test_a_refused_port_says_so():
    with socket.create_server(("127.0.0.1", 0)) as sock:
        port = sock.getsockname()[1]  # free once closed
    with pytest.raises(CallError, match="connection refused"):
        probe(Address("127.0.0.1", port), timeout=2)


def test_something_that_is_not_a_tvm_server_says_so(listening):
    address = listening(lambda conn: (conn.recv(64), conn.sendall(b"HTTP")))
    with pytest.raises(CallError, match="not a TVM RPC server"):
        probe(address, timeout=2)


def test_a_server_that_never_answers_costs_the_timeout_only(listening):
    address = listening(lambda conn: time.sleep(20))
    started = time.monotonic()
    with pytest.raises(CallError, match=r"no answer within 0.3 s"):
        RemoteSession(address, timeout=0.3).run(lambda: None)
    assert time.monotonic() - started < 10  # far below the server's silence, even under load


def test_modules_of_one_address_share_its_session_until_the_last_lets_go():
    address = Address("127.0.0.1", 1)
    first, second = session_for(address, 1.0), session_for(address, 2.0)
    assert first is second and first.timeout == 2.0 and not first.connected
    release(address)
    assert session_for(address, 1.0) is first  # still used by one module
    release(address)
    release(address)
    assert session_for(address, 1.0) is not first  # the last one let go: a new session
    release(address)
