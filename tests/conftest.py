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


# About how long each of the longest scopes takes (seconds, `make test` on two busy cores). Under
# `--dist loadscope` a worker runs a whole scope (a file, a class, a notebook) and takes the next
# in collection order when it is nearly done (the Makefile keeps xdist from reordering the scopes
# by their number of tests, which put the long ones of few tests last): the longest go first, so
# that the short ones fill in at the end and no worker idles while the other finishes a long one.
SECONDS = {
    "tests/test_real_models.py::TestHalfTheZoo": 105,
    "tests/test_real_models.py::TestTheOtherHalf": 100,
    "notebooks/08_make_it_fast.ipynb": 90,
    "tests/test_tune_relax.py": 75,
    "tests/test_making_fast.py": 70,
    "tests/test_binder.py": 60,
    "tests/test_long_session.py": 60,
    "tests/test_fuzz.py": 40,
}


def pytest_collection_modifyitems(config, items):
    """The longest scopes first (a stable sort: the rest keep their order)."""
    items.sort(key=lambda item: -SECONDS.get(item.nodeid.rsplit("::", 1)[0], 0))


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
