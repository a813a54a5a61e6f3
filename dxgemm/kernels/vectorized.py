"""Rung 6 — vectorised memory access: 128-bit global loads and a transposed A tile.

The idea: the 2-D block tiling of rung 5, with every memory access made as wide as the
hardware allows.  Each thread copies its share of A and B from global memory 16 bytes at
a time (one ``LDG.E.128`` instead of four ``LDG.E``; Numba cannot express this, so
:func:`~dxgemm.kernels._device.load_vec` emits the vector load as LLVM IR), and A's tile is
stored *transposed* in shared memory (K-major), so a thread's 8 A values for one K step
are contiguous and come back in two ``LDS.128`` instead of eight scalar ``LDS``.

Memory traffic saved over blocktile2d: the same bytes move, in a quarter of the load
instructions for float32 (half for float64), and the shared reads of A shrink from 8 to 2
instructions per step — fewer issue slots spent on anything but FMAs.  Edge tiles and
operands whose base or leading dimension is not 16-byte aligned take the guarded scalar
path of the same loader.

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
    load_a = make_tile_loader(dt, spec.layout_a, BM, BK, Layout.COL, THREADS, True)
    load_b = make_tile_loader(dt, spec.layout_b, BK, BN, Layout.ROW, THREADS, True)
    d_off = make_offset(spec.layout_d)
    epilogue = spec.epilogue_fn
    nb = dt.type
    zero = nb(0)
    a_elems, b_elems, acc_elems = BM * BK, BK * BN, TM * TN
    uBM, uBN, uBK, uTM, uTN = U(BM), U(BN), U(BK), U(TM), U(TN)
    threads_per_row = U(BN // TN)
    one, two = U(1), U(2)

    def vectorized_gemm(a, b, d, m, n, k, lda, ldb, ldd, flags, epi_args):
        a_tile = cuda.shared.array(a_elems, nb, alignment=SMEM_ALIGN)  # K-major: a_tile[p * BM + i]
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
        vec_a = (U(flags) & one) != U(0)
        vec_b = (U(flags) & two) != U(0)
        for k0 in range(U(0), uk, uBK):
            load_a(a, U(lda), row0, k0, um, uk, a_tile, tid, vec_a)
            load_b(b, U(ldb), k0, col0, uk, un, b_tile, tid, vec_b)
            cuda.syncthreads()
            for p in range(BK):
                for i in range(TM):
                    reg_m[i] = a_tile[U(p) * uBM + t_row * uTM + U(i)]
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

    return BuiltKernel(vectorized_gemm, (THREADS,), BM, BN)
