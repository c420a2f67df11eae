"""Leaving the notebook: `NAME.export("file.py")` and `NAME.export_library("file.so")`.

The Python file is the module as TVMScript (pyfuncs included, weights inline)
and a few lines of runtime that plain TVM lacks: `load()` instantiates the
module with upstream's `BasePyModule` and registers its pyfuncs for
`R.call_py_func` (upstream's `@I.ir_module` factory loses them), and
`python file.py` checks the example call the live module ran, if one was
given. Nothing of this package or of IPython is needed to run it.

The library is what a deployment loads with `tvm.runtime.load_module`: a
Relax VM executable (run with `relax.VirtualMachine(lib, device)`) whose
imports hold every compiled PrimFunc (`lib.get_function(name,
query_imports=True)`). Relax functions that call pyfuncs cannot go in it.
"""

from __future__ import annotations

import base64
import inspect
import io
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import tvm

from .._version import __version__
from ..errors import TVM_NOTES, CallError, CompileError, last_reason, native_stderr_without
from .build.library_files import write_library
from .live.cells import PRIMFUNC, PYFUNC, RELAX
from .live.editing import module_text
from .live.relax_rewrite import py_func_calls, relax_closure, sub_module
from .module_parts import ModuleParts
from .run.tensors import to_torch
from .user_files import write_whole

_LOADERS = '''def _load(text):
    """Arrays by name; a dtype numpy lacks (bfloat16) travels as its bits, as `name:dtype`."""
    arrays = {}
    with np.load(io.BytesIO(base64.b64decode(text))) as data:
        for key in data.files:
            name, _, dtype = key.partition(":")
            arrays[name] = data[key].view(getattr(ml_dtypes, dtype)) if dtype else data[key]
    return arrays


def _constants(text):
    # each keeps its dtype: relax.const(array) would make int64 int32 and float64 float32
    arrays = _load(text).items()
    return types.SimpleNamespace(**{k: relax.const(tvm.runtime.tensor(a)) for k, a in arrays})

'''

_RUNTIME = '''

PYFUNCS = {pyfuncs!r}
EXAMPLE = {example!r}  # (function, arguments, expected outputs), as .npz in base64, or None


def load(device=None):
    """`{name}` compiled for `device` (the CPU by default), its pyfuncs callable from Relax."""
    with native_stderr_without(*TVM_NOTES):
        module = {name}(device or tvm.cpu())
    single = module._convert_single_tvm_to_pytorch
    module._convert_tvm_to_pytorch = lambda out: _to_torch(out, single)
    register = tvm.get_global_func("vm.builtin.register_py_func")
    for pyfunc in PYFUNCS:
        register(pyfunc, _called_from_relax(getattr(module, pyfunc)))
    return module


# What TVM's C++ side says while it compiles code it wrote itself (a `take` in fast mode, a
# `pow` with a large exponent): nothing a reader of this file can act on
TVM_NOTES = {notes!r}


{without}

def _to_torch(out, single):
    """A Relax function's result in torch, a tuple of outputs as a list: upstream's conversion
    gives a tuple (a TVM Array, not a Python one) to torch.tensor, which fails."""
    if isinstance(out, (tvm_ffi.Array, tuple, list)):
        return [_to_torch(o, single) for o in out]
    return single(out)


def _called_from_relax(pyfunc):
    """What R.call_py_func calls: TVM tensors in (a tuple of them unpacked), TVM tensors out."""

    def call(*args):
        if len(args) == 1 and not hasattr(args[0], "shape"):
            args = tuple(args[0])
        out = pyfunc(*[torch.from_dlpack(a) for a in args])
        outs = out if isinstance(out, (tuple, list)) else [out]
        converted = [tvm.runtime.from_dlpack(o.contiguous()) for o in outs]
        return converted[0] if len(converted) == 1 else converted

    return call


def _arrays(text):
    arrays = _load(text)
    return [arrays[f"a{{i}}"] for i in range(len(arrays))]


def _flat(value):
    if isinstance(value, (tuple, list)):
        return [v for item in value for v in _flat(item)]
    return [value]


atexit.register(tvm.get_global_func("vm.builtin.clear_py_func_registry"))

if __name__ == "__main__":
    module = load()
    if EXAMPLE is None:
        print("{name}: loaded and compiled; no example call to check")
        sys.exit(0)
    function, arguments, expected = EXAMPLE
    outputs = _flat(getattr(module, function)(*[torch.tensor(a) for a in _arrays(arguments)]))
    wanted = _arrays(expected)
    same = len(outputs) == len(wanted) and all(
        np.allclose(torch.as_tensor(o).numpy(), w, rtol=1e-5, atol=1e-6)
        for o, w in zip(outputs, wanted)
    )
    verdict = "gives the numbers of the live module" if same else "DIFFERS from the live module"
    print(f"{name}.{{function}}: {{verdict}}")
    sys.exit(0 if same else 1)
'''


