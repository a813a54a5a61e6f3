"""Microbenchmark kernels for the benchmark's roofline: the GPU's measured SIMT FMA peak.

Each thread runs sixteen independent multiply-add chains (enough to cover FMA latency) for
a fixed number of iterations and stores one value so nothing is optimised away.  The
rate it reaches is the ceiling every handwritten (non-tensor-core) rung works under.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

CHAINS = 16
UNROLL = 8
ITERATIONS = 512


def fma_peak_kernel(dtype: np.dtype):
    """Kernel ``k(out, seed)``: ``2 * CHAINS * UNROLL * ITERATIONS`` flops per thread.

    The chains live in a register array indexed only by unrolled constants, and each loop
    iteration issues ``CHAINS * UNROLL`` FMAs, so loop overhead stays under 2 %.
    """
    nb = np.dtype(dtype).type
    scale = nb(0.999)
    add = nb(0.001)

    @cuda.jit
    def fma_peak(out, seed):
        x = cuda.local.array(CHAINS, nb)
        for c in range(CHAINS):
            x[c] = seed + nb(cuda.threadIdx.x + c)
        for _ in range(ITERATIONS):
            for _u in range(UNROLL):
                for c in range(CHAINS):
                    x[c] = x[c] * scale + add
        total = nb(0)
        for c in range(CHAINS):
            total += x[c]
        if total == seed:  # practically never true; keeps the chains alive
            out[0] = total

    return fma_peak


@cuda.jit
def spin(microseconds):
    """Keep the GPU busy so the host can queue timed launches without gaps between them."""
    for _ in range(microseconds):
        cuda.nanosleep(1000)
