"""The persistent compile cache, with real compiles: what it serves and refuses, how it stays small.

Every test uses its own temporary cache directory, never the user's.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest
import torch
from cells import ADD_TIR, MAIN_PYFUNC, MAIN_RELAX, RELAX_CALLS_BOTH, SCALE_PYFUNC
from IPython.core.error import UsageError

from tvm_pyfunc_nb import CompileCache, CompileCacheWarning, LiveModule, _magics

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
        for record in cache.directory.glob("*.json"):
            fields = json.loads(json.loads(record.read_text())["record"])
            if fields["name"] == name and fields["script"] == script:
                return record, record.with_suffix(".so")
        warm(cache, body)
    raise AssertionError(f"no entry of {name} in {cache.directory}")


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
        assert str(cache.directory) + "/" + add_library.name not in maps.read_text()
    assert not [p for p in cache.directory.iterdir() if p.name.startswith(".load-")]


# -- bounds and files --------------------------------------------------------------------
def kernel(k: int) -> str:
    return ADD_TIR.replace("add_tir", f"k{k}").replace(
        "A[i] + B[i]", f"A[i] + B[i] + T.float32({k})"
    )


def test_eviction_keeps_the_size_bound_and_drops_the_least_recently_used(tmp_path):
    probe = CompileCache(tmp_path / "probe")
    warm(probe, kernel(0))
    entry_size = probe.summary().size

    cache = CompileCache(tmp_path / "bounded", max_bytes=int(entry_size * 2.5))
    first = LiveModule("m", persistent_cache=cache)
    for k in (0, 1):  # one by one: entries of their own (kernels built together share a file)
        first.run_cell(kernel(k), key=k)
        first.compile()
    cache.flush()
    second = LiveModule(
        "m", persistent_cache=CompileCache(tmp_path / "bounded", max_bytes=cache.max_bytes)
    )
    second.run_cell(kernel(0))
    second.compile()  # loads k0: now k1 is the least recently used
    assert tir_compiles(second) == []
    first.run_cell(kernel(2), key=2)
    first.compile()
    cache.flush()

    summary = cache.summary()
    assert summary.size <= cache.max_bytes and summary.entries == 2
    survivor = LiveModule("m", persistent_cache=CompileCache(tmp_path / "bounded"))
    survivor.run_cell(kernel(0) + kernel(1) + kernel(2))
    survivor.compile()
    assert tir_compiles(survivor) == [("k1",)]


def test_kernels_built_together_have_entries_of_their_own_that_share_one_file(tmp_path):
    cache = CompileCache(tmp_path)
    live = LiveModule("m", persistent_cache=cache)
    live.run_cell(kernel(0) + kernel(1) + kernel(2))
    live.compile()
    cache.flush()
    assert tir_compiles(live) == [("k0", "k1", "k2")]
    libraries = list(tmp_path.glob("*.so"))
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


def test_directories_the_cache_makes_are_private_and_entries_are_owner_only(tmp_path):
    cache = CompileCache(tmp_path / "a" / "cache")
    assert mode(cache.directory) == mode(tmp_path / "a") == 0o700
    warm(cache)
    assert all(mode(p) == 0o600 for p in cache.directory.iterdir())
    readable = tmp_path / "readable"  # the user's own, readable by others: used as it is
    readable.mkdir()
    os.chmod(readable, 0o755)
    assert CompileCache(readable).distrust() is None and mode(readable) == 0o755


def test_a_cache_directory_deleted_meanwhile_is_made_again_private(tmp_path):
    cache = CompileCache(tmp_path / "cache")
    shutil.rmtree(cache.directory)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileCacheWarning)
        warm(cache)
    assert mode(cache.directory) == 0o700 and cache.summary().entries == 1


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


def world_writable(tmp_path: Path) -> tuple[Path, str]:
    directory = tmp_path / "cache"
    warm(CompileCache(directory))
    os.chmod(directory, 0o777)
    why = f"{directory} is writable by its group and others (mode 0777)"
    return directory, f"{why}. Fix: chmod 700 {directory}, or {ELSEWHERE}"


def group_writable(tmp_path: Path) -> tuple[Path, str]:
    directory = tmp_path / "cache"
    warm(CompileCache(directory))
    os.chmod(directory, 0o770)
    why = f"{directory} is writable by its group (mode 0770)"
    return directory, f"{why}. Fix: chmod 700 {directory}, or {ELSEWHERE}"


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
    assert cache_notices(caught) == [f"compile cache off, every function compiles instead: {why}"]
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


# -- the magic ---------------------------------------------------------------------------
@pytest.fixture
def cache_shell(shell, tmp_path):
    shell.run(f"%config TVMModuleMagics.cache_dir = {str(tmp_path / 'cache')!r}")
    yield shell
    shell.run("%config TVMModuleMagics.cache_dir = ''")


def test_tvmcache_shows_the_cache_and_clear_empties_it(cache_shell, tmp_path):
    cache_shell.cell("demo", ADD_TIR + MAIN_RELAX)
    cache_shell.ns["demo"].main_relax(X, Y)
    magics = cache_shell.ip.magics_manager.registry["TVMModuleMagics"]
    magics.compile_cache().flush()

    shown = repr(cache_shell.run("%tvmcache"))
    assert str(tmp_path / "cache") in shown
    built = [name for names in tir_compiles(cache_shell.ns["demo"]) for name in names]
    assert f"{len(built)} entries" in shown  # the PrimFuncs Relax was lowered to
    assert "MB" in shown

    shown = repr(cache_shell.run("%tvmcache clear"))
    assert "0 entries" in shown
    assert list((tmp_path / "cache").iterdir()) == []
    cache_shell.run("%tvmcache nonsense", expect_error=UsageError)


def test_tvmcache_waits_for_the_writes_of_what_was_just_compiled(cache_shell, monkeypatch):
    """Entries are written in the background after the call that compiled; `%tvmcache` right
    after it waits for them (at most `SHOW_WAIT_SECONDS`), so that its counts are settled: a
    tutorial shows them."""
    write = CompileCache._write

    def slow_write(self, *args):
        time.sleep(0.5)
        write(self, *args)

    monkeypatch.setattr(CompileCache, "_write", slow_write)
    cache_shell.cell("demo", ADD_TIR)
    cache_shell.ns["demo"].add_tir(X, Y, torch.empty(5))
    monkeypatch.setattr(_magics, "SHOW_WAIT_SECONDS", 0.0)
    shown = repr(cache_shell.run("%tvmcache"))
    assert "  0 entries, 0 KB of 512.0 MB\n" in shown, shown
    assert "0 stored, 0 rejected as damaged, stale or writable by others, 1 being written" in shown

    monkeypatch.setattr(_magics, "SHOW_WAIT_SECONDS", 30.0)
    shown = repr(cache_shell.run("%tvmcache"))
    assert re.search(r"\n  1 entry, [1-9]\d* KB of 512\.0 MB\n", shown), shown
    assert shown.endswith(
        "this kernel: 0 loaded, 1 missed, 1 stored, 0 rejected as damaged, stale or writable by "
        "others, 0 being written"
    ), shown


def test_a_cache_dir_others_can_change_leaves_cells_working_and_tvmcache_says_why(
    cache_shell, tmp_path
):
    directory = tmp_path / "cache"
    assert "  trusted: no one else can change it\n" in repr(cache_shell.run("%tvmcache"))
    os.chmod(directory, 0o777)
    with pytest.warns(CompileCacheWarning) as caught:
        cache_shell.cell("demo", ADD_TIR)
        out = torch.empty(5)
        cache_shell.ns["demo"].add_tir(X, Y, out)
        shown = repr(cache_shell.run("%tvmcache"))
    assert torch.equal(out, X + Y) and tir_compiles(cache_shell.ns["demo"]) == [("add_tir",)]
    assert len(cache_notices(caught)) == 1
    assert (
        f"  not trusted, so off: {directory} is writable by its group and others (mode 0777). "
        f"Fix: chmod 700 {directory}, or {ELSEWHERE}\n"
    ) in shown


def test_tvmcache_says_when_the_cache_is_off(shell, capsys):
    assert shell.run("%tvmcache") is None
    assert "compile cache: off" in capsys.readouterr().out


def test_the_magic_passes_its_cache_to_new_modules(cache_shell):
    cache_shell.cell("demo", ADD_TIR)
    out = torch.empty(5)
    cache_shell.ns["demo"].add_tir(X, Y, out)
    magics = cache_shell.ip.magics_manager.registry["TVMModuleMagics"]
    magics.compile_cache().flush()
    cache_shell.run("%tvmmodule_drop demo")
    cache_shell.cell("demo", ADD_TIR)
    cache_shell.ns["demo"].add_tir(X, Y, out)
    assert (
        tir_compiles(cache_shell.ns["demo"]) == [] and cache_shell.ns["demo"].stats.cache_hits == 1
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
    assert built and len(list((tmp_path / "cache").glob("*.so"))) == len(built)
    warm_run = run()
    assert warm_run["tir"] == [] and warm_run["hits"] >= len(cold["tir"])


EXIT_WITH_EXPORTS_QUEUED = """
import sys, tvm
from tvm_pyfunc_nb import CompileCache, LiveModule
from tvm_pyfunc_nb._core import compile_cache
compile_cache._Writer.EXIT_GRACE_SECONDS = 0  # what a long queue comes to once the grace is over
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
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no half-written file