def python_file(
    name: str,
    script: str,
    pyfuncs: Sequence[str],
    constants: dict[str, np.ndarray],
    example: tuple[str, Sequence, object] | None,
) -> str:
    """The text of a standalone Python file holding the module `script` and its runtime."""
    header = [
        f'"""`{name}`, exported from a live module by tvm_pyfunc_nb {__version__}.',
        "",
        f"Needs only apache-tvm {tvm.__version__} and torch. `python <this file>` compiles the "
        "module and",
        "checks the example call it was exported with; `load()` returns the compiled module.",
        '"""',
        "",
        "import atexit",
        "import base64",
        "import contextlib",
        "import io",
        "import os",
        "import sys",
        "import tempfile",
        "import types",
        "",
        "import ml_dtypes",
        "import numpy as np",
        "import torch",
        "import tvm",
        "import tvm_ffi",
        "from tvm import relax",
        "",
        "",
        _LOADERS,
        f"consts = _constants({_npz(constants)!r})",
        "",
    ]
    encoded = None
    if example is not None:
        function, args, expected = example
        arrays = [to_torch(a).detach().cpu().numpy() for a in args]
        outputs = [to_torch(o).detach().cpu().numpy() for o in _flat(expected)]
        encoded = (
            function,
            _npz({f"a{i}": a for i, a in enumerate(arrays)}),
            _npz({f"a{i}": o for i, o in enumerate(outputs)}),
        )
    body = script.replace("from __future__ import annotations\n", "")
    runtime = _RUNTIME.format(
        name=name,
        pyfuncs=list(pyfuncs),
        example=encoded,
        notes=list(TVM_NOTES),
        without=inspect.getsource(native_stderr_without),  # the package's own, as it is
    )
    return "from __future__ import annotations\n\n" + "\n".join(header) + "\n" + body + runtime


def _npz(arrays: dict[str, np.ndarray]) -> str:
    """`.npz` bytes in base64; an array of a dtype numpy lacks (ml_dtypes' bfloat16, float8)
    as its bits, under `name:dtype` (`np.savez` would write it as raw bytes of no dtype)."""
    buffer = io.BytesIO()
    native = {
        (k if a.dtype.kind != "V" else f"{k}:{a.dtype.name}"): (
            a if a.dtype.kind != "V" else a.view(f"u{a.dtype.itemsize}")
        )
        for k, a in arrays.items()
    }
    np.savez(buffer, **native)
    return base64.b64encode(buffer.getvalue()).decode()


def _flat(value) -> list:
    if isinstance(value, (tuple, list)):
        return [v for item in value for v in _flat(item)]
    return [value]


@dataclass(frozen=True)
class LibraryExport:
    """What `export_library` wrote: the file, the functions in it, and what it had to leave out."""

    path: str
    relax: list[str]
    kernels: list[str]
    left_out: dict[str, str]  # function -> why

    def __repr__(self) -> str:
        lines = [
            f"exported {self.path}: Relax {', '.join(self.relax) or 'none'}; "
            f"PrimFuncs {', '.join(self.kernels) or 'none'}"
        ]
        lines += [f"  left out {name}: {why}" for name, why in self.left_out.items()]
        lines.append(
            "  load it with tvm.runtime.load_module(path); relax.VirtualMachine(lib, "
            "device) runs the Relax functions, lib.get_function(name, query_imports=True) "
            "a PrimFunc"
        )
        return "\n".join(lines)


def export(parts: ModuleParts, path: str, example: tuple | None) -> str:
    """Write the module to `path` as a standalone Python file; `example=("fn", args)` is run now
    and checked again when the file runs."""
    if example is not None:
        if not isinstance(example, (tuple, list)) or len(example) != 2:
            raise CallError('export: example is ("function", (arguments, ...))')
        fn, args = example
        if parts.entry(fn).kind == PRIMFUNC:
            raise CallError(
                "export: the example must be a Relax function or a pyfunc (a "
                "PrimFunc writes its outputs into its arguments)",
                function=fn,
            )
        args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
        example = (fn, args, parts.function(fn)(*args))
    consts, state = parts.consts, parts.state
    names = parts.constant_names()
    script = module_text(parts.name, state.ir_mod, consts, names, "consts.", py_module=True)
    constants = {name: consts.numpy(name) for name in consts}
    pyfuncs = [n for n, kind in state.functions.items() if kind == PYFUNC]
    text = python_file(parts.name, script, pyfuncs, constants, example)
    write_whole(path, text, "export")
    return path


def export_library(parts: ModuleParts, path: str) -> LibraryExport:
    """The compiled PrimFuncs and Relax functions of the module as one library at `path`; Relax
    functions that call pyfuncs are left out (a library cannot carry Python)."""
    state = parts.state
    left_out = {}
    relax_names = []
    for name, entry in state.entries.items():
        if entry.kind != RELAX:
            continue
        closure = [state.entries[n] for n in relax_closure([name], state.ir_mod)]
        if any(e.kind == PYFUNC or (e.kind == RELAX and py_func_calls(e.func)) for e in closure):
            left_out[name] = "calls Python (a pyfunc), which a library cannot carry"
        else:
            relax_names.append(name)
    kernels = {n: e.func for n, e in state.entries.items() if e.kind == PRIMFUNC}
    mod = sub_module(state.ir_mod, relax_closure(relax_names, state.ir_mod))
    try:
        executable, linked = parts.build.link_standalone(mod, kernels)
        write_library(executable, path)
    except CompileError:
        raise
    except Exception as err:
        raise CompileError(f"exporting the library failed: {last_reason(err)}") from err
    return LibraryExport(path, relax_names, [n for n in linked if n in kernels], left_out)
