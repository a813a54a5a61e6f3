"""Device-code generation for the pipeline kernel: the Python the GEMM kernel is compiled from.

cuBLASDx's device pipeline (through nvmath-python's ``Matmul`` and libmathdx) fills the
block's shared-memory stages; this module writes the kernel around it: the init kernel that
fills four device pipelines' storage, the GEMM kernel's Numba function (:func:`_gemm_pyfunc`:
the main loop over K tiles, the K tail in shared memory, the fragment stores and the tile
walk that runs the epilogue), and the lowering of both into LTO-IR (:func:`_lower`).  The
build (:mod:`._build`) links what this produces; :mod:`.workers` replays the lowering in
parallel processes.  What it takes from nvmath beyond the public API it takes through
:mod:`.nvmath_internals`; it imports nvmath's public ``Matmul`` only.
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from . import nvmath_internals
from .config import STORES, TILE_WALK_STORES, PipelineConfig, walk_unroll

LIBMATHDX_RUNTIME = -(2**63)
"""``LLONG_MIN``: libcublasdx.h's marker for a shape or stride provided at run time."""

ARRANGEMENTS = ("row_major", "col_major")

OPERAND_PRECISIONS = ("native", "tf32")
"""How the tensor cores read A and B: ``"native"`` (the dtype itself) or ``"tf32"``
(float32 operands read as TF32 by the tensor cores, float32 accumulation; see
:func:`_operand_precision` and :mod:`.tf32x3`)."""

INIT_ENTRY = "dxgemm_pipeline_init"


@dataclass(frozen=True)
class _Placeholder:
    """The part of a ``StridedMemoryView`` nvmath's pipeline code reads: shape, strides, dtype."""

    shape: tuple[int, int]
    strides: tuple[int, int]
    dtype: np.dtype


def _placeholder(arrangement: str, dtype: np.dtype) -> _Placeholder:
    """A 2-D global tensor with run-time extents and leading dimension, unit stride fixed."""
    r = LIBMATHDX_RUNTIME
    strides = (r, 1) if arrangement == "row_major" else (1, r)
    return _Placeholder((r, r), strides, np.dtype(dtype))


@contextlib.contextmanager
def _operand_precision(precision: str, dtype: np.dtype):
    """Build with A and B in ``precision`` inside this block (``"native"``: nothing changes).

    ``"tf32"``: float32 data read by the tensor cores as TF32, accumulated in float32
    (:func:`.nvmath_internals.tf32_operands` makes nvmath ask libmathdx for it).  On the
    H100 this turns the SIMT float32 pipeline into one on the TF32 tensor cores with TMA
    loads (its storage grows from 72 to 576 bytes: TMA descriptors).
    """
    if precision == "native":
        yield
        return
    if precision != "tf32":
        raise ValueError(f"operand precision must be one of {OPERAND_PRECISIONS}, got {precision!r}")
    if np.dtype(dtype) != np.dtype(np.float32):
        raise TypeError(f"TF32 operands need float32 data, not {np.dtype(dtype)}")
    with nvmath_internals.tf32_operands():
        yield


def _make_matmul(config: PipelineConfig, dtype: np.dtype, arrangement: tuple[str, str], cc: tuple[int, int]):
    from nvmath.device import Matmul  # public API

    t = np.dtype(dtype).type
    return Matmul(
        size=(config.tile_m, config.tile_n, config.tile_k),
        precision=(t, t, t),
        data_type="real",
        sm=nvmath_internals.compute_capability(cc),
        alignment=nvmath_internals.max_alignment(),
        arrangement=(arrangement[0], arrangement[1], "row_major"),
        execution="Block",
        block_size=config.block_size,
        with_pipeline=True,
        enable_input_streaming=True,
        static_block_dim=True,
    )


def _make_device_pipeline(mm, depth: int, arrangement: tuple[str, str], dtype: np.dtype):
    """A DevicePipeline over run-time-shape placeholders, made without a GPU: ``(dp, handle)``."""
    return nvmath_internals.device_pipeline_without_gpu(mm, depth, _placeholder(arrangement[0], dtype),
                                                        _placeholder(arrangement[1], dtype))


