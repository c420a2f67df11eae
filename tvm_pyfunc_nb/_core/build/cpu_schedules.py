"""A CPU schedule for matmuls and convolutions, and one for element-wise kernels, written once
and applied to the kernels a pipeline makes.

No Relax pipeline of TVM 0.27 schedules a matmul or a convolution on a CPU
(DLight's CPU rules cover GEMV and reductions), so a legalized `R.matmul` runs
as three loops, one multiply-add at a time, on one core. This rule gives every
matmul-shaped kernel a pipeline made (`C[.., i, j] += A[.., i, k] * B[.., k, j]`,
`j` the last axis of `B` and `C`: `R.matmul`, batched or not, fused with what
follows it or not) the classic CPU layout: tiles of 4 rows × 4 vectors computed
in registers, the tiles spread over the cores, `B` read a row of vectors at a
time and kept in cache across the rows of a column of tiles, the bias,
activation or other element-wise ops fused after it applied to each tile as it
is written. An NCHW `R.nn.conv2d` gets the same, its output channels as rows and
a row of output pixels as columns. A kernel of element-wise ops (a batch norm with running
statistics fused with its add and ReLU: five full-size intermediates written and read back, one
element at a time) becomes one loop nest in vectors over the cores. Only kernels the pipeline
made are touched: a PrimFunc written in a cell keeps the loops its author wrote.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.s_tir.dlight.analysis import get_root_block
from tvm.s_tir.dlight.gpu.matmul import IterKind, detect_iter_traits, get_reduction_blocks

from ...errors import reason_sentence
from .crash_guards import LOWER_SBLOCKS

# what DLight, MetaSchedule and the CPU schedules mark on a kernel they scheduled (and skip)
SCHEDULED = "tirx.is_scheduled"
ROWS_PER_TILE = 4
VECTORS_PER_TILE = 4


def schedule_kernels(
    mod: tvm.IRModule, target: tvm.target.Target, keep
) -> tuple[tvm.IRModule, dict[str, str]]:
    """`mod` with its matmul, convolution and element-wise kernels scheduled for the CPU `target`
    (`default_schedule_of`), except those named in `keep` (the module's own PrimFuncs) and those
    already scheduled; and the kernels that keep TVM's default instead, since the schedule
    written for their kind failed on them, with why (a notice, never a failed compile)."""
    if target.kind.name != "llvm":
        return mod, {}
    updates, failed = {}, {}
    for gv, func in mod.functions_items():
        if not isinstance(func, tirx.PrimFunc) or gv.name_hint in keep:
            continue
        if (func.attrs and func.attrs.get(SCHEDULED, False)) or not _made_of_blocks(func):
            continue
        sch, why = checked_schedule_of(func, target)
        if sch is not None:
            updates[gv] = sch.mod["main"].with_attr(SCHEDULED, True)
        elif why:
            failed[gv.name_hint] = why
    if not updates:
        return mod, failed
    mod = mod.clone()  # the pipeline may hand back the module it was given: never change that
    for gv, func in updates.items():
        mod[gv] = func
    return mod, failed


def checked_schedule_of(func, target: tvm.target.Target) -> tuple[s_tir.Schedule | None, str]:
    """`default_schedule_of(func)` for the CPU `target` if it applies and what it makes lowers;
    else None, with TVM's reason if it failed ("" if no schedule is written for what `func`
    computes).

    A schedule whose vectors hold an op the target can lower only one value at a time is made
    again without vectors: TVM 0.27 marks `cosh` and `sinh` vectorizable, but lowers them for
    LLVM to libm's scalar `coshf`, so a vector of them stays an "unknown intrinsic" that does
    not compile (plain TVM never vectorizes them: nothing in its CPU pipeline vectorizes)."""
    try:
        sch = default_schedule_of(func, vector_lanes(target))
        if sch is not None and _scalar_only(sch.mod["main"], target):
            sch = default_schedule_of(func, 1)
        if sch is not None:
            _LOWERS_CHECK(tvm.IRModule({"main": sch.mod["main"]}))
    except Exception as err:  # TVM raises its own errors from any primitive or pass
        return None, reason_sentence(err)
    return sch, ""


# What a schedule can break, seen without generating code (under a millisecond a kernel): where
# buffers are allocated, how blocks become loops (TIR's lowering, first passes).
_LOWERS_CHECK = tvm.transform.Sequential([LOWER_SBLOCKS, tirx.transform.FlattenBuffer()])
# ...and how vectors and math intrinsics lower for the target (a millisecond more)
_VECTORS_LOWER = tvm.transform.Sequential(
    [_LOWERS_CHECK, tirx.transform.VectorizeLoop(), tirx.transform.LowerIntrin()]
)
# An op with one of these is a math intrinsic that `LowerIntrin` must turn into code
_LOWERINGS = ("FLowerIntrinsic", "FLegalize")


def _scalar_only(func: tirx.PrimFunc, target: tvm.target.Target) -> list[str]:
    """The math intrinsics `func`'s vectorized loops call that the target cannot lower as
    vectors (what LLVM's code generator would refuse: "unknown intrinsic")."""
    # a look ahead, not a step of the build: no instrument (bisect's pass log) sees its passes
    with tvm.transform.PassContext():
        lowered = _VECTORS_LOWER(tvm.IRModule({"main": func.with_attr("target", target)}))
    kinds = (target.kind.name, "default")
    left: set[str] = set()

    def visit(call) -> None:
        op = call.op
        if isinstance(op, tvm.ir.Op) and any(
            op.get_attr(f"{kind}.{lowering}") is not None
            for kind in kinds
            for lowering in _LOWERINGS
        ):
            left.add(op.name)

    tvm_ffi.structural_walk(lowered["main"].body, [(tvm.ir.Call, visit)])
    return sorted(left)


def _made_of_blocks(func: tirx.PrimFunc) -> bool:
    """Whether `func` is a kernel of blocks (not a function of the VM's, such as a shape
    function)."""
    return isinstance(func.body, s_tir.SBlockRealize)


def vector_lanes(target: tvm.target.Target) -> int:
    """float32 lanes of the target's vector registers: 16 (AVX-512), 8 (AVX), 4 (SSE, NEON)."""
    from tvm.target.codegen import target_has_features

    if target_has_features("avx512f", target):
        return 16
    if target_has_features("avx", target):
        return 8
    return 4


def default_schedule_of(func, lanes: int) -> s_tir.Schedule | None:
    """The schedule written once for `func` (a PrimFunc or a module of one named `main`): as a
    matmul or convolution if it is one, else as an element-wise kernel if it is one, else None."""
    sch = matmul_schedule_of(func, lanes)
    return sch if sch is not None else elementwise_schedule_of(func, lanes)


def matmul_schedule_of(func, lanes: int) -> s_tir.Schedule | None:
    """The schedule (its trace replays it) of `func`, a PrimFunc or a module of one named
    `main`, as a CPU matmul; None if it is not matmul-shaped.

    A convolution (NCHW) is one too, read the other way round: its rows are the output
    channels, its columns the output's last axis (a row of pixels), its depth the input
    channels and the kernel's window."""
    sch = s_tir.Schedule(func)
    reductions = get_reduction_blocks(sch, sch.get_child_blocks(get_root_block(sch)))
    if reductions is None:
        return None
    block = reductions[0]
    if not _multiply_accumulates(sch.get(block)):
        return None
    axes = _matmul_axes(sch, block)
    if axes is None:
        return None
    outer, rows, (cols, width), depth = axes
    vector = _largest_divisor(width, lanes)
    tile_cols = _largest_divisor(width, vector * VECTORS_PER_TILE, multiple_of=vector)
    sch.reorder(*outer, *rows, cols, *depth)
    row = sch.fuse(*rows) if len(rows) > 1 else rows[0]
    row_tiles, row_in = sch.split(row, [None, ROWS_PER_TILE])
    col_tiles, col_in = sch.split(cols, [None, tile_cols])
    col_vectors, lane = sch.split(col_in, [None, vector])
    # a column of tiles in a row: the slice of B they read stays in cache from one to the next
    sch.reorder(*outer, col_tiles, row_tiles, *depth, row_in, col_vectors, lane)
    tiles = sch.fuse(*outer, col_tiles, row_tiles)
    sch.parallel(tiles)
    sch.vectorize(lane)
    sch.unroll(row_in)
    sch.unroll(col_vectors)
    tile = sch.cache_write(block, 0, "local")  # the tile's accumulators: registers
    _inline_consumers(sch, tile)
    sch.reverse_compute_at(tile, tiles)
    _vectorize_innermost(sch, tile, vector)
    init = sch.decompose_reduction(block, depth[0])
    _vectorize_innermost(sch, init, vector)
    return sch


def _matmul_axes(sch: s_tir.Schedule, block):
    """The block's loops as (outer loops, row loops, (column loop, its extent), depth loops),
    or None unless the block is a matmul whose columns are the last axis of B and C (or a
    convolution whose columns are the last axis of its output), with a static number of
    columns and depth, one loop for each of its axes."""
    stmt = sch.get(block)
    traits = detect_iter_traits(stmt)
    loops = sch.get_loops(block)
    if traits is None or len(loops) != len(stmt.iter_vars):
        return None
    kinds: dict = {}
    by_var = {}
    for loop, var, trait in zip(loops, stmt.iter_vars, traits[3], strict=True):
        kinds.setdefault(trait.kind, []).append(loop)
        by_var[var.var] = (loop, trait)
    last = stmt.writes[0].region[-1].min
    if not isinstance(last, tirx.Var) or last not in by_var:
        return None
    col_loop, col_trait = by_var[last]
    depth = kinds.get(IterKind.kIter_K, [])
    extents = [
        col_trait.extent,
        *(t.extent for _, t in by_var.values() if t.kind == IterKind.kIter_K),
    ]
    if not all(isinstance(e, tirx.IntImm) for e in extents):
        return None
    if col_trait.kind == IterKind.kIter_J:  # a matmul: B's rows are read as vectors too
        b_last = stmt.reads[1].region[-1].min
        if len(depth) != 1 or not (isinstance(b_last, tirx.Var) and b_last.same_as(last)):
            return None
        rows = kinds.get(IterKind.kIter_I, [])
        others = kinds.get(IterKind.kIter_J, [])
        # a batch axis only A has (broadcast) is fused with the rows: a tile of rows must then
        # never straddle two batches (it was given wrong numbers, a (2, 3, 4) @ (4, 5) here)
        inner = next(t for loop, t in by_var.values() if loop.same_as(rows[-1])) if rows else None
        if len(rows) > 1 and not _divides(ROWS_PER_TILE, inner.extent):
            return None
    elif col_trait.kind == IterKind.kIter_I and len(kinds.get(IterKind.kIter_J, [])) == 1:
        rows = kinds[IterKind.kIter_J]  # a convolution: output channels as rows
        others = kinds.get(IterKind.kIter_I, [])
    else:
        return None
    outer = [*kinds.get(IterKind.kIter_S, []), *kinds.get(IterKind.kIter_T, [])]
    outer += [loop for loop in others if not loop.same_as(col_loop)]
    return outer, rows, (col_loop, col_trait.extent.value), depth


def _multiply_accumulates(block) -> bool:
    """Whether `block` computes `C[..] = C[..] + A[..] * B[..]` (casts allowed): what a matmul
    and a convolution compute; a max-pool or a sum of one input only looks like one by its
    indices."""

    def bare(expr):
        return bare(expr.value) if isinstance(expr, tirx.Cast) else expr

    store = block.body
    if not isinstance(store, tirx.BufferStore) or not isinstance(store.value, tirx.Add):
        return False
    acc, product = bare(store.value.a), bare(store.value.b)
    if isinstance(product, tvm.ir.TensorLoad) and isinstance(acc, tirx.Mul):
        acc, product = product, acc
    return (
        isinstance(acc, tvm.ir.TensorLoad)
        and acc.source.same_as(store.buffer)
        and isinstance(product, tirx.Mul)
        and all(isinstance(bare(x), tvm.ir.TensorLoad) for x in (product.a, product.b))
    )


def _inline_consumers(sch: s_tir.Schedule, tile) -> None:
    """Fold the chain of element-wise ops after the matmul (bias, activation) into the tile's
    write-back, as long as each value is read by the next op alone.

    A value read twice (GELU reads its input for `x * (0.5 + erf(x) / 2)`) stops the chain
    there: the rest runs after, whole. TVM 0.27 lets the second reader be folded in anyway and
    then loses the buffer the first one read (Whisper's `conv1d + add + gelu`: "Buffer
    T_add_intermediate is used before its definition")."""
    while True:
        consumers = sch.get_consumers(tile)
        if len(consumers) != 1:
            return
        try:
            sch.reverse_compute_inline(consumers[0])
        except s_tir.ScheduleError:  # not element-wise over the tile: it runs after, whole
            return


def _vectorize_innermost(sch: s_tir.Schedule, block, vector: int) -> None:
    if vector > 1:
        sch.vectorize(sch.split(sch.get_loops(block)[-1], [None, vector])[1])


def _largest_divisor(n: int, at_most: int, multiple_of: int = 1) -> int:
    """The largest divisor of `n` that is at most `at_most` and a multiple of `multiple_of` (a
    divisor of `n` itself)."""
    return max(d for d in range(multiple_of, min(n, at_most) + 1, multiple_of) if n % d == 0)


def _divides(d: int, extent) -> bool:
    return isinstance(extent, tirx.IntImm) and extent.value % d == 0


# elements: below, an element-wise kernel (bound by memory) gains less from the thread pool than
# it loses when the pool has to wake, or to wait for cores PyTorch's threads hold (--offload)
PARALLEL_FROM = 1 << 18


def elementwise_schedule_of(func, lanes: int) -> s_tir.Schedule | None:
    """The schedule of `func` (a PrimFunc or a module of one named `main`), a kernel of
    element-wise blocks (no reduction: a fused bias, normalization
    with running statistics, activation, add), as one loop nest: every full-size intermediate
    computed where it is used instead of written out and read back, the innermost axis in
    vectors and the outer axes spread over the cores where there are enough elements. None if
    it has a reduction or nothing to gain (a single small loop).

    Intermediates are computed where they are used however small the kernel: a value gathered
    only to be dropped by a `where` (TVM's `slice_scatter` gathers from its source at every
    place, in bounds or not) is then read only where it is selected (crash_guards.py)."""
    sch = s_tir.Schedule(func)
    blocks = sch.get_child_blocks(get_root_block(sch))
    if not blocks or any(_reduces(sch, b) for b in blocks):
        return None
    size = _elements(sch.get(blocks[-1]).writes[0].source)
    if size is None:
        return None
    inlined = False
    for block in reversed(blocks[:-1]):  # the per-channel ones stay: small, computed once
        if _elements(sch.get(block).writes[0].source) == size:
            try:
                sch.compute_inline(block)
                inlined = True
            except s_tir.ScheduleError:  # not inlinable (read twice at other places): it stays
                continue
    loops = sch.get_loops(sch.get_child_blocks(get_root_block(sch))[-1])
    vector = 1
    if loops and size >= 2 * lanes and isinstance(extent := sch.get(loops[-1]).extent, tirx.IntImm):
        vector = _largest_divisor(extent.value, lanes)
    if vector > 1:
        sch.vectorize(sch.split(loops[-1], [None, vector])[1])
    spread = len(loops) > 1 and size >= PARALLEL_FROM
    if spread:
        sch.parallel(sch.fuse(*loops[:-1]))
    return sch if inlined or vector > 1 or spread else None


def _reduces(sch: s_tir.Schedule, block) -> bool:
    return any(v.iter_type != tirx.IterVar.DataPar for v in sch.get(block).iter_vars)


def _elements(buffer) -> int | None:
    count = 1
    for extent in buffer.shape:
        if not isinstance(extent, tirx.IntImm):
            return None
        count *= extent.value
    return count
