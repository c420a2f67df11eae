"""`library_files.write_library`: every kind of module the package builds becomes a library that
loads and computes what the module in memory computes, and a write that fails is an error of the
package, never the end of the process (TVM's own `export_library` ends it: shown here too)."""

from __future__ import annotations

import contextlib
import errno
import multiprocessing
import os
import resource
import signal

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from tvm_pyfunc_nb import CompileCache
from tvm_pyfunc_nb._core.build.library_files import load_library, write_library
from tvm_pyfunc_nb.errors import LibraryWriteError


@T.prim_func
def vectors(a: T.handle, b: T.handle):
    A = T.match_buffer(a, (64,), "float32")
    B = T.match_buffer(b, (64,), "float32")
    for i in T.vectorized(64):
        B[i] = A[i] * T.float32(2) + T.float32(1)


@T.prim_func
def parallel_exp(a: T.handle, b: T.handle):
    n = T.int64()
    A = T.match_buffer(a, (n,), "float32")
    B = T.match_buffer(b, (n,), "float32")
    for i in T.parallel(n):
        B[i] = T.exp(A[i])


@T.prim_func
def extern_sqrt(a: T.handle, b: T.handle):
    A = T.match_buffer(a, (64,), "float32")
    B = T.match_buffer(b, (64,), "float32")
    for i in range(64):
        B[i] = T.call_extern("float32", "sqrtf", A[i])


@I.ir_module
class WithConstants:
    @R.function
    def main(x: R.Tensor((8, 8), "float32")):
        w = R.const(np.arange(64, dtype="float32").reshape(8, 8) / 64)
        y = R.matmul(x, w)
        return R.nn.softmax(y)


X = np.linspace(0.5, 4.0, 64, dtype="float32")
EXPECTED = {"vectors": X * 2 + 1, "parallel_exp": np.exp(X), "extern_sqrt": np.sqrt(X)}


@pytest.fixture(scope="module")
def kernels():
    """Three kernels of three kinds (vectors, a parallel loop, an extern call), built together in
    one library, as `Build` builds the kernels one compile needs."""
    funcs = {"vectors": vectors, "parallel_exp": parallel_exp, "extern_sqrt": extern_sqrt}
    return tvm.tirx.build(tvm.IRModule(funcs), target="llvm")


def run_kernel(lib, name: str) -> np.ndarray:
    out = tvm.runtime.tensor(np.zeros_like(X))
    lib[name](tvm.runtime.tensor(X), out)
    return out.numpy()


def test_kernels_built_together_load_and_compute_as_in_memory(kernels, tmp_path):
    write_library(kernels, tmp_path / "kernels.so")
    loaded = tvm.runtime.load_module(str(tmp_path / "kernels.so"))
    for name, expected in EXPECTED.items():
        np.testing.assert_allclose(run_kernel(loaded, name), expected, rtol=1e-6)
        np.testing.assert_array_equal(run_kernel(loaded, name), run_kernel(kernels, name))
    assert [p.name for p in tmp_path.iterdir()] == ["kernels.so"]  # no file of the work left


def test_float16_on_a_cpu_without_f16c_loads_and_computes(tmp_path):
    """LLVM calls `__extendhfsf2` for each conversion; TVM puts a weak definition of it in the
    module, which the library must keep."""

    @T.prim_func
    def widen(a: T.handle, b: T.handle):
        A = T.match_buffer(a, (64,), "float16")
        B = T.match_buffer(b, (64,), "float32")
        for i in range(64):
            B[i] = T.Cast("float32", A[i]) * T.float32(2)

    lib = tvm.tirx.build(tvm.IRModule({"widen": widen}), target={"kind": "llvm", "mcpu": "x86-64"})
    assert "__extendhfsf2" in lib.inspect_source("asm")
    write_library(lib, tmp_path / "widen.so")
    half = np.linspace(-2, 2, 64).astype("float16")
    out = tvm.runtime.tensor(np.zeros(64, dtype="float32"))
    tvm.runtime.load_module(str(tmp_path / "widen.so"))["widen"](tvm.runtime.tensor(half), out)
    np.testing.assert_array_equal(out.numpy(), half.astype("float32") * 2)


def test_a_vm_with_constants_loads_and_runs_as_in_memory(tmp_path):
    executable = tvm.compile(WithConstants, target="llvm")
    write_library(executable.mod, tmp_path / "vm.so")
    x = tvm.runtime.tensor(np.linspace(-1, 1, 64, dtype="float32").reshape(8, 8))
    ours = relax.VirtualMachine(tvm.runtime.load_module(str(tmp_path / "vm.so")), tvm.cpu())
    in_memory = relax.VirtualMachine(executable, tvm.cpu())
    np.testing.assert_array_equal(ours["main"](x).numpy(), in_memory["main"](x).numpy())


