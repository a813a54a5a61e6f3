"""Rung 5 — 2-D block tiling: each thread computes an 8x8 patch as outer products.

The idea: a block of 256 threads owns a 128x128 tile of D; each thread owns an 8x8
patch of it in registers.  At every step of K it loads 8 values of A (a column of its
patch's rows) and 8 values of B (a row of its patch's columns) into registers and
performs their 8x8 outer product: 64 multiply-adds for 16 shared-memory loads.

Memory traffic saved over blocktile1d: shared loads per multiply-add fall from
``1 + 1/8`` to ``1/4``, and the 128x128 block tile halves global loads per output again
(``2k/128``).  Arithmetic intensity per thread now allows the FMA units, not the
load/store units, to set the pace.

What it reaches at 4096^3 is in ``docs/performance.md`` (the ladder table).

Why float64 does not gain here: the 8x8 float64 thread tile needs 172 registers per
thread (``python tools/resources.py``: no spills, no local memory), so only one
256-thread block — 8 warps — fits on an SM, too few to hide DFMA and shared-load
latency; the float64 tile of :mod:`~dxgemm.kernels.warptile` is sized for that.
"""

from __future__ import annotations

from numba import cuda

from ._device import SMEM_ALIGN, U, make_offset, make_tile_loader
from ._spec import BuiltKernel, KernelSpec, Layout

BM, BN, BK, TM, TN = 128, 128, 8, 8, 8
THREADS = (BM // TM) * (BN // TN)


def build(spec: KernelSpec) -> BuiltKernel:
    dt = spec.dtype
    load_a = make_tile_loader(dt, spec.layout_a, BM, BK, Layout.ROW, THREADS, False)
    load_b = make_tile_loader(dt, spec.layout_b, BK, BN, Layout.ROW, THREADS, False)
    d_off = make_offset(spec.layout_d)
    epilogue = spec.epilogue_fn
    nb = dt.type
    zero = nb(0)
    a_elems, b_elems, acc_elems = BM * BK, BK * BN, TM * TN
    uBM, uBN, uBK, uTM, uTN = U(BM), U(BN), U(BK), U(TM), U(TN)
    threads_per_row = U(BN // TN)

    def blocktile2d_gemm(a, b, d, m, n, k, lda, ldb, ldd, flags, epi_args):
        a_tile = cuda.shared.array(a_elems, nb, alignment=SMEM_ALIGN)
        b_tile = cuda.shared.array(b_elems, nb, alignment=SMEM_ALIGN)
        acc = cuda.local.array(acc_elems, nb)
        reg_m = cuda.local.array(TM, nb)
        reg_n = cuda.local.array(TN, nb)
        for i in range(acc_elems):
            acc[i] = zero
        tid = U(cuda.threadIdx.x)
        t_col = tid % threads_per_row
        t_row = tid // threads_per_row
        row0 = U(cuda.blockIdx.y) * uBM
        col0 = U(cuda.blockIdx.x) * uBN
        um, un, uk = U(m), U(n), U(k)
        for k0 in range(U(0), uk, uBK):
            load_a(a, U(lda), row0, k0, um, uk, a_tile, tid, False)
            load_b(b, U(ldb), k0, col0, uk, un, b_tile, tid, False)
            cuda.syncthreads()
            for p in range(BK):
                for i in range(TM):
                    reg_m[i] = a_tile[(t_row * uTM + U(i)) * uBK + U(p)]
                for j in range(TN):
                    reg_n[j] = b_tile[U(p) * uBN + t_col * uTN + U(j)]
                for i in range(TM):
                    for j in range(TN):
                        acc[i * TN + j] += reg_m[i] * reg_n[j]
            cuda.syncthreads()
        for i in range(TM):
            row = row0 + t_row * uTM + U(i)
            for j in range(TN):
                col = col0 + t_col * uTN + U(j)
                if row < um and col < un:
                    d[d_off(row, col, U(ldd))] = epilogue(acc[i * TN + j], row, col, epi_args)

    return BuiltKernel(blocktile2d_gemm, (THREADS,), BM, BN)
