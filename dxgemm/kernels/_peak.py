"""Microbenchmark kernels for the benchmark's roofline: the GPU's measured SIMT FMA peak.

Each thread runs eight independent multiply-add chains (enough to cover FMA latency) for
a fixed number of iterations and stores one value so nothing is optimised away.  The
rate it reaches is the ceiling every handwritten (non-tensor-core) rung works under.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

CHAINS = 8
ITERATIONS = 4096


def fma_peak_kernel(dtype: np.dtype):
    """Kernel ``k(out, seed)``: ``2 * CHAINS * ITERATIONS`` flops per thread."""
    nb = np.dtype(dtype).type
    scale = nb(0.999)
    add = nb(0.001)

    @cuda.jit
    def fma_peak(out, seed):
        x0 = seed + nb(cuda.threadIdx.x)
        x1, x2, x3, x4, x5, x6, x7 = x0 + nb(1), x0 + nb(2), x0 + nb(3), x0 + nb(4), x0 + nb(5), x0 + nb(6), x0 + nb(7)
        for _ in range(ITERATIONS):
            x0 = x0 * scale + add
            x1 = x1 * scale + add
            x2 = x2 * scale + add
            x3 = x3 * scale + add
            x4 = x4 * scale + add
            x5 = x5 * scale + add
            x6 = x6 * scale + add
            x7 = x7 * scale + add
        total = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7
        if total == seed:  # practically never true; keeps the chains alive
            out[0] = total

    return fma_peak


@cuda.jit
def spin(microseconds):
    """Keep the GPU busy so the host can queue timed launches without gaps between them."""
    for _ in range(microseconds):
        cuda.nanosleep(1000)
