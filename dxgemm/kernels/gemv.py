"""Single-row GEMM (``m = 1``, a vector times a matrix): one pass over B, K split across threads.

The idea: with one row of output there is no reuse to tile for — every element of B is
used exactly once — so the kernel's only job is to stream B through the SMs at full
bandwidth.  A tiled GEMM kernel does the opposite: a 128-row tile computes one useful row,
so it runs several times slower than cuBLAS at this shape.

Each output element gets a group of threads ("lanes") that split K between them (lane
``l`` of ``L`` sums ``k = l, l + L, ...``, four loads in flight, which
already keep the memory system busy), then one of them adds the ``L`` partial sums from shared memory and applies the
epilogue.  The 32 threads of a warp are laid
along B's contiguous dimension, so every warp-wide load is one or two full cache lines:

* B row-major (a row of B contiguous): a warp covers 16 consecutive *columns* at two k;
  a block of 16 x 64 threads covers 16 columns with 64 lanes each (32 columns per block
  would leave 4096 columns one block per SM, too few to stream B at full bandwidth);
* B column-major (a column of B contiguous): a warp is the 32 lanes of one column,
  reading 32 consecutive *k*; a block of 32 x 8 threads covers 8 columns.

A is read by every column's threads (a broadcast from L1).  Memory traffic: B once,
``k n`` elements, which is also cuBLAS's floor for this shape.  The grid's second
dimension walks output rows, so the kernel is correct for any ``m`` — it is only *used*
for ``m = 1`` (``dxgemm.policy``), where it wins; its figures against cuBLAS are in
``docs/performance.md``.

The tile ``"rows"`` is the same kernel for one output *column* (``n = 1``, a matrix times
a vector): the roles of A and B swap, each output row gets the group of lanes, and the
warps lie along A's contiguous dimension, so A streams once (A row-major: a warp is 32
lanes of one row; column-major: 16 rows at two k).  The grid's first dimension walks
output columns, its second blocks of rows.  ``"rows_deep"`` gives each row of a row-major A
four warps (128 lanes), for long K on few rows, where eight rows a block would leave too
few loads in flight to stream A at full bandwidth.

The tiles ``"batched"`` and ``"batched_wide"`` are for a batch of single rows
(``dxgemm.policy.choose_batched_tile``), where the batch, not K, supplies the parallelism.  With B
row-major each thread owns 16 bytes of adjacent outputs (4 float32, 2 float64) and reads them with
one vector load a k (:func:`build_vector`), so a warp's load is 512 bytes and a thread's loads in
flight carry four or two times the bytes of scalar ones for the same registers spent on addresses;
an output gets 8-32 lanes (:data:`TILE_CONFIGS`).  The single-call tile's 64 lanes and 1024-thread
blocks leave one block an SM, idle while a block drains and the next starts; these keep several.
"""

from __future__ import annotations

from numba import cuda

from . import FLAG_VEC_B
from ._device import VEC_BYTES, U, load_vec, make_offset
from ._spec import BuiltKernel, KernelSpec, Layout


TILE_CONFIGS = {"float64": {"batched": (64, 8, 8), "batched_wide": (64, 16, 4)},
                "float32": {"batched": (128, 16, 4), "batched_wide": (128, 32, 4)}}
"""The batched tiles where B's K is not contiguous: (outputs a block, lanes an output, loads in flight
a thread), per dtype; the kernel cache's key holds them.  A batch brings its own parallelism, so a
block gives each output fewer lanes than a single call's (a short partial sum, several blocks an SM);
``"batched_wide"`` gives it twice the lanes, for a batch too short to fill the GPU with
``"batched"``'s blocks (``benchmarks/results/h200_gemv_vector_tiles.log``)."""


