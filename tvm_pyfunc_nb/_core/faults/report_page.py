"""The report's page: one HTML file that needs nothing but a browser.

Everything is in the file: the style sheet (Pygments' classes for the code,
a few rules for the tables), no script, no font, no image, no link to
anything outside it. Text is escaped (`html.escape`), code highlighted by
Pygments (which escapes it too), long code folded in `<details>`.

`scrubbed` is the last step: whatever a TVM message or a path let through,
the page names no place of this machine: its working folder, home, temporary
folder and Python prefix become `<cwd>`, `~`, `<tmp>` and `<python>`, its
host name `<host>`, its user name (in a path, an address) `<user>`.
"""

from __future__ import annotations

import getpass
import html
import os
import re
import socket
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import DiffLexer, PythonLexer


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: list[tuple]
    marked: int | None = None  # the row to highlight


@dataclass(frozen=True)
class Code:
    text: str
    summary: str = ""  # a title that folds it (<details>); "" shows it open, untitled
    diff: bool = False
    opened: bool = False


@dataclass(frozen=True)
class Verdict:
    text: str
    bad: bool


@dataclass
class Section:
    key: str  # the anchor
    title: str
    blocks: list = field(default_factory=list)  # str (a paragraph), Table, Code, Verdict


_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto;
       max-width: 72em; padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
nav a { margin-right: 1em; }
table { border-collapse: collapse; margin: .5em 0; font-size: 13px; }
th, td { text-align: left; padding: 2px 12px 2px 0; vertical-align: top; }
th { border-bottom: 1px solid #ccc; }
tr.marked { background: rgba(176, 0, 32, .10); }
.bad { color: #b00020; font-weight: bold; } .good { color: #1b5e20; font-weight: bold; }
details { margin: .4em 0; } summary { cursor: pointer; font-family: monospace; }
.highlight { background: #f8f8f8; border: 1px solid #e4e4e4; border-radius: 4px;
             overflow: auto; max-height: 40em; padding: 0 .6em; }
.highlight pre { margin: .4em 0; font-size: 12px; }
"""


def page(title: str, sections: list) -> str:
    """The whole page: a title, a list of the sections, each section."""
    nav = " ".join(f'<a href="#{s.key}">{_text(s.title)}</a>' for s in sections)
    body = "\n".join(_section(s) for s in sections)
    style = _CSS + HtmlFormatter().get_style_defs(".highlight")
    document = (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{_text(title)}</title>\n<style>{style}</style>\n</head>\n<body>\n"
        f"<h1>{_text(title)}</h1>\n<nav>{nav}</nav>\n{body}\n</body>\n</html>\n"
    )
    return scrubbed(document)


def _section(section) -> str:
    blocks = "\n".join(_block(b) for b in section.blocks)
    return f'<section id="{section.key}">\n<h2>{_text(section.title)}</h2>\n{blocks}\n</section>'


def _block(block) -> str:
    if isinstance(block, Verdict):
        return f'<p class="{"bad" if block.bad else "good"}">{_text(block.text)}</p>'
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Code):
        lexer = DiffLexer() if block.diff else PythonLexer()
        code = highlight(block.text, lexer, HtmlFormatter())
        if not block.summary:
            return code
        opened = " open" if block.opened else ""
        return f"<details{opened}><summary>{_text(block.summary)}</summary>{code}</details>"
    return f"<p>{_text(block)}</p>"


def _table(table) -> str:
    head = "".join(f"<th>{_text(h)}</th>" for h in table.header)
    rows = []
    for i, row in enumerate(table.rows):
        cells = "".join(f"<td>{_text(c)}</td>" for c in row)
        rows.append(
            f'<tr class="marked">{cells}</tr>' if i == table.marked else f"<tr>{cells}</tr>"
        )
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _text(value: object) -> str:
    return html.escape(str(value), quote=True)


def scrubbed(text: str) -> str:
    """`text` naming no folder, host or user of this machine (see the module's docstring)."""
    places = [
        (os.getcwd(), "<cwd>"),
        (str(Path.home()), "~"),
        (tempfile.gettempdir(), "<tmp>"),
        (sys.prefix, "<python>"),
        (sys.base_prefix, "<python>"),
    ]
    for place, word in sorted(places, key=lambda p: -len(p[0])):
        if len(place) > 1:
            text = text.replace(place, word)
    host = socket.gethostname()
    if len(host) > 2:
        text = re.sub(rf"\b{re.escape(host)}\b", "<host>", text)
    user = re.escape(getpass.getuser())
    return re.sub(rf"(?<=[/\\]){user}(?=[/\\])|\b{user}(?=@)", "<user>", text)
