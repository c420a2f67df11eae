"""Shared fixtures: a real IPython shell with the extension loaded, and cell helpers."""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile

import pytest
from IPython.testing.globalipapp import start_ipython

_cell_ids = itertools.count(1)


def pytest_configure(config):
    """Kernels and notebooks started by the tests get a throwaway compile cache, never the user's own."""
    os.environ["TVM_PYFUNC_NB_CACHE_DIR"] = tempfile.mkdtemp(prefix="tvm-pyfunc-nb-cache-")


def pytest_unconfigure(config):
    shutil.rmtree(os.environ.pop("TVM_PYFUNC_NB_CACHE_DIR", ""), ignore_errors=True)


class Shell:
    """A real IPython shell; `run` executes a cell the way a notebook front end would."""

    def __init__(self, ip):
        self.ip = ip

    def run(self, cell: str, *, cell_id: str | None = None, expect_error: type | None = None):
        """Run `cell` (with a front-end cell id if given); raise if it fails unexpectedly."""
        result = self.ip.run_cell(cell, store_history=True, cell_id=cell_id)
        error = result.error_before_exec or result.error_in_exec
        if expect_error is not None:
            assert isinstance(error, expect_error), f"expected {expect_error.__name__}, got {error!r}"
            return error
        if error is not None:
            raise error
        return result.result

    def cell(self, name: str, body: str, *, cell_id: str | None = None, options: str = "", **kw):
        """Run `%%tvmmodule name options` with `body`; cell_id defaults to a fresh id."""
        cell_id = cell_id or f"cell-{next(_cell_ids)}"
        return self.run(f"%%tvmmodule {name} {options}\n{body}", cell_id=cell_id, **kw)

    def text(self, obj) -> str:
        """What a front end without widgets shows for `obj` (its text/plain)."""
        data, _ = self.ip.display_formatter.format(obj)
        return data["text/plain"]

    def eval(self, expr: str):
        return eval(expr, self.ip.user_ns)

    @property
    def ns(self):
        return self.ip.user_ns


@pytest.fixture(scope="session")
def _ipython():
    ip = start_ipython()
    ip.run_line_magic("load_ext", "tvm_pyfunc_nb")
    # No persistent compile cache here: each test compiles what it uses (test_compile_cache opts in)
    ip.run_line_magic("config", "TVMModuleMagics.cache_dir = ''")
    return ip


@pytest.fixture
def shell(_ipython):
    """A real IPython shell with `tvm_pyfunc_nb` loaded; live modules are dropped afterwards."""
    yield Shell(_ipython)
    from tvm_pyfunc_nb import _loaded

    magics = _loaded.get(_ipython)
    if magics is not None:
        for name in list(magics.modules):
            magics.tvmmodule_drop(name)
    _ipython.run_line_magic("reset", "-f")