def build(spec: KernelSpec, *, shape: tuple[int, int, int] | None = None) -> BuiltKernel:
    """``spec``'s kernel; ``shape`` = (outputs a block, lanes an output, loads in flight a thread)
    replaces the tile's (benchmarks try variants)."""
    a_off, b_off, d_off = (make_offset(layout) for layout in (spec.layout_a, spec.layout_b, spec.layout_d))
    epilogue = spec.epilogue_fn
    nb = spec.dtype.type
    zero = nb(0)
    by_rows = spec.tile in ("rows", "rows_deep")  # one output column: a group of lanes per output row
    # the streamed operand's K is contiguous: lanes walk K
    k_fast = spec.layout_a == Layout.ROW if by_rows else spec.layout_b == Layout.COL
    # K contiguous: a warp is 32 lanes of one output.  Otherwise a warp is 16 outputs x 2
    # lanes (two 64/128-byte pieces of a line), so 4096 outputs make 256 blocks, two per SM.
    cols, lanes, unroll = (8, 32, 4) if k_fast else (16, 64, 4)
    if spec.tile == "rows_deep" and k_fast:  # few rows, long K: four warps a row keep more loads in flight
        cols, lanes = 2, 128
    if spec.tile.startswith("batched") and not k_fast:
        cols, lanes, unroll = TILE_CONFIGS[spec.dtype.name][spec.tile]
    if shape is not None:
        cols, lanes, unroll = shape
    vector = cols > 32
    if (vector and (k_fast or by_rows or cols != 32 * VEC_BYTES // spec.dtype.itemsize or unroll not in (1, 2, 4, 8, 16))
            or not vector and unroll not in (4, 8)):
        raise ValueError(f"gemv: a block holds at most 32 outputs a thread 4 or 8 loads, or 32 vectors of 16 bytes "
                         f"along B's rows a thread 1, 2, 4, 8 or 16 loads; got {(cols, lanes, unroll)}")
    if vector:
        return build_vector(spec, lanes, unroll)

    def gemv(a, b, d, m, n, k, lda, ldb, ldd, flags, epi_args):
        partial = cuda.shared.array((lanes, 33), nb)
        if k_fast:
            lane = U(cuda.threadIdx.x)
            c = U(cuda.threadIdx.y)
        else:
            c = U(cuda.threadIdx.x)
            lane = U(cuda.threadIdx.y)
        if by_rows:  # c: this group's output row in the block's ``cols`` rows
            row = U(cuda.blockIdx.y) * U(cols) + c
            col = U(cuda.blockIdx.x)
        else:
            row = U(cuda.blockIdx.y)
            col = U(cuda.blockIdx.x) * U(cols) + c
        live = row < U(m) if by_rows else col < U(n)
        kk = U(k)
        acc0 = zero
        acc1 = zero
        acc2 = zero
        acc3 = zero
        acc4 = zero
        acc5 = zero
        acc6 = zero
        acc7 = zero
        if live:
            i = lane
            if unroll == 8:
                while i + U(7 * lanes) < kk:  # eight independent loads in flight per thread
                    acc0 += a[a_off(row, i, U(lda))] * b[b_off(i, col, U(ldb))]
                    acc1 += a[a_off(row, i + U(lanes), U(lda))] * b[b_off(i + U(lanes), col, U(ldb))]
                    acc2 += a[a_off(row, i + U(2 * lanes), U(lda))] * b[b_off(i + U(2 * lanes), col, U(ldb))]
                    acc3 += a[a_off(row, i + U(3 * lanes), U(lda))] * b[b_off(i + U(3 * lanes), col, U(ldb))]
                    acc4 += a[a_off(row, i + U(4 * lanes), U(lda))] * b[b_off(i + U(4 * lanes), col, U(ldb))]
                    acc5 += a[a_off(row, i + U(5 * lanes), U(lda))] * b[b_off(i + U(5 * lanes), col, U(ldb))]
                    acc6 += a[a_off(row, i + U(6 * lanes), U(lda))] * b[b_off(i + U(6 * lanes), col, U(ldb))]
                    acc7 += a[a_off(row, i + U(7 * lanes), U(lda))] * b[b_off(i + U(7 * lanes), col, U(ldb))]
                    i += U(8 * lanes)
            while i + U(3 * lanes) < kk:  # four independent loads in flight per thread
                acc0 += a[a_off(row, i, U(lda))] * b[b_off(i, col, U(ldb))]
                acc1 += a[a_off(row, i + U(lanes), U(lda))] * b[b_off(i + U(lanes), col, U(ldb))]
                acc2 += a[a_off(row, i + U(2 * lanes), U(lda))] * b[b_off(i + U(2 * lanes), col, U(ldb))]
                acc3 += a[a_off(row, i + U(3 * lanes), U(lda))] * b[b_off(i + U(3 * lanes), col, U(ldb))]
                i += U(4 * lanes)
            while i < kk:
                acc0 += a[a_off(row, i, U(lda))] * b[b_off(i, col, U(ldb))]
                i += U(lanes)
        partial[lane, c] = ((acc0 + acc1) + (acc2 + acc3)) + ((acc4 + acc5) + (acc6 + acc7))
        cuda.syncthreads()
        if lane == U(0) and live:
            total = zero
            for j in range(lanes):
                total += partial[j, c]
            d[d_off(row, col, U(ldd))] = epilogue(total, row, col, epi_args)

    block = (lanes, cols) if k_fast else (cols, lanes)
    if by_rows:  # grid: (n, ceil(m / cols))
        return BuiltKernel(gemv, block=block, tile_m=cols, tile_n=1)
    return BuiltKernel(gemv, block=block, tile_m=1, tile_n=cols)


def build_vector(spec: KernelSpec, lanes: int, unroll: int) -> BuiltKernel:
    """The batched tile over B row-major with 16-byte loads: a block of ``32 x lanes`` threads
    covers ``32 w`` adjacent outputs (``w = 16 / itemsize``), thread ``(c, lane)`` the ``w``
    outputs from ``32 w blockIdx.x + w c``, summing ``k = lane, lane + lanes, ...``.

    Each k step reads one A element (a broadcast) and one vector of B, so ``unroll`` loads in
    flight move ``16 unroll`` bytes of B a thread.  Where B is not 16-byte aligned (the flags)
    or the vector crosses column ``n``, the thread reads the same outputs one element at a time.
    The partial sums meet in shared memory; warp ``j < w`` then finishes the block's outputs
    ``32 j .. 32 j + 31``, so the final reads and the store are a warp's consecutive columns."""
    a_off, b_off, d_off = (make_offset(layout) for layout in (spec.layout_a, spec.layout_b, spec.layout_d))
    epilogue, nb = spec.epilogue_fn, spec.dtype.type
    zero = nb(0)
    width = VEC_BYTES // spec.dtype.itemsize
    cols = 32 * width
    pitch = cols + 1  # a partial sum's row in shared memory, padded against bank conflicts
    if lanes < width:
        raise ValueError(f"gemv: the vector tile needs at least {width} lanes an output, got {lanes}")
    sums = unroll * width
    span = U((unroll - 1) * lanes)
    step = U(unroll * lanes)
    vec_flag = U(FLAG_VEC_B)

    def gemv_vector(a, b, d, m, n, k, lda, ldb, ldd, flags, epi_args):
        partial = cuda.shared.array((lanes, pitch), nb)
        acc = cuda.local.array(sums, nb)  # acc[u * width + v]: load u's sum for output v
        for u in range(sums):
            acc[u] = zero
        c = U(cuda.threadIdx.x)
        lane = U(cuda.threadIdx.y)
        row = U(cuda.blockIdx.y)
        col0 = U(cuda.blockIdx.x) * U(cols)
        col = col0 + c * U(width)  # this thread's first output
        un = U(n)
        kk = U(k)
        if row < U(m) and col < un:
            i = lane
            if (U(flags) & vec_flag) != U(0) and col + U(width) <= un:
                while i + span < kk:
                    for u in range(unroll):
                        j = i + U(u * lanes)
                        x = a[a_off(row, j, U(lda))]
                        y = load_vec(b, b_off(j, col, U(ldb)))
                        for v in range(width):
                            acc[u * width + v] += x * y[v]
                    i += step
                while i < kk:
                    x = a[a_off(row, i, U(lda))]
                    y = load_vec(b, b_off(i, col, U(ldb)))
                    for v in range(width):
                        acc[v] += x * y[v]
                    i += U(lanes)
            else:  # unaligned B or the last outputs of a row: element by element
                while i < kk:
                    x = a[a_off(row, i, U(lda))]
                    for v in range(width):
                        if col + U(v) < un:
                            acc[v] += x * b[b_off(i, col + U(v), U(ldb))]
                    i += U(lanes)
        # a pairwise sum over the loads, per output; constant indices keep acc in registers
        if unroll >= 16:
            for u in range(8 * width):
                acc[u] += acc[u + 8 * width]
        if unroll >= 8:
            for u in range(4 * width):
                acc[u] += acc[u + 4 * width]
        if unroll >= 4:
            for u in range(2 * width):
                acc[u] += acc[u + 2 * width]
        if unroll >= 2:
            for u in range(width):
                acc[u] += acc[u + width]
        for v in range(width):
            partial[lane, c * U(width) + U(v)] = acc[v]
        cuda.syncthreads()
        if lane < U(width):
            out = lane * U(32) + c  # warp ``lane`` finishes outputs 32 lane .. 32 lane + 31
            col_out = col0 + out
            if row < U(m) and col_out < un:
                total = zero
                for j in range(lanes):
                    total += partial[j, out]
                d[d_off(row, col_out, U(ldd))] = epilogue(total, row, col_out, epi_args)

    return BuiltKernel(gemv_vector, block=(32, lanes), tile_m=1, tile_n=cols)
