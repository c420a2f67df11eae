"""The persistent compile cache, with real compiles: what it serves and refuses, how it stays small.

Every test uses its own temporary cache directory, never the user's.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings
from pathlib import Path

import pytest
import torch
import tvm
import tvm_ffi
from cells import ADD_TIR, MAIN_PYFUNC, MAIN_RELAX, RELAX_CALLS_BOTH, SCALE_PYFUNC
from IPython.core.error import UsageError
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.database import JSONDatabase, TuningRecord

from tvm_pyfunc_nb import CompileCache, CompileCacheWarning, LiveModule, ScheduleError, _magics
from tvm_pyfunc_nb._core.build.cache_files import CacheSweep
from tvm_pyfunc_nb._core.build.disk_cache import OWN_DIR
from tvm_pyfunc_nb._core.build.trust import files_problem
from tvm_pyfunc_nb._core.build.tuning_records import (
    RECORD_FILES,
    TuningRecords,
    open_database,
    target_digest,
    tuning_target,
)
from tvm_pyfunc_nb._core.tuning.entry import unscheduled
from tvm_pyfunc_nb._core.tuning.relax_kernels import kernel_tasks
from tvm_pyfunc_nb.testing import parts_of

X = torch.arange(5, dtype=torch.float32)
Y = torch.full((5,), 2.0)
MUL_TIR = ADD_TIR.replace("A[i] + B[i]", "A[i] * B[i]")


def tir_compiles(live: LiveModule) -> list[tuple[str, ...]]:
    return [c.functions for c in live.stats.compiles if c.kind == "tir"]


def add_module(cache: CompileCache, body: str = ADD_TIR) -> LiveModule:
    live = LiveModule("demo", persistent_cache=cache)
    live.run_cell(body)
    return live


def warm(cache: CompileCache, body: str = ADD_TIR) -> None:
    """Compile `body` once and wait until its entries are on disk."""
    add_module(cache, body).compile()
    cache.flush()


def files_of(cache: CompileCache, body: str = ADD_TIR, name: str = "add_tir") -> tuple[Path, Path]:
    """The record and library files of PrimFunc `name` as `body` defines it (compiled into the
    cache).
    """
    script = _script_of(body, name)
    for _ in range(2):
        for record in cache.own_dir.glob("*.json"):
            fields = json.loads(json.loads(record.read_text())["record"])
            if fields["name"] == name and fields["script"] == script:
                return record, record.with_suffix(".so")
        warm(cache, body)
    raise AssertionError(f"no entry of {name} in {cache.own_dir}")


def _script_of(body: str, name: str) -> str:
    probe = LiveModule("probe")
    probe.run_cell(body)
    return probe.ir_mod[name].script()


def call_add(cache: CompileCache, body: str = ADD_TIR) -> tuple[LiveModule, torch.Tensor]:
    live = add_module(cache, body)
    out = torch.empty(5)
    live.add_tir(X, Y, out)
    return live, out


# -- what is served ----------------------------------------------------------------------
def test_warm_cache_in_a_fresh_live_module_compiles_no_primfunc(tmp_path):
    body = ADD_TIR + MAIN_PYFUNC + MAIN_RELAX + SCALE_PYFUNC + RELAX_CALLS_BOTH
    first_cache = CompileCache(tmp_path)
    first = LiveModule("demo", persistent_cache=first_cache)
    first.namespace["demo"] = first
    first.run_cell(body)
    expected = (first.main(X, Y), first.main_relax(X, Y), first.pipeline(X, Y))
    assert tir_compiles(first)
    first_cache.flush()

    # a new cache object: nothing shared in memory with the first module
    cache = CompileCache(tmp_path)
    fresh = LiveModule("demo", persistent_cache=cache)
    fresh.namespace["demo"] = fresh
    fresh.run_cell(body)
    results = (fresh.main(X, Y), fresh.main_relax(X, Y), fresh.pipeline(X, Y))
    assert all(torch.equal(a, b) for a, b in zip(results, expected, strict=False))
    assert tir_compiles(fresh) == []
    built = [name for names in tir_compiles(first) for name in names]
    assert fresh.stats.cache_hits > 0 and cache.hits == len(built)


def test_a_changed_function_is_compiled_not_served(tmp_path):
    cache = CompileCache(tmp_path)
    warm(cache, ADD_TIR)
    live, out = call_add(cache, MUL_TIR)
    assert torch.equal(out, X * Y)
    assert tir_compiles(live) == [("add_tir",)]


def test_an_entry_under_the_right_key_but_for_another_function_is_refused(tmp_path):
    """A hash collision, staged: the entry of `A + B` filed under the key of `A * B`."""
    cache = CompileCache(tmp_path)
    mul_record, mul_library = files_of(cache, MUL_TIR)
    mul_hash = json.loads(json.loads(mul_record.read_text())["record"])["structural_hash"]
    mul_record.unlink()
    mul_library.unlink()
    add_record, add_library = files_of(cache, ADD_TIR)
    rewrite_record(add_record, structural_hash=mul_hash)
    add_record.rename(mul_record)
    add_library.rename(mul_library)

    live, out = call_add(cache, MUL_TIR)
    assert torch.equal(out, X * Y)
    assert tir_compiles(live) == [("add_tir",)]
    assert cache.rejected == 1 and "different TVMScript" in cache.problem


def rewrite_record(path: Path, **changes) -> None:
    """Change fields of an entry's record, with a matching checksum (as a real collision would)."""
    record = {**json.loads(json.loads(path.read_text())["record"]), **changes}
    body = json.dumps(record, sort_keys=True)
    path.write_text(
        json.dumps({"checksum": hashlib.sha256(body.encode()).hexdigest(), "record": body})
    )


