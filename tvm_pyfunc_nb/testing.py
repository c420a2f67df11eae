"""A real IPython shell with the extension loaded, for tests: the project's, benchmarks', yours.

    from tvm_pyfunc_nb.testing import NotebookShell

    shell = NotebookShell()
    shell.cell("demo", '''
    @I.pyfunc
    def double(self, x):
        return x * 2
    ''')
    assert shell.eval("demo.double(torch.ones(2))").tolist() == [2.0, 2.0]

`cell` runs a `%%tvmmodule` cell the way a notebook front end does (with a
cell id of its own, so running it again under the same id replaces what it
contributed); `run` runs any cell and raises what it raised; `text` is what a
front end without widgets shows for an object; `debug` is what `%debug` shows
when commands are typed at its prompt (`typed_into_debugger` does that in a
notebook). Nothing here is mocked: these are IPython's own `run_cell`, magics,
display formatters and debugger.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from IPython import get_ipython
from IPython.core.debugger import Pdb
from IPython.core.interactiveshell import InteractiveShell

from ._core.module_parts import ModuleParts
from ._core.run.remote import Address, probe
from ._magics import TVMModuleMagics, magics_of
from ._views import notebook_front_end
from .errors import TVMModuleError

_cell_ids = itertools.count(1)

# Code for any x86-64 CPU with AVX2 and without AVX-512 (8 floats to a vector, where this machine
# may have 16): the CPU of most laptops and many servers. The project's tests compile the op
# corpus, the real models and the tutorials for it as well as for the CPU they run on, so that
# what depends on the vector width is seen on one machine (`TVM_PYFUNC_NB_TARGET` sets it).
AVX2_TARGET = '{"kind": "llvm", "mcpu": "x86-64-v3"}'
# The instruction sets of the x86-64 levels (v2 to v4): what code for a CPU may use
_INSTRUCTION_SETS = frozenset(
    {"cx16", "sahf", "popcnt", "sse3", "sse4.1", "sse4.2", "ssse3"}
    | {"avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave"}
    | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}
)


def parts_of(live) -> ModuleParts:
    """The parts of live module `live` (`ModuleParts`: its assembly, build, runner, call
    table...), as its features see them: for tests and benchmarks that look at a part or drive
    a feature directly. The one handle to them outside the module itself."""
    return live._parts


def cannot_run_here(target: str) -> str | None:
    """Why code compiled for the LLVM `target` (its JSON form) cannot run on this machine's CPU,
    or None if it can: an instruction set of the x86-64 levels it may use is missing here (the
    process would stop with SIGILL)."""
    from tvm.target.codegen import llvm_get_cpu_features

    wanted = set(llvm_get_cpu_features(_llvm(target))) & _INSTRUCTION_SETS
    missing = sorted(wanted - set(llvm_get_cpu_features(_llvm(None))))
    return f"this CPU cannot run code for {target} (no {', '.join(missing)})" if missing else None


def second_run_here(target: str) -> str | None:
    """Why a test run for `target` would show nothing here that the run for this CPU does not,
    or None if it would: it cannot run here, or this CPU's vectors hold as many floats (the CPU
    schedule makes the same kernels for both)."""
    from ._core.build.cpu_schedules import vector_lanes

    why = cannot_run_here(target)
    if why is None and vector_lanes(_llvm(target)) == vector_lanes(_llvm(None)):
        why = f"this CPU's vectors hold as many floats as {target}'s: its own run is that run"
    return why


def _llvm(target: str | None):
    """The TVM target of `target` (JSON), or of this machine's CPU."""
    import json

    import tvm
    from tvm.target.codegen import llvm_get_system_cpu

    config = json.loads(target) if target else {"kind": "llvm", "mcpu": llvm_get_system_cpu()}
    return tvm.target.Target(config)