# STORES (defined in .config, which picks among them) are how the kernel stores its
# accumulator fragment: ``"loop"`` (a run-time loop over the fragment: the fragment goes
# through local memory, ``STL``/``LDL`` in SASS), ``"unrolled"``
# (one straight-line block per fragment element, so every index is a constant and the
# fragment can stay in registers; the epilogue is inlined once per element) or
# ``"staged"`` (the fragment is written, with constant indices, into the pipeline's shared
# memory buffer, which the finished main loop no longer needs; then the block walks the
# tile in D's memory order and applies the epilogue once per element in one loop: one copy
# of the epilogue's code, and coalesced stores) or ``"staged_vec"`` (staged, but each
# thread takes 16 bytes of consecutive elements along D's contiguous dimension: one index
# computation and one 128-bit store for 4 float32 / 2 float64 elements, the epilogue
# inlined that many times; :func:`_vector_group`).  ``"staged_tile"`` / ``"staged_vec_tile"``:
# the same, but a block whose tile lies wholly inside D, with no K tail (and, for the vector
# store, 16-byte aligned rows) walks it with a loop of constant trip count, one loop per D
# order, each thread's column (row) fixed and its row (column) stepped by a constant, with
# unsigned indices (no bounds checks, no negative-index fix-ups), along rows one 128-bit
# shared-memory load per group, and several groups per iteration loaded, then computed,
# then stored (:func:`_walk_group`, :func:`.config.walk_unroll`); other tiles take the
# general loop.


def _vector_group(width: int, slot: Callable, epilogue: Callable, value_type: Any) -> Callable:
    """A device function storing ``width`` consecutive elements of D from the staging area.

    Elements ``j = 0 .. width-1`` are tile element ``(r + j dr, c + j dc)``, global element
    ``(row + j dr, col + j dc)`` (``dr, dc``: 1/0 along D's contiguous dimension).  Each
    in-bounds element gets the epilogue; when all are in bounds and the
    address is 16-byte aligned they leave in one 128-bit store, otherwise one by one.
    """
    from numba import cuda

    from ..kernels._device import is_aligned16, store_vec

    args = "smem, d, r, c, row, col, dr, dc, m, n, d_rs, d_cs, epi_args"
    lines = [f"def group({args}):", "    full = True"]
    for j in range(width):
        lines += [f"    rj = r + {j} * dr", f"    cj = c + {j} * dc", f"    gr = row + {j} * dr", f"    gc = col + {j} * dc",
                  f"    v{j} = ZERO",
                  "    if gr < m and gc < n:",
                  f"        v{j} = epilogue(smem[slot(rj, cj)], gr, gc, epi_args)",
                  "    else:",
                  "        full = False"]
    values = ", ".join(f"v{j}" for j in range(width))
    lines += ["    at = row * d_rs + col * d_cs",
              "    if full and is_aligned16(d, at):",
              f"        store_vec(d, at, ({values},))",
              "    else:",
              "        step = dr * d_rs + dc * d_cs"]
    for j in range(width):
        lines += [f"        if row + {j} * dr < m and col + {j} * dc < n:", f"            d[at + {j} * step] = v{j}"]
    namespace = {"epilogue": epilogue, "is_aligned16": is_aligned16, "store_vec": store_vec,
                 "ZERO": value_type(0), "slot": slot}
    exec("\n".join(lines), namespace)  # noqa: S102 - generated from constants above
    return cuda.jit(device=True, forceinline=True)(namespace["group"])


def _walk_group(width: int, slot: Callable, epilogue: Callable, along_row: bool, steps: int = 1,
                step_rows: int = 0, step_cols: int = 0) -> Callable:
    """A device function storing ``steps`` groups of ``width`` consecutive elements of a tile wholly inside D.

    The tile walk's counterpart of :func:`_vector_group` for blocks with no edge and no K
    tail: no bounds checks, no K tail, and the caller has checked once that every group's
    address is 16-byte aligned.  ``along_row``: a group runs along a row of the tile (D
    row-major), where the staging layout keeps it contiguous (:func:`_staging_slot`), so
    it leaves shared memory in one 128-bit load; otherwise down a column, element by
    element.  Group ``u`` starts ``u * step_rows`` rows and ``u * step_cols`` columns
    after ``(r, c)``.  Indices are unsigned (no negative-index fix-ups).

    The code is in three phases, all groups' shared-memory loads, then all epilogues, then
    all stores, because the compiler may not move a load above an earlier store to D: D
    may alias the epilogue's operands (a bias vector), and Numba's arrays are generic
    pointers that may alias shared memory.  Written group by group, each group's loads wait
    for the previous group's store, and a fused walk pays a load latency per group.
    """
    lines = ["def group(smem, d, r, c, row0, col0, d_rs, d_cs, epi_args):"]
    for u in range(steps):
        ru, cu = f"r + {u * step_rows}", f"c + {u * step_cols}"
        if along_row and width > 1:
            lines.append(f"    {', '.join(f'x{u}_{j}' for j in range(width))}, = load_vec(smem, uint32(slot({ru}, {cu})))")
        else:
            lines += [f"    x{u}_{j} = smem[uint32(slot({ru} + {j}, {cu}))]" for j in range(width)]
    for u in range(steps):
        ru, cu = f"r + {u * step_rows}", f"c + {u * step_cols}"
        if along_row:
            lines += [f"    v{u}_{j} = epilogue(x{u}_{j}, row0 + {ru}, col0 + {cu} + {j}, epi_args)" for j in range(width)]
        else:
            lines += [f"    v{u}_{j} = epilogue(x{u}_{j}, row0 + {ru} + {j}, col0 + {cu}, epi_args)" for j in range(width)]
    for u in range(steps):
        ru, cu = f"r + {u * step_rows}", f"c + {u * step_cols}"
        lines.append(f"    at = uint64((row0 + {ru}) * d_rs + (col0 + {cu}) * d_cs)")
        if width == 1:
            lines.append(f"    d[at] = v{u}_0")
        else:
            lines.append(f"    store_vec(d, at, ({', '.join(f'v{u}_{j}' for j in range(width))},))")
    return _jit_walk(lines, slot, epilogue)


