"""The error corpus in a real Jupyter kernel, and processes that exit cleanly after using it.

A notebook runs the seed cells, then every bad cell and bad call of the
corpus (`test_errors`), then a cell that prints the seed's numbers. The
kernel must survive all of it, show each failure as one compact error output
of the package's class, and exit with code 0 when shut down, although the
`R.call_py_func` registry is in use (TVM segfaults at exit if it is not
emptied: `py_registry` clears it at exit).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import nbformat
import pytest
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook
from test_errors import CALLS, CELLS, MAX_LINES, SEED

pytestmark = pytest.mark.slow

SETUP = """\
%load_ext tvm_pyfunc_nb
import numpy as np, torch, tvm, tvm_ffi
from tvm.script import relax as R
X = torch.arange(4, dtype=torch.float32)
Y = torch.ones(4)"""
NUMBERS = """\
out = torch.empty(4)
demo.add_tir(X, Y, out)
print(json.dumps({
    "add_tir": out.tolist(), "main": demo.main(X, Y).tolist(),
    "main_relax": demo.main_relax(X, Y).tolist(),
    "scale": demo.scale(X).tolist(), "pipeline": demo.pipeline(X, Y).tolist(),
    "same_ir_mod": tvm_ffi.structural_equal(demo.ir_mod, seed_ir_mod),
    "registry_entries": demo.kept["registered_pyfunc_sites"],
}))"""
EXPECTED = {
    "add_tir": [1.0, 2.0, 3.0, 4.0],
    "main": [2.0, 4.0, 6.0, 8.0],
    "main_relax": [1.0, 2.0, 3.0, 4.0],
    "scale": [0.0, 10.0, 20.0, 30.0],
    "pipeline": [10.0, 20.0, 30.0, 40.0],
    "same_ir_mod": True,
}


def corpus_steps() -> tuple[nbformat.NotebookNode, list[tuple[int, str, type | None]]]:
    """The notebook, and the steps to run: `(cell index, source, error class it must show or None)`.

    An edit of a seed cell is a step that runs the seed cell with other source, as a front end
    sends an edited cell: under the same cell id.
    """
    cells = [new_code_cell(SETUP, id="setup")]
    cells += [
        new_code_cell(f"%%tvmmodule demo --quiet\n{body}", id=cell_id)
        for cell_id, body in SEED.items()
    ]
    cells.append(
        new_code_cell("import json\nseed_ir_mod = demo.ir_mod\n" + NUMBERS, id="seed-numbers")
    )
    steps = [(index, cell.source, None) for index, cell in enumerate(cells)]
    seed_index = {cell.id: index for index, cell in enumerate(cells)}

    def add(source: str, cell_id: str, error: type | None = None) -> None:
        cells.append(new_code_cell(source, id=cell_id))
        steps.append((len(cells) - 1, source, error))

    for number, case in enumerate(CELLS):
        source = f"%%tvmmodule demo --quiet\n{case.body}"
        error = case.error if case.call is None else None
        if case.replaces:
            steps.append((seed_index[case.replaces], source, error))
        else:
            add(source, f"bad-cell-{number}", error)
        if case.call is not None:
            add(case.call, f"bad-cell-{number}-call", case.error)
            if case.replaces:  # the edit ran: run the seed cell as it was again
                seed = seed_index[case.replaces]
                steps.append((seed, f"%%tvmmodule demo --quiet\n{SEED[case.replaces]}", None))
            else:
                add(f"demo.drop_functions('bad-cell-{number}')", f"bad-cell-{number}-undo")
    for number, call in enumerate(CALLS):
        add(call.call, f"bad-call-{number}", call.error)
    add(NUMBERS, "final-numbers")
    return new_notebook(cells=cells), steps


def names_of(error_class: type) -> set[str]:
    """The names an error of `error_class` may show: its own, or a subclass's (e.g.
    UnknownFunctionError).
    """
    return {error_class.__name__} | {
        name for sub in error_class.__subclasses__() for name in names_of(sub)
    }


def send_cell_ids(client: NotebookClient) -> None:
    """Send each cell's id with its execute request, as JupyterLab and Notebook 7 do (nbclient does
    not).
    """
    session, current = client.kc.session, {}
    client.on_cell_execute = lambda cell, cell_index: current.update(id=cell.id)
    plain_msg = session.msg

    def msg(msg_type, content=None, parent=None, header=None, metadata=None):
        if msg_type == "execute_request":
            metadata = {**(metadata or {}), "cellId": current["id"]}
        return plain_msg(msg_type, content, parent, header, metadata)

    session.msg = msg


def test_the_corpus_in_a_real_kernel_errors_compactly_and_the_kernel_survives_and_exits_with_0():
    nb, steps = corpus_steps()
    km = KernelManager(kernel_name="python3")
    processes = []
    client = NotebookClient(
        nb,
        km=km,
        timeout=300,
        allow_errors=True,
        on_notebook_start=lambda notebook: processes.append(km.provisioner.process),
    )
    printed = []
    with client.setup_kernel():
        send_cell_ids(client)
        for index, source, error_class in steps:
            cell = nb.cells[index]
            cell.source = source
            client.execute_cell(cell, index)
            errors = [o for o in cell.outputs if o.output_type == "error"]
            if error_class is None:
                assert not errors, (cell.id, source, errors)
            else:
                assert len(errors) == 1, (cell.id, source, cell.outputs)
                assert errors[0].ename in names_of(error_class), (cell.id, errors[0])
                shown = "\n".join(errors[0].traceback)
                assert len(shown.splitlines()) <= MAX_LINES and "Traceback" not in shown, shown
            if cell.id in ("seed-numbers", "final-numbers"):
                printed.append(
                    "".join(
                        o.text
                        for o in cell.outputs
                        if o.output_type == "stream" and o.name == "stdout"
                    )
                )

        # as closing the notebook does: a shutdown request, then wait (longer than Jupyter's 5 s:
        # on a loaded machine exiting takes longer, and a kill is what this test must not see;
        # test_compile_cache checks that exit waits for at most one export)
        km.shutdown_wait_time = 30
        km.shutdown_kernel(now=False)

    assert len(printed) == 2
    for text in printed:
        numbers = json.loads(text)
        assert numbers.pop("registry_entries") > 0  # the registry is in use when the kernel exits
        assert numbers == EXPECTED
    (process,) = processes
    assert process.returncode == 0  # graceful shutdown; a segfault at exit would be -11


def test_an_ipython_process_that_used_the_extension_exits_with_0():
    body = SEED["seed-tir"] + SEED["seed-scale"] + SEED["seed-pipeline"]
    script = textwrap.dedent(f"""
        import torch
        ip = get_ipython()
        ip.run_line_magic("load_ext", "tvm_pyfunc_nb")
        ip.run_cell_magic("tvmmodule", "demo --quiet", {body!r})
        x = torch.arange(4, dtype=torch.float32)
        print(demo.pipeline(x, torch.ones(4)).tolist(), demo.kept["registered_pyfunc_sites"])
    """)
    done = subprocess.run(
        [sys.executable, "-m", "IPython", "--no-banner", "--quick", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "[10.0, 20.0, 30.0, 40.0] 1" in done.stdout
