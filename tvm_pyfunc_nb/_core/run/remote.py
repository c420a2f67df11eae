"""Compiled code on another machine, through TVM's RPC: `%%tvmmodule NAME --rpc HOST:PORT`.

Kernels and Relax VMs are built here (for the remote target, with a cross
compiler if one is given), exported, uploaded and loaded there; tensors are
copied there and results copied back. What TVM's RPC client does not give,
this adds:

- Bounded time, and nothing left behind. TVM's client has no timeout: a server
  that hangs blocks a call for ever. Every remote step runs on a thread of its
  own and is waited for at most `timeout` seconds (TVM releases the GIL while
  it waits); a server that does not answer in time is given up: the session's
  socket is shut down, which ends the stuck step and its thread, and the next
  call connects again (rpc_connection.py). Before connecting, a handshake
  probe with a key no server accepts checks, within the timeout, that an RPC
  server answers at all; a tracker is asked on a socket with that timeout.
- One session per server. TVM's server serves one session at a time, so the
  live modules of a process share one session per address.
- Uploads keyed by content. A file name is never reused for other content
  (overwriting a loaded library crashes TVM's server), and an unchanged
  artifact is not sent again in the same session. A new session (the server
  restarted) starts empty: everything is uploaded again as calls need it.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import socket
import struct
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ...errors import CallError, TVMModuleError
from ..build.library_files import write_library
from .rpc_connection import Connection, Hung

# What TVM says when the connection is gone (the server died, restarted, or timed the session out)
_LOST = (
    "kShutdown",
    "RPCCode::kReturn",
    "Broken pipe",
    "Connection reset",
    "RPCSessionTimeoutError",
    "has expired",
    "SockChannel",
    "Socket",
    "connection",
)


@dataclass(frozen=True)
class Address:
    """`HOST:PORT` of an RPC server, or `tracker=HOST:PORT/KEY` of a tracker and a device key."""

    host: str
    port: int
    key: str | None = None  # through a tracker: the device key servers registered with

    @classmethod
    def parse(cls, text: str) -> Address:
        spec = text.strip()
        tracker = spec.startswith("tracker=")
        spec = spec.removeprefix("tracker=")
        where, _, key = spec.partition("/") if tracker else (spec, "", "")
        host, _, port = where.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536 or (tracker and not key):
            form = "tracker=HOST:PORT/KEY" if tracker else "HOST:PORT"
            raise TVMModuleError(f"--rpc `{text}`: write {form}, e.g. 127.0.0.1:9090")
        return cls(host, int(port), key or None)

    def __str__(self) -> str:
        return (
            f"tracker {self.host}:{self.port}, key {self.key}"
            if self.key
            else f"{self.host}:{self.port}"
        )


class RemoteSession:
    """The process's one RPC session with a server (or a tracker's device), connected on demand."""

    def __init__(self, address: Address, timeout: float):
        self.address = address
        self.timeout = timeout
        self._connection: Connection | None = None
        # what was made there in this session (loaded modules, devices, functions, VMs) by key:
        # (owner, what...), where the owner is a remote device, or "upload" for shared modules
        self._handles: dict[tuple, Any] = {}

    # -- running remote steps ------------------------------------------------------
    def run(self, step: Callable, *args) -> Any:
        """`step(*args)` on a thread of its own, within the timeout; connects if needed."""
        if not self.connected:
            self._connect()
        return self._bounded(step, *args)

    def _bounded(self, step: Callable, *args) -> Any:
        try:
            return self._connection.run(step, *args, timeout=self.timeout)
        except Hung:
            self.drop()
            raise CallError(
                f"the RPC server at {self.address} did not answer within {self.timeout:g} s; "
                "the next call connects again"
            ) from None
        except KeyboardInterrupt:  # the step was given up, and its connection with it
            self.drop()
            raise
        except TVMModuleError:
            raise
        except Exception as err:
            if any(sign in str(err) for sign in _LOST):
                self.drop()
                expired = "expired" in str(err) or "RPCSessionTimeoutError" in str(err)
                why = "its session expired" if expired else "the connection closed"
                raise CallError(
                    f"lost the RPC server at {self.address} ({why}); the next call "
                    "connects again and uploads what it needs"
                ) from err
            raise

    @property
    def connected(self) -> bool:
        return self._connection is not None and self._connection.session is not None

    @property
    def session(self):
        """TVM's `RPCSession` (in a step)."""
        return self._connection.session

    def _connect(self) -> None:
        address = self.address
        if address.key is None:
            probe(address, self.timeout)
            host, port, key = address.host, address.port, ""
        else:
            host, port, key = _request_from_tracker(address, self.timeout)
        self._connection = Connection(host, port)
        try:
            self._bounded(self._connection.open, key)
        except BaseException:
            self.drop()
            raise

    def drop(self) -> None:
        """End the session (its server is gone or hung, or no module uses it any more): its socket
        is shut down first, so that releasing its handles cannot wait on the server; the next
        step connects again, and makes again what it needs."""
        connection, handles = self._connection, self._handles
        self._connection, self._handles = None, {}
        if connection is not None:
            connection.end()
        handles.clear()

    # -- what was made there -------------------------------------------------------
    def cached(self, key: tuple, make: Callable[[], Any]) -> Any:
        """The handle `key` of this session, made by `make()` (which runs steps) if it has none:
        after the server restarted, what a call needs is made again in the new session."""
        found = self._handles.get(key)
        if found is None:
            found = self._handles[key] = make()
        return found

    def let_go(self, owner) -> None:
        """Release the handles `owner` made: releasing one sends the server a message, so while
        the session lives that is a step (a server that does not answer is given up, and the
        next call says so)."""
        handles = [self._handles.pop(key) for key in list(self._handles) if key[0] == owner]
        if handles and self.connected:
            with contextlib.suppress(CallError):
                self._bounded(handles.clear)

    # -- what runs there ---------------------------------------------------------
    def device(self, kind: str, index: int):
        return self.run(lambda: self.session.device(kind, index))

    def load(self, lib, name: str, export: Callable[[Any, str], None]) -> tuple[Any, int]:
        """`lib` uploaded (once per session and content) and loaded there; returns the remote
        module and the bytes sent (0 if it was there already)."""
        with tempfile.TemporaryDirectory(prefix="tvm-pyfunc-nb-upload-") as work:
            path = os.path.join(work, "lib.so")
            export(lib, path)
            data = open(path, "rb").read()  # noqa: SIM115 (a small file, read once)
        artifact = f"{name}-{hashlib.sha256(data).hexdigest()[:16]}.so"
        sent = []

        def upload_and_load():
            self.session.upload(bytearray(data), artifact)
            sent.append(len(data))
            return self.session.load_module(artifact)

        module = self.cached(("upload", artifact), lambda: self.run(upload_and_load))
        return module, sum(sent)


