"""A CPU schedule for matmuls and convolutions, and one for element-wise kernels, written once
and applied to the kernels a pipeline makes.

No Relax pipeline of TVM 0.27 schedules a matmul or a convolution on a CPU (DLight's CPU rules
cover GEMV and reductions), so a legalized `R.matmul` runs as three loops, one multiply-add at a
time, on one core. This rule gives every kernel that multiplies and accumulates as a matmul does
(`C[.., i, j] += A[.., i, k] * B[.., k, j]`, whatever the names and the number of `i` and `k`
axes: `R.matmul`, batched or not, an NCHW `R.nn.conv2d`, fused with what follows them or not) the
classic CPU layout: a tile of rows × vectors of columns computed in registers (as many as the
target's vector registers hold, with room to spare: 8 rows × 2 vectors on AVX-512, 4 × 2 on
AVX2),
the tiles spread over the cores, `B` read a row of vectors at a time, the bias, normalization,
activation or other element-wise ops fused after it applied to each tile as it is written.

Which axis is the vectors' is `B`'s last: a matmul's columns, and a convolution's output
channels once its weights are stored HWIO (the `fused` pipeline does that: pipelines.py). A
convolution's tile is then a few output pixels of a row (or a few rows of a small image) times
a few vectors of output channels; its input is read one value at a time, for any stride and
padding, and each tile's values are written back to the NCHW output a vector of channels at a
time. A convolution of OIHW weights (weights not constant) takes its output channels as rows and
a row of output pixels as vectors instead.

A kernel of element-wise ops (a batch norm with running statistics fused with its add and ReLU:
five full-size intermediates written and read back, one element at a time) becomes one loop
nest in vectors over the cores. Only kernels the pipeline made are touched: a PrimFunc written in
a cell keeps the loops its author wrote.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.s_tir.dlight.analysis import get_root_block
from tvm.s_tir.dlight.gpu.matmul import IterKind, detect_iter_traits, get_reduction_blocks
from tvm.sym.pattern import detect_linear_equation

from ...errors import reason_sentence
from .crash_guards import LOWER_SBLOCKS

# what DLight, MetaSchedule and the CPU schedules mark on a kernel they scheduled (and skip)
SCHEDULED = "tirx.is_scheduled"
# vector registers a tile leaves to LLVM (addresses, a second broadcast while the first is in use):
# without them, LLVM spilled accumulators to the stack on every multiply-add
SPARE_REGISTERS = 4
# what a vector of B costs to load against a broadcast of A: B (weights) is read from L2, A's
# few rows stay in L1; on AVX-512 8 rows × 2 vectors ran a 32×512 @ 512×512 matmul at 1.1-2×
# the speed of 4 × 4 (the squarer tile: fewest loads if all loads cost the same)
VECTOR_LOAD_COST = 3
MAX_ROWS = 16  # rows of a tile: beyond, the broadcasts outnumber the vectors they feed


@dataclass(frozen=True)
class VectorUnit:
    """A CPU's float32 vectors: lanes per vector register, and how many registers there are."""

    lanes: int
    registers: int


def vector_unit(target: tvm.target.Target) -> VectorUnit:
    """AVX-512: 32 registers of 16 floats; AVX (AVX2): 16 of 8; SSE and NEON: 16 of 4."""
    from tvm.target.codegen import target_has_features

    if target_has_features("avx512f", target):
        return VectorUnit(16, 32)
    if target_has_features("avx", target):
        return VectorUnit(8, 16)
    return VectorUnit(4, 16)


def vector_lanes(target: tvm.target.Target) -> int:
    """float32 lanes of the target's vector registers: 16 (AVX-512), 8 (AVX), 4 (SSE, NEON)."""
    return vector_unit(target).lanes


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
        unit = vector_unit(target)
        sch = default_schedule_of(func, unit)
        if sch is not None and _scalar_only(sch.mod["main"], target):
            sch = default_schedule_of(func, VectorUnit(1, unit.registers))
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


def default_schedule_of(func, unit: VectorUnit) -> s_tir.Schedule | None:
    """The schedule written once for `func` (a PrimFunc or a module of one named `main`): as a
    matmul or convolution if it is one, else as an element-wise kernel if it is one, else None
    (a depthwise convolution: LLVM vectorizes its loops as the pipeline wrote them, at 2-4×
    PyTorch's speed here, more than a schedule of windows in vectors gave)."""
    sch = matmul_schedule_of(func, unit)
    return sch if sch is not None else elementwise_schedule_of(func, unit.lanes)


