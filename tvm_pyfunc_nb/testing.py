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
front end without widgets shows for an object. Nothing here is mocked: these
are IPython's own `run_cell`, magics and display formatters.
"""

from __future__ import annotations

import itertools
from typing import Any

from IPython.core.interactiveshell import InteractiveShell

from ._magics import TVMModuleMagics, magics_of

_cell_ids = itertools.count(1)


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
        """Run `cell` (with a front-end cell id if given) and return its result.

        It raises what the cell raised, unless `expect_error` is given: then that
        error (an instance of it) is returned, and anything else fails.
        """
        result = self.ip.run_cell(cell, store_history=store_history, cell_id=cell_id)
        error = result.error_before_exec or result.error_in_exec
        if expect_error is not None:
            if not isinstance(error, expect_error):
                raise AssertionError(f"expected {expect_error.__name__}, got {error!r}")
            return error
        if error is not None:
            raise error
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

    def drop_all(self) -> None:
        """Drop every live module (as `%tvmmodule_drop` does), e.g. between tests."""
        for name in list(self.magics.modules):
            self.ip.run_line_magic("tvmmodule_drop", name)

    def flush_cache(self) -> None:
        """Wait until the compile cache's background writes are on disk."""
        cache = self.magics.compile_cache()
        if cache is not None:
            cache.flush()
