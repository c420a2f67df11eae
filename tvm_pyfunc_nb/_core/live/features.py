"""What a live module shows and writes: its features, each a function of its parts.

Every method here is one line over a module of its own (`trace`: tracing.py,
`compare`: comparing.py and kernel_compare.py, `export`: exporting.py...),
given the module's `ModuleParts` (module_parts.py), never the module: a new
feature is a new module with a function of `parts`, and one method here.
They read the module and change nothing of it; what changes it (cells,
`add`, `schedule`, `tune`) is the facade's own (live_module.py).
"""

from __future__ import annotations

from .. import exporting, front_end_port
from ..faults import bisecting, minimizing, reporting
from ..inspect import (
    comparing,
    kernel_compare,
    lowered_views,
    profiling,
    timing,
    tracing,
)
from ..inspect import graph as dataflow
from ..module_parts import ModuleParts
from . import script_text
from .cells import RELAX


class Features:
    """The features of a live module (`LiveModule` is one): `_parts` are its parts."""

    _parts: ModuleParts

    def as_torch(self, fn: str) -> str:
        """Relax function `fn` as PyTorch source text; what it cannot map is flagged."""
        from ..models.torch_source import relax_to_torch_source

        entry = self._parts.entry(fn, kind=RELAX, needed_by="as_torch")
        return relax_to_torch_source(fn, entry.func)

    def script(self) -> str:
        """TVMScript of the whole module, every pyfunc's source included; it parses back (in a
        `%%tvmmodule` cell: weights are written `NAME.consts.<name>`)."""
        return script_text.script(self._parts)

    def edit_text(self, fn: str) -> str:
        """The cell that defines `fn` now: `%%tvmmodule NAME` and its TVMScript (a pyfunc's
        source), weights as `NAME.consts.<name>`. Running it makes the cell `fn`'s owner."""
        return script_text.edit_text(self._parts, fn)

    def edit(self, fn: str) -> str | None:
        """Put `fn`'s cell (`edit_text`) in a new cell below, as `%load` does (outside a notebook,
        return the text)."""
        text = self.edit_text(fn)
        return None if front_end_port.current().next_input(text) else text

    def export(self, path: str, *, example: tuple | None = None) -> str:
        """Write the module to `path` as a standalone Python file that runs with plain TVM;
        `example=("fn", args)` runs now, and `python path` checks it gives the same numbers."""
        return exporting.export(self._parts, path, example)

    def export_library(self, path: str) -> exporting.LibraryExport:
        """Export the compiled PrimFuncs and Relax VM as one library at `path`, for
        `tvm.runtime.load_module` (Relax functions that call pyfuncs are left out)."""
        return exporting.export_library(self._parts, path)

    def trace(self, fn: str, *args, stop_at: str | None = None) -> tracing.Trace:
        """Run Relax function `fn` once and return every intermediate by binding name, in order,
        as `torch.Tensor`s; shown as a table of binding, op, shape, dtype, min/max/mean.
        `stop_at="nonfinite"` stops at the first binding that makes nan or inf from finite
        inputs, and names it, its op, its inputs' ranges and its source line."""
        return tracing.trace(self._parts, fn, args, stop_at=stop_at)

    def compare(
        self, fn: str, reference, *args, rtol=1e-5, atol=1e-6, by="binding"
    ) -> comparing.Comparison:
        """Run `fn` and `reference` (a callable or torch.nn.Module) on `args`: each output's
        error, pass/fail; op by op when `fn` came from `add_torch(reference)`. `by="kernel"`:
        each compiled kernel's output against the binding it computes (in PyTorch, or in a
        build with every optional pass off), naming the first that diverges."""
        return kernel_compare.compare(self._parts, fn, reference, args, rtol, atol, by)

    def bisect(self, fn: str, *args, reference=None, rtol=1e-5, atol=1e-6) -> bisecting.Bisection:
        """The first optional pass of `fn`'s build (Relax pipeline, then TIR) that changes its
        numbers on `args` or crashes, found by building in a child process with passes 1..k on;
        `.save("repro.py")` writes a standalone file that shows it. A pass of your own joins
        the search through a Relax pipeline (`relax.register_pipeline`, `--pipeline NAME`);
        bisecting.py says how, and which passes stay on."""
        return bisecting.bisect(self._parts, fn, args, reference, rtol, atol)

    def minimize(
        self, fn: str, *args, reference=None, rtol=1e-5, atol=1e-6
    ) -> minimizing.Minimized:
        """`fn` cut to the fewest bindings whose build still shows its fault: a crash, an error,
        or numbers that leave `reference`'s (the PyTorch model `fn` came from, else the build
        with every optional pass off), each cut built and run in a child process. Shows the
        cut as TVMScript; `.save("repro.py")` writes it as a standalone file. A bisect
        result's `.minimize()` cuts to what its pass still breaks."""
        return minimizing.minimize(self._parts, fn, args, reference, rtol, atol)

    def report(self, fn: str, *args, path: str = "report.html", bisect=None, minimize=None) -> str:
        """Write one self-contained HTML file for an upstream report of `fn` on `args`: versions,
        the CPU, the options; `fn` and each pass that changed it (a diff); its kernels' TIR;
        `compare` and `profile`; the `bisect` and `minimize` results given, with their repros.
        It names no path, user or host of this machine. Returns the path."""
        return reporting.report(self._parts, fn, args, path, bisect, minimize)

    def lowered(self, fn: str) -> str:
        """`fn` as TVM lowered it: a Relax function after the module's pipeline, a PrimFunc
        after TIR lowering."""
        return lowered_views.lowered(self._parts, fn)

    def kernels(self, fn: str) -> lowered_views.KernelList:
        """The kernels Relax function `fn` runs after the pipeline, in order (with --offload
        torch, its PyTorch calls too; the pyfuncs it calls): a list, shown as a table of the
        bindings each kernel computes and where in the model's code they came from."""
        return lowered_views.kernels(self._parts, fn)

    def source(self, fn: str, fmt: str | None = None) -> str:
        """The code TVM generated for `fn`: LLVM IR (`"ll"`) or assembly (`"asm"`) on a CPU,
        CUDA source on CUDA; for a Relax function, that of every kernel it runs."""
        return lowered_views.source(self._parts, fn, fmt)

    def time(self, fn: str, *args, number=10, repeat=5, against=None) -> timing.Timing:
        """Time `fn` on `args` with TVM's `time_evaluator` on the module's device (pyfuncs: wall
        clock); `against=callable` times a reference on the same inputs and shows the function's
        speed as a multiple of the reference's (`Timing.speed`: above 1 is faster)."""
        return timing.time_function(self._parts, fn, args, number, repeat, against)

    def profile(self, fn: str, *args, number=10, repeat=5) -> profiling.Profile:
        """Time every kernel Relax function `fn` launches on `args` (TIR kernels, PyTorch calls,
        pyfuncs; the VM's own work apart): a table slowest first, with the bindings and PyTorch
        ops fused into each and where they came from."""
        return profiling.profile(self._parts, fn, args, number, repeat)

    def graph(self, fn: str, overlay=None, *, by: str = "binding") -> dataflow.Graph:
        """Relax function `fn` as a dataflow graph, drawn in a notebook in groups by `nn.Module`
        that fold: a node per binding, or per kernel launch of the compiled function
        (`by="kernel"`). `overlay=` what `compare`, `profile` or `trace` returned for `fn`
        colours the nodes by error, time or non-finite values."""
        return dataflow.graph(self._parts, fn, overlay, by)
