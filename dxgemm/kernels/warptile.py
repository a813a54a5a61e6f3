"""Rung 7 — warp tiling: a tile level between the block and the thread.

The idea: the block tile is split into warp tiles, and each warp's tile into a grid of
sub-tiles that its 32 threads sweep together (``WNITER`` across, ``WMITER`` down).  A
thread's accumulators are spread over those sub-tiles instead of one contiguous patch.
Three things follow: the values a warp reads from shared memory at one K step are a
small set that all its threads share (reads are broadcasts, free of bank conflicts);
the register footprint per thread is chosen independently of the block tile; and the
mapping mirrors the hardware hierarchy (block -> SM, warp -> scheduler, thread -> lane)
that tensor-core kernels use as well.

Memory traffic saved over vectorized: global traffic is the same per output; per K step
a warp reads ``WM + WN`` distinct shared values for ``WM * WN`` multiply-adds, and the
larger K step (16) halves the barriers per multiply-add.

Reached on the H100 (benchmarks/results/h100.json, 4096^3): 28.83 TFLOP/s float32
(0.554x cuBLAS), 13.09 TFLOP/s float64 (0.218x cuBLAS).
"""

from __future__ import annotations

from numba import cuda

from ._device import SMEM_ALIGN, U, make_offset, make_tile_loader
from ._spec import BuiltKernel, KernelSpec, Layout

WARP = 32

# Per dtype: threads, block tile (BM, BN, BK), warp tile (WM, WN), sub-tiles across a warp
# tile (WNITER) and thread tile (TM, TN).  Chosen by benchmarks/sweep_warptile.py on the
# H100 (benchmarks/results/h100_run1_sweep.log, 4096^3): for float32, 8 warps with 32x
# (8x8) accumulators each (104 registers, two blocks per SM) beat siboehm's 4-warp
# 64-accumulator layout (201 registers, 0.42x vs 0.55x cuBLAS); for float64, a 64x64
# block tile with 4x8 accumulators per thread (96 registers) beat every larger tile
# (0.215x vs <= 0.19x) — larger float64 tiles run out of registers and occupancy.
CONFIGS = {
    "float32": dict(threads=256, BM=128, BN=128, BK=16, WM=64, WN=32, WNITER=2, TM=8, TN=4),
    "float64": dict(threads=128, BM=64, BN=64, BK=16, WM=32, WN=32, WNITER=2, TM=4, TN=4),
}


def build(spec: KernelSpec, **overrides) -> BuiltKernel:
    cfg = dict(CONFIGS[spec.dtype.name], **overrides)
    threads, BM, BN, BK = cfg["threads"], cfg["BM"], cfg["BN"], cfg["BK"]
    WM, WN, WNITER, TM, TN = cfg["WM"], cfg["WN"], cfg["WNITER"], cfg["TM"], cfg["TN"]
    WMITER = (WM * WN) // (WARP * TM * TN * WNITER)
    if (BM // WM) * (BN // WN) * WARP != threads or WMITER < 1 or WMITER * WARP * TM * TN * WNITER != WM * WN:
        raise ValueError(f"inconsistent warptile configuration {cfg}")
    WSUBM, WSUBN = WM // WMITER, WN // WNITER
    lanes_across = WSUBN // TN

    dt = spec.dtype
    load_a = make_tile_loader(dt, spec.layout_a, BM, BK, Layout.COL, threads, True)
    load_b = make_tile_loader(dt, spec.layout_b, BK, BN, Layout.ROW, threads, True)
    d_off = make_offset(spec.layout_d)
    epilogue = spec.epilogue_fn
    nb = dt.type
    zero = nb(0)
    a_elems, b_elems = BM * BK, BK * BN
    M_REG, N_REG = WMITER * TM, WNITER * TN
    acc_elems = M_REG * N_REG
    uBM, uBN, uBK, uWM, uWN = U(BM), U(BN), U(BK), U(WM), U(WN)
    uWSUBM, uWSUBN, uTM, uTN = U(WSUBM), U(WSUBN), U(TM), U(TN)
    uWARP, u_lanes_across, warps_across = U(WARP), U(lanes_across), U(BN // WN)
    one, two = U(1), U(2)

    def warptile_gemm(a, b, d, m, n, k, lda, ldb, ldd, flags, epi_args):
        a_tile = cuda.shared.array(a_elems, nb, alignment=SMEM_ALIGN)  # K-major
        b_tile = cuda.shared.array(b_elems, nb, alignment=SMEM_ALIGN)
        acc = cuda.local.array(acc_elems, nb)
        reg_m = cuda.local.array(M_REG, nb)
        reg_n = cuda.local.array(N_REG, nb)
        for i in range(acc_elems):
            acc[i] = zero
        tid = U(cuda.threadIdx.x)
        warp = tid // uWARP
        lane = tid % uWARP
        w_row = (warp // warps_across) * uWM
        w_col = (warp % warps_across) * uWN
        l_row = (lane // u_lanes_across) * uTM
        l_col = (lane % u_lanes_across) * uTN
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
                a_base = U(p) * uBM + w_row + l_row
                b_base = U(p) * uBN + w_col + l_col
                for wm in range(WMITER):
                    for i in range(TM):
                        reg_m[wm * TM + i] = a_tile[a_base + U(wm) * uWSUBM + U(i)]
                for wn in range(WNITER):
                    for j in range(TN):
                        reg_n[wn * TN + j] = b_tile[b_base + U(wn) * uWSUBN + U(j)]
                for i in range(M_REG):
                    for j in range(N_REG):
                        acc[i * N_REG + j] += reg_m[i] * reg_n[j]
            cuda.syncthreads()
        for wm in range(WMITER):
            for i in range(TM):
                row = row0 + w_row + U(wm) * uWSUBM + l_row + U(i)
                for wn in range(WNITER):
                    for j in range(TN):
                        col = col0 + w_col + U(wn) * uWSUBN + l_col + U(j)
                        if row < um and col < un:
                            value = acc[(wm * TM + i) * N_REG + wn * TN + j]
                            d[d_off(row, col, U(ldd))] = epilogue(value, row, col, epi_args)

    return BuiltKernel(warptile_gemm, (threads,), BM, BN)