def test_the_key_holds_the_resolved_cpu_its_features_and_the_pass_context(tmp_path):
    """Machines with different CPUs sharing a home directory never serve each other's code, nor
    does a build under other PassContext options serve this one."""
    cache = CompileCache(tmp_path)
    live, _ = call_add(cache)
    cache.flush()
    build = parts_of(live).build
    features = tvm.target.codegen.llvm_get_cpu_features(build.target)
    assert f'"mcpu":"{tvm.target.codegen.llvm_get_system_cpu()}"' in build.key
    assert "+" + ",+".join(sorted(features)) in build.key and "native" not in build.key
    with tvm.transform.PassContext(config={"tirx.disable_vectorize": True}):
        other, out = call_add(CompileCache(tmp_path))
    assert torch.equal(out, X + Y) and tir_compiles(other) == [("add_tir",)]
    again, out = call_add(CompileCache(tmp_path))
    assert torch.equal(out, X + Y) and tir_compiles(again) == []


def test_recompile_bypasses_the_persistent_cache(tmp_path):
    cache = CompileCache(tmp_path)
    warm(cache)
    live = add_module(cache)
    live.recompile()
    assert tir_compiles(live) == [("add_tir",)]
    assert cache.hits == 0


# -- what is refused ---------------------------------------------------------------------
def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def garble(path: Path) -> None:
    path.write_text("{not json")


def forge_record(path: Path) -> None:
    """Edit the record without updating its checksum."""
    wrapper = json.loads(path.read_text())
    wrapper["record"] = wrapper["record"].replace('"library_bytes": ', '"library_bytes": 1')
    path.write_text(json.dumps(wrapper))


DAMAGE = {
    "truncated library": ("so", truncate),
    "flipped byte in library": ("so", flip_a_byte),
    "missing library": ("so", Path.unlink),
    "truncated record": ("json", truncate),
    "garbled record": ("json", garble),
    "record edited without its checksum": ("json", forge_record),
}


@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
def test_a_damaged_entry_is_deleted_and_rebuilt(tmp_path, damage):
    cache = CompileCache(tmp_path)
    warm(cache)
    record, library = files_of(cache)
    suffix, spoil = DAMAGE[damage]
    spoil(library if suffix == "so" else record)

    live, out = call_add(cache)
    assert torch.equal(out, X + Y)
    assert tir_compiles(live) == [("add_tir",)]
    assert cache.rejected == 1 and cache.hits == 0
    cache.flush()  # the rebuilt entry is written again, and serves the next module
    again = CompileCache(tmp_path)
    live, out = call_add(again)
    assert torch.equal(out, X + Y) and tir_compiles(live) == [] and again.hits == 1


def test_a_valid_library_that_is_not_the_recorded_one_is_never_loaded(tmp_path):
    """The library of `A * B` put in place of `A + B`'s: it would load and run, so only the checksum
    stops it.
    """
    cache = CompileCache(tmp_path)
    warm(cache, ADD_TIR)
    warm(cache, MUL_TIR)
    _, add_library = files_of(cache, ADD_TIR)
    _, mul_library = files_of(cache, MUL_TIR)
    add_library.write_bytes(mul_library.read_bytes())

    live, out = call_add(cache, ADD_TIR)
    assert torch.equal(out, X + Y)
    assert cache.rejected == 1 and tir_compiles(live) == [("add_tir",)]
    maps = Path("/proc/self/maps")
    if maps.exists():
        assert str(add_library) not in maps.read_text()
    assert not [p for p in cache.own_dir.iterdir() if p.name.startswith(".load-")]


# -- bounds and files --------------------------------------------------------------------
def kernel(k: int) -> str:
    return ADD_TIR.replace("add_tir", f"k{k}").replace(
        "A[i] + B[i]", f"A[i] + B[i] + T.float32({k})"
    )