@dataclass(frozen=True)
class _Axes:
    """The loops of a matmul-shaped block by their part in its tiles: `outer` (batches, and row
    axes no tile holds), `rows` (outermost first), the vector loop and its extent, `depth` (the
    reduction, in the order `B` is stored) and whether the vectors are the output's last axis
    (else it is written back transposed: a convolution's output channels)."""

    outer: list
    rows: list
    cols: object
    width: int
    depth: list
    last_axis: bool
    dims: dict  # output axis of each row loop and of the vector loop (by `id` of the loop)
    rank: int  # the output's axes


def matmul_schedule_of(func, unit: VectorUnit) -> s_tir.Schedule | None:
    """The schedule (its trace replays it) of `func`, a PrimFunc or a module of one named
    `main`, as a CPU matmul; None if it is not matmul-shaped."""
    sch = s_tir.Schedule(func)
    reductions = get_reduction_blocks(sch, sch.get_child_blocks(get_root_block(sch)))
    if reductions is None:
        return None
    block = reductions[0]
    if not _multiply_accumulates(sch.get(block)):
        return None
    axes = _matmul_axes(sch, block, unit.lanes)
    if axes is None:
        return None
    vector = _vector(axes.width, unit.lanes)
    vector_dim = axes.dims[id(axes.cols)]
    row_dims = [axes.dims.get(id(loop)) for loop in axes.rows]
    rows, (_, vectors) = _row_tile(sch, axes.rows, axes.width // vector, unit)
    col_tiles, col_vectors, lane = sch.split(axes.cols, [None, vectors, vector])
    # a column of tiles in a row: the slice of B they read stays in cache from one to the next
    sch.reorder(*axes.outer, col_tiles, *rows.tiles, *axes.depth, *rows.inner, col_vectors, lane)
    tiles = sch.fuse(*axes.outer, col_tiles, *rows.tiles)
    sch.parallel(tiles)
    sch.vectorize(lane)
    for loop in [*rows.inner, col_vectors]:
        sch.unroll(loop)
    tile = sch.cache_write(block, 0, "local")  # the tile's accumulators: registers
    if not axes.last_axis:  # the accumulators' vectors along the vector axis, as computed
        sch.transform_layout(block, ("write", 0), _moved_last(vector_dim, axes.rank))
    _inline_consumers(sch, tile)
    sch.reverse_compute_at(tile, tiles)
    if axes.last_axis:
        _vectorize_innermost(sch, tile, vector)
    else:
        extents = dict.fromkeys(range(axes.rank), 1)
        extents[vector_dim] = vectors * vector
        for dim, loop in zip(row_dims[-len(rows.inner) :], rows.inner, strict=True):
            extents[dim] = _extent(sch, loop)
        _write_back_by_vectors(sch, tile, extents, vector_dim, vector)
    init = sch.decompose_reduction(block, axes.depth[0])
    _vectorize_innermost(sch, init, vector)
    _parallel_producers(sch)
    return sch


@dataclass(frozen=True)
class _Rows:
    tiles: list  # loops over the tiles' rows
    inner: list  # loops inside a tile


def _row_tile(sch: s_tir.Schedule, rows: list, vectors: int, unit: VectorUnit):
    """The row loops split into tiles and what a tile holds, and (rows, vectors) of a tile: the
    most accumulators that fit in the registers with room to spare, the cheapest loads per
    multiply-add among equals (a vector of B costs `VECTOR_LOAD_COST` broadcasts). A tile takes
    rows of the innermost row loop, and all of it and rows of the next one out when it is short
    (a convolution's row of a small image)."""
    extents = [_extent(sch, loop) for loop in rows]
    budget = unit.registers - SPARE_REGISTERS
    if not rows:
        heights = {1: None}
    elif all(e is not None for e in extents):
        heights = _row_counts(extents)
    else:  # a symbolic row count: tiles of 4 rows, the last one partly out of range
        heights = {4: None}
    best = None
    for v in range(1, vectors + 1):
        if vectors % v:
            continue
        fits = [h for h in heights if h * v + v + 1 <= budget and h <= MAX_ROWS]
        if not fits:
            continue
        h = max(fits)
        key = (h * v, -(h + VECTOR_LOAD_COST * v))
        if best is None or key > best[0]:
            best = (key, h, v)
    _, height, v = best or ((0, 0), 1, 1)
    return _split_rows(sch, rows, extents, height), (height, v)


def _row_counts(extents: list[int]) -> dict[int, None]:
    """The rows a tile can hold without a partial tile: a divisor of the innermost row loop's
    extent, or all of it times a divisor of the next one's."""
    last = extents[-1]
    counts = [d for d in range(1, last + 1) if last % d == 0]
    if len(extents) > 1:
        counts += [last * d for d in range(2, extents[-2] + 1) if extents[-2] % d == 0]
    return dict.fromkeys(counts)


def _split_rows(sch: s_tir.Schedule, rows: list, extents: list, height: int) -> _Rows:
    if not rows:
        return _Rows([], [])
    if len(rows) > 1 and extents[-1] is None:  # symbolic: the rows fused, as one loop
        rows, extents = [sch.fuse(*rows)], [None]
    last = extents[-1]
    if last is None or height <= last:
        tiles, inner = sch.split(rows[-1], [None, height])
        return _Rows([*rows[:-1], tiles], [inner])
    tiles, inner = sch.split(rows[-2], [None, height // last])
    return _Rows([*rows[:-2], tiles], [inner, rows[-1]])


def _matmul_axes(sch: s_tir.Schedule, block, lanes: int) -> _Axes | None:
    """The block's loops by their part in a tile, or None unless it is a matmul whose vectors
    can be `B`'s last axis (its columns; a convolution's output channels), or, for a
    convolution of OIHW weights, the output's last axis (a row of pixels); with a static number
    of columns and depth, one loop for each of its axes."""
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
    out_last, b_last = stmt.writes[0].region[-1].min, stmt.reads[1].region[-1].min
    output = stmt.writes[0].region
    dims = {id(by_var[r.min][0]): d for d, r in enumerate(output) if r.min in by_var}
    if not all(isinstance(v, tirx.Var) and v in by_var for v in (out_last, b_last)):
        return None
    depth = kinds.get(IterKind.kIter_K, [])
    depth_extents = [t.extent for _, t in by_var.values() if t.kind == IterKind.kIter_K]
    if not all(isinstance(e, tirx.IntImm) for e in depth_extents):
        return None
    outer = [*kinds.get(IterKind.kIter_S, []), *kinds.get(IterKind.kIter_T, [])]
    b_loop, b_trait = by_var[b_last]
    if _channels_as_rows(stmt, by_var, out_last, lanes):
        b_trait = None  # a row of pixels fills whole vectors: read them as vectors
    if b_trait is not None and b_trait.kind == IterKind.kIter_J and _static(b_trait):
        if len(kinds.get(IterKind.kIter_J, [])) != 1:
            return None
        rows = kinds.get(IterKind.kIter_I, [])
        last_axis = out_last.same_as(b_last)
        if last_axis and len(depth) != 1:
            return None
        if last_axis:
            rows, more = _rows_of_a_matmul(by_var, rows)
            if rows is None:
                return None
            outer += more
        else:  # a convolution: its pixels as rows, in the output's order, the last innermost
            rows = _in_order_of(stmt.writes[0], by_var, rows)
        depth = _in_order_of(stmt.reads[1], by_var, depth)
        width = b_trait.extent.value
        return _Axes(outer, rows, b_loop, width, depth, last_axis, dims, len(output))
    col_loop, col_trait = by_var[out_last]
    if col_trait.kind != IterKind.kIter_I or len(kinds.get(IterKind.kIter_J, [])) != 1:
        return None
    if not _static(col_trait):
        return None
    # a convolution: output channels as rows, a row of pixels as vectors
    outer += [loop for loop in kinds.get(IterKind.kIter_I, []) if not loop.same_as(col_loop)]
    rows, width = kinds[IterKind.kIter_J], col_trait.extent.value
    return _Axes(outer, rows, col_loop, width, depth, True, dims, len(output))


def _static(trait) -> bool:
    return isinstance(trait.extent, tirx.IntImm)


def _channels_as_rows(stmt, by_var: dict, out_last, lanes: int) -> bool:
    """Whether a convolution's tile is better as output channels × a row of pixels in vectors
    (what its OIHW weights allow too): its output's rows are a whole number of vectors, read
    from the input as vectors (stride 1). Else (a strided convolution, a row of 56 or 7
    pixels) its tile is pixels × vectors of output channels, read one input value at a time."""
    if not (isinstance(out_last, tirx.Var) and out_last in by_var):
        return False
    trait = by_var[out_last][1]
    if trait.kind != IterKind.kIter_I or not _static(trait) or trait.extent.value % lanes:
        return False
    return _reads_one_to_one(stmt.reads[0], out_last)


def _is_int(expr, value: int) -> bool:
    return isinstance(expr, tirx.IntImm) and expr.value == value


def _rows_of_a_matmul(by_var: dict, rows: list):
    """A matmul's rows, and the row loops left outside the tiles. A batch axis only A has
    (broadcast) is fused with the rows: a tile of rows must then never straddle two batches (it
    was given wrong numbers, a (2, 3, 4) @ (4, 5) here), so those rows are tiled apart."""
    if len(rows) <= 1:
        return rows, []
    inner = next(t for loop, t in by_var.values() if loop.same_as(rows[-1]))
    if isinstance(inner.extent, tirx.IntImm) and inner.extent.value >= 4:
        return rows[-1:], rows[:-1]
    return None, []


def _in_order_of(region, by_var: dict, loops: list) -> list:
    """`loops` in the order of the axes of the buffer region that indexes them."""
    position = {}
    for axis, rng in enumerate(region.region):
        for var in tvm.tirx.analysis.undefined_vars(rng.min):
            if var in by_var:
                position.setdefault(by_var[var][0], axis)
    return sorted(loops, key=lambda loop: next(p for k, p in position.items() if k.same_as(loop)))


def _moved_last(axis: int, rank: int):
    """An index map of a buffer of `rank` axes that moves axis `axis` to the end."""
    return lambda *idx: (*idx[:axis], *idx[axis + 1 : rank], idx[axis])


def _write_back_by_vectors(
    sch: s_tir.Schedule, tile, extents: dict[int, int], vector_dim: int, vector: int
) -> None:
    """The tile's values to the output with the accumulators' axis innermost, in vectors (the
    element-wise ops fused after the matmul computed on vectors; the stores go one by one).
    `extents`: the tile's extent along each output axis; `reverse_compute_at` made a loop for
    each axis of more than one, in order."""
    dims = [dim for dim, extent in sorted(extents.items()) if extent > 1]
    loops = sch.get_loops(tile)[-len(dims) :]
    channel = loops[dims.index(vector_dim)]
    sch.reorder(*[loop for loop in loops if not loop.same_as(channel)], channel)
    sch.vectorize(sch.split(channel, [None, vector])[1])


def _parallel_producers(sch: s_tir.Schedule) -> None:
    """Blocks computed whole before the matmul (a convolution's padded input) over the cores."""
    for block in sch.get_child_blocks(get_root_block(sch)):
        if _reduces(sch, block) or sch.get_consumers(block) == []:
            continue
        loops = sch.get_loops(block)
        if len(loops) > 1 and all(sch.get(loop).kind == tirx.ForKind.SERIAL for loop in loops):
            sch.parallel(sch.fuse(*loops[:-2]) if len(loops) > 2 else loops[0])


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


def _vector(n: int, lanes: int) -> int:
    """The widest vector for a loop of `n`: the largest power of two that divides `n`, at most
    `lanes` (LLVM splits a vector of 14 floats into pieces slower than two of 8)."""
    return math.gcd(n, lanes) if lanes & (lanes - 1) == 0 else 1


def _extent(sch: s_tir.Schedule, loop) -> int | None:
    extent = sch.get(loop).extent
    return extent.value if isinstance(extent, tirx.IntImm) else None


def _reads_one_to_one(read, var) -> bool:
    """Whether buffer region `read`'s last index moves one element per step of `var`."""
    if not isinstance(var, tirx.Var):
        return False
    coefficients = detect_linear_equation(read.region[-1].min, [var])
    return len(coefficients) == 2 and _is_int(coefficients[0], 1)


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
        vector = _vector(extent.value, lanes)
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
