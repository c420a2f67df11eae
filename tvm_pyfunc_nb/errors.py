"""The package's one error family.

Every mistake a user can make raises a subclass of `TVMModuleError`. The
message is short and names the function and the cell line where one applies;
the magic layer shows it like IPython's `UsageError` (no traceback noise),
while `%tb` still has the full chain (`__cause__`). The error a pyfunc raised
ends its traceback in the pyfunc's frame, so that `%debug` opens there
(`_core/call_errors.raised_in_pyfunc`).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import traceback
from collections.abc import Iterator

MAX_DETAIL_LINES = 12
# TVM's assertion prefix, `Check failed: (IsBaseOf(a, b)) is false: `, says nothing to a user
_CHECK_FAILED = re.compile(r"^Check failed: \((.*?)\) is false:\s*")


class TVMModuleError(Exception):
    """Base class of every error this package raises on a user's behalf.

    `function` is the function's name and `line` its cell line (the
    `%%tvmmodule` line is line 1), when they apply.
    """

    def __init__(self, message: str, *, function: str | None = None, line: int | None = None):
        self.function = function
        self.line = line
        self.detail = message
        super().__init__(_compose(message, function, line))


class CellSyntaxError(TVMModuleError):
    """The cell is not valid Python, or has something other than functions at top level."""


class TVMScriptError(TVMModuleError):
    """TVMScript rejected a function: unknown op, bad annotation, undefined name..."""


class IllFormedModuleError(TVMModuleError):
    """The functions parse one by one but do not make a well-formed module together."""


class CompileError(TVMModuleError):
    """TVM failed to compile a function for the target.

    `about` holds the strings of the function's source that the failure names (a storage
    scope, an extern symbol, a thread tag): where one stands is the cell line at fault.
    """

    def __init__(
        self,
        message: str,
        *,
        function: str | None = None,
        line: int | None = None,
        about: tuple[str, ...] = (),
    ):
        super().__init__(message, function=function, line=line)
        self.about = about


class CallError(TVMModuleError):
    """A call was wrong: unknown function, wrong number, shape or dtype of arguments."""


class UnknownFunctionError(CallError, AttributeError):
    """`NAME.fn` (or a call by name) where the module has no function `fn`."""


class ModelImportError(TVMModuleError):
    """A model could not be brought in: `torch.export` or TVM's importer refused it."""


class ScheduleError(TVMModuleError):
    """A schedule or tuning run failed: a primitive refused, or no candidate ran."""


class PyFuncError(TVMModuleError):
    """A pyfunc raised, or returned something that does not match its declared `out_ty`."""


class FileWriteError(TVMModuleError):
    """A file for the user (`export`, a repro, a library) could not be written: the disk is
    full, a quota or a file size limit was hit, the folder is read-only or gone, or a symbolic
    link stands at the destination. Nothing was written: the destination is as it was.

    `errno` is the operating system's error number when a write failed (`errno.ENOSPC`...),
    else None. The process goes on.
    """

    def __init__(self, message: str, *, errno: int | None = None):
        super().__init__(message)
        self.errno = errno


class LibraryWriteError(FileWriteError):
    """A compiled module could not be written as a shared library: the disk is full, a quota or
    a file size limit was hit, the folder is read-only or gone, or the C compiler failed. The
    module still runs from memory.
    """


class WorkerCrash(TVMModuleError):
    """The build worker (a child process that builds what could crash this one) died during a
    job: a signal, an abort, LLVM's fatal error, or a job past its time. `crash` says how: the
    signal, the stage the job was in, and the last lines the worker wrote to stderr."""

    def __init__(self, crash):
        super().__init__(str(crash))
        self.crash = crash


class CompileCacheWarning(UserWarning):
    """The compile cache will not load code that someone else could have written (it is off, or
    it ignored an entry or a folder of tuning records), or it could not store an entry. Nothing
    fails: the functions it would have served compile instead, tuning results stay in memory."""


class ScheduleWarning(UserWarning):
    """A kernel keeps TVM's default schedule: the CPU schedule written for its kind (a matmul, a
    convolution, an element-wise chain) failed on it, or TVM could not fuse the module and it is
    built as `--pipeline default` builds it. Nothing fails; it runs as TVM made it."""


def _compose(message: str, function: str | None, line: int | None) -> str:
    where = []
    if function:
        where.append(f"`{function}`")
    if line:
        where.append(f"cell line {line}")
    head = f"{', '.join(where)}: " if where else ""
    return head + shorten(message)


def shorten(text: str, max_lines: int = MAX_DETAIL_LINES) -> str:
    """Keep an error detail on one screen: strip TVM's backtrace noise, cap the lines."""
    lines = [ln.rstrip() for ln in str(text).strip().splitlines()]
    lines = [ln for ln in lines if ln and not _is_noise(ln)]
    if len(lines) > max_lines:
        dropped = len(lines) - max_lines
        lines = [*lines[:max_lines], f"... ({dropped} more lines; %tb shows the full story)"]
    return "\n".join(lines)


