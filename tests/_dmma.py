"""Run the float64 warptile kernel with a chosen configuration (FP64 mma shape, copy path, layouts)."""

from __future__ import annotations

import numpy as np
from numba import cuda, typeof

from dxgemm.epilogues._base import AlphaBeta, EpilogueContext
from dxgemm.kernels import CompiledKernel, KernelSpec, Layout, kernel_signature, vector_flags, warptile
from dxgemm.kernels._device import SIMULATOR

# One small tile per mma shape: two warps, each two mma blocks high and two wide, K tile
# two mma steps deep, so the K loop, the stage switch and every fragment value are used.
SMALL_CONFIGS = {
    shape: dict(kind="dmma", mma=shape, threads=64, BM=4 * shape[0], BN=16, BK=2 * shape[1],
                WM=2 * shape[0], WN=16, stages=2)
    for shape in ((8, 4), (16, 4), (16, 8), (16, 16))
}

# The cp.async path on a small tile, three stages: with K = 29 and BK = 8 the ring of
# stages wraps around and the last tile is partial; two mma rows and two K steps per tile,
# so A blocks stream in behind the mmas and each step hands its fragments to the next.
ASYNC_CONFIG = dict(kind="dmma", mma=(16, 4), copy="async", threads=64, BM=32, BN=32, BK=8, WM=32, WN=16,
                    stages=3)

# The interior fast loop (unchecked copies between the mmas) as the shipped large float64 tile
# runs it, scaled down: m16n8k16, four stages, two mma rows per warp, blocks grouped two tile
# rows at a time.  With K = 98 and BK = 16 an interior block runs three tiles through it, then
# the general loop.
INTERIOR_CONFIG = dict(kind="dmma", mma=(16, 16), copy="async", threads=64, BM=32, BN=32, BK=16, WM=32, WN=16,
                       stages=4, group_m=2)


# The interior tile over K slices: with K = 98 and three slices of 3, 3 and 1 K tiles (the
# last partial), interior blocks run the unchecked loop in the first two only.
SPLIT_CONFIG = dict(INTERIOR_CONFIG, split_k=True, group_m=0)


def warptile_dmma(a: np.ndarray, b: np.ndarray, cfg: dict, alpha: float = 1.0, layout_a: str = "row",
                  layout_b: str = "row", aligned: bool = True, slices: int = 1) -> np.ndarray:
    """``alpha * a @ b`` (host float64 arrays) through ``warptile.build(spec, **cfg)``.

    ``layout_a`` / ``layout_b``: "row" or "col", how the operand is stored on the device;
    ``aligned=False`` passes flags that forbid 16-byte accesses (the one-element path).
    ``slices > 1``: a split-K configuration over that many K slices; the slices' partial
    products (each poisoned first) are summed here.
    """
    m, k = a.shape
    n = b.shape[1]
    dtype = np.dtype(np.float64)
    la, lb = Layout(layout_a), Layout(layout_b)
    bound = AlphaBeta(alpha, 0.0).bind(EpilogueContext(m, n, dtype, adapt=None))
    spec = KernelSpec(dtype, la, lb, Layout.ROW, bound.key, bound.make())
    built = warptile.build(spec, **cfg)
    threads = int(np.prod(built.block))
    bounds = (threads, built.min_blocks) if built.min_blocks else threads
    options = {} if SIMULATOR else {"launch_bounds": bounds}  # as dxgemm.kernels compiles a rung
    kernel = cuda.jit(kernel_signature(dtype, typeof(bound.args)), **options)(built.pyfunc)
    flat_a = cuda.to_device(np.ascontiguousarray(a if la == Layout.ROW else a.T).ravel())
    flat_b = cuda.to_device(np.ascontiguousarray(b if lb == Layout.ROW else b.T).ravel())
    d = cuda.to_device(np.full(slices * m * n, np.nan))
    lda = k if la == Layout.ROW else m
    ldb = n if lb == Layout.ROW else k
    flags = vector_flags(0, lda, 0, ldb, 8) if aligned else 0  # fresh allocations are 256-byte aligned
    CompiledKernel("warptile", built, kernel).launch(0, flat_a, flat_b, d, m, n, k, lda, ldb, n, flags, bound.args,
                                                     slices=slices)
    cuda.synchronize()
    return d.copy_to_host().reshape(slices, m, n).sum(axis=0)
