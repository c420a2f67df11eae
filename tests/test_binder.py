"""The Binder check: a fresh environment built from `binder/` alone runs the quickstart.

mybinder.org builds its image with repo2docker: the Python of
`binder/runtime.txt`, a base environment that already runs JupyterLab with
ipykernel and ipywidgets, then `pip install -r binder/requirements.txt` from
the repository root. With a `binder/` folder the repository itself is *not*
installed, so the requirements have to name it (`.`).

This test does the same in a fresh venv, with ipykernel and nbclient standing
in for the base environment, and runs `notebooks/01_quickstart.ipynb` in it
through nbclient. Only PyPI is reachable here: torch comes from
`pip install torch==2.13.0`, which this machine serves from a local CPU wheel
(constrained to `+cpu`, so pip fails rather than download a CUDA build), and
the PyTorch CPU index that the requirements name for mybinder.org is not
retried when it cannot be reached (`PIP_RETRIES=0`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
BINDER = REPO / "binder"
NOTEBOOK = REPO / "notebooks" / "01_quickstart.ipynb"
VENV = REPO / "build" / "binder-check"
PYTHON = VENV / "bin" / "python"
# What repo2docker's base environment brings that running a notebook needs
BASE_ENVIRONMENT = ["ipykernel==7.4.0", "nbclient==0.11.0"]
KERNEL = "binder-check"
STEP_TIMEOUT = 600  # seconds
LEAKY_VARIABLES = {
    "PYTHONPATH",
    "PYTHONHOME",
    "VIRTUAL_ENV",
}  # would mix this environment into the check's

EXECUTE = textwrap.dedent("""
    import json, sys
    import nbformat
    from nbclient import NotebookClient

    path, kernel = sys.argv[1], sys.argv[2]
    nb = nbformat.read(path, as_version=4)
    resources = {"metadata": {"path": sys.argv[3]}}
    NotebookClient(nb, kernel_name=kernel, timeout=600, resources=resources).execute()
    outputs = [
        {"source": cell.source, "outputs": cell.outputs}
        for cell in nb.cells if cell.cell_type == "code"
    ]
    print(json.dumps(outputs))
""")


def run(*args: str | Path, cwd: Path = REPO) -> str:
    """Run a command in the check's environment; fail with its output if it fails."""
    env = {k: v for k, v in os.environ.items() if k not in LEAKY_VARIABLES}
    env["PIP_RETRIES"] = "0"  # an index that cannot be reached here fails at once, not five times
    proc = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT,
    )
    command = " ".join(map(str, args))
    assert proc.returncode == 0, f"{command} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def binder_env(tmp_path_factory) -> Path:
    """A fresh venv built the way repo2docker builds the Binder image; returns its python."""
    shutil.rmtree(VENV, ignore_errors=True)
    run(sys.executable, "-m", "venv", VENV)
    cpu_only = tmp_path_factory.mktemp("binder") / "cpu-only.txt"
    cpu_only.write_text("torch==2.13.0+cpu\n")
    # --no-compile: pip would byte-compile every module it installs, torch's and transformers'
    # thousands, most of which nothing here imports (half the setup: 55 s of 110 s on two cores);
    # Python compiles what the probe and the kernel import as they import it.
    pip_install = (PYTHON, "-m", "pip", "install", "-q", "--no-compile")
    run(*pip_install, "torch==2.13.0", "-c", cpu_only)
    run(*pip_install, *BASE_ENVIRONMENT)
    run(*pip_install, "-r", BINDER / "requirements.txt")
    run(PYTHON, "-m", "ipykernel", "install", "--prefix", VENV, "--name", KERNEL)
    return PYTHON


def test_runtime_is_the_python_this_check_runs():
    runtime = (BINDER / "runtime.txt").read_text().strip()
    assert runtime == f"python-{sys.version_info.major}.{sys.version_info.minor}"


def test_requirements_name_the_package_and_a_cpu_torch():
    text = (BINDER / "requirements.txt").read_text()
    lines = [ln.split("#")[0].strip() for ln in text.splitlines()]
    lines = [ln for ln in lines if ln]
    # repo2docker does not install a repository that has a binder/ folder; NAME.graph's extra
    assert ".[graph]" in lines
    assert "torch==2.13.0+cpu" in lines
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in lines
    pinned = [ln for ln in lines if not ln.startswith("-") and ln != ".[graph]"]
    assert all("==" in ln for ln in pinned), pinned


def test_the_environment_is_consistent_and_cpu_only(binder_env):
    run(binder_env, "-m", "pip", "check")
    probe = (
        "import json, torch, tvm_pyfunc_nb; "
        "from tvm_pyfunc_nb._views import graphviz_engine; "
        "print(json.dumps([torch.__version__, torch.version.cuda, tvm_pyfunc_nb.__file__, "
        "graphviz_engine.version()]))"
    )
    version, cuda, package, graphviz = json.loads(run(binder_env, "-c", probe, cwd=NOTEBOOK.parent))
    assert version == "2.13.0+cpu" and cuda is None
    assert graphviz.startswith("16.")  # NAME.graph's engine: shipped in the package, and runs
    # installed from binder/requirements.txt, not imported from the work tree
    assert Path(package).is_relative_to(VENV), package


def test_the_quickstart_runs_in_the_binder_environment(binder_env):
    stdout = run(binder_env, "-c", EXECUTE, NOTEBOOK, KERNEL, NOTEBOOK.parent, cwd=NOTEBOOK.parent)
    outputs = [o for cell in json.loads(stdout) for o in cell["outputs"]]
    errors = [o for o in outputs if o["output_type"] == "error"]
    assert not errors, errors
    shown = [o.get("data", {}).get("text/plain", "") for o in outputs]
    assert "tensor([ 2.,  4.,  6.,  8., 10.])" in shown
    assert "demo: this cell defines add_tir (tir), main (pyfunc)" in shown