def _jit_walk(lines: list[str], slot: Callable, epilogue: Callable) -> Callable:
    """The walk function written in ``lines`` (named ``group``), compiled as an inlined device function."""
    from numba import cuda, uint32, uint64

    from ..kernels._device import load_vec, store_vec

    namespace = {"epilogue": epilogue, "load_vec": load_vec, "store_vec": store_vec, "uint32": uint32,
                 "uint64": uint64, "slot": slot}
    exec("\n".join(lines), namespace)  # noqa: S102 - generated from constants in the caller
    return cuda.jit(device=True, forceinline=True)(namespace["group"])


def _preload_group(width: int, preload: Callable, along_row: bool) -> Callable:
    """A device function reading early what the epilogue will read for a thread's first group of the tile walk.

    ``preload`` is the chain's (:func:`dxgemm.epilogues._base.compose`); the group's
    elements are ``(r, c + j)`` along a row of the tile (D row-major, ``along_row``) or
    ``(r + j, c)`` down a column, written as :func:`_walk_group` writes them, so that the
    compiler finds the walk's reads equal to these and serves them from these values.
    Returns the sum of what the reads return (the caller keeps it alive).
    """
    if along_row:
        total = " + ".join(f"preload(row0 + r + 0, col0 + c + 0 + {j}, epi_args)" for j in range(width))
    else:
        total = " + ".join(f"preload(row0 + r + 0 + {j}, col0 + c + 0, epi_args)" for j in range(width))
    from numba import cuda

    namespace = {"preload": preload}
    exec(f"def group(row0, col0, r, c, epi_args):\n    return {total}\n", namespace)  # noqa: S102
    return cuda.jit(device=True, forceinline=True)(namespace["group"])


def _tile_position(tile_m: int, tile_n: int) -> Callable:
    """A device function mapping tile element ``e`` (in D's memory order) to its ``(r, c)``."""
    from numba import cuda

    def position(e, rows_fastest):
        if rows_fastest:
            return e % tile_m, e // tile_m
        return e // tile_n, e % tile_n

    return cuda.jit(device=True, forceinline=True)(position)


def _unrolled_store(frag_size: int, epilogue: Callable) -> Callable:
    """A device function storing a fragment element by element, with constant indices."""
    from numba import cuda, int64

    lines = ["def store(accumulator, results, row0, col0, m, n, d, d_rs, d_cs, epi_args):"]
    for i in range(frag_size):
        lines += [
            f"    r, c = accumulator.map_fragment_index({i})",
            "    row = row0 + int64(r)",
            "    col = col0 + int64(c)",
            "    if row < m and col < n:",
            f"        d[row * d_rs + col * d_cs] = epilogue(results[{i}], row, col, epi_args)",
        ]
    namespace = {"int64": int64, "epilogue": epilogue}
    exec("\n".join(lines), namespace)  # noqa: S102 - generated from constants above
    return cuda.jit(device=True, forceinline=True)(namespace["store"])


def _staging_slot(tile_n: int, rotation: int) -> Callable:
    """The staging area's layout: a device function giving the slot of tile element ``(r, c)``.

    Element ``(r, c)`` goes to ``r * tile_n + ((c + rotation * r) mod tile_n)``.  Rows are
    rotated so that the lanes of a warp writing the same column of different rows hit
    different banks (no padding, which would not fit: a 128x128 float64 tile fills the
    whole buffer).  A rotation that is a multiple of the 16-byte vector width keeps every
    aligned group of ``16 / itemsize`` elements of a row contiguous and aligned in shared
    memory, so the tile walk reads it with one 128-bit load; with ``rotation = 4`` a
    warp's float32 fragment store (8 rows x 4 column pairs) is at most 2-way bank
    conflicted, against up to 4-way with ``rotation = 1``.
    """
    from numba import cuda

    mask = tile_n - 1

    def slot(r, c):
        return r * tile_n + ((c + rotation * r) & mask)

    return cuda.jit(device=True, forceinline=True)(slot)