def project_folder(path: Path) -> Path:
    """A folder as users point cache_dir at (a project, a home directory): files of its own,
    some named as the cache names its files, dot files older than the sweep's hour."""
    (path / ".git" / "refs").mkdir(parents=True)
    (path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (path / ".env").write_text("TOKEN=not-the-caches\n")
    (path / "notes.txt").write_text("my notes\n")
    (path / "package.json").write_text("{}\n")
    (path / "libfoo.so").write_bytes(bytes(2**16))  # more than the bound below, alone
    (path / f"{'ab' * 20}.so").write_bytes(b"named as an entry of an earlier version")
    (path / ".work-mine").mkdir()  # named as the cache names its temporary folders
    hours_ago = time.time() - 3 * 3600
    for name in (".git", ".env", ".work-mine", "notes.txt"):
        os.utime(path / name, (hours_ago, hours_ago))
    return path


def contents(path: Path) -> dict[str, tuple]:
    """Everything in `path` but the cache's own folder, with its time and bytes."""
    return {
        str(p.relative_to(path)): (p.stat().st_mtime, p.read_bytes() if p.is_file() else None)
        for p in sorted(path.rglob("*"))
        if OWN_DIR not in p.parts
    }


def test_eviction_and_the_sweep_keep_the_bound_and_touch_only_the_caches_own_files(tmp_path):
    probe = CompileCache(tmp_path / "probe")
    warm(probe, kernel(0))
    entry_size = probe.summary().size

    bounded = project_folder(tmp_path / "bounded")
    before = contents(bounded)
    cache = CompileCache(bounded, max_bytes=int(entry_size * 2.5))
    first = LiveModule("m", persistent_cache=cache)
    for k in (0, 1):  # one by one: entries of their own (kernels built together share a file)
        first.run_cell(kernel(k), key=k)
        first.compile()
    cache.flush()
    stale = cache.own_dir / ".work-stale"  # a temporary folder a killed kernel left behind
    stale.mkdir()
    os.utime(stale, (time.time() - 3 * 3600,) * 2)
    second = LiveModule("m", persistent_cache=CompileCache(bounded, max_bytes=cache.max_bytes))
    second.run_cell(kernel(0))
    second.compile()  # loads k0: now k1 is the least recently used
    assert tir_compiles(second) == []
    first.run_cell(kernel(2), key=2)
    first.compile()
    cache.flush()

    summary = cache.summary()
    assert summary.size <= cache.max_bytes and summary.entries == 2
    assert not stale.exists() and contents(bounded) == before
    survivor = LiveModule("m", persistent_cache=CompileCache(bounded))
    survivor.run_cell(kernel(0) + kernel(1) + kernel(2))
    survivor.compile()
    assert tir_compiles(survivor) == [("k1",)]


def test_the_sweep_evicts_the_least_recently_used_entries_by_name_only(tmp_path):
    """The size bound at the level of files (cache_files.py): an entry's record and library go
    together, the oldest use first; a file not named as the cache names its own stays, and so
    does a young temporary file (another kernel may be writing it)."""
    sweep = CacheSweep(tmp_path)
    now = time.time()
    for age, key in enumerate(["a" * 40, "b" * 40, "c" * 40]):
        record, library = sweep.paths(key)
        library.write_bytes(b"x" * 100)
        record.write_bytes(b"{}")
        os.utime(record, (now - 100 * (3 - age),) * 2)
    theirs, young = tmp_path / ("d" * 39 + ".so"), tmp_path / ".work-young"
    theirs.write_bytes(b"y" * 1000)
    young.mkdir()
    sweep.evict(max_bytes=250)
    assert sorted(e.key[0] for e in sweep.entries()) == ["b", "c"]
    assert theirs.exists() and young.exists()
    assert sweep.clear(tmp_path / "none") == 2 and sweep.entries() == [] and theirs.exists()


def test_a_folder_of_the_caches_name_it_did_not_make_is_left_alone(tmp_path):
    (tmp_path / OWN_DIR).mkdir()
    (tmp_path / OWN_DIR / "mine.txt").write_text("not the cache's")
    with pytest.warns(CompileCacheWarning) as caught:
        cache = CompileCache(tmp_path)
        live, out = call_add(cache)
        cache.flush()
    assert torch.equal(out, X + Y) and tir_compiles(live) == [("add_tir",)]
    [notice] = cache_notices(caught)
    assert f"{cache.own_dir} holds files the cache did not write (it has no CACHEDIR.TAG)" in notice
    assert cache.clear() == 0 and os.listdir(cache.own_dir) == ["mine.txt"]


def test_kernels_built_together_have_entries_of_their_own_that_share_one_file(tmp_path):
    cache = CompileCache(tmp_path)
    live = LiveModule("m", persistent_cache=cache)
    live.run_cell(kernel(0) + kernel(1) + kernel(2))
    live.compile()
    cache.flush()
    assert tir_compiles(live) == [("k0", "k1", "k2")]
    libraries = list(cache.own_dir.glob("*.so"))
    assert len(libraries) == 3 and len({p.stat().st_ino for p in libraries}) == 1
    assert cache.summary().size < 1.5 * libraries[0].stat().st_size  # the file counts once

    fresh = LiveModule("m", persistent_cache=CompileCache(tmp_path))
    fresh.run_cell(kernel(1) + kernel(3))
    out = torch.empty(5)
    fresh.k1(X, Y, out)  # served from the shared file, which also holds k0 and k2
    assert torch.equal(out, X + Y + 1) and tir_compiles(fresh) == []
    fresh.k3(X, Y, out)
    assert torch.equal(out, X + Y + 3) and tir_compiles(fresh) == [("k3",)]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_folders_the_cache_makes_are_private_marked_and_made_again_when_deleted(tmp_path):
    cache = CompileCache(tmp_path / "a" / "cache")
    assert mode(cache.directory) == mode(tmp_path / "a") == 0o700
    warm(cache)
    assert mode(cache.own_dir) == 0o700
    assert (cache.own_dir / "CACHEDIR.TAG").read_bytes().startswith(b"Signature: 8a477f597d28d")
    assert all(mode(p) == 0o600 for p in cache.own_dir.iterdir())
    shutil.rmtree(cache.directory)  # deleted meanwhile: made again, private, marked
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileCacheWarning)
        warm(cache, kernel(1))
    assert mode(cache.directory) == mode(cache.own_dir) == 0o700 and cache.summary().entries == 1
    assert (cache.own_dir / "CACHEDIR.TAG").exists()
    readable = tmp_path / "readable"  # the user's own, readable by others: used as it is
    readable.mkdir()
    os.chmod(readable, 0o755)
    assert CompileCache(readable).distrust() is None and mode(readable) == 0o755


