"""Rung 3 — shared-memory tiling: a block stages 32x32 tiles of A and B on chip.

The idea: a block of 32x32 threads owns a 32x32 tile of D.  It walks K in steps of 32;
at each step every thread copies one element of A's and one of B's tile into shared
memory (coalesced along each operand's contiguous dimension), the block synchronises,
and each thread runs 32 multiply-adds out of shared memory.

Memory traffic saved over coalesced: every element loaded from global memory is used by
32 threads, so global loads drop from ``2k`` per output to ``2k / 32`` — 32x fewer.  What
limits it now is shared memory: each multiply-add still needs two shared loads.

What it reaches at 4096^3 is in ``docs/performance.md`` (the ladder table).
"""

from __future__ import annotations

from numba import cuda

from ._device import SMEM_ALIGN, U, make_offset, make_tile_loader
from ._spec import BuiltKernel, KernelSpec, Layout

TILE = 32


def build(spec: KernelSpec) -> BuiltKernel:
    dt = spec.dtype
    nthreads = TILE * TILE
    x_walks_cols = spec.layout_d == Layout.ROW
    # Shared tiles are stored so that a warp's reads in the inner loop are either one
    # broadcast address or 32 consecutive words (no bank conflicts) for either D layout.
    a_smem = Layout.ROW if x_walks_cols else Layout.COL
    b_smem = Layout.ROW if x_walks_cols else Layout.COL
    load_a = make_tile_loader(dt, spec.layout_a, TILE, TILE, a_smem, nthreads, False)
    load_b = make_tile_loader(dt, spec.layout_b, TILE, TILE, b_smem, nthreads, False)
    d_off = make_offset(spec.layout_d)
    epilogue = spec.epilogue_fn
    zero = dt.type(0)
    T = U(TILE)
    nb = dt.type
    tile_elems = TILE * TILE

    def smem_gemm(a, b, d, m, n, k, lda, ldb, ldd, flags, epi_args):
        a_tile = cuda.shared.array(tile_elems, nb, alignment=SMEM_ALIGN)
        b_tile = cuda.shared.array(tile_elems, nb, alignment=SMEM_ALIGN)
        tid = U(cuda.threadIdx.y) * T + U(cuda.threadIdx.x)
        if x_walks_cols:
            tr = U(cuda.threadIdx.y)
            tc = U(cuda.threadIdx.x)
        else:
            tr = U(cuda.threadIdx.x)
            tc = U(cuda.threadIdx.y)
        row0 = U(cuda.blockIdx.y) * T
        col0 = U(cuda.blockIdx.x) * T
        um, un, uk = U(m), U(n), U(k)
        acc = zero
        for k0 in range(U(0), uk, T):
            load_a(a, U(lda), row0, k0, um, uk, a_tile, tid, False)
            load_b(b, U(ldb), k0, col0, uk, un, b_tile, tid, False)
            cuda.syncthreads()
            for p in range(TILE):
                up = U(p)
                if x_walks_cols:
                    acc += a_tile[tr * T + up] * b_tile[up * T + tc]
                else:
                    acc += a_tile[up * T + tr] * b_tile[tc * T + up]
            cuda.syncthreads()
        row = row0 + tr
        col = col0 + tc
        if row < um and col < un:
            d[d_off(row, col, U(ldd))] = epilogue(acc, row, col, epi_args)

    return BuiltKernel(smem_gemm, (TILE, TILE), TILE, TILE)