def test_a_library_loaded_with_load_library_is_written_again(kernels, tmp_path):
    write_library(kernels, tmp_path / "first.so")
    loaded = load_library(tmp_path / "first.so")
    (tmp_path / "first.so").unlink()  # what the compile cache does with its private copy
    write_library(loaded, tmp_path / "again.so")
    again = tvm.runtime.load_module(str(tmp_path / "again.so"))
    np.testing.assert_array_equal(run_kernel(again, "vectors"), EXPECTED["vectors"])


def test_code_loaded_from_a_file_by_tvm_alone_is_refused_with_the_reason(kernels, tmp_path):
    write_library(kernels, tmp_path / "k.so")
    plain = tvm.runtime.load_module(str(tmp_path / "k.so"))
    with pytest.raises(LibraryWriteError, match="loaded from a file"):
        write_library(plain, tmp_path / "again.so")
    assert not (tmp_path / "again.so").exists()


def test_a_cuda_host_module_is_written_with_its_device_code(tmp_path):
    """No GPU here: the file holds the host code and the CUDA module, as TVM's own export does
    (loading it asks for a CUDA runtime, in both)."""

    @T.prim_func
    def double(a: T.handle, b: T.handle):
        A = T.match_buffer(a, (256,), "float32")
        B = T.match_buffer(b, (256,), "float32")
        for bx in T.thread_binding(2, "blockIdx.x"):
            for tx in T.thread_binding(128, "threadIdx.x"):
                B[bx * 128 + tx] = A[bx * 128 + tx] * T.float32(2)

    lib = tvm.tirx.build(tvm.IRModule({"double": double}), target="cuda")
    write_library(lib, tmp_path / "ours.so")
    lib.export_library(str(tmp_path / "theirs.so"))
    for name in ("ours.so", "theirs.so"):
        with pytest.raises(Exception, match=r"load_from_bytes\.cuda"):
            tvm.runtime.load_module(str(tmp_path / name))


def test_a_failing_compiler_or_a_missing_folder_is_the_package_error(kernels, tmp_path):
    with pytest.raises(LibraryWriteError, match="no C compiler `no-such-cc`"):
        write_library(kernels, tmp_path / "k.so", compiler="no-such-cc")
    with pytest.raises(LibraryWriteError, match=r"could not link .* \(`false` exit 1\)"):
        write_library(kernels, tmp_path / "k.so", compiler="false")
    with pytest.raises(LibraryWriteError) as raised:
        write_library(kernels, tmp_path / "gone" / "k.so")
    assert raised.value.errno == errno.ENOENT
    assert list(tmp_path.iterdir()) == []


def disk_full_from_now(folder: str) -> None:
    """This process (forked) may not grow a file past 4 KB and ignores SIGXFSZ: every write
    past that fails with EFBIG, as on a full disk or over a quota. What it writes to stderr goes
    to `folder`/stderr."""
    with open(os.path.join(folder, "stderr"), "w") as said:
        os.dup2(said.fileno(), 2)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))


def forked(target, *args) -> tuple[list, int]:
    """What `target(report, *args)` sent through `report` in a forked process, and its exit
    status."""
    fork = multiprocessing.get_context("fork")
    receive, report = fork.Pipe(duplex=False)
    process = fork.Process(target=target, args=(report, *args))
    process.start()
    process.join(120)
    report.close()
    said = []
    with contextlib.suppress(EOFError):
        while receive.poll():
            said.append(receive.recv())
    return said, process.exitcode


def full_disk(report, lib, folder: str) -> None:
    """Write `lib` our way, then with TVM's `export_library`, on a full disk."""
    disk_full_from_now(folder)
    try:
        write_library(lib, os.path.join(folder, "ours.so"))
    except LibraryWriteError as err:
        report.send(("ours", err.errno, str(err)))
    lib.export_library(os.path.join(folder, "theirs.so"))
    report.send(("export_library returned",))


def test_a_full_disk_is_an_error_for_ours_and_the_end_of_the_process_for_export_library(
    kernels, tmp_path
):
    said, status = forked(full_disk, kernels, str(tmp_path))
    assert said and said[0][:2] == ("ours", errno.EFBIG), (tmp_path / "stderr").read_text()
    assert said[0][2].startswith("cannot write the library")
    # TVM's export: LLVM's fatal error ends the process (in a notebook, the kernel)
    assert said[1:] == [] and status != 0
    assert "LLVM ERROR: IO failure on output stream" in (tmp_path / "stderr").read_text()


def cache_on_a_full_disk(report, lib, folder: str) -> None:
    cache = CompileCache(os.path.join(folder, "cache"))
    disk_full_from_now(folder)
    cache.store({"vectors": vectors}, "llvm", lib)
    cache.flush()
    report.send(cache.problem)


def test_the_compile_cache_on_a_full_disk_tells_why_and_the_process_goes_on(kernels, tmp_path):
    """Issue 28: the cache's writer thread ended the kernel with LLVM's "IO failure on output
    stream"."""
    said, status = forked(cache_on_a_full_disk, kernels, str(tmp_path))
    [problem] = said
    assert problem.startswith("writing an entry failed: cannot write the library")
    assert problem.endswith("library.so: File too large")
    assert status == 0