# -- what is trusted -----------------------------------------------------------------------
needs_root = pytest.mark.skipif(os.getuid() != 0, reason="gives a file away or needs root's own")
NOBODY = 65534


def libraries_mapped_from(directory: Path) -> int:
    """How many shared libraries this process has loaded from `directory`, as the operating
    system counts them (the cache loads a private copy, deleted once open: it stays mapped)."""
    maps = Path("/proc/self/maps")
    if not maps.exists():
        return 0  # not Linux: the cache's own count (`hits`) is all there is
    lines = maps.read_text().splitlines()
    return len({line.split(maxsplit=5)[5] for line in lines if f"{directory}/" in line})


def cache_notices(caught) -> list[str]:
    return [str(w.message) for w in caught if w.category is CompileCacheWarning]


ELSEWHERE = "point TVMModuleMagics.cache_dir at a directory only you can write"
OFF = (
    "compile cache off, nothing is read from it (no library, no tuning record) and every "
    "function compiles instead: "
)


def writable(tmp_path: Path, mode: int, by: str) -> tuple[Path, str]:
    """A warm cache folder made writable by others (`mode`), and what the notice says."""
    directory = tmp_path / "cache"
    warm(CompileCache(directory))
    os.chmod(directory, mode)
    why = f"{directory} is writable by {by} (mode {mode:04o})"
    return directory, f"{why}. Fix: chmod go-w {directory}, or {ELSEWHERE}"


def world_writable(tmp_path: Path) -> tuple[Path, str]:
    return writable(tmp_path, 0o777, "its group and others")


def group_writable(tmp_path: Path) -> tuple[Path, str]:
    return writable(tmp_path, 0o770, "its group")


def symlink_to_another_users(tmp_path: Path) -> tuple[Path, str]:
    theirs = tmp_path / "theirs"
    warm(CompileCache(theirs))
    os.chown(theirs, NOBODY, NOBODY)
    (tmp_path / "mine").symlink_to(theirs)
    why = f"{theirs} belongs to another user (uid {NOBODY}, mode 0700)"
    return tmp_path / "mine", f"{why}. Fix: {ELSEWHERE}"


def parent_writable_without_sticky_bit(tmp_path: Path) -> tuple[Path, str]:
    parent = tmp_path / "shared"
    warm(CompileCache(parent / "cache"))
    os.chmod(parent, 0o777)
    why = f"{parent} is writable by its group and others (mode 0777)"
    return parent / "cache", f"{why}. Fix: chmod go-w {parent}, or {ELSEWHERE}"


UNSAFE = [
    pytest.param(world_writable, id="world-writable"),
    pytest.param(group_writable, id="group-writable"),
    pytest.param(symlink_to_another_users, id="symlink-to-another-users", marks=needs_root),
    pytest.param(parent_writable_without_sticky_bit, id="parent-writable-not-sticky"),
]


@pytest.mark.parametrize("make_unsafe", UNSAFE)
def test_a_cache_others_could_change_is_off_and_everything_compiles(tmp_path, make_unsafe):
    configured, why = make_unsafe(tmp_path)
    real = configured.resolve()
    before = (sorted(real.iterdir()), mode(real), mode(real.parent))
    with pytest.warns(CompileCacheWarning) as caught:
        cache = CompileCache(configured)
        live, out = call_add(cache)
    assert torch.equal(out, X + Y) and tir_compiles(live) == [("add_tir",)]
    assert cache.hits == 0 and libraries_mapped_from(real) == 0
    assert cache_notices(caught) == [OFF + why]
    cache.flush()  # nothing was written there, no mode changed
    assert (sorted(real.iterdir()), mode(real), mode(real.parent)) == before
    assert f"  not trusted, so off: {why}\n" in repr(cache.summary())


def exposed_to_others(path: Path) -> None:
    os.chmod(path, 0o606)


def exposed_to_group(path: Path) -> None:
    os.chmod(path, 0o620)


