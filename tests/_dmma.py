"""Run the float64 warptile kernel with a chosen configuration (FP64 mma shape, copy path, layouts)."""

from __future__ import annotations

import numpy as np
from numba import cuda, typeof

from dxgemm.epilogues._base import AlphaBeta, EpilogueContext
from dxgemm.kernels import KernelSpec, Layout, compile_rung, vector_flags

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


def plain_spec(dtype: np.dtype, m: int, n: int, alpha: float = 1.0, layout_a: Layout = Layout.ROW,
               layout_b: Layout = Layout.ROW) -> tuple[KernelSpec, object]:
    """The spec of a plain ``alpha * a @ b`` into row-major D (``m x n``), and its bound epilogue."""
    bound = AlphaBeta(alpha, 0.0).bind(EpilogueContext(m, n, np.dtype(dtype), adapt=None))
    return KernelSpec(np.dtype(dtype), layout_a, layout_b, Layout.ROW, bound.key, bound.make()), bound


# The interior tile over K slices: with K = 98 and three slices of 3, 3 and 1 K tiles (the
# last partial), interior blocks run the unchecked loop in the first two only.
SPLIT_CONFIG = dict(INTERIOR_CONFIG, split_k=True, group_m=0)


def warptile_dmma(a: np.ndarray, b: np.ndarray, cfg: dict, alpha: float = 1.0, layout_a: str = "row",
                  layout_b: str = "row", aligned: bool = True, slices: int = 1, line_align: int = 1) -> np.ndarray:
    """``alpha * a @ b`` (host float64 arrays) through ``warptile.build(spec, **cfg)``.

    ``layout_a`` / ``layout_b``: "row" or "col", how the operand is stored on the device;
    ``aligned=False`` passes flags that forbid 16-byte accesses (the one-element path).
    ``slices > 1``: a split-K configuration over that many K slices; the slices' partial
    products (each poisoned first) are summed here.  ``line_align``: each operand's
    lines padded with NaN to a multiple of that many elements.
    """
    m, k = a.shape
    n = b.shape[1]
    dtype = np.dtype(np.float64)
    la, lb = Layout(layout_a), Layout(layout_b)
    spec, bound = plain_spec(dtype, m, n, alpha, la, lb)
    compiled = compile_rung("warptile", spec, typeof(bound.args), **cfg)
    flat_a, lda = _padded(a if la == Layout.ROW else a.T, line_align)
    flat_b, ldb = _padded(b if lb == Layout.ROW else b.T, line_align)
    d = cuda.to_device(np.full(slices * m * n, np.nan))
    flags = vector_flags(0, lda, 0, ldb, 8) if aligned else 0  # fresh allocations are 256-byte aligned
    compiled.launch(0, flat_a, flat_b, d, m, n, k, lda, ldb, n, flags, bound.args, slices=slices)
    cuda.synchronize()
    return d.copy_to_host().reshape(slices, m, n).sum(axis=0)


def _padded(stored: np.ndarray, line_align: int) -> tuple[object, int]:
    """``stored`` (its lines along the last axis) on the device, each line padded with NaN to
    a multiple of ``line_align`` elements, and the leading dimension."""
    lines, extent = stored.shape
    ld = -(-extent // line_align) * line_align
    full = np.full((lines, ld), np.nan)
    full[:, :extent] = stored
    return cuda.to_device(full.ravel()), ld
