"""Rung 4 — 1-D block tiling: each thread computes a column of 8 outputs.

The idea: a block of 512 threads owns a 64x64 tile of D and walks K in steps of 8.  Each
thread keeps 8 accumulators in registers — 8 consecutive rows of one column — and, for
every step of the inner loop, loads one value of B from shared memory once and reuses it
for all 8 of its rows.

Memory traffic saved over smem: the shared-memory tiles are the same idea, but each
multiply-add now needs ``1 + 1/8`` shared loads instead of 2 (the B value is kept in a
register), and the 64x64 tile halves global loads per output again (``2k/64``).  The
kernel moves from being shared-memory bound toward being bound by instruction issue.

What it reaches at 4096^3 is in ``docs/performance.md`` (the ladder table).
"""

from __future__ import annotations

from numba import cuda

from ._device import SMEM_ALIGN, U, make_offset, make_tile_loader
from ._spec import BuiltKernel, KernelSpec, Layout

BM, BN, BK, TM = 64, 64, 8, 8
THREADS = BM * BN // TM


def build(spec: KernelSpec) -> BuiltKernel:
    dt = spec.dtype
    load_a = make_tile_loader(dt, spec.layout_a, BM, BK, Layout.ROW, THREADS, False)
    load_b = make_tile_loader(dt, spec.layout_b, BK, BN, Layout.ROW, THREADS, False)
    d_off = make_offset(spec.layout_d)
    epilogue = spec.epilogue_fn
    nb = dt.type
    zero = nb(0)
    a_elems, b_elems = BM * BK, BK * BN
    uBN, uBK, uTM, uBM = U(BN), U(BK), U(TM), U(BM)

    def blocktile1d_gemm(a, b, d, m, n, k, lda, ldb, ldd, flags, epi_args):
        a_tile = cuda.shared.array(a_elems, nb, alignment=SMEM_ALIGN)
        b_tile = cuda.shared.array(b_elems, nb, alignment=SMEM_ALIGN)
        acc = cuda.local.array(TM, nb)
        for i in range(TM):
            acc[i] = zero
        tid = U(cuda.threadIdx.x)
        t_col = tid % uBN
        t_row = tid // uBN
        row0 = U(cuda.blockIdx.y) * uBM
        col0 = U(cuda.blockIdx.x) * uBN
        um, un, uk = U(m), U(n), U(k)
        for k0 in range(U(0), uk, uBK):
            load_a(a, U(lda), row0, k0, um, uk, a_tile, tid, False)
            load_b(b, U(ldb), k0, col0, uk, un, b_tile, tid, False)
            cuda.syncthreads()
            for p in range(BK):
                b_val = b_tile[U(p) * uBN + t_col]
                for i in range(TM):
                    acc[i] += a_tile[(t_row * uTM + U(i)) * uBK + U(p)] * b_val
            cuda.syncthreads()
        col = col0 + t_col
        if col < un:
            for i in range(TM):
                row = row0 + t_row * uTM + U(i)
                if row < um:
                    d[d_off(row, col, U(ldd))] = epilogue(acc[i], row, col, epi_args)

    return BuiltKernel(blocktile1d_gemm, (THREADS,), BM, BN)
