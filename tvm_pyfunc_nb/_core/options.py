"""The options of the extension and of each live module, each declared once.

One `Option` yields the `%config TVMModuleMagics.<name>` trait, the
`%%tvmmodule` flag (if it has one) and, for what a module is made for, the
field of `ModuleOptions`. The magics build their traits and flags from
`OPTIONS`, and the core reads the defaults it needs from there
(`default_of`); nothing else lists them or writes their defaults again.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

import tvm

from ..errors import TVMModuleError
from .build.target_text import why_not_here

TARGET_ENV = "TVM_PYFUNC_NB_TARGET"


def default_target() -> str:
    """The `target` of a module that names none: `$TVM_PYFUNC_NB_TARGET` if set (one switch for a
    whole notebook server or test run, e.g. code for the oldest CPU of a mixed cluster), else
    `llvm`, the CPU the module runs on. Read when the package is imported."""
    return os.environ.get(TARGET_ENV, "").strip() or "llvm"


@dataclass(frozen=True)
class Option:
    """One option: its name, default and help; its `%%tvmmodule` flag, if any."""

    name: str
    default: Any
    help: str
    flag: str | None = None  # e.g. "--target"; None: set only with %config
    negated: bool = False  # the flag turns a true default off (`--unchecked` for `checked`)
    per_cell: bool = False  # how one cell runs (`--eager`), not what the module is made for
    # one setting for the whole process (the compile cache), not what a module is made for
    process_wide: bool = False
    metavar: str | None = None  # how the flag's help names its value


OPTIONS: tuple[Option, ...] = (
    Option(
        "target",
        default_target(),
        f"TVM target: llvm (this CPU here), cuda, its JSON form or llvm -mcpu=...; "
        f"${TARGET_ENV} sets the default",
        "--target",
    ),
    Option("device", "cpu", "device, e.g. cpu, cpu:0, cuda:0", "--device"),
    Option(
        "pipeline",
        "auto",
        "Relax pipeline: auto (what tvm.compile picks for the target), target (the target's "
        "own, with fusion), or a relax.get_pipeline name (default, zero...)",
        "--pipeline",
    ),
    Option(
        "offload",
        "none",
        "ops sent to a library: torch runs matmul/linear, conv2d and attention as PyTorch calls "
        "on the same memory, and TVM compiles and fuses the rest; none compiles everything "
        "with TVM",
        "--offload",
    ),
    Option(
        "checked",
        True,
        "bounds and division checks in CPU kernels, so that a bad index raises instead of "
        "killing the kernel (--unchecked leaves them out: faster, at your own risk)",
        "--unchecked",
        negated=True,
    ),
    Option(
        "rpc",
        "",
        "run compiled code on a remote device through TVM's RPC: HOST:PORT of an RPC server, "
        "or tracker=HOST:PORT/KEY ('' runs it here)",
        "--rpc",
        metavar="ADDRESS",
    ),
    Option(
        "isolate",
        False,
        "imports and compiles run in a child process (the build worker), so that a crash "
        "inside TVM or LLVM is a CompileError or ModelImportError, not the end of the kernel",
        "--isolate",
    ),
    Option("rpc_timeout", 60.0, "seconds a remote step (connect, upload, call) may take"),
    Option(
        "cross_compiler",
        "",
        "the C compiler that links libraries for a remote target, e.g. aarch64-linux-gnu-gcc "
        "('' is this machine's own)",
    ),
    Option(
        "eager",
        False,
        "compile when the cell runs; a compile failure fails the cell and changes nothing",
        "--eager",
        per_cell=True,
    ),
    Option("quiet", False, "show nothing after the cell", "--quiet", per_cell=True),
    Option(
        "cache_dir",
        "",
        "persistent compile cache shared by kernels ('' turns it off); in IPython by default "
        "$TVM_PYFUNC_NB_CACHE_DIR if set, else <IPython cache dir>/tvm_pyfunc_nb (%tvmcache "
        "shows it)",
        process_wide=True,
    ),
    Option(
        "cache_max_mb",
        512,
        "size bound of the compile cache in MB; least recently used entries go first",
        process_wide=True,
    ),
)
OPTION_BY_NAME = {o.name: o for o in OPTIONS}


def default_of(name: str) -> Any:
    """The declared default of option `name`."""
    return OPTION_BY_NAME[name].default


ModuleOptions = dataclasses.make_dataclass(
    "ModuleOptions",
    [(o.name, type(o.default), o.default) for o in OPTIONS if not (o.per_cell or o.process_wide)],
    frozen=True,
)
ModuleOptions.__module__ = __name__
ModuleOptions.__doc__ = "What a live module was made for (the `%%tvmmodule` options), for life."


def module_options(given: dict[str, Any]) -> ModuleOptions:
    """`given` (option name -> value) as `ModuleOptions`, the defaults for what is missing."""
    known = {f.name for f in dataclasses.fields(ModuleOptions)}
    unknown = sorted(set(given) - known)
    if unknown:
        raise TVMModuleError(
            f"unknown option(s) {', '.join(unknown)} (options: {', '.join(sorted(known))})"
        )
    return ModuleOptions(**{k: v for k, v in given.items() if v is not None})


def device_of(device: str):
    """`cpu`, `cpu:0`, `cuda:1`... as a TVM device, or a `TVMModuleError` saying what is wrong."""
    kind, _, index = device.partition(":")
    if not (index or "0").isdigit() or int(index or 0) >= 2**31:
        raise TVMModuleError(
            f"device `{device}`: the index after `:` must be a small non-negative number"
        )
    try:
        return tvm.runtime.device(kind, int(index or 0))
    except ValueError as err:
        raise TVMModuleError(f"device `{device}`: {err} (e.g. cpu, cpu:0, cuda:0)") from None


def check_target_runs_on(target: tvm.target.Target, options: ModuleOptions, device) -> None:
    """A `TVMModuleError` if code for `target` cannot run on `device` (`--target cuda` on cpu),
    or, for a module run here (no `--rpc`), cannot run in this process: code for another
    operating system, or for a CPU with instruction sets this one lacks. Checked when the
    module is made, so that a cell with such a target is refused before anything runs."""
    runs_on = tvm.runtime.device(target.get_target_device_type(), 0)
    if runs_on.dlpack_device_type() != device.dlpack_device_type():
        raise TVMModuleError(
            f"target `{options.target}` runs on {runs_on.type} devices, not on "
            f"`{options.device}`; choose a {runs_on.type} device"
        )
    why = None if options.rpc else why_not_here(target)
    if why:
        raise TVMModuleError(
            f"target `{options.target}` cannot run on this machine: {why}. Run it on a "
            "machine that can with --rpc HOST:PORT, or target this one (`llvm`, or an older "
            'CPU: `{"kind": "llvm", "mcpu": "x86-64-v2"}`)'
        )