def _staging_store(frag_size: int, slot: Callable) -> Callable:
    """A device function writing a fragment into the tile-sized staging area, with constant indices."""
    from numba import cuda

    lines = ["def stage(accumulator, results, smem):"]
    for i in range(frag_size):
        lines += [f"    r, c = accumulator.map_fragment_index({i})",
                  f"    smem[slot(r, c)] = results[{i}]"]
    namespace: dict = {"slot": slot}
    exec("\n".join(lines), namespace)  # noqa: S102 - generated from constants above
    return cuda.jit(device=True, forceinline=True)(namespace["stage"])


TAIL_GROUP = 8
"""Fragment elements whose K tails :func:`_fragment_tail` accumulates side by side."""


def _fragment_tail(frag_size: int, tile_n: int) -> Callable:
    """A device function adding the K tail, staged in shared memory, to a fragment in registers.

    ``strips`` holds the block's tail of A (``tile_m x tail``, row ``r`` at ``r * tail``)
    followed, from ``b_at``, by its tail of B (``tail x tile_n``, row ``kk`` at
    ``b_at + kk * tile_n``).  Fragment element ``i`` (tile element ``(r, c)``) gains
    ``sum(A_tail[r, kk] * B_tail[kk, c])``.  Elements go :data:`TAIL_GROUP` at a time, one
    loop over ``kk`` per group with the group's sums side by side: independent
    multiply-adds to overlap the shared-memory latency, and few enough addresses held at
    once not to crowd the registers.  Every index into ``results`` is a constant, so the
    fragment stays in registers.
    """
    from numba import cuda, int32

    group = math.gcd(frag_size, TAIL_GROUP)
    lines = ["def add_tail(accumulator, results, strips, tail, b_at):",
             "    n = int32(tail)"]
    for first in range(0, frag_size, group):
        members = range(first, first + group)
        for i in members:
            lines += [f"    r{i}, c{i} = accumulator.map_fragment_index({i})",
                      f"    a{i} = int32(r{i}) * n",
                      f"    b{i} = int32(b_at) + int32(c{i})",
                      f"    v{i} = results[{i}]"]
        lines.append("    for kk in range(n):")
        lines += [f"        v{i} += strips[a{i} + kk] * strips[b{i} + kk * {tile_n}]" for i in members]
        lines += [f"    results[{i}] = v{i}" for i in members]
    namespace: dict = {"int32": int32}
    exec("\n".join(lines), namespace)  # noqa: S102 - generated from constants above
    return cuda.jit(device=True, forceinline=True)(namespace["add_tail"])


