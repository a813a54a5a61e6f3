"""The serial split-K finish (``splitk_reduce.make_serial_finish``) under Numba's simulator.

Each block of a ``(1, 1, S)`` grid writes its slice of a small tile into the workspace and
calls the finish; the block that arrives last sums the tile.  The sum must be the slices'
in order, slice 0 first, exactly as the separate reduce sums them (the loads are issued in
batches of ``SERIAL_BATCH`` but added one by one), whatever S is against the batch, and the
arrival count must be left at zero.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda


@pytest.mark.parametrize("slices", [1, 7, 8, 19])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_serial_finish_sums_the_slices_in_order(dtype, slices):
    from dxgemm.epilogues._base import AlphaBeta, EpilogueContext
    from dxgemm.kernels import KernelSpec, Layout
    from dxgemm.kernels.splitk_reduce import SERIAL_BATCH, make_serial_finish

    assert SERIAL_BATCH == 8  # the cases straddle one batch and two batches with a remainder
    um, un, threads = 5, 7, 16  # a 5x7 corner of an 8x8 tile: the finish skips the rest
    dt = np.dtype(dtype)
    bound = AlphaBeta(1.0, 0.0).bind(EpilogueContext(um, un, dt, adapt=None))
    spec = KernelSpec(dt, Layout.ROW, Layout.ROW, Layout.ROW, bound.key, bound.make())
    finish = make_serial_finish(spec, 8, 8, threads)
    rng = np.random.default_rng(slices)
    # values whose float sum depends on the order: large and small of both signs
    parts = (rng.standard_normal((slices, um, un)) * 2.0 ** rng.integers(-20, 20, (slices, um, un))).astype(dt)

    @cuda.jit
    def kernel(parts, w, counters, d, epi_args):
        tid = cuda.threadIdx.x
        z = cuda.blockIdx.z
        for e in range(tid, um * un, threads):
            w[z * um * un + e] = parts[z * um * un + e]
        finish(w, counters, d, un, um, un, 0, 0, tid, epi_args)

    w = cuda.to_device(np.zeros(slices * um * un, dt))
    counters = cuda.to_device(np.zeros(1, np.int32))
    d = cuda.to_device(np.full(um * un, np.nan, dt))
    kernel[(1, 1, slices), threads](cuda.to_device(parts.ravel()), w, counters, d, bound.args)
    expected = np.zeros((um, un), dt)
    for s in range(slices):  # slice 0 first, in the dtype: the separate reduce's order
        expected = (expected + parts[s]).astype(dt)
    got = d.copy_to_host().reshape(um, un)
    np.testing.assert_array_equal(got, expected)
    assert counters.copy_to_host()[0] == 0
