"""Graphviz, the layout of `NAME.graph`'s picture: DOT text in, SVG out, in the kernel.

The engine is Graphviz itself, compiled to WebAssembly by `@hpcc-js/wasm-graphviz`
(shipped in `assets/`, pinned, with its licences: `assets/README.md`), run by the V8 of
`mini-racer`. So no Graphviz install, no network, no browser: the picture is made where the
notebook runs, and is the same bytes on every machine (WebAssembly's arithmetic is IEEE's,
with no CPU-specific rounding), which is what a saved notebook, GitHub and nbval need.

The bundle is an ES module; V8 here evaluates scripts, so its closing `export{...}` becomes
an assignment of the `Graphviz` class to `globalThis`. One V8 context serves the process,
made at the first picture and closed at exit (a context left open keeps the interpreter from
exiting). It is made on a thread of its own: mini-racer runs its work on the asyncio loop
running where it is made, if any, and a Jupyter kernel runs its cells on one; waiting there
for the engine would wait on the very loop that must run it.

HTML-like labels (`label=<...>`) are not used: they make the bundle ask for `crypto`, which
V8 without a browser does not have.
"""

from __future__ import annotations

import atexit
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..errors import TVMModuleError

BUNDLE = Path(__file__).parent / "assets" / "graphviz-wasm.js"
LOAD_SECONDS = 60  # compiling the WebAssembly, on a loaded machine
_EXPORTS = re.compile(r"export\{([^}]*)\};?\s*(//[^\n]*)?\s*$")

_lock = threading.Lock()
_context = None


def svg(dot: str) -> str:
    """The SVG Graphviz's `dot` layout makes of `dot` (DOT text)."""
    with _lock:
        context = _context or _start()
        try:
            return context.call("layoutSvg", dot)
        except Exception as err:  # the engine's own error type; its message is Graphviz's
            raise TVMModuleError(f"graph: Graphviz could not lay the graph out: {err}") from err


def version() -> str:
    """The Graphviz version inside the bundle (`16.1.0`)."""
    with _lock:
        return (_context or _start()).eval("engine.version()")


def _start():
    """The V8 context holding the loaded engine (made once, closed at exit)."""
    global _context
    with ThreadPoolExecutor(1) as thread:  # no asyncio loop runs there
        _context = thread.submit(_loaded).result()
    atexit.register(_close)
    return _context


def _loaded():
    from py_mini_racer import MiniRacer

    context = MiniRacer()
    context.eval(script(BUNDLE.read_text()))
    context.eval("Graphviz.load().then(g => { globalThis.engine = g; return 1; })").get(
        timeout=LOAD_SECONDS
    )
    context.eval("var layoutSvg = (dot) => engine.dot(dot, 'svg')")
    return context


def _close() -> None:
    global _context
    with _lock:
        if _context is not None:
            _context.close()
            _context = None


def script(module: str) -> str:
    """The ES module `module` as a script that puts its `Graphviz` export on `globalThis`."""
    found = _EXPORTS.search(module)
    if found is None:
        raise TVMModuleError("graph: the Graphviz bundle has no export list at its end")
    names = dict(
        reversed(item.strip().split(" as ")) for item in found.group(1).split(",") if " as " in item
    )
    return f"{module[: found.start()]}globalThis.Graphviz = {names['Graphviz']};"
