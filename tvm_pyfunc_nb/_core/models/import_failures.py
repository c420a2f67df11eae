"""Why `add_torch` could not bring a model in, in PyTorch's words and at the user's line.

`torch.export` puts its reason first ("Could not guard on data-dependent
expression ...") and the user's line under "The following call raised this
error:", and ends with a trailer ("The error above occurred when calling
torch.export.export ...") that says nothing on its own: the reason and the
line are kept, the trailer and the advice between them are not. When TVM's
importer refuses a node, the node's own stack trace (kept by `torch.export`)
gives the user's line.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import traceback
from collections.abc import Iterator

import torch

from ...errors import ModelImportError, last_reason
from .source_sites import place

MAX_REASON_LINES = 6
_TRAILER = "The error above occurred when calling torch.export"
_USER_CALL = re.compile(r'File "([^"]+)", line (\d+), in [^\n]*\n\s*([^\n]+)')
_PACKAGES = (os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(__file__)))


@contextlib.contextmanager
def stderr_kept_if_it_works() -> Iterator[None]:
    """What Python writes to stderr meanwhile is passed on only if no error is raised.

    A failing `torch.export` prints the partial graph it traced (twice) before it raises: a
    screen of noise above an error that says what matters in a few lines.
    """
    kept = io.StringIO()
    with contextlib.redirect_stderr(kept):
        yield
    sys.stderr.write(kept.getvalue())


def export_failure(model: torch.nn.Module, err: BaseException) -> ModelImportError:
    """`torch.export` refused `model`: its reason, and the user's line where it names one."""
    text = str(err).split(_TRAILER)[0].strip()
    # the reason is the first paragraph: one line, or a few (a violated constraint, its fix)
    reason = [_capped(line.strip()) for line in text.split("\n\n")[0].splitlines()]
    reason = [line for line in reason if line][:MAX_REASON_LINES]
    where = _last_user_call(text) or _user_frame(err)
    message = f"torch.export could not export {type(model).__name__}: "
    message += "\n  ".join(reason) if reason else last_reason(err)
    return ModelImportError(message + (f"\n  at {where}" if where else ""))


def translation_failure(
    model: torch.nn.Module, err: BaseException, exported, translated
) -> ModelImportError:
    """TVM's importer refused a node of `exported`: the first one it has no value for
    (`translated` holds the nodes it did), with the user's line that made it."""
    failed = next(
        (n for n in exported.graph.nodes if n.op == "call_function" and n not in translated), None
    )
    message = (
        f"TVM's PyTorch importer could not translate {type(model).__name__}: {last_reason(err)}"
    )
    if failed is not None:
        message += f"\n  at node `{failed.name}` ({failed.target})"
        where = _last_user_call(failed.meta.get("stack_trace") or "")
        message += f", from {where}" if where else ""
    return ModelImportError(message)


def _last_user_call(text: str) -> str | None:
    """`file:line: code` of the last `File "...", line N, in f` of a quoted stack (a notebook
    cell's code as such: `source_sites.place`)."""
    calls = _USER_CALL.findall(text)
    if not calls:
        return None
    path, line, code = calls[-1]
    return f"{place(path, int(line), whole_path=True)}: {code.strip()}"


def _user_frame(err: BaseException) -> str | None:
    """`file:line: code` of the innermost frame of `err`'s traceback outside torch and this
    package (the model's own code), if there is one."""
    frames = [
        f
        for f in traceback.extract_tb(err.__traceback__)
        if not f.filename.startswith(_PACKAGES) and f.line
    ]
    if not frames:
        return None
    frame = frames[-1]
    return f"{place(frame.filename, frame.lineno or 0, whole_path=True)}: {frame.line}"


def _capped(text: str, max_chars: int = 300) -> str:
    return text if len(text) <= max_chars else text[: max_chars - 3] + "..."