def given_away(path: Path) -> None:
    os.chown(path, NOBODY, NOBODY)


EXPOSED = [
    pytest.param("json", exposed_to_others, "is writable by others (mode 0606)", id="record-o+w"),
    pytest.param("so", exposed_to_group, "is writable by its group (mode 0620)", id="library-g+w"),
    pytest.param(
        "so", given_away, f"belongs to another user (uid {NOBODY}", id="foreign", marks=needs_root
    ),
]


@pytest.mark.parametrize(("suffix", "expose", "why"), EXPOSED)
def test_an_entry_others_could_have_written_is_ignored_and_compiled_again(
    tmp_path, suffix, expose, why
):
    exposed = []
    for k in (0, 1):  # compiled one by one: files of their own
        record, library = files_of(CompileCache(tmp_path), kernel(k), f"k{k}")
        exposed.append(library if suffix == "so" else record)
        expose(exposed[-1])

    cache = CompileCache(tmp_path)
    live = LiveModule("m", persistent_cache=cache)
    live.run_cell(kernel(0) + kernel(1))
    with pytest.warns(CompileCacheWarning) as caught:
        live.compile()
    assert tir_compiles(live) == [("k0", "k1")] and cache.hits == 0 and cache.rejected == 2
    assert libraries_mapped_from(cache.directory) == 0
    [notice] = cache_notices(caught)  # the first time only
    assert f"ignored the entry of `k0`, since {exposed[0]} {why}" in notice
    out = torch.empty(5)
    live.k1(X, Y, out)
    assert torch.equal(out, X + Y + 1)

    cache.flush()  # the entries compiled again are the user's own, and serve the next kernel
    again = LiveModule("m", persistent_cache=CompileCache(tmp_path))
    again.run_cell(kernel(0) + kernel(1))
    again.compile()
    assert tir_compiles(again) == [] and again.stats.cache_hits == 2


def below_a_sticky_directory(tmp_path: Path) -> Path:
    """As /tmp is: root's, anyone may add to it, no one may move what is not theirs."""
    shared = tmp_path / "sticky"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    return shared / "cache"


PRIVATE = [
    pytest.param(lambda tmp_path: tmp_path / "cache", id="private"),
    pytest.param(below_a_sticky_directory, id="below-a-sticky-dir", marks=needs_root),
]


@pytest.mark.parametrize("place", PRIVATE)
def test_a_private_cache_is_trusted_and_serves_hits(tmp_path, place):
    directory = place(tmp_path)
    warm(CompileCache(directory))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileCacheWarning)
        cache = CompileCache(directory)
        live, out = call_add(cache)
    assert torch.equal(out, X + Y) and tir_compiles(live) == []
    assert cache.hits == 1 and libraries_mapped_from(cache.directory) == 1
    assert "  trusted: no one else can change it\n" in repr(cache.summary())


