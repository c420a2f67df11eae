"""The `PassContext` a build runs in: the caller's, wherever the build runs.

A build runs in the `PassContext` in force where it is asked for: its
`opt_level`, required and disabled passes and config change what TVM makes.
In this process that holds by itself; the build worker (`--isolate`, `bisect`)
gets it as a `CallerContext`, made in the caller and entered there around
the job. Its config travels as TVM's own JSON (any value TVM can save: a
bool, an `UnrollLoopConfig`...). Instruments do not travel: an instrument
is Python of this process (a pass timer, a printer, a test's recorder), and
what it would record or print in the worker never comes back, so a build
that would need one there is refused, saying why (`CannotTravel`).

`cache_key` is the same context as the compile cache files it: an entry
built under one context is never served under another.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import tvm

from ...errors import TVMModuleError


class CannotTravel(TVMModuleError):
    """The caller's `PassContext` cannot go where the build runs (an instrument)."""


@dataclass(frozen=True)
class CallerContext:
    """The options of the caller's `PassContext`, as they cross to the build worker."""

    opt_level: int = 2
    required: tuple[str, ...] = ()
    disabled: tuple[str, ...] = ()
    config: str = ""  # `tvm.ir.save_json` of its config map ("" for none)

    @classmethod
    def current(cls, where: str) -> CallerContext:
        """The context in force now; `CannotTravel` if it has instruments (`where` says where
        the build would run them)."""
        context = tvm.transform.PassContext.current()
        if context.instruments:
            names = ", ".join(sorted({type(i).__name__ for i in context.instruments}))
            raise CannotTravel(
                f"the PassContext's instruments ({names}) would run in {where}, and what they "
                "record or print there never comes back: build without --isolate to use them, "
                "or leave them out of the PassContext"
            )
        return cls(
            int(context.opt_level),
            tuple(map(str, context.required_pass)),
            tuple(map(str, context.disabled_pass)),
            tvm.ir.save_json(context.config) if context.config else "",
        )

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """This context, in force inside (in the worker)."""
        config = dict(tvm.ir.load_json(self.config)) if self.config else {}
        with tvm.transform.PassContext(
            opt_level=self.opt_level,
            required_pass=list(self.required),
            disabled_pass=list(self.disabled),
            config=config,
        ):
            yield


def with_instruments(*instruments) -> tvm.transform.PassContext:
    """The context in force now, with `instruments` added to its own (options kept)."""
    current = tvm.transform.PassContext.current()
    return tvm.transform.PassContext(
        opt_level=current.opt_level,
        required_pass=list(current.required_pass),
        disabled_pass=list(current.disabled_pass),
        instruments=[*current.instruments, *instruments],
        config=dict(current.config),
    )


def cache_key() -> dict | None:
    """The options of the PassContext in effect, which change what a build makes; None when
    one of them cannot be told apart by its value (a pass or a map given as a config), so that
    nothing is read or written under it."""
    context = tvm.transform.PassContext.current()
    config = {}
    for name, value in context.config.items():
        if not isinstance(value, bool | int | float | str):
            return None
        config[str(name)] = value
    return {
        "opt_level": int(context.opt_level),
        "required": sorted(map(str, context.required_pass)),
        "disabled": sorted(map(str, context.disabled_pass)),
        "config": config,
    }