def _is_noise(line: str) -> bool:
    stripped = line.strip()
    return (
        stripped.startswith(('File "', "File '", "Traceback (most recent call last)"))
        or stripped.startswith("note: run with `TVM_BACKTRACE=1`")
        or stripped.startswith("^")
        # C++ backtraces
        or stripped.startswith(("frame #", "Exception raised from ", "<omitting python frames>"))
    )


def last_reason(err: BaseException) -> str:
    """The one line that says why TVM failed: its last line that is not backtrace noise, capped."""
    lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
    useful = [ln for ln in lines if not _is_noise(ln)]
    text = plain_reason(useful[-1]) if useful else type(err).__name__
    return text if len(text) < 300 else text[:297] + "..."


_SIZE = re.compile(r"\bT\.int64\((-?\d+)\)")
_OP_NAME = re.compile(r'name="([^"]+)"')


def plain_reason(line: str) -> str:
    """A line of TVM's as a user reads it: an operator named as the cell writes it (`R.add`),
    not as the whole record TVM prints (`ir.Op(span=None, ..., support_level=10)`, hundreds
    of characters); sizes as numbers (`3`, not `T.int64(3)`); no assertion prefix."""
    text = _SIZE.sub(r"\1", _CHECK_FAILED.sub("", line))
    while (start := text.find("ir.Op(")) != -1:
        end = _closing(text, start + len("ir.Op"))
        name = _OP_NAME.search(text, start, end)
        op = name.group(1) if name else "an operator"
        text = text[:start] + re.sub(r"^relax\.", "R.", op) + text[end:]
    return text


def _closing(text: str, opening: int) -> int:
    """The index after the parenthesis that closes the one at `opening` (quotes respected)."""
    depth, quoted, index = 0, False, opening
    while index < len(text):
        char = text[index]
        if quoted:
            quoted = char != '"' or text[index - 1] == "\\"
        elif char == '"':
            quoted = True
        elif char in "()":
            depth += 1 if char == "(" else -1
            if depth == 0:
                return index + 1
        index += 1
    return len(text)


# A line of generated code quoted in an error (LLVM IR: `%12 = fcmp oeq i1 %8, %11, !dbg !42`)
_CODE_LINE = re.compile(r"^(%[\w.]+ = |!\d|define |declare |store |br |ret |call |tail call )")


def reason_sentence(err: BaseException, max_chars: int = 300) -> str:
    """TVM's reason in a sentence or two: its message without backtraces, without the code it
    quotes (a line of LLVM IR, an offending call named by the pipeline's internal names)."""
    kept = []
    for line in str(err).strip().splitlines():
        line = line.strip()
        if line.startswith("Offending call:"):
            break
        if line and not _is_noise(line) and not _CODE_LINE.match(line):
            check = _CHECK_FAILED.match(line)
            rest = line[check.end() :] if check else line
            # an assertion with no message: its condition is all TVM says
            kept.append(rest or f"TVM's internal check `{check.group(1)}` failed")
    text = " ".join(kept) or _unsaid(err)
    if len(text) > max_chars:
        cut = text.rfind(". ", 0, max_chars)
        text = text[: cut + 1] if cut > 0 else text[: max_chars - 3] + "..."
    return text


def _unsaid(err: BaseException) -> str:
    """What an error without a message says: for a bare `assert` in TVM's Python, the
    condition, the function and TVM's file; else its type."""
    frames = traceback.extract_tb(err.__traceback__)
    if not frames or not (frames[-1].line or "").startswith("assert "):
        return type(err).__name__
    last = frames[-1]
    where = f"{last.name}, {_tvm_path(last.filename)}:{last.lineno}"
    return f"TVM's check `{last.line[len('assert ') :]}` failed (in {where})"


def _tvm_path(filename: str) -> str:
    """`tvm/relax/...py` for a file of the installed package (no machine paths)."""
    parts = filename.replace(os.sep, "/").split("/site-packages/")
    return parts[-1]


# What TVM's C++ side warns about code its own legalization wrote (every imported transformer
# has a `take` in fast mode and a `pow`): nothing a user can act on
TVM_NOTES = ("Fast mode segfaults when there are out-of-bounds indices", "Detected pow(x, y)")


@contextlib.contextmanager
def native_stderr_silenced() -> Iterator[None]:
    """Nothing TVM's C++ side writes to stderr (fd 2) reaches the notebook meanwhile.

    TVM logs warnings while it formats some errors, and when an IR builder a failed parse
    left behind is collected; in a notebook they would land in whichever cell runs next.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@contextlib.contextmanager
def native_stderr_without(*noise: str) -> Iterator[None]:
    """What TVM's C++ side writes to stderr (fd 2) meanwhile reaches the notebook, but for the
    lines that contain one of `noise`.

    For a warning that says nothing a user can act on, where the rest of what TVM says might:
    making a target (`--target cuda` on a machine without a GPU) warns that it cannot detect
    the CUDA version, while an LLVM target's warnings about its `mcpu` or `mattr` matter.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        try:
            os.dup2(captured.fileno(), 2)
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            said = captured.read().decode(errors="replace").splitlines(keepends=True)
            kept = "".join(line for line in said if not any(n in line for n in noise))
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()
