"""One connection of TVM's RPC client that this process can always end, even when its server hangs.

TVM's client has no timeout and keeps its socket to itself: a step sent to a server that hangs
waits in `recv` for ever, holding its thread, the socket and the session's lock (so releasing a
remote handle would wait too). Here each step runs on a thread of its own, waited for at most
the timeout; the socket TVM opened is found among this process's file descriptors (the new TCP
connection to the server's port), so that `end()` can shut it down: a stuck step then fails at
once and its thread ends. The connection is gone then, even while a traceback still holds a
handle of the session (an unconnected socket takes its descriptor's place): releasing a handle
fails at once (TVM ignores errors when it releases one), and the last one closes the stand-in.
The threads are daemons: nothing stuck ever keeps the interpreter from exiting.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

from ...errors import CallError

# How long a step may take to end once its socket is shut (it fails at the next `recv`)
_ENDING_SECONDS = 2.0
_FD_DIR = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"  # Linux, macOS


class Hung(Exception):
    """A step did not end within the timeout; the connection was ended."""


class Connection:
    """TVM's client session with the RPC server at `host:port`, and the socket it talks through."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.session = None  # TVM's RPCSession, once `open` succeeded
        self._before = set(_tcp_sockets())  # what was open before TVM's socket
        self._socket: tuple[int, Any] | None = None  # TVM's: file descriptor, local address

    def open(self, key: str = "") -> None:
        """Connect (run as a step: `run(connection.open, key)`)."""
        from tvm import rpc

        try:
            session = rpc.connect(self.host, self.port, key)
        except BaseException:
            for fd, local in self._new_sockets():  # TVM leaves it open when the handshake fails
                _on_socket(fd, local, socket.socket.close)
            raise
        found = self._new_sockets()
        if len(found) != 1:  # then a server that hangs could not be given up
            raise CallError(
                f"--rpc {self.host}:{self.port}: cannot tell which socket TVM's RPC client "
                f"opened ({len(found)} new ones to that port)"
            )
        self._socket, self.session = found[0], session

    def run(self, step: Callable, *args, timeout: float) -> Any:
        """`step(*args)` on a thread of its own, waited for at most `timeout` seconds: then (or
        on Ctrl-C) the connection is ended and `Hung` (or KeyboardInterrupt) raised."""
        outcome: dict[str, Any] = {}
        done = threading.Event()  # not `is_alive()`: Ctrl-C in `join` marks a thread ended

        def work():
            try:
                outcome["value"] = step(*args)
            except BaseException as err:
                outcome["error"] = err.with_traceback(None)  # its frames hold remote handles
            done.set()

        threading.Thread(target=work, name="tvm-rpc", daemon=True).start()
        try:
            done.wait(timeout)
        finally:
            hung = not done.is_set()
            if hung:
                self.end()
                done.wait(_ENDING_SECONDS)
        if hung:
            raise Hung
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]

    def end(self) -> None:
        """Shut the socket down, so that nothing of this session can wait on the server any more,
        and let go of the session (its handles are released, at once)."""
        if self._socket is None:  # still connecting: `open` closes it when TVM gives up
            for fd, local in self._new_sockets():
                _on_socket(fd, local, lambda sock: sock.shutdown(socket.SHUT_RDWR))
        else:  # the session's: gone now, whoever still holds a handle of the session
            _on_socket(*self._socket, _shut_and_replace)
        self.session = None

    def _new_sockets(self) -> list[tuple[int, Any]]:
        return [
            (fd, local)
            for fd, (local, peer) in _tcp_sockets().items()
            if fd not in self._before and peer[1] == self.port
        ]


def _shut_and_replace(sock: socket.socket) -> None:
    """Shut `sock` down (what waits on it returns), and put an unconnected socket in its place:
    the connection ends now, and TVM, which owns the descriptor, closes that one when the last
    handle of its session goes (its calls on it fail at once, as on a dead connection)."""
    sock.shutdown(socket.SHUT_RDWR)
    with socket.socket(sock.family, socket.SOCK_STREAM) as stand_in:
        os.dup2(stand_in.fileno(), sock.fileno(), inheritable=False)


def _tcp_sockets() -> dict[int, tuple[Any, Any]]:
    """This process's connected TCP sockets: file descriptor -> (local address, peer address)."""
    found = {}
    for name in os.listdir(_FD_DIR):
        addresses = _on_socket(int(name), None, _addresses)
        if addresses is not None:
            found[int(name)] = addresses
    return found


def _addresses(sock: socket.socket) -> tuple[Any, Any] | None:
    if sock.type != socket.SOCK_STREAM or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return None
    return sock.getsockname(), sock.getpeername()  # OSError if not connected


def _on_socket(fd: int, local: Any, action: Callable[[socket.socket], Any]) -> Any:
    """`action` on the socket of file descriptor `fd` (None if `fd` is no socket any more, or
    no longer the one bound to `local`, unless that is None, or not connected); the descriptor
    stays open unless `action` closes it, and in the mode it was in (a Python socket made on it
    turns it non-blocking when `socket.setdefaulttimeout` was called: its owner's reads would
    fail)."""
    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        sock = socket.socket(fileno=fd)
    except OSError:  # not a socket, or closed meanwhile
        return None
    try:
        if local is None or sock.getsockname() == local:
            return action(sock)
        return None
    except OSError:  # not connected, or its peer reset it meanwhile: nothing waits on it
        return None
    finally:
        if sock.fileno() != -1:
            sock.detach()
            # another thread may have closed `fd` meanwhile: then there is no mode to restore
            with contextlib.suppress(OSError):
                if fcntl.fcntl(fd, fcntl.F_GETFL) != flags:
                    fcntl.fcntl(fd, fcntl.F_SETFL, flags)
