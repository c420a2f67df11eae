"""The one path from a built module to a shared library file, on which a failed write is an
error and never the end of the process.

TVM's `export_library` has LLVM write the object files itself, through a stream
that calls `report_fatal_error("IO failure on output stream")` when a write
fails (a full disk, a quota, a file size limit): the process exits, and in a
notebook every variable goes with it. Here LLVM only emits into memory
(`inspect_source("asm")`, the same code generator and target machine as the
object file), and everything that touches the disk is Python's `open` (an
`OSError`) or a C compiler in a subprocess (an exit code):

1. the assembly of each DSO module of the library (`_collect_dso_modules()`:
   the kernels of a `tirx.build`, the kernels a VM executable links) is
   written as a `.s` file, the C source of a `c` target module as a `.c` file;
2. the modules the library imports (a VM executable's bytecode and constants,
   a CUDA module's code) are packed as TVM packs them
   (`ModulePackImportsToTensor`), written as a binary file that a small
   assembly stub includes (`.incbin`): no C source of a model's weights in hex
   for the compiler to parse;
3. the C compiler assembles and links them (`cc -shared`), in a session of its
   own, so that interrupting or stopping the kernel does not kill it. With GCC
   on Linux its assembler and linker run directly, with the flags and libgcc
   GCC would give them: two short runs instead of the driver's four, a third
   of a library's write. GNU as needs `--gdwarf-5` for the DWARF-5 line tables
   LLVM writes; clang's assembler reads them as they are and refuses that
   flag, so each compiler is asked once which it is.

A library that was itself loaded from a file (`load_library`) holds no code
LLVM could emit again: it is written as the bytes it was loaded from.
`write_library` raises `LibraryWriteError` for every way it can fail; callers
turn it into a notice (the compile cache) or a `CompileError` (an export).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import tvm

from ...errors import LibraryWriteError, last_reason

LOADED_BYTES = "_tvm_pyfunc_nb_library_bytes"  # set on a module by load_library
BLOB_SYMBOL = "__tvm_ffi__library_bin"  # where TVM looks for a library's packed imports
MAX_COMPILER_LINES = 12
C_COMPILERS = ("cc", "gcc", "clang")
# what GCC's own `-shared` link asks of the linker that a TVM library needs (its unwind table);
# libgcc (helpers LLVM may call) is linked in as GCC links it in
LINKER_FLAGS = ("-shared", "--eh-frame-hdr")

# LLVM's code generator is not safe for two threads on one module (the compile cache's writer
# and an RPC upload of the same library once crashed TVM): what runs in this process is serial
_EMITTING = threading.Lock()


def write_library(
    lib: tvm.runtime.Module,
    path: str | os.PathLike,
    *,
    compiler: str | None = None,
    workspace: str | os.PathLike | None = None,
    on_step: Callable[[str], None] | None = None,
) -> None:
    """Write `lib` (a `tirx.build` library, a VM executable's module, or a library loaded with
    `load_library`) to `path` as a shared library that `tvm.runtime.load_module` loads.

    `compiler` is the C compiler that assembles and links (a cross compiler such as
    `aarch64-linux-gnu-gcc` for a remote target; by default this machine's: `$CC`, else cc,
    gcc or clang).
    Intermediate files go in a private temporary folder under `workspace` (the system's
    temporary folder by default). `path` appears complete or not at all. Raises
    `LibraryWriteError`, whatever went wrong. `on_step("codegen")` is called before LLVM
    generates the code, `on_step("link")` before the C compiler runs (the build worker's
    stages).
    """
    step = on_step or (lambda _: None)
    path = Path(path)
    loaded = vars(lib).get(LOADED_BYTES)  # not getattr: a module's lookup JIT-compiles it
    try:
        if loaded is not None:
            with _in_place(path) as partial:
                Path(partial).write_bytes(loaded)
            return
        with tempfile.TemporaryDirectory(
            prefix=".library-", dir=workspace, ignore_cleanup_errors=True
        ) as work:
            step("codegen")
            with _EMITTING:
                sources = _write_sources(lib, Path(work))
            step("link")
            _link(compiler or _default_compiler(), sources, path, Path(work))
    except OSError as err:
        raise LibraryWriteError(
            f"cannot write the library {path}: {err.strerror or err}"
            + (f" ({err.filename})" if err.filename and str(err.filename) != str(path) else ""),
            errno=err.errno,
        ) from err


def load_library(path: str | os.PathLike, data: bytes | None = None) -> tvm.runtime.Module:
    """`tvm.runtime.load_module(path)`, remembering the file's bytes (`data` if the caller has
    them already) so that `write_library` can write this library again, after `path` is gone."""
    if data is None:
        data = Path(path).read_bytes()
    lib = tvm.runtime.load_module(os.fspath(path))
    vars(lib)[LOADED_BYTES] = data
    return lib


def _write_sources(lib: tvm.runtime.Module, work: Path) -> list[str]:
    """The files the C compiler turns into `lib`'s library, written in `work` (names relative
    to it)."""
    if any(m.kind == "library" for m in _import_tree(lib)):
        raise LibraryWriteError(
            "the module links a library loaded from a file, whose code cannot be emitted "
            "again: build it again in this process (or load it with `load_library`, alone)"
        )
    try:
        modules = lib._collect_dso_modules()
        sources = [_write_module_source(module, i, work) for i, module in enumerate(modules)]
        if lib.imports:
            sources.append(_write_imports(lib, work))
    except (OSError, LibraryWriteError):
        raise
    except Exception as err:  # TVM refuses a module it cannot emit or pack
        raise LibraryWriteError(f"{lib.kind} module cannot be written: {last_reason(err)}") from err
    return sources


def _import_tree(lib: tvm.runtime.Module) -> list[tvm.runtime.Module]:
    """`lib` and every module it imports, directly or not."""
    found, pending = [], [lib]
    while pending:
        module = pending.pop()
        found.append(module)
        pending.extend(module.imports)
    return found


def _write_module_source(module: tvm.runtime.Module, index: int, work: Path) -> str:
    if module.kind == "llvm":
        if module.get_function("__tvm_is_system_module")():
            raise LibraryWriteError(
                "a system-lib module is linked statically into an application, not written "
                "as a shared library"
            )
        name = f"lib{index}.s"
        (work / name).write_text(module.inspect_source("asm"))
    elif module.kind == "c":
        name = f"lib{index}.c"
        (work / name).write_text(module.inspect_source("c"))
    else:
        raise LibraryWriteError(f"a {module.kind} module cannot be written as a shared library")
    return name


def _write_imports(lib: tvm.runtime.Module, work: Path) -> str:
    """`lib`'s imported modules packed as TVM packs them, in a file, and the assembly that puts
    them in the library under the symbol TVM looks for."""
    from tvm.runtime import _ffi_api

    packed = _ffi_api.ModulePackImportsToTensor(lib).numpy().tobytes()
    (work / "imports.bin").write_bytes(packed)
    symbol = ("_" if sys.platform == "darwin" else "") + BLOB_SYMBOL
    section = "__TEXT,__const" if sys.platform == "darwin" else ".rodata"
    elf = "" if sys.platform == "darwin" else f"\t.type {symbol}, %object\n"
    stub = (
        f"\t.section {section}\n\t.globl {symbol}\n{elf}\t.p2align 4\n"
        f'{symbol}:\n\t.incbin "imports.bin"\n'
    )
    (work / "imports.s").write_text(stub)
    return "imports.s"


def _link(compiler: str, sources: list[str], path: Path, work: Path) -> None:
    """Assemble, compile and link `sources` into `path`: with the assembler and the linker
    themselves where the compiler is GCC and there is no C to compile (two short runs
    instead of the compiler's four, tens of milliseconds less per library), else with the
    compiler."""
    with _in_place(path) as partial:
        tools = None if any(s.endswith(".c") for s in sources) else _binutils(compiler)
        if tools is None:
            _check(_compiler_link(compiler, sources, partial), path, work)
        else:
            assembler, linker, libgcc = tools
            objects = [source.removesuffix(".s") + ".o" for source in sources]
            for source, obj in zip(sources, objects, strict=True):
                flags = [flag.removeprefix("-Wa,") for flag in _assembler_flags(compiler)]
                _check([assembler, *flags, "-o", obj, source], path, work)
            _check([linker, *LINKER_FLAGS, "-o", partial, *objects, libgcc], path, work)


def _compiler_link(compiler: str, sources: list[str], output: str) -> list[str]:
    include = [] if not any(s.endswith(".c") for s in sources) else _tvm_includes()
    command = [compiler, "-shared", "-fPIC", *_assembler_flags(compiler), *include]
    if sys.platform == "darwin":
        command += ["-undefined", "dynamic_lookup"]
    return [*command, "-o", output, *sources]


def _check(command: list[str], path: Path, work: Path) -> None:
    """Run `command` in `work`; a `LibraryWriteError` with what it said if it fails."""
    done = _run(command, work)
    if done.returncode != 0:
        said = (done.stdout + done.stderr).strip().splitlines()
        raise LibraryWriteError(
            f"the C compiler could not link the library {path} (`{Path(command[0]).name}` exit "
            f"{done.returncode}): " + "\n".join(said[-MAX_COMPILER_LINES:]),
            errno=_errno_in(done.stderr),
        )


@functools.cache
def _binutils(compiler: str) -> tuple[str, str, str] | None:
    """The assembler, linker and libgcc (the helpers LLVM's code may call) that GCC `compiler`
    links with on Linux, or None (not Linux, not GCC, or not found)."""
    if not sys.platform.startswith("linux"):
        return None
    found = []
    for question in ("-print-prog-name=as", "-print-prog-name=ld", "-print-libgcc-file-name"):
        answer = _run([compiler, question]).stdout.strip()
        found.append(shutil.which(answer) or answer)
    if not all(os.path.isabs(p) and os.path.isfile(p) for p in found):
        return None
    return found[0], found[1], found[2]


def _run(command: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            command,
            cwd=cwd,
            capture_output=True,
            text=True,
            errors="replace",
            start_new_session=True,
            check=False,
        )
    except FileNotFoundError:
        raise LibraryWriteError(f"no C compiler `{command[0]}` to link the library") from None


def _default_compiler() -> str:
    """This machine's C compiler: `$CC`, else the first of cc, gcc and clang on the PATH.
    (TVM's `get_cc` prefers a C++ compiler, whose link also searches libstdc++: a third slower,
    and nothing here is C++.)"""
    found = os.environ.get("CC") or next(filter(None, map(shutil.which, C_COMPILERS)), None)
    if not found:
        raise LibraryWriteError("no C compiler found to link the library: install gcc or clang")
    return found


@functools.cache
def _assembler_flags(compiler: str) -> tuple[str, ...]:
    """`-Wa,--gdwarf-5` if `compiler` drives GNU as, which needs it for LLVM's DWARF-5 line
    tables; nothing for clang, whose own assembler takes them and refuses the flag. Asked with
    no file written, so a full disk cannot give a wrong answer."""
    flag = "-Wa,--gdwarf-5"
    asked = _run([compiler, flag, "-c", "-x", "assembler", os.devnull, "-o", os.devnull])
    return (flag,) if asked.returncode == 0 else ()


@functools.cache
def _tvm_includes() -> tuple[str, ...]:
    """What C source made by TVM's `c` target includes."""
    import tvm_ffi.libinfo

    paths = (
        tvm.libinfo.find_include_path(),
        tvm_ffi.libinfo.find_include_path(),
        tvm_ffi.libinfo.find_dlpack_include_path(),
    )
    return tuple(f"-I{p}" for p in dict.fromkeys(paths))


def _errno_in(said: str) -> int | None:
    """The error number a compiler's message names (`File too large`, `No space left on
    device`...), so that callers can tell a full disk from a compiler that failed."""
    for number in (errno.EFBIG, errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES):
        if os.strerror(number) in said:
            return number
    return None


@contextlib.contextmanager
def _in_place(path: Path) -> Iterator[str]:
    """A temporary name next to `path` to write to, renamed to `path` if the block succeeds:
    `path` appears complete or not at all, and nothing is left behind."""
    fd, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield partial
        os.replace(partial, path)
    finally:
        _remove(partial)


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