class NotebookShell:
    """IPython's shell with `tvm_pyfunc_nb` loaded.

    `shell` defaults to IPython's `InteractiveShell.instance()`; `cache_dir`
    sets `TVMModuleMagics.cache_dir` ('' turns the persistent compile cache
    off, so each test compiles what it uses; None leaves the setting alone).
    """

    def __init__(self, shell: InteractiveShell | None = None, *, cache_dir: str | None = ""):
        self.ip = shell if shell is not None else InteractiveShell.instance()
        self.ip.run_line_magic("load_ext", "tvm_pyfunc_nb")
        if cache_dir is not None:
            self.ip.run_line_magic("config", f"TVMModuleMagics.cache_dir = {cache_dir!r}")

    @property
    def ns(self) -> dict[str, Any]:
        """The user namespace: live modules are bound here by name."""
        return self.ip.user_ns

    @property
    def magics(self) -> TVMModuleMagics:
        """The extension's magics (their traitlets are what `%config TVMModuleMagics` sets)."""
        magics = magics_of(self.ip)
        if magics is None:
            raise RuntimeError("tvm_pyfunc_nb is not loaded in this shell")
        return magics

    def run(
        self,
        cell: str,
        *,
        cell_id: str | None = None,
        expect_error: type | None = None,
        store_history: bool = True,
    ) -> Any:
        """Run `cell` (with a front-end cell id if given) and return its result, or the view a
        `%%tvmmodule` cell displayed (its output widget).

        It raises what the cell raised, unless `expect_error` is given: then that
        error (an instance of it) is returned, and anything else fails.
        """
        before = notebook_front_end.newest_cell_view()
        result = self.ip.run_cell(cell, store_history=store_history, cell_id=cell_id)
        error = result.error_before_exec or result.error_in_exec
        if expect_error is not None:
            if not isinstance(error, expect_error):
                raise AssertionError(f"expected {expect_error.__name__}, got {error!r}")
            return error
        if error is not None:
            raise error
        view = notebook_front_end.newest_cell_view()
        if result.result is None and view is not before:
            return view
        return result.result

    def cell(
        self, name: str, body: str, *, cell_id: str | None = None, options: str = "", **kwargs
    ) -> Any:
        """Run `%%tvmmodule name options` with `body` under `cell_id` (a fresh id by default)."""
        cell_id = cell_id or f"cell-{next(_cell_ids)}"
        return self.run(f"%%tvmmodule {name} {options}\n{body}", cell_id=cell_id, **kwargs)

    def eval(self, expression: str) -> Any:
        """`expression` evaluated in the user namespace."""
        return eval(expression, self.ip.user_ns)

    def text(self, obj: Any) -> str:
        """What a front end without widgets shows for `obj` (its text/plain)."""
        data, _ = self.ip.display_formatter.format(obj)
        return data["text/plain"]

    def debug(self, *commands: str) -> str:
        """What `%debug` prints for the last error when `commands` are typed at its prompt."""
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed), typed_into_debugger(*commands, shell=self.ip):
            self.ip.run_line_magic("debug", "")
        return printed.getvalue()

    def drop_all(self) -> None:
        """Drop every live module (as `%tvmmodule_drop` does), e.g. between tests."""
        for name in list(self.magics.modules):
            self.ip.run_line_magic("tvmmodule_drop", name)

    def flush_cache(self) -> None:
        """Wait until the compile cache's background writes are on disk."""
        cache = self.magics.compile_cache()
        if cache is not None:
            cache.flush()


@contextlib.contextmanager
def typed_into_debugger(*commands: str, shell: InteractiveShell | None = None) -> Iterator[None]:
    """`%debug` (and `%pdb on`) inside the block read `commands`, then `quit`, instead of the
    keyboard, and print each command after the prompt, as if typed, to `sys.stdout`, as plain
    text: what it prints is a transcript kept in a notebook's saved outputs, where a terminal's
    colour codes would stay as raw escapes.

    A notebook run by a machine (nbval, a test) has no one to type at the `ipdb>` prompt:

        with typed_into_debugger("p y", "where"):
            %debug
    """
    shell, out = shell or get_ipython(), sys.stdout
    tb = shell.InteractiveTB
    saved = tb.pdb
    typed = "".join(f"{command}\n" for command in (*commands, "quit"))
    tb.pdb = Pdb(stdin=_Typed(typed, out), stdout=out)
    tb.pdb.set_theme_name("nocolor")
    try:
        yield
    finally:
        tb.pdb = saved


class _Typed(io.StringIO):
    """Debugger input that shows each line it gives on `echo`, as a terminal shows what is typed."""

    def __init__(self, text: str, echo):
        super().__init__(text)
        self.echo = echo

    def readline(self, size: int = -1) -> str:
        line = super().readline(size)
        self.echo.write(line)
        return line


