"""Rung 2 — coalesced: the naive kernel with the warp laid along memory.

The idea: the same one-thread-per-output dot product, but ``threadIdx.x`` now walks the
output's *contiguous* dimension (columns of a row-major D, rows of a column-major one).
The 32 threads of a warp then read one element of A that they all share (a broadcast),
32 consecutive elements of B (one 128-byte line for float32) and write 32 consecutive
elements of D.

Memory traffic saved over naive: the operand loads per output are still ``2k``, but each
warp-wide access now uses whole cache lines instead of one element per 32-byte sector —
up to 8x fewer bytes through the memory system for float32 (4x for float64).

What it reaches at 4096^3 is in ``docs/performance.md`` (the ladder table).
"""

from __future__ import annotations

from ._device import U, make_element_index, make_offset
from ._spec import BuiltKernel, KernelSpec, Layout

BLOCK_FAST = 32  # threads along the contiguous dimension: one warp
BLOCK_SLOW = 8


def build(spec: KernelSpec) -> BuiltKernel:
    a_off = make_offset(spec.layout_a)
    b_off = make_offset(spec.layout_b)
    d_off = make_offset(spec.layout_d)
    epilogue = spec.epilogue_fn
    zero = spec.dtype.type(0)
    x_walks_cols = spec.layout_d == Layout.ROW
    tile_m = BLOCK_SLOW if x_walks_cols else BLOCK_FAST
    tile_n = BLOCK_FAST if x_walks_cols else BLOCK_SLOW

    element_index = make_element_index(spec.layout_d, tile_m, tile_n)

    def coalesced_gemm(a, b, d, m, n, k, lda, ldb, ldd, flags, epi_args):
        row, col = element_index()
        if row >= U(m) or col >= U(n):
            return
        acc = zero
        for p in range(U(k)):
            acc += a[a_off(row, p, U(lda))] * b[b_off(p, col, U(ldb))]
        d[d_off(row, col, U(ldd))] = epilogue(acc, row, col, epi_args)

    return BuiltKernel(coalesced_gemm, (BLOCK_FAST, BLOCK_SLOW), tile_m, tile_n)