# -- writes that fail ---------------------------------------------------------------------
@contextlib.contextmanager
def unwritable(directory: Path):
    """Nothing can be made, changed or deleted in `directory`, as on a read-only mount (for
    root, whom modes do not stop, by the immutable attribute)."""
    if os.getuid() != 0:
        os.chmod(directory, 0o500)
        try:
            yield
        finally:
            os.chmod(directory, 0o700)
        return
    made = subprocess.run(["chattr", "+i", str(directory)], capture_output=True, check=False)
    if made.returncode:
        pytest.skip(f"this file system has no immutable attribute: {made.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(directory)], check=True)


def test_a_cache_that_cannot_be_written_says_so_once_and_keeps_its_entries(tmp_path):
    cache = CompileCache(tmp_path)
    files_of(cache, kernel(0), "k0")
    kept = contents(cache.own_dir)
    with unwritable(cache.own_dir):
        cache = CompileCache(tmp_path)
        live = LiveModule("m", persistent_cache=cache)
        live.run_cell(kernel(0) + kernel(1))
        with pytest.warns(CompileCacheWarning) as caught:
            live.compile()
            cache.flush()
            live.run_cell(kernel(2), key="more")
            live.compile()
            cache.flush()
        out = torch.empty(5)
        live.k1(X, Y, out)
        assert torch.equal(out, X + Y + 1) and contents(cache.own_dir) == kept
    [notice] = cache_notices(caught)  # the second failing write says nothing more
    assert notice.startswith("compile cache: could not store k0, k1 (") and "from memory" in notice
    assert "could not store" not in (cache.problem or "") and "k2" not in notice


# -- tuning records ----------------------------------------------------------------------
SCALED = """
@R.function
def scaled(x: R.Tensor((8,), "float32")) -> R.Tensor((8,), "float32"):
    return R.multiply(x, R.const(1.5, "float32"))
"""


def int8_results(sch) -> None:
    """The issue's record: the kernel computes in int8, silently wrong."""
    block = sch.get_sblock("T_multiply")
    sch.cache_write(block, 0, "global")
    sch.unsafe_set_dtype(block, 0, "int8")


def imported_llvm(sch) -> None:
    """Native code of someone else's, linked into the kernel."""
    block = sch.get_sblock("T_multiply")
    code = "define i32 @planted() {\n  ret i32 7\n}\n"
    sch.annotate(sch.get_loops(block)[0], "pragma_import_llvm", code)


def plant(cache: CompileCache, record) -> tuple[Path, LiveModule]:
    """A tuning record for `scaled`'s kernel where a module `demo` with `cache` reads them."""
    live = LiveModule("demo")
    live.run_cell(SCALED)
    (task,) = kernel_tasks(unscheduled(parts_of(live), "scaled", link_first=False), "scaled")
    target = parts_of(live).build.target
    place = cache.tuning_directory(f"demo.relax-{target_digest(target)}", (), create=True)
    database = JSONDatabase(work_dir=str(place))
    sch = tvm.s_tir.Schedule(task.workload)
    record(sch)
    workload = database.commit_workload(task.workload)
    args = ArgInfo.from_prim_func(task.workload["main"])
    database.commit_tuning_record(
        TuningRecord(sch.trace, workload, [1e-9], tuning_target(target), args)
    )
    return place, live


def applied(cache: CompileCache) -> bool:
    """Whether a module `demo` with `cache` runs `scaled` with a planted record."""
    live = LiveModule("demo", persistent_cache=cache)
    live.run_cell(SCALED)
    x = torch.arange(8, dtype=torch.float32)
    right = torch.equal(live.scaled(x), x * 1.5)
    return not right or "pragma_import_llvm" in live.lowered("scaled")


@pytest.mark.parametrize("record", [int8_results, imported_llvm])
def test_a_tuning_record_in_the_users_own_cache_is_applied(tmp_path, record):
    """What the tests below refuse would run: the records are real and apply."""
    plant(CompileCache(tmp_path), record)
    assert applied(CompileCache(tmp_path))


def cache_world_writable(cache: CompileCache, place: Path) -> str:
    os.chmod(cache.directory, 0o777)
    return OFF + f"{cache.directory} is writable by its group and others (mode 0777)"


def records_writable_by_others(cache: CompileCache, place: Path) -> str:
    os.chmod(place / "database_tuning_record.json", 0o646)
    return f"{place}/database_tuning_record.json is writable by others (mode 0646)"


def folder_writable_by_group(cache: CompileCache, place: Path) -> str:
    os.chmod(place, 0o770)
    return f"{place} is writable by its group (mode 0770)"


def workload_of_another_user(cache: CompileCache, place: Path) -> str:
    os.chown(place / "database_workload.json", NOBODY, NOBODY)
    return f"{place}/database_workload.json belongs to another user (uid {NOBODY}"


PLANTED = [
    pytest.param(cache_world_writable, int8_results, id="cache-o+w-int8"),
    pytest.param(cache_world_writable, imported_llvm, id="cache-o+w-import-llvm"),
    pytest.param(records_writable_by_others, imported_llvm, id="records-o+w-import-llvm"),
    pytest.param(folder_writable_by_group, int8_results, id="folder-g+w-int8"),
    pytest.param(
        workload_of_another_user, imported_llvm, id="foreign-import-llvm", marks=needs_root
    ),
]


@pytest.mark.parametrize(("expose", "record"), PLANTED)
def test_a_tuning_record_others_could_have_planted_is_never_applied(tmp_path, expose, record):
    cache = CompileCache(tmp_path)
    place, _ = plant(cache, record)
    why = expose(cache, place)
    with pytest.warns(CompileCacheWarning) as caught:
        assert not applied(CompileCache(tmp_path))
    [notice] = cache_notices(caught)
    assert why in notice, notice


def test_a_tuning_database_cut_short_leaves_the_module_working(tmp_path):
    """A full disk while MetaSchedule appended a record leaves half a line: compiles go on with
    the default schedules (a notice says why), and `tune` says which files to delete."""
    cache = CompileCache(tmp_path)
    place, _ = plant(cache, int8_results)
    workload = place / "database_workload.json"
    workload.write_text(workload.read_text()[:40])
    with pytest.warns(CompileCacheWarning) as caught:
        assert not applied(CompileCache(tmp_path))
    [notice] = cache_notices(caught)
    assert f"the tuning records in {place} cannot be read (" in notice, notice

    live = add_module(cache)
    key = tvm_ffi.structural_hash(tvm.IRModule({"main": live.ir_mod["add_tir"]})) & 0xFFFFFFFFFFFF
    target = parts_of(live).build.target
    folder = f"add_tir-{key:012x}-{target_digest(target)}"
    cut = cache.tuning_directory(folder, (), create=True)
    (cut / "database_workload.json").write_text('["cut sh')
    with pytest.raises(ScheduleError) as failed:
        live.tune("add_tir", trials=1)
    assert f"its tuning records in {cut} cannot be read" in str(failed.value)
    out = torch.empty(5)
    live.add_tir(X, Y, out)
    assert torch.equal(out, X + Y)


def test_tuning_a_primfunc_never_reads_a_predictable_or_refused_place(tmp_path):
    """Without a cache the database was in /tmp/tvm-pyfunc-nb-tuning-<uid>, where any local user
    could plant records; a cache others can write is refused for tuning too: the records stay in
    memory, where no one else can reach them."""
    live = LiveModule("demo")
    live.run_cell(ADD_TIR)
    func, target = live.ir_mod["add_tir"], parts_of(live).build.target
    mod = tvm.IRModule({"main": func})
    key = f"{tvm_ffi.structural_hash(mod) & 0xFFFFFFFFFFFF:012x}"
    predictable = Path(tempfile.gettempdir()) / f"tvm-pyfunc-nb-tuning-{os.getuid()}"
    cache = CompileCache(tmp_path / "cache")
    planted = [
        predictable / f"add_tir-{key}-llvm",
        cache.tuning_directory(f"add_tir-{key}-{target_digest(target)}", (), create=True),
    ]
    planted[0].mkdir(parents=True, exist_ok=True)
    for place in planted:
        JSONDatabase(work_dir=str(place)).commit_workload(mod)
    os.chmod(cache.directory, 0o777)
    try:
        with pytest.warns(CompileCacheWarning):
            records = [TuningRecords(c, "demo", target) for c in (None, cache)]
            found = [r.database(r.kernel_folder("add_tir", func), create=True) for r in records]
        for database, where in found:
            assert where == "in memory" and not database.has_workload(mod)
    finally:
        shutil.rmtree(planted[0])
        with contextlib.suppress(OSError):  # another process's records may be there too
            predictable.rmdir()


def test_tuning_records_written_under_a_shared_group_umask_are_still_trusted(tmp_path):
    """With umask 002 (user private groups) MetaSchedule makes its files group-writable, and the
    trust test would refuse the user's own records."""
    live = LiveModule("demo")
    live.run_cell(ADD_TIR)
    previous = os.umask(0o002)
    try:
        open_database(tmp_path).commit_workload(live.ir_mod)
    finally:
        os.umask(previous)
    assert files_problem(tmp_path, RECORD_FILES) is None
    assert {mode(tmp_path / name) for name in RECORD_FILES} == {0o600}


# -- the magic ---------------------------------------------------------------------------
def earlier_entry(directory: Path) -> list[Path]:
    """An entry as an earlier version of the cache wrote it, directly in `directory`."""
    library = directory / f"{'cd' * 20}.so"
    library.write_bytes(b"a library")
    body = json.dumps({"format": 1, "library_sha256": hashlib.sha256(b"a library").hexdigest()})
    record = library.with_suffix(".json")
    checksum = hashlib.sha256(body.encode()).hexdigest()
    record.write_text(json.dumps({"checksum": checksum, "record": body}))
    return [record, library]


def test_tvmcache_shows_the_cache_and_clear_empties_it_of_its_own_files_only(
    cached_shell, tmp_path
):
    project = project_folder(tmp_path / "cache")
    kept = contents(project)
    earlier = earlier_entry(project)  # proven the cache's by their checksums: cleared
    cached_shell.cell("demo", ADD_TIR + MAIN_RELAX)
    cached_shell.ns["demo"].main_relax(X, Y)
    magics = cached_shell.ip.magics_manager.registry["TVMModuleMagics"]
    magics.compile_cache().flush()

    shown = repr(cached_shell.run("%tvmcache"))
    assert str(project / OWN_DIR) in shown
    built = [name for names in tir_compiles(cached_shell.ns["demo"]) for name in names]
    assert f"{len(built)} entries" in shown and "KB of 512.0 MB" in shown  # Relax's PrimFuncs
    assert "\n  3 files of an earlier version beside it, no longer read" in shown

    shown = repr(cached_shell.run("%tvmcache clear"))
    assert "0 entries" in shown and "1 file of an earlier version" in shown
    assert os.listdir(project / OWN_DIR) == ["CACHEDIR.TAG"]
    assert not any(p.exists() for p in earlier) and contents(project) == kept
    cached_shell.run("%tvmcache nonsense", expect_error=UsageError)


def test_tvmcache_waits_for_the_writes_of_what_was_just_compiled(cached_shell, monkeypatch):
    """Entries are written in the background after the call that compiled; `%tvmcache` right
    after it waits for them (at most `SHOW_WAIT_SECONDS`), so that its counts are settled: a
    tutorial shows them."""
    write = CompileCache._write

    def slow_write(self, *args):
        time.sleep(0.5)
        write(self, *args)

    monkeypatch.setattr(CompileCache, "_write", slow_write)
    cached_shell.cell("demo", ADD_TIR)
    cached_shell.ns["demo"].add_tir(X, Y, torch.empty(5))
    monkeypatch.setattr(_magics, "SHOW_WAIT_SECONDS", 0.0)
    shown = repr(cached_shell.run("%tvmcache"))
    assert "  0 entries, 0 KB of 512.0 MB\n" in shown, shown
    assert "0 stored, 0 rejected as damaged, stale or writable by others, 1 being written" in shown

    monkeypatch.setattr(_magics, "SHOW_WAIT_SECONDS", 30.0)
    shown = repr(cached_shell.run("%tvmcache"))
    assert re.search(r"\n  1 entry, [1-9]\d* KB of 512\.0 MB\n", shown), shown
    assert shown.endswith(
        "this kernel: 0 loaded, 1 missed, 1 stored, 0 rejected as damaged, stale or writable by "
        "others, 0 being written"
    ), shown


def test_a_cache_dir_others_can_change_leaves_cells_working_and_tvmcache_says_why(
    cached_shell, tmp_path
):
    directory = tmp_path / "cache"
    assert "  trusted: no one else can change it\n" in repr(cached_shell.run("%tvmcache"))
    os.chmod(directory, 0o777)
    with pytest.warns(CompileCacheWarning) as caught:
        cached_shell.cell("demo", ADD_TIR)
        out = torch.empty(5)
        cached_shell.ns["demo"].add_tir(X, Y, out)
        shown = repr(cached_shell.run("%tvmcache"))
    assert torch.equal(out, X + Y) and tir_compiles(cached_shell.ns["demo"]) == [("add_tir",)]
    assert len(cache_notices(caught)) == 1
    assert (
        f"  not trusted, so off: {directory} is writable by its group and others (mode 0777). "
        f"Fix: chmod go-w {directory}, or {ELSEWHERE}\n"
    ) in shown


def test_tvmcache_says_when_the_cache_is_off(shell, capsys):
    assert shell.run("%tvmcache") is None
    assert "compile cache: off" in capsys.readouterr().out


def test_the_magic_passes_its_cache_to_new_modules(cached_shell):
    cached_shell.cell("demo", ADD_TIR)
    out = torch.empty(5)
    cached_shell.ns["demo"].add_tir(X, Y, out)
    magics = cached_shell.ip.magics_manager.registry["TVMModuleMagics"]
    magics.compile_cache().flush()
    cached_shell.run("%tvmmodule_drop demo")
    cached_shell.cell("demo", ADD_TIR)
    cached_shell.ns["demo"].add_tir(X, Y, out)
    assert (
        tir_compiles(cached_shell.ns["demo"]) == []
        and cached_shell.ns["demo"].stats.cache_hits == 1
    )


# -- a fresh kernel --------------------------------------------------------------------------
NOTEBOOK = f"""
import json, torch
ip = get_ipython()
ip.run_line_magic("load_ext", "tvm_pyfunc_nb")
ip.run_cell_magic("tvmmodule", "demo --quiet", {ADD_TIR + MAIN_PYFUNC + MAIN_RELAX!r})
x, y = torch.arange(5.0), torch.ones(5)
assert torch.equal(demo.main(x, y), (x + y) * 2) and torch.equal(demo.main_relax(x, y), x + y)
print(json.dumps({{"tir": [c.functions for c in demo.stats.compiles if c.kind == "tir"],
                  "hits": demo.stats.cache_hits}}))
"""


@pytest.mark.slow
def test_a_fresh_kernel_with_a_warm_cache_compiles_no_primfunc(tmp_path):
    """Two kernels in turn, the cache directory given by the environment variable."""
    script = tmp_path / "notebook.ipy"
    script.write_text(textwrap.dedent(NOTEBOOK))
    env = {**os.environ, "TVM_PYFUNC_NB_CACHE_DIR": str(tmp_path / "cache")}

    def run() -> dict:
        done = subprocess.run(
            [sys.executable, "-m", "IPython", "--no-banner", "--quick", str(script)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
        return json.loads(done.stdout.strip().splitlines()[-1])

    cold = run()
    built = [name for names in cold["tir"] for name in names]
    assert built and len(list((tmp_path / "cache" / OWN_DIR).glob("*.so"))) == len(built)
    warm_run = run()
    assert warm_run["tir"] == [] and warm_run["hits"] >= len(cold["tir"])


EXIT_WITH_EXPORTS_QUEUED = """
import sys, tvm
from tvm_pyfunc_nb import CompileCache, LiveModule
from tvm_pyfunc_nb._core.build import disk_cache
disk_cache._Writer.EXIT_GRACE_SECONDS = 0  # what a long queue comes to once the grace is over
cache = CompileCache(sys.argv[1])
live = LiveModule("m")
live.run_cell(sys.argv[2])
for name, func in live.ir_mod.functions_items():
    lib = tvm.tirx.build(tvm.IRModule({name: func.with_attr("global_symbol", name.name_hint)}))
    cache.store({name.name_hint: func}, "llvm", lib)
print(len(cache.summary().location) > 0, flush=True)
"""


@pytest.mark.slow
def test_exit_waits_for_the_export_running_not_for_every_export_queued(tmp_path):
    count = 24
    body = "".join(kernel(k) for k in range(count))
    done = subprocess.run(
        [sys.executable, "-c", EXIT_WITH_EXPORTS_QUEUED, str(tmp_path), body],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    written = CompileCache(tmp_path).summary().entries
    assert written < count  # the main thread ended at once: most exports were dropped, not waited
    own = tmp_path / OWN_DIR
    assert not [p for p in own.iterdir() if p.name.startswith(".")]  # no half-written file
