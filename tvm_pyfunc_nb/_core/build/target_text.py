"""A target as users write it: a kind's name, TVM's JSON form, or the string form TVM 0.27 dropped.

Every TVM tutorial before 0.27, and most code people bring, writes a target
as `"llvm -mcpu=haswell"`, `"llvm -mtriple=aarch64-linux-gnu -mattr=+neon"` or
`"cuda -arch=sm_80"`; TVM 0.27 refuses that and takes only
`{"kind": "llvm", "mcpu": "haswell"}`. The string form is read here as TVM
read it until then: the kind, then `-key=value` (or `-key value`), `-key`
alone for a flag (a boolean option set true), comma-separated lists for the
options that are lists (`-mattr`, `-keys`, `-libs`), each value typed by
what the kind declares (`TargetKind.options_from_name`).
"""

from __future__ import annotations

import difflib
import json
import shlex
from typing import Any

import tvm

_TRUE, _FALSE = ("1", "true"), ("0", "false")


def target_config(text: str) -> str | dict[str, Any]:
    """What `tvm.target.Target` takes for `text`: the kind's name, or a config dict (from JSON or
    the string form). A `ValueError` says what is wrong with `text`."""
    if text.lstrip().startswith("{"):
        return json.loads(text)
    words = shlex.split(text)
    if len(words) == 1 and not words[0].startswith("-"):
        return words[0]
    if not words or words[0].startswith("-"):
        raise ValueError("a target starts with its kind, e.g. llvm -mcpu=haswell")
    kind, rest = words[0], words[1:]
    kinds = sorted(str(k) for k in tvm.target.Target.list_kinds())
    if kind not in kinds:
        raise ValueError(f"unknown kind `{kind}` (kinds: {', '.join(kinds)})")
    types = dict(tvm.target.TargetKind.options_from_name(kind))
    config: dict[str, Any] = {"kind": kind}
    while rest:
        key, value, rest = _option(rest)
        if key == "kind" or key not in types:
            hint = _hint(key, kind, types)
            raise ValueError(f"`-{key}` is not an option of {kind} targets{hint}")
        if key in config:
            raise ValueError(f"`-{key}` is given twice")
        config[key] = _typed(key, value, types[key])
    return config


def _hint(key: str, kind: str, types: dict) -> str:
    close = difflib.get_close_matches(key, [k for k in types if k != "kind"], n=1)
    if close:
        return f"; did you mean -{close[0]}?"
    return f" (they are listed by tvm.target.TargetKind.options_from_name({kind!r}))"


def _option(words: list[str]) -> tuple[str, str | None, list[str]]:
    """`(key, value or None for a flag, the words left)` of the option `words` start with."""
    word = words[0]
    if not word.startswith("-") or not word.lstrip("-"):
        raise ValueError(f"`{word}` is not an option: options are written -key=value or -flag")
    key, equals, value = word.lstrip("-").partition("=")
    if equals:
        if not key or not value:
            raise ValueError(f"`{word}`: an option is written -key=value")
        return key, value, words[1:]
    if len(words) > 1 and not words[1].startswith("-"):  # `-key value`
        return key, words[1], words[2:]
    return key, None, words[1:]


def _typed(key: str, value: str | None, type_key: str):
    """`value` of option `-key` as the kind declares it (`str`, `int`, `bool`, `Array<str>`,
    `target.Target`)."""
    if type_key == "bool":
        if value is None or value.lower() in _TRUE:
            return True
        if value.lower() in _FALSE:
            return False
        raise ValueError(f"`-{key}` is a flag: write -{key}, or -{key}=true or false")
    if value is None:
        raise ValueError(f"`-{key}` needs a value: -{key}=...")
    if type_key == "int":
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"`-{key}={value}`: {key} is a whole number") from None
    if type_key.startswith("Array"):
        return [item for item in value.split(",") if item]
    if type_key == "target.Target":
        return target_config(value)
    return value


def check_cpu(config: str | dict[str, Any]) -> None:
    """A `ValueError` if an LLVM target's config names a CPU that LLVM does not know for its
    architecture: LLVM itself only complains on stderr and compiles for a generic CPU of that
    architecture, so a misspelt `haswel` would quietly give SSE2 code."""
    if not isinstance(config, dict) or config.get("kind") != "llvm" or not config.get("mcpu"):
        return
    from tvm.target.codegen import llvm_get_cpu_archlist, llvm_get_system_triple, llvm_is_valid_cpu

    cpu, triple = str(config["mcpu"]), str(config.get("mtriple") or llvm_get_system_triple())
    if llvm_is_valid_cpu(cpu, triple):
        return
    known = llvm_get_cpu_archlist(tvm.target.Target({"kind": "llvm", "mtriple": triple}))
    close = difflib.get_close_matches(cpu, [str(c) for c in known], n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    raise ValueError(f"LLVM knows no CPU `{cpu}` for {triple.split('-')[0]}{hint}")


# LLVM's features that tune code for a CPU rather than give it instructions: a CPU without them
# runs the code all the same
_TUNING = (
    *("fast-", "faster-", "slow-", "false-deps-", "no-bypass-delay", "tuning-", "prefer-"),
    *("use-", "idivl-", "idivq-", "lea-", "pad-short-", "allow-light-", "sbb-dep-", "branch"),
    *("macrofusion", "vzeroupper", "ermsb", "fsrm", "64bit-mode"),
)
# The operating systems a target triple may name (`x86_64-pc-windows-msvc`): code for another
# one than this process's cannot be loaded here (LLVM's JIT crashes on it)
_SYSTEMS = ("linux", "windows", "win32", "mingw", "cygwin", "darwin", "macos", "ios")
_SYSTEMS += ("freebsd", "netbsd", "openbsd", "none", "wasi", "emscripten", "cuda", "amdhsa")


def why_not_here(target: tvm.target.Target) -> str | None:
    """Why code for LLVM `target` cannot run in this process, for a target of this machine's
    architecture (another one's is refused when its code is built, kernel_builds.py): it is
    for another operating system, or for a CPU with instruction sets this one lacks (the
    process would stop with SIGILL). None if it can run here."""
    from tvm.target.codegen import (
        llvm_get_cpu_features,
        llvm_get_system_cpu,
        llvm_get_system_triple,
    )

    if target.kind.name != "llvm":
        return None
    here = str(llvm_get_system_triple())
    triple = str(target.attrs.get("mtriple", "") or "") or here
    if triple.split("-")[0] != here.split("-")[0]:
        return None
    system, ours = _system(triple), _system(here)
    if system and system != ours:
        return f"it makes code for {system}, which this {ours or here} process cannot load"
    cpu = str(llvm_get_system_cpu())
    host = tvm.target.Target({"kind": "llvm", "mcpu": cpu})
    wanted = set(llvm_get_cpu_features(target)) - set(llvm_get_cpu_features(host))
    missing = sorted(f for f in wanted if not f.startswith(_TUNING))
    if missing:
        return (
            f"it makes code for a CPU with {', '.join(missing)}, which this machine's CPU "
            f"({cpu}) lacks: running it would stop the process with SIGILL"
        )
    return None


def _system(triple: str) -> str:
    """The operating system `triple` names (`linux`, `windows`...), or "" if none is known."""
    for part in triple.lower().split("-")[1:]:
        for system in _SYSTEMS:
            if part.startswith(system):
                return system
    return ""