def _gemm_pyfunc(mm, config: PipelineConfig, dtype: np.dtype, frag_size: int, buffer_alignment: int,
                 epilogue: Callable, store: str = "loop", slice_bytes: int = 0, walk_groups: int = 1,
                 preload: Callable | None = None) -> Callable:
    """The kernel's Python function, specialised by closure on everything compile-time.

    ``slice_bytes`` > 0 builds the *split-K* variant (:mod:`dxgemm.runtime.splitk`): the grid's z
    dimension runs the K slices side by side in one launch.  Slice ``z`` takes its four
    device pipelines ``slice_bytes`` further into the storage (the init kernel filled
    them for its K range), writes its partial product into slice ``z`` of the stacked
    workspace ``d`` (``m`` rows of ``d_rs``, or ``n`` columns of ``d_cs``, per slice), and
    only the last slice adds the K tail.  ``walk_groups``: groups per iteration of a
    staged tile walk (:func:`.config.walk_unroll`).  ``preload``: the epilogue chain's early
    reads (``epilogue.preload``, :func:`dxgemm.epilogues._base.compose`), which a tile-walk
    kernel issues right after its main loop (below).

    Edges (found on the H100): the
    pipeline's loads are unmasked ``cp.async`` (LDGSTS) and its tile loop runs over
    ceil(K / tile_k) tiles, so it reads past K; values read past M or N only reach
    accumulator rows/columns that are never stored.  Hence:

    * the pipeline is given ``k_main`` (K rounded down to the tile) and the kernel adds
      the K tail ``sum(A[row, kk] * B[kk, col] for kk in k_main..k-1)`` to its fragment
      before the epilogue: the block copies its ``tile_m x tail`` and ``tail x tile_n``
      strips of ``a``/``b`` (run-time strides) into the finished pipeline's buffer, and
      each thread adds the products from there in registers (:func:`_fragment_tail`).
      Each tail element is read from global memory once per block, not once per stored
      element;
    * blocks in the last, partial block row / column take their tiles from one of three
      more device pipelines whose A (or B) is a tile-high (tile-wide) scratch copy of the
      edge strip, so no load leaves an allocation.  Block (i, j) of the grid uses
      pipeline ``p_main`` with tile (i, j), ``p_bottom`` with tile (0, j), ``p_right``
      with tile (i, 0), or ``p_corner`` with tile (0, 0);
    * stores are guarded by ``row < m and col < n`` and go through run-time strides, so
      D may be row- or column-major (or a view) without another compile;
    * blocks take their tiles in a grouped order (:data:`GROUP_M` block rows at a time,
      as in Triton's matmul tutorial): the blocks in flight then read a few block rows of
      A and a few block columns of B, which stay in L2, instead of all of A per wave.
    """
    from numba import cuda, int64

    from ..kernels._device import is_aligned16

    tile_m, tile_n = config.tile_m, config.tile_n
    value_type = np.dtype(dtype).type
    SPLIT = slice_bytes > 0
    pipeline_at = _pipeline_at() if SPLIT else None
    if store not in STORES:
        raise ValueError(f"store must be one of {STORES}, got {store!r}")
    UNROLLED = store == "unrolled"
    STAGED = store.startswith("staged")
    VECTOR = store in ("staged_vec", "staged_vec_tile")
    TILE_WALK = store in TILE_WALK_STORES
    STEP = 16 // np.dtype(dtype).itemsize if VECTOR else 1  # tile elements per thread and step
    slot = _staging_slot(tile_n, STEP)
    vector_group = _vector_group(STEP, slot, epilogue, value_type) if VECTOR else None
    tile_position = _tile_position(tile_m, tile_n)
    store_unrolled = _unrolled_store(frag_size, epilogue) if UNROLLED else None
    stage = _staging_store(frag_size, slot) if STAGED else None
    add_tail = _fragment_tail(frag_size, tile_n)
    ZERO = value_type(0)
    if (tile_m + tile_n) * (config.tile_k - 1) * np.dtype(dtype).itemsize > config.smem_bytes(np.dtype(dtype).itemsize):
        raise ValueError(f"the K tail's strips of a {tile_m}x{tile_n}x{config.tile_k} tile do not fit the pipeline buffer")
    threads = config.block_size
    tile_elements = tile_m * tile_n
    SPAN = threads * STEP  # tile elements the block covers per step of the full-tile walk
    if TILE_WALK and (SPAN % tile_m or SPAN % tile_n or tile_elements % SPAN):
        raise ValueError(f"the tile walk needs {threads} x {STEP} elements to cover whole rows and columns of "
                         f"the {tile_m}x{tile_n} tile")
    WALK_STEPS = tile_elements // SPAN if TILE_WALK else 0
    ROW_STEP = SPAN // tile_n if TILE_WALK else 0  # rows per step, D row-major
    COL_STEP = SPAN // tile_m if TILE_WALK else 0  # columns per step, D column-major
    WALK_UNROLL = math.gcd(walk_groups, WALK_STEPS) if TILE_WALK else 1  # groups per walk iteration
    walk_rows = _walk_group(STEP, slot, epilogue, True, WALK_UNROLL, step_rows=ROW_STEP) if TILE_WALK else None
    walk_columns = _walk_group(STEP, slot, epilogue, False, WALK_UNROLL, step_cols=COL_STEP) if TILE_WALK else None
    PRELOAD = TILE_WALK and preload is not None

    def preloaded_walk(along_row: bool) -> Callable:
        """The end of a tile-walk kernel whose epilogue reads something per tile (a column bias,
        D row-major): that read, then the staging and its barriers, then the walk.

        Asked for after the barriers, where the compiler put it, the read held up the walk's
        first arithmetic (an L2 latency, under the other block's stores) once per tile; asked
        for here, its latency passes behind the staging.  In one function with the walk (one
        per direction) it dominates the walk's own reads, invariant loads, which the compiler
        then serves from it.  Asked for before the main loop, it lived in a register through
        the loop: worse."""
        preload_group = _preload_group(STEP, preload, along_row)
        walk = walk_rows if along_row else walk_columns

        @cuda.jit(device=True, forceinline=True)
        def finish(smem, d, accumulator, results, active, r, c, row0, col0, d_rs, d_cs, epi_args):
            warm = preload_group(row0, col0, r, c, epi_args)
            cuda.syncthreads()
            if active:
                stage(accumulator, results, smem)
            cuda.syncthreads()
            for step in range(WALK_STEPS // WALK_UNROLL):
                walk(smem, d, r, c, row0, col0, d_rs, d_cs, epi_args)
                if along_row:
                    r += WALK_UNROLL * ROW_STEP
                else:
                    c += WALK_UNROLL * COL_STEP
            return warm

        return finish

    finish_along_rows = preloaded_walk(True) if PRELOAD else None
    finish_down_columns = preloaded_walk(False) if PRELOAD else None

    if STAGED and (tile_m & (tile_m - 1) or tile_n & (tile_n - 1)):
        raise ValueError(f"the staged store needs power-of-two tile sides, got {tile_m}x{tile_n}")
    if STAGED and tile_elements * np.dtype(dtype).itemsize > config.smem_bytes(np.dtype(dtype).itemsize):
        raise ValueError(f"the staged store needs the {tile_m}x{tile_n} tile to fit the pipeline buffer")

    def gemm(d, d_rs, d_cs, m, n, k, k_main, a, a_rs, a_cs, b, b_rs, b_cs, mb_main, nb_main, epi_args,
             p_main, p_bottom, p_right, p_corner):
        smem = cuda.shared.array(shape=(0,), dtype=value_type, alignment=buffer_alignment)
        z = int64(0)
        if SPLIT:
            z = int64(cuda.blockIdx.z)
            d = d[z * (m * d_rs if d_cs == 1 else n * d_cs):]
            if z != int64(cuda.gridDim.z) - 1:
                k_main = k  # the K tail belongs to the last slice
        # Grouped raster: consecutive blocks walk down GROUP_M block rows before moving
        # right, so the blocks resident at once share A and B tiles in L2
        grid_m = int64(cuda.gridDim.x)
        grid_n = int64(cuda.gridDim.y)
        linear = int64(cuda.blockIdx.y) * grid_m + int64(cuda.blockIdx.x)
        group = linear // (GROUP_M * grid_n)
        first = group * GROUP_M
        rows = min(grid_m - first, int64(GROUP_M))
        within = linear - group * (GROUP_M * grid_n)
        bm = first + within % rows
        bn = within // rows
        pipeline = p_main
        ti = bm
        tj = bn
        if bm >= mb_main:
            ti = int64(0)
            if bn >= nb_main:
                tj = int64(0)
                pipeline = p_corner
            else:
                pipeline = p_bottom
        elif bn >= nb_main:
            tj = int64(0)
            pipeline = p_right
        if SPLIT:
            pipeline = pipeline_at(pipeline, z * slice_bytes)
        tile_pipeline = pipeline.get_tile(smem, ti, tj)
        accumulator = mm.suggest_accumulator()
        tile_pipeline.execute(accumulator)
        row0 = bm * tile_m
        col0 = bn * tile_n
        active = accumulator.is_thread_active()
        results = accumulator.get_results()
        tail = k - k_main
        if tail > 0:
            # The K tail, k_main .. k-1 (fewer than tile_k): the block stages its tail of A
            # and of B in the finished pipeline's buffer, zero past m and n, and each
            # thread adds the products to its fragment in registers.
            cuda.syncthreads()  # every warp is past its last MMA: the buffer is free
            tid = int64(cuda.threadIdx.x)
            a_elements = tile_m * tail
            for e in range(tid, a_elements, threads):
                if a_cs == 1:  # consecutive threads read along A's contiguous dimension
                    r = e // tail
                    kk = e - r * tail
                else:
                    kk = e // tile_m
                    r = e - kk * tile_m
                value = ZERO
                if row0 + r < m:
                    value = a[(row0 + r) * a_rs + (k_main + kk) * a_cs]
                smem[r * tail + kk] = value
            for e in range(tid, tail * tile_n, threads):
                if b_rs == 1:
                    c = e // tail
                    kk = e - c * tail
                else:
                    kk = e // tile_n
                    c = e - kk * tile_n
                value = ZERO
                if col0 + c < n:
                    value = b[(k_main + kk) * b_rs + (col0 + c) * b_cs]
                smem[a_elements + kk * tile_n + c] = value
            cuda.syncthreads()
            if active:
                add_tail(accumulator, results, smem, tail, a_elements)
        warm = ZERO
        if STAGED and PRELOAD and row0 + tile_m <= m and col0 + tile_n <= n and (
                STEP == 1 or (is_aligned16(d, 0) and (d_cs if d_rs == 1 and d_cs != 1 else d_rs) % STEP == 0)):
            r, c = tile_position(int64(cuda.threadIdx.x) * STEP, d_rs == 1 and d_cs != 1)
            if d_rs == 1 and d_cs != 1:
                warm = finish_down_columns(smem, d, accumulator, results, active, r, c, row0, col0, d_rs, d_cs,
                                           epi_args)
            else:
                warm = finish_along_rows(smem, d, accumulator, results, active, r, c, row0, col0, d_rs, d_cs,
                                         epi_args)
        elif STAGED:
            # The main loop has consumed every stage it loaded (and the tail its strips):
            # once all warps are past, the buffer holds nothing anyone still needs.
            cuda.syncthreads()
            if active:
                stage(accumulator, results, smem)
            cuda.syncthreads()
            first = int64(cuda.threadIdx.x)
            rows_fastest = d_rs == 1 and d_cs != 1  # walk the tile in D's memory order
            if TILE_WALK and row0 + tile_m <= m and col0 + tile_n <= n and (
                    STEP == 1 or (is_aligned16(d, 0) and (d_cs if rows_fastest else d_rs) % STEP == 0)):
                r, c = tile_position(first * STEP, rows_fastest)
                if rows_fastest:
                    for step in range(WALK_STEPS // WALK_UNROLL):
                        walk_columns(smem, d, r, c, row0, col0, d_rs, d_cs, epi_args)
                        c += WALK_UNROLL * COL_STEP
                else:
                    for step in range(WALK_STEPS // WALK_UNROLL):
                        walk_rows(smem, d, r, c, row0, col0, d_rs, d_cs, epi_args)
                        r += WALK_UNROLL * ROW_STEP
            else:
                dr = int64(1) if rows_fastest else int64(0)  # the vector group's direction
                dc = int64(1) - dr
                for g in range(first, tile_elements // STEP, threads):
                    r, c = tile_position(g * STEP, rows_fastest)
                    row = row0 + r
                    col = col0 + c
                    if VECTOR:
                        vector_group(smem, d, r, c, row, col, dr, dc, m, n, d_rs, d_cs, epi_args)
                    elif row < m and col < n:
                        d[row * d_rs + col * d_cs] = epilogue(smem[slot(r, c)], row, col, epi_args)
        elif active:
            if UNROLLED:
                store_unrolled(accumulator, results, row0, col0, m, n, d, d_rs, d_cs, epi_args)
            else:
                for i in range(frag_size):
                    r, c = accumulator.map_fragment_index(i)
                    row = row0 + int64(r)
                    col = col0 + int64(c)
                    if row < m and col < n:
                        d[row * d_rs + col * d_cs] = epilogue(results[i], row, col, epi_args)
        if PRELOAD and k < 0:  # never (K >= 0): keeps the early reads, which the walk's then reuse
            d[0] = warm
        tile_pipeline._del()

    return gemm


@functools.lru_cache(maxsize=None)
def _pipeline_at():
    """A Numba intrinsic ``pipeline_at(pipeline, nbytes)``: the device pipeline whose storage
    lies ``nbytes`` after ``pipeline``'s (nvmath's DevicePipeline value is a struct holding
    just that storage pointer)."""
    from numba import types
    from numba.core import cgutils
    from numba.cuda.extending import intrinsic

    @intrinsic
    def pipeline_at(typingctx, pipeline, nbytes):
        if not isinstance(nbytes, types.Integer):
            return None
        sig = pipeline(pipeline, nbytes)

        def codegen(context, builder, signature, args):
            value, offset = args
            proxy = cgutils.create_struct_proxy(signature.args[0])(context, builder, value=value)
            proxy.ptr = builder.gep(proxy.ptr, [offset])
            return proxy._getvalue()

        return sig, codegen

    return pipeline_at


GROUP_M = 8
"""Block rows a group of consecutive blocks covers (the grouped raster order of the GEMM kernel)."""

GEMM_ARG_NAMES = ("d", "d_rs", "d_cs", "m", "n", "k", "k_main", "a", "a_rs", "a_cs", "b", "b_rs", "b_cs",
                  "mb_main", "nb_main", "epi_args", "p_main", "p_bottom", "p_right", "p_corner")
"""The GEMM kernel's parameters, in order (see :func:`_gemm_pyfunc`)."""


_INIT_SOURCE = """
// dxgemm: fill four cuBLASDx device pipelines' storage for run-time-shape A and B.
// The tensor struct is libcublasdx.h's device representation of a global tensor with two
// run-time extents and one run-time stride: {{ ptr, shape[2], stride[1] }}.
// Block i (one thread each) fills storage i: bit 0 picks the A edge strip, bit 1 the B
// edge strip (0 main, 1 bottom, 2 right, 3 corner).  One block per pipeline because a
// TMA pipeline's create stages its descriptors in the block's shared memory: four
// threads of one block overwrite each other's (measured: wrong edge tiles).
struct dxgemm_tensor {{ void* ptr; long long shape[2]; long long stride[1]; }};
struct dxgemm_pipeline {{ void* ptr; }};
extern "C" __device__ void {create}(dxgemm_pipeline, dxgemm_tensor, dxgemm_tensor);
extern "C" __global__ void {entry}(char* storage, long long storage_stride,
                                   void* a, long long a_rows, long long a_cols, long long lda,
                                   void* a_edge, long long a_edge_rows, long long lda_edge,
                                   void* b, long long b_rows, long long b_cols, long long ldb,
                                   void* b_edge, long long b_edge_cols, long long ldb_edge) {{
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= 4) return;
    const bool ea = i & 1u, eb = i & 2u;
    dxgemm_tensor ta = {{ ea ? a_edge : a, {{ ea ? a_edge_rows : a_rows, a_cols }}, {{ ea ? lda_edge : lda }} }};
    dxgemm_tensor tb = {{ eb ? b_edge : b, {{ b_rows, eb ? b_edge_cols : b_cols }}, {{ eb ? ldb_edge : ldb }} }};
    {create}(dxgemm_pipeline{{ storage + i * storage_stride }}, ta, tb);
}}
"""



INIT_PIPELINES = 4
"""Device pipelines the init kernel fills: main, bottom edge, right edge, corner (one block each)."""

INIT_PARAMS = ("i64", "ptr", "i64", "i64", "i64", "ptr", "i64", "i64", "ptr", "i64", "i64", "i64", "ptr", "i64", "i64")
"""Init kernel parameters after ``storage``: its stride; A (pointer, rows, cols, ld); the A
edge strip (pointer, rows, ld); B (pointer, rows, cols, ld); the B edge strip (pointer,
cols, ld)."""


def _lower(config: PipelineConfig, dtype: np.dtype, arrangement: tuple[str, str], epilogue: Callable | None,
           epi_args: tuple, cc: tuple[int, int], operands: str = "native", store: str = "loop",
           split_k: bool = False, preload: bool = False, walk: int | None = None) -> dict:
    """Descriptors, pipeline traits and Numba lowering: everything up to the LTO-IR objects.

    With :mod:`._lto` intercepting in ``defer`` mode no device-function NVRTC runs here;
    libmathdx's objects come back as placeholders.  ``operands``: see :func:`_operand_precision`.
    """
    from . import _lto

    with _operand_precision(operands, dtype), _lto.traits.deferring():
        return _lower_inner(config, dtype, arrangement, epilogue, epi_args, cc, store, split_k, preload, walk)


def _lower_inner(config: PipelineConfig, dtype: np.dtype, arrangement: tuple[str, str], epilogue: Callable | None,
                 epi_args: tuple, cc: tuple[int, int], store: str = "loop", split_k: bool = False,
                 preload: bool = False, walk: int | None = None) -> dict:
    from numba import cuda, typeof, types

    out: dict = {"times": {}}
    t = time.perf_counter()
    mm = _make_matmul(config, dtype, arrangement, cc)
    dp, pipeline_handle = _make_device_pipeline(mm, config.depth, arrangement, dtype)
    layout = nvmath_internals.pipeline_layout(dp)
    mm_handle = nvmath_internals.tensors_handle(mm)
    # get_results() copies the accumulator into a fragment of the suggested rmem C layout
    frag_size = int(mm.suggest_layout_rmem_c().cosize)
    out["times"]["pipeline_traits"] = time.perf_counter() - t

    if epilogue is None:
        @cuda.jit(device=True)
        def epilogue(value, row, col, args):
            return value

    from ._launch import storage_stride

    slice_bytes = (INIT_PIPELINES * storage_stride(layout.storage_bytes, layout.storage_alignment_bytes)
                   if split_k else 0)
    pyfunc = _gemm_pyfunc(mm, config, dtype, frag_size, layout.buffer_alignment_bytes, epilogue, store, slice_bytes,
                          walk_unroll(store, split_k) if walk is None else walk,
                          getattr(epilogue, "preload", None) if preload else None)
    arg_types = gemm_arg_types(dtype, typeof(epi_args), nvmath_internals.device_pipeline_type(dp))
    t = time.perf_counter()
    codes, _ = cuda.compile_all(
        pyfunc, types.void(*arg_types), device=False, abi="numba", output="ltoir", cc=cc,
        # staged: the accumulator and the staging addresses are live together (167 registers for
        # TF32 128x128/256 threads unbounded, one block per SM); bound them so that as many
        # blocks fit as the buffer allows, and one block's epilogue overlaps another's main loop
        launch_bounds=(config.block_size,
                       config.bounded_blocks(dtype.itemsize) if store.startswith("staged") else 1),
    )
    out["times"]["compile_all"] = time.perf_counter() - t
    t = time.perf_counter()
    create_code, create_symbol = nvmath_internals.pipeline_create_code(mm_handle, pipeline_handle, cc)
    out["create"] = (nvmath_internals.lto_bytes(create_code), create_symbol)
    out["times"]["init_create"] = time.perf_counter() - t
    out.update(dp=dp, layout=layout, frag_size=frag_size, arg_types=arg_types, slice_bytes=slice_bytes,
               # an object requested from two call sites comes back twice (the accumulator's
               # map_fragment_index, by the loop store and the K tail): link it once
               codes=list(dict.fromkeys(bytes(getattr(c, "data", c)) for c in codes)))
    return out


def gemm_arg_types(dtype: Any, epi_type: Any, pipeline_type: Any) -> list:
    """The GEMM kernel's Numba argument types, in :data:`GEMM_ARG_NAMES` order."""
    from numba import types

    vector = types.Array(types.float64 if np.dtype(dtype) == np.float64 else types.float32, 1, "C")
    i64 = types.int64
    return [vector, i64, i64, i64, i64, i64, i64, vector, i64, i64, vector, i64, i64, i64, i64, epi_type,
            pipeline_type, pipeline_type, pipeline_type, pipeline_type]
