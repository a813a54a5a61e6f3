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

from ._grid import TILES, case_id, cases, operands, split, supports

DTYPES = [np.float32, np.float64]
# ``auto`` too: at m = 1 it takes the gemv kernel; on small outputs a rung (shapes at gemv's edges, cheap)
def _simulated_cheaply(backend: str, case: tuple) -> bool:
    """tf32mma's 128-wide tile edges take minutes a case under the simulator: on the CPU only its
    single-row and single-column edges run here (tests/test_tf32mma_cpu.py covers its layouts at
    small odd shapes; tests/test_gpu_guard.py runs every edge on the GPU)."""
    _, (m, n, _k), *_ = case
    return backend != "tf32mma" or min(m, n) == 1


GRID = [(backend, case, dtype)
        for backend, case in ([(backend, case) for backend in dxgemm.available_backends() for case in cases(backend)]
                              + [("auto", case) for case in cases("gemv")])
        for dtype in DTYPES if supports(backend, dtype) and _simulated_cheaply(backend, case)]


def _to_host(arr):
    return arr.copy_to_host()


@pytest.mark.parametrize("backend, case, dtype", GRID,
                         ids=[f"{b}-{case_id(c)}-{np.dtype(t).name}" for b, c, t in GRID])
def test_every_layout_at_tile_edges_in_guard_bands(backend, case, dtype):
    layouts, shape, kind, alpha, beta = case
    a, b, c = operands(case, dtype, seed=sum(shape))
    d = run_guarded(a, b, c, layouts, to_device=cuda.to_device, to_host=_to_host, backend=backend,
                    alpha=alpha, beta=beta)
    c64 = c.astype(np.float64) if c is not None else None
    assert_close(d, a.astype(np.float64), b.astype(np.float64), np.dtype(dtype), alpha=alpha, beta=beta, c=c64,
                 split=split(backend, dtype))


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


BIAS_GRID = [(b, t) for b in dxgemm.available_backends() for t in DTYPES
             if supports(b, t) and _simulated_cheaply(b, cases(b)[1])]


@pytest.mark.parametrize("backend, dtype", BIAS_GRID)
def test_bias_epilogue_at_tile_edges_in_guard_bands(backend, dtype):
    """A ``(n,)`` bias read from inside a NaN band (a read past its end poisons the result), D a
    column-major view in a sentinel band, alpha and beta: the epilogue's reads and the edge stores."""
    from dxgemm import epilogues as E
    from dxgemm.epilogues.reference import check

    layouts, _, kind, alpha, beta = cases(backend)[1]
    t, bk = TILES[backend]
    # n one past the tile side (a second tile column reads the bias at its global column), a partial
    # tile row, a K tail
    n = t + 1
    case = (layouts, (5, n, bk + 1 if bk > 1 else 5), kind, alpha, beta)
    a, b, c = operands(case, dtype, seed=7)
    band = np.full(n + 6, np.nan, dtype)
    band[3:3 + n] = np.random.default_rng(8).standard_normal(n) * 4
    v_buf = cuda.to_device(band)
    epilogue = E.bias(v_buf[3:3 + n]) | E.relu()
    d = run_guarded(a, b, c, layouts, to_device=cuda.to_device, to_host=_to_host, backend=backend,
                    alpha=alpha, beta=beta, epilogue=epilogue)
    np.testing.assert_array_equal(v_buf.copy_to_host().view(np.uint8), band.view(np.uint8))
    worst = check(d, epilogue, a.astype(np.float64), b.astype(np.float64), np.dtype(dtype), alpha=alpha, beta=beta,
                  c=c.astype(np.float64), split=split(backend, dtype))
    assert worst <= 1.0
    assert (d > 0).any() and (d == 0).any()  # the relu sees both signs: alpha and beta came first