# -- RPC servers on this machine ----------------------------------------------------------------
class LocalRPC:
    """A TVM RPC server (or tracker) in a subprocess on 127.0.0.1, for tests and tutorials.

        with LocalRPC() as server:            # python -m tvm.exec.rpc_server on a free port
            %tvmmodule demo --rpc {server.address}
            ...
            server.restart()                  # killed, then started again on the same port

    `LocalRPC(tracker=other.port, key="k")` registers the server with a tracker;
    `LocalRPC(kind="tracker")` is a tracker; `command` is what runs. The server runs in a
    session of its own, so `stop()` ends it and the workers it forks (one holds the port)
    together, and a Ctrl-C of this process does not reach it. A watchdog ends the session
    when this process ends, however it ends (killed, crashed): it reads a pipe from this
    process, which the operating system closes then. No server outlives its caller.
    """

    def __init__(
        self,
        *,
        kind: str = "server",
        port: int | None = None,
        tracker: int | None = None,
        key: str | None = None,
        ready_timeout: float = 60,
    ):
        self.kind, self.tracker, self.key = kind, tracker, key
        self.port = port or free_port()
        self.ready_timeout = ready_timeout
        self.process = None
        self._log = tempfile.NamedTemporaryFile(prefix=f"tvm-rpc-{kind}-", suffix=".log")  # noqa: SIM115 (closed in __exit__)
        self.start()

    @property
    def address(self) -> str:
        """What `--rpc` takes for this server."""
        return f"127.0.0.1:{self.port}"

    @property
    def command(self) -> list[str]:
        """The command that runs the server (or tracker), as one would type it on a board."""
        module = "tvm.exec.rpc_server" if self.kind == "server" else "tvm.exec.rpc_tracker"
        # --port-end: TVM would quietly take another port up to it if this one were busy
        command = ["python", "-m", module, "--host", "127.0.0.1"]
        command += ["--port", str(self.port), "--port-end", str(self.port + 1)]
        if self.tracker is not None:
            command += ["--tracker", f"127.0.0.1:{self.tracker}", "--key", self.key or "local"]
        return command

    def start(self) -> None:
        """Start the server; return once it answers (it is up, on its port)."""
        self.process = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, sys.executable, *self.command[1:]],
            stdin=subprocess.PIPE,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._wait_until_ready()

    def stop(self) -> None:
        """Kill the server and everything it started; return once all of it is gone."""
        if self.process is None:
            return
        process, self.process = self.process, None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        process.stdin.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # its workers exit a moment after the watchdog
            try:
                os.killpg(process.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.02)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> LocalRPC:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
        self._log.close()

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the RPC {self.kind} exited: {self._read_log()}")
            if self._answers():
                return
            time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"the RPC {self.kind} did not start within {self.ready_timeout} s")

    def _answers(self) -> bool:
        if self.kind == "server" and self.tracker is None:
            return _server_answers(self.port)
        from tvm import rpc

        port = self.tracker or self.port
        try:  # TVM's tracker client retries a refused port for a minute: knock first
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            tracker = rpc.connect_tracker("127.0.0.1", port)
            tracker._sock.settimeout(2)  # TVM's client has no timeout of its own
            servers = tracker.summary()["server_info"]
            tracker.close()
        except Exception:  # not up yet
            return False
        # this server registered (not only another under the same key)
        key = f"server:{self.key or 'local'}"
        return self.kind == "tracker" or any(
            s["key"] == key and s["addr"][1] == self.port for s in servers
        )

    def log(self) -> str:
        """What the server (or tracker) printed so far: the sessions it served, the modules it
        loaded."""
        self._log.flush()
        with open(self._log.name) as log:
            return log.read()

    def _read_log(self) -> str:
        return self.log()[-2000:]


# Runs the command in its arguments; kills its own process group (the command, all it started,
# itself) when its stdin, a pipe from the process that started it, closes.
_WATCHDOG = """
import os, signal, subprocess, sys, threading
child = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL)
def end_all_when_stdin_closes():
    sys.stdin.buffer.read()
    os.killpg(0, signal.SIGKILL)
threading.Thread(target=end_all_when_stdin_closes, daemon=True).start()
sys.exit(child.wait())
"""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _server_answers(port: int) -> bool:
    """Whether an RPC server answers the handshake (with a key no server accepts: no session)."""
    try:
        probe(Address("127.0.0.1", port), timeout=2)
    except TVMModuleError:
        return False
    return True


# -- passes at fault, made to order (TVM 0.27 has no miscompile left for bisect to find) -------
def op_swapped(op: str, into: str, name: str):
    """A Relax module pass `name` that turns every call of the Relax op `op` (`"relax.add"`) in
    the module's Relax functions into one of `into` (`"subtract"`, a `relax.op` function) on the
    same arguments: wrong numbers, made to order."""
    import tvm
    from tvm import relax

    @tvm.transform.module_pass(opt_level=0, name=name)
    def swap(mod, ctx):
        swapped, replacement = tvm.ir.Op.get(op), getattr(relax.op, into)

        @relax.expr_functor.mutator
        class Swap(relax.PyExprMutator):
            def visit_call_(self, call):
                call = super().visit_call_(call)
                return replacement(*call.args) if call.op.same_as(swapped) else call

        out = tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs)
        for gv, func in mod.functions_items():
            if isinstance(func, relax.Function):
                out[gv] = Swap(mod).visit_expr(func)
        return out

    return swap


def add_becomes_subtract():
    """A Relax pipeline (for `relax.register_pipeline`) of one pass of our own,
    `AddBecomesSubtract`, that turns every `R.add` of the module's Relax functions into
    `R.subtract`: wrong numbers, made to order. The pass is made inside the pipeline function,
    so that it reaches the build worker (`_core/build/worker/jobs.py`)."""
    return op_swapped("relax.add", "subtract", "AddBecomesSubtract")


def aborts():
    """A Relax pipeline of one pass, `Aborts`, that ends the process that runs it
    (`os.abort()`): a crash made to order. Never compile with it in a process you keep."""
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="Aborts")
    def abort(mod, ctx):
        os.abort()

    return abort