def probe(address: Address, timeout: float) -> None:
    """Whether an RPC server answers the handshake, with a key no server accepts (so no session
    starts); within `timeout`, with a clear error for each way it does not."""
    from tvm.rpc import base

    try:
        with socket.create_connection((address.host, address.port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            key = b"client:__tvm_pyfunc_nb_probe__"
            sock.sendall(struct.pack("<ii", base.RPC_MAGIC, len(key)) + key)
            answer = struct.unpack("<i", base.recvall(sock, 4))[0]
    except socket.gaierror as err:
        raise CallError(f"--rpc {address}: no such host ({err.strerror})") from None
    except ConnectionRefusedError:
        raise CallError(
            f"--rpc {address}: connection refused (is the RPC server running, on this port?)"
        ) from None
    except TimeoutError:
        raise CallError(
            f"--rpc {address}: no answer within {timeout:g} s (a server busy with "
            "another session, or hung)"
        ) from None
    except OSError as err:
        raise CallError(f"--rpc {address}: cannot connect ({err.strerror or err})") from None
    if answer not in (base.RPC_CODE_MISMATCH, base.RPC_CODE_SUCCESS):
        raise CallError(f"--rpc {address}: what answers there is not a TVM RPC server")


def _request_from_tracker(address: Address, timeout: float) -> tuple[str, int, str]:
    """Where a free server of `address.key` is (host, port, the key it expects), from the
    tracker, each exchange within `timeout` (TVM's tracker client has no timeout: it waits for
    ever on a tracker that hangs, and retries a refused port for a minute)."""
    from tvm.rpc import base

    late = f"no answer from the tracker within {timeout:g} s"
    try:
        with socket.create_connection((address.host, address.port), timeout=timeout) as tracker:
            tracker.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
            if struct.unpack("<i", base.recvall(tracker, 4))[0] != base.RPC_TRACKER_MAGIC:
                raise CallError(f"--rpc {address}: what answers there is not a TVM RPC tracker")
            queues = _ask(tracker, address, [base.TrackerCode.SUMMARY])["queue_info"]
            if address.key not in queues:
                known = ", ".join(sorted(queues)) or "none"
                raise CallError(
                    f"--rpc {address}: the tracker has no server with key "
                    f"`{address.key}` (keys it has: {known})"
                )
            late = f"no server of key `{address.key}` came free within {timeout:g} s"
            request = [base.TrackerCode.REQUEST, address.key, "", 1]
            host, port, key = _ask(tracker, address, request)
    except TimeoutError:
        raise CallError(f"--rpc {address}: {late}") from None
    except OSError as err:
        why = err.strerror or err
        raise CallError(f"--rpc {address}: cannot reach the tracker ({why})") from None
    return host, port, key


def _ask(tracker: socket.socket, address: Address, request: list) -> Any:
    """The tracker's answer to `request` (TVM's tracker protocol: JSON messages)."""
    from tvm.rpc import base

    base.sendjson(tracker, request)
    answer = base.recvjson(tracker)
    if answer[0] != base.TrackerCode.SUCCESS:
        raise CallError(f"--rpc {address}: the tracker refused {request[:2]}: {answer}")
    return answer[1]


# -- the sessions of this process ------------------------------------------------------------
_sessions: dict[Address, RemoteSession] = {}
_users: dict[Address, int] = {}
_owners = itertools.count()


def session_for(address: Address, timeout: float) -> RemoteSession:
    """The shared session of `address` (TVM's server serves one session at a time)."""
    session = _sessions.get(address)
    if session is None:
        session = _sessions[address] = RemoteSession(address, timeout)
    session.timeout = timeout
    _users[address] = _users.get(address, 0) + 1
    return session


def release(address: Address) -> None:
    """A module no longer uses `address`: the last one closes the session, freeing the server."""
    _users[address] = _users.get(address, 1) - 1
    if _users[address] <= 0:
        session = _sessions.pop(address, None)
        _users.pop(address, None)
        if session is not None:
            session.drop()


# -- tensors -----------------------------------------------------------------------------
def to_remote(value, device):
    """A torch tensor (or numpy array, or local TVM tensor) copied to the remote `device`."""
    import tvm

    if isinstance(value, torch.Tensor):
        return tvm.runtime.tensor(value.detach().contiguous().cpu().numpy(), device)
    if hasattr(value, "numpy") and hasattr(value, "shape"):
        return tvm.runtime.tensor(value.numpy(), device)
    if hasattr(value, "shape") and hasattr(value, "dtype"):  # numpy
        return tvm.runtime.tensor(value, device)
    return value


class RemoteDevice:
    """One remote device of a live module: its compiled code uploaded, loaded and called, each
    step bounded.

    Remote functions are looked up afresh (from a per-session cache) at every call, so a call
    after the server restarted finds the new session and uploads what it needs again.
    """

    def __init__(self, address: str, options, on_upload: Callable[[tuple[str, int]], None]):
        device, timeout = options.device, options.rpc_timeout
        self.address = Address.parse(address)
        self.device_name = device
        kind, _, index = device.partition(":")
        self.device_kind, self.device_index = kind, int(index or 0)
        self.cross_compiler = options.cross_compiler or None
        self.session = session_for(self.address, timeout)
        self._on_upload = on_upload
        self._owner = next(_owners)  # of what this device made in the shared session

    def close(self) -> None:
        """Let go of the session: the last module to let go ends it, freeing the server (which
        serves one session at a time), even while this object lives on in a traceback."""
        session, self.session = self.session, None
        release(self.address)
        session.let_go(self._owner)

    # -- loading -------------------------------------------------------------------
    def _cached(self, key: tuple, make: Callable[[], Any]) -> Any:
        return self.session.cached((self._owner, *key), make)

    def device(self):
        return self._cached(
            ("device",), lambda: self.session.device(self.device_kind, self.device_index)
        )

    def _module(self, name: str, lib) -> Any:
        module, sent = self.session.load(lib, name, self._export)
        if sent:
            self._on_upload((name, sent))
        return module

    def _export(self, lib, path: str) -> None:
        write_library(lib, path, compiler=self.cross_compiler)

    def module(self, name: str, lib) -> Any:
        """`lib` (the library of PrimFunc `name`), loaded there."""
        return self._cached(("module", name, id(lib), lib), lambda: self._module(name, lib))

    def kernel(self, name: str, lib) -> Any:
        """PrimFunc `name` of `lib`, loaded on the remote device."""
        return self._cached(
            ("kernel", name, id(lib), lib),
            lambda: self.session.run(self.module(name, lib).get_function, name),
        )

    def vm(self, linked) -> Any:
        """The linked Relax executable, loaded in a VM on the remote device."""
        from tvm import relax

        def make():
            module = self._module("relax_vm", linked.executable)
            device = self.device()
            return self.session.run(relax.VirtualMachine, module, device)

        return self._cached(("vm", id(linked), linked), make)

    # -- calling -------------------------------------------------------------------
    def call_kernel(self, name: str, lib, args: tuple) -> None:
        """Run a PrimFunc there on copies of `args`; what it wrote comes back into them."""
        function, device = self.kernel(name, lib), self.device()

        def step():
            remote = [to_remote(a, device) for a in args]
            function(*remote)
            return _contents(remote)

        _written_back(args, self.session.run(step))

    def call_relax(
        self, name: str, linked, args: tuple, returns_tuple: bool, writes_inputs: bool = False
    ) -> Any:
        """Run a Relax function there on copies of `args`; its result comes back as torch, and
        for a function that `writes_inputs` (`x.add_(1)` in PyTorch), what it wrote into them."""
        vm, device = self.vm(linked), self.device()

        def step():
            remote = [to_remote(a, device) for a in args]
            if returns_tuple:  # TVM's RPC cannot hand a tuple back from `vm[name](...)`
                vm.set_input(name, *remote)
                vm.invoke_stateful(name)
                out = vm.get_outputs(name)
            else:
                out = vm[name](*remote)
            return _fetch(out), _contents(remote) if writes_inputs else []

        out, written = self.session.run(step)
        _written_back(args, written)
        return out

    def time(self, module, name: str, args: tuple, number: int, repeat: int) -> tuple[float, ...]:
        """Seconds per call of each repeat, measured on the remote device by `time_evaluator`."""
        device = self.device()

        def step():
            evaluator = module.time_evaluator(name, device, number=number, repeat=repeat)
            return tuple(float(s) for s in evaluator(*[to_remote(a, device) for a in args]).results)

        return self.session.run(step)


def _contents(remote: list) -> list:
    """What each remote argument holds now (None for what is no tensor)."""
    return [r.numpy() if hasattr(r, "numpy") else None for r in remote]


def _written_back(args: tuple, contents: list) -> None:
    """Copy what a remote function wrote into its copies of `args` back into `args`."""
    for original, result in zip(args, contents, strict=False):
        if isinstance(original, torch.Tensor) and result is not None:
            original.copy_(torch.from_numpy(result))


def _fetch(value) -> Any:
    if isinstance(value, (tuple, list)) or type(value).__name__ in ("Array", "RPCObjectRef"):
        try:
            return tuple(_fetch(v) for v in value)
        except TypeError:
            pass
    if hasattr(value, "numpy"):
        return torch.from_numpy(value.numpy())
    return value
