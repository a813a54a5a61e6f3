"""Every backend, both dtypes, every operand in every layout, at tile edges, inside guard bands.

The deterministic grid of ``tests/_grid.py`` under the CUDA simulator: inputs in NaN bands
(a stray read poisons the result), D in a sentinel band (a stray write changes it) with NaN
inside when beta is 0 (an unwritten element stays NaN).  The GPU twin is
``tests/test_gpu_guard.py``.  The Hypothesis test in ``test_ladder_cpu.py`` stays as a
second net.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

import dxgemm
from dxgemm.testing import assert_close
from dxgemm.testing.guard import SENTINEL, place, run_guarded

from ._grid import case_id, cases, operands

DTYPES = [np.float32, np.float64]
GRID = [(backend, case) for backend in dxgemm.available_backends() for case in cases(backend)]


def _to_host(arr):
    return arr.copy_to_host()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend, case", GRID, ids=[f"{b}-{case_id(c)}" for b, c in GRID])
def test_every_layout_at_tile_edges_in_guard_bands(backend, case, dtype):
    layouts, shape, kind, alpha, beta = case
    a, b, c = operands(case, dtype, seed=sum(shape))
    d = run_guarded(a, b, c, layouts, to_device=cuda.to_device, to_host=_to_host, backend=backend,
                    alpha=alpha, beta=beta)
    c64 = c.astype(np.float64) if c is not None else None
    assert_close(d, a.astype(np.float64), b.astype(np.float64), np.dtype(dtype), alpha=alpha, beta=beta, c=c64)


def test_guard_band_catches_a_stray_write_and_a_stray_read():
    """The bands themselves: a write into D's band and an input changed in place are reported."""
    host = np.arange(12, dtype=np.float64).reshape(3, 4) + 0.5
    g = place(host, "T", to_device=cuda.to_device, fill=SENTINEL)
    from dxgemm.testing.guard import assert_untouched, read_inside

    np.testing.assert_array_equal(read_inside(g, _to_host), host)
    np.testing.assert_array_equal(g.view.copy_to_host(), host)
    assert_untouched(g, _to_host, "D", band_only=True)
    g.buffer[0, 0] = 1.0  # outside the matrix
    with pytest.raises(AssertionError, match="guard band"):
        assert_untouched(g, _to_host, "D", band_only=True)
    for layout in ("row", "col", "view"):
        gi = place(host, layout, to_device=cuda.to_device)
        np.testing.assert_array_equal(gi.view.copy_to_host(), host)
        gi.view[1, 2] = 0.0  # an input written in place
        with pytest.raises(AssertionError, match="matrix"):
            assert_untouched(gi, _to_host, "A")
