"""Run the float64 warptile kernel with a chosen FP64 mma shape (row-major operands)."""

from __future__ import annotations

import numpy as np
from numba import cuda, typeof

from dxgemm.epilogues._base import AlphaBeta, EpilogueContext
from dxgemm.kernels._device import SIMULATOR
from dxgemm.kernels import CompiledKernel, KernelSpec, Layout, kernel_signature, vector_flags, warptile

# One small tile per mma shape: two warps, each two mma blocks high and two wide, K tile
# two mma steps deep, so the K loop, the stage switch and every fragment value are used.
SMALL_CONFIGS = {
    shape: dict(kind="dmma", mma=shape, threads=64, BM=4 * shape[0], BN=16, BK=2 * shape[1],
                WM=2 * shape[0], WN=16, stages=2)
    for shape in ((8, 4), (16, 4), (16, 8), (16, 16))
}


def warptile_dmma(a, b, cfg: dict, alpha: float = 1.0):
    """``alpha * a @ b`` through ``warptile.build(spec, **cfg)``; ``a``/``b`` C-contiguous device arrays."""
    m, k = a.shape
    n = b.shape[1]
    dtype = np.dtype(np.float64)
    bound = AlphaBeta(alpha, 0.0).bind(EpilogueContext(m, n, dtype, adapt=None))
    spec = KernelSpec(dtype, Layout.ROW, Layout.ROW, Layout.ROW, bound.key, bound.make())
    built = warptile.build(spec, **cfg)
    threads = int(np.prod(built.block))
    bounds = (threads, built.min_blocks) if built.min_blocks else threads
    options = {} if SIMULATOR else {"launch_bounds": bounds}  # as dxgemm.kernels compiles a rung
    kernel = cuda.jit(kernel_signature(dtype, typeof(bound.args)), **options)(built.pyfunc)
    d = cuda.to_device(np.full((m, n), np.nan))
    flat = [x.reshape(x.size) for x in (a, b, d)]
    flags = vector_flags(0, k, 0, n, 8)  # fresh device allocations are 256-byte aligned
    CompiledKernel("warptile", built, kernel).launch(0, *flat, m, n, k, k, n, n, flags, bound.args)
    cuda.synchronize()
    return d.copy_to_host()
