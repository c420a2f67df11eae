"""Shared fixtures: a real IPython shell with the extension loaded, and cell helpers."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest
from IPython.testing.globalipapp import start_ipython

from tvm_pyfunc_nb.testing import NotebookShell


def pytest_configure(config):
    """Kernels and notebooks started by the tests get a throwaway compile cache, never the user's
    own.
    """
    os.environ["TVM_PYFUNC_NB_CACHE_DIR"] = tempfile.mkdtemp(prefix="tvm-pyfunc-nb-cache-")


def pytest_unconfigure(config):
    shutil.rmtree(os.environ.pop("TVM_PYFUNC_NB_CACHE_DIR", ""), ignore_errors=True)


Shell = NotebookShell


@pytest.fixture(scope="session")
def _ipython():
    # No persistent compile cache here: each test compiles what it uses (test_compile_cache opts in)
    return NotebookShell(start_ipython(), cache_dir="").ip


@pytest.fixture
def shell(_ipython):
    """A real IPython shell with `tvm_pyfunc_nb` loaded; live modules are dropped afterwards."""
    shell = NotebookShell(_ipython, cache_dir=None)
    yield shell
    if "tvmmodule" in _ipython.magics_manager.magics["cell"]:
        shell.drop_all()
    _ipython.run_line_magic("reset", "-f")
