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

The tile ``"batched"`` is for a batch of single rows (``dxgemm.policy.choose_batched_tile``),
where the batch, not K, supplies the parallelism: with B row-major a warp covers 32 adjacent
outputs, an output gets 8 (float64) or 16 (float32) lanes and each thread eight loads in
flight (:data:`BATCHED_TILES`).  The single-call tile's 64 lanes and 1024-thread blocks leave
one block an SM, idle while a block drains and the next starts; this one keeps several.
"""

from __future__ import annotations

from numba import cuda

from ._device import U, make_offset
from ._spec import BuiltKernel, KernelSpec, Layout


BATCHED_TILES = {"float64": (32, 8, 8), "float32": (32, 16, 8)}
"""The ``"batched"`` tile where B's K is not contiguous: (outputs a block, lanes an output, loads in flight
a thread), per dtype.  A batch brings its own parallelism, so a block can give each output fewer lanes
than a single call's (a short partial sum, a block of 256-512 threads, several blocks an SM) and a warp
32 adjacent outputs (one 128- or 256-byte line per load)."""


def build(spec: KernelSpec) -> BuiltKernel:
    a_off = make_offset(spec.layout_a)
    b_off = make_offset(spec.layout_b)
    d_off = make_offset(spec.layout_d)
    epilogue = spec.epilogue_fn
    nb = spec.dtype.type
    zero = nb(0)
    by_rows = spec.tile in ("rows", "rows_deep")  # one output column: a group of lanes per output row
    # the streamed operand's K is contiguous: lanes walk K
    k_fast = spec.layout_a == Layout.ROW if by_rows else spec.layout_b == Layout.COL
    # K contiguous: a warp is 32 lanes of one output.  Otherwise a warp is 16 outputs x 2
    # lanes (two 64/128-byte pieces of a line), so 4096 outputs make 256 blocks, two per SM.
    cols, lanes = (8, 32) if k_fast else (16, 64)
    unroll = 4
    if spec.tile == "rows_deep" and k_fast:  # few rows, long K: four warps a row keep more loads in flight
        cols, lanes = 2, 128
    if spec.tile == "batched" and not k_fast:
        cols, lanes, unroll = BATCHED_TILES[spec.dtype.name]


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
