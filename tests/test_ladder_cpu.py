"""Every rung x both dtypes x layouts, under the CUDA simulator, against a float64 reference."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dxgemm
from dxgemm.kernels import RUNGS  # the handwritten ladder; the pipeline has its own tests
from dxgemm.testing import assert_close

from ._dmma import ASYNC_CONFIG, INTERIOR_CONFIG, SMALL_CONFIGS, SPLIT_CONFIG, warptile_dmma
from ._sim import device_matrix, poisoned

M, N, K = 33, 47, 29  # odd, and not a multiple of any tile
DTYPES = [np.float32, np.float64]
LAYOUTS = [("row", "row", "row"), ("col", "col", "col"), ("row", "col", "col"), ("col", "row", "row")]


@pytest.mark.parametrize("backend", RUNGS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layouts", LAYOUTS, ids=lambda t: "-".join(t))
def test_rung_matches_reference(backend, dtype, layouts, rng):
    la, lb, lc = layouts
    a = rng.standard_normal((M, K)).astype(dtype)
    b = rng.standard_normal((K, N)).astype(dtype)
    c = rng.standard_normal((M, N)).astype(dtype)
    d_c = device_matrix(c, lc)
    out = dxgemm.gemm(device_matrix(a, la), device_matrix(b, lb), d_c, alpha=-0.75, beta=1.5, backend=backend)
    assert out is d_c
    assert_close(out.copy_to_host(), a.astype(np.float64), b.astype(np.float64), np.dtype(dtype),
                 alpha=-0.75, beta=1.5, c=c.astype(np.float64))


@pytest.mark.parametrize("backend", RUNGS)
def test_beta_zero_never_reads_c(backend, rng):
    a = rng.standard_normal((M, K))
    b = rng.standard_normal((K, N))
    c = poisoned((M, N), np.float64, "col")
    out = dxgemm.gemm(device_matrix(a, "row"), device_matrix(b, "row"), c, backend=backend)
    assert_close(out.copy_to_host(), a, b, np.dtype(np.float64))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    backend=st.sampled_from(RUNGS),
    dtype=st.sampled_from(DTYPES),
    m=st.integers(1, 40), n=st.integers(1, 40), k=st.integers(1, 40),
    la=st.sampled_from(["row", "col", "view", "T"]),
    lb=st.sampled_from(["row", "col", "view", "T"]),
    lc=st.sampled_from(["row", "col", "view"]),
    seed=st.integers(0, 2**31),
)
def test_random_shapes_layouts_views(backend, dtype, m, n, k, la, lb, lc, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    c = poisoned((m, n), dtype, lc)
    out = dxgemm.gemm(device_matrix(a, la), device_matrix(b, lb), c, backend=backend)
    assert_close(out.copy_to_host(), a.astype(np.float64), b.astype(np.float64), np.dtype(dtype))


def test_new_array_returned_with_a_library(rng):
    from numba import cuda

    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    out = dxgemm.gemm(cuda.to_device(a), cuda.to_device(b))
    assert out.shape == (M, N) and out.dtype == np.float32
    assert_close(out.copy_to_host(), a.astype(np.float64), b.astype(np.float64), np.dtype(np.float32))


def test_zero_sizes_follow_blas(rng):
    from numba import cuda

    c = rng.standard_normal((5, 4))
    out = dxgemm.gemm(cuda.to_device(np.empty((5, 0))), cuda.to_device(np.empty((0, 4))), cuda.to_device(c),
                      beta=2.0, backend="smem")
    np.testing.assert_array_equal(out.copy_to_host(), 2.0 * c)
    empty = dxgemm.gemm(cuda.to_device(np.ones((0, 3))), cuda.to_device(np.ones((3, 4))))
    assert empty.shape == (0, 4)


def test_nan_and_inf_in_inputs_propagate(rng):
    from numba import cuda

    a = rng.standard_normal((9, 6))
    b = rng.standard_normal((6, 7))
    a[2, 3] = np.nan
    b[1, 5] = np.inf
    out = dxgemm.gemm(cuda.to_device(a), cuda.to_device(b), backend="warptile").copy_to_host()
    assert np.isnan(out[2]).all()
    assert np.isinf(out[:, 5]).sum() + np.isnan(out[:, 5]).sum() == 9
    # every element judged as float64-then-rounded would give it: NaN, the same infinity, or within the bound
    from dxgemm.testing import make_data

    for dtype in (np.float32, np.float64):
        a, b = make_data("nonfinite", (9, 6, 7), dtype, rng, count=2)
        out = dxgemm.gemm(cuda.to_device(a), cuda.to_device(b), backend="warptile").copy_to_host()
        assert_close(out, a.astype(np.float64), b.astype(np.float64), np.dtype(dtype))


def test_no_recompile_for_new_arrays_or_sizes(rng):
    from numba import cuda

    from dxgemm.kernels import compile_count

    def run(m, n, k):
        a = cuda.to_device(rng.standard_normal((m, k)))
        b = cuda.to_device(rng.standard_normal((k, n)))
        return dxgemm.gemm(a, b, backend="blocktile1d", alpha=0.5)

    run(7, 9, 5)
    before = compile_count()
    run(7, 9, 5)
    run(13, 3, 21)
    assert compile_count() == before


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layouts", LAYOUTS + [("view", "T", "view")], ids=lambda t: "-".join(t))
@pytest.mark.parametrize("k", [29, 301])  # 301: the four-loads-in-flight loop and its remainder
def test_single_row_takes_the_gemv_kernel(dtype, layouts, k, rng):
    """``m = 1`` under ``auto`` runs ``dxgemm.kernels.gemv`` (every layout; alpha, beta, C; poisoned D)."""
    from dxgemm.runtime.memo import KERNELS

    la, lb, lc = layouts
    n = 47
    a = rng.standard_normal((1, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    c = rng.standard_normal((1, n)).astype(dtype)
    d_c = device_matrix(c, lc)
    dxgemm.gemm(device_matrix(a, la), device_matrix(b, lb), d_c, alpha=0.5, beta=-1.25)
    assert_close(d_c.copy_to_host(), a.astype(np.float64), b.astype(np.float64), np.dtype(dtype),
                 alpha=0.5, beta=-1.25, c=c.astype(np.float64))
    assert any(key[1] == "gemv" for key in KERNELS.keys("numba"))
    d = poisoned((1, n), dtype, lc)
    dxgemm.gemm(device_matrix(a, la), device_matrix(b, lb), d)
    assert_close(d.copy_to_host(), a.astype(np.float64), b.astype(np.float64), np.dtype(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layouts", LAYOUTS + [("view", "T", "view")], ids=lambda t: "-".join(t))
@pytest.mark.parametrize("m,k", [(37, 29), (9, 301), (5, 4099)])  # partial row blocks; the K loops; rows_deep
def test_single_column_takes_the_gemv_rows_tile(dtype, layouts, m, k, rng):
    """``n = 1`` under ``auto`` runs ``gemv``'s ``"rows"`` tile (``"rows_deep"`` from K = 4096;
    every layout; alpha, beta, C;
    a per-row bias; poisoned D), and the kernel key names the tile."""
    from dxgemm.epilogues import bias, relu
    from dxgemm.runtime.memo import KERNELS

    la, lb, lc = layouts
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, 1)).astype(dtype)
    c = rng.standard_normal((m, 1)).astype(dtype)
    d_c = device_matrix(c, lc)
    dxgemm.gemm(device_matrix(a, la), device_matrix(b, lb), d_c, alpha=0.5, beta=-1.25)
    assert_close(d_c.copy_to_host(), a.astype(np.float64), b.astype(np.float64), np.dtype(dtype),
                 alpha=0.5, beta=-1.25, c=c.astype(np.float64))
    assert any(key[1] == "gemv" and "rows" in str(key) for key in KERNELS.keys("numba"))
    v = rng.standard_normal((m, 1)).astype(dtype)
    d = poisoned((m, 1), dtype, lc)
    dxgemm.gemm(device_matrix(a, la), device_matrix(b, lb), d, epilogue=bias(cuda.to_device(v)) | relu())
    ref = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + v, 0)
    got = d.copy_to_host()
    assert not np.isnan(got).any()
    assert np.allclose(got, ref, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5 * np.abs(ref).max())


@pytest.mark.parametrize("shape", list(SMALL_CONFIGS), ids=lambda s: f"m{s[0]}n8k{s[1]}")
def test_warptile_every_fp64_mma_shape(shape, rng):
    """Each FP64 mma shape's fragment indexing, on a tile small enough for the simulator."""
    a = rng.standard_normal((M, K))
    b = rng.standard_normal((K, N))
    out = warptile_dmma(a, b, SMALL_CONFIGS[shape], alpha=-0.75)
    assert_close(out, a, b, np.dtype(np.float64), alpha=-0.75)


@pytest.mark.parametrize("layouts", [("row", "row"), ("col", "col"), ("row", "col"), ("col", "row")],
                         ids=lambda t: "-".join(t))
@pytest.mark.parametrize("aligned", [True, False], ids=["16-byte", "one-element"])
def test_warptile_fp64_async_copies(layouts, aligned, rng):
    """The cp.async path: shared tiles in each operand layout, both copy widths, a K tail."""
    a = rng.standard_normal((M, K))
    b = rng.standard_normal((K, N - 1))  # even n: row-major B takes 16-byte copies
    out = warptile_dmma(a, b, ASYNC_CONFIG, layout_a=layouts[0], layout_b=layouts[1], aligned=aligned)
    assert_close(out, a, b, np.dtype(np.float64))


@pytest.mark.parametrize("layouts", [("row", "row"), ("col", "col"), ("row", "col"), ("col", "row")],
                         ids=lambda t: "-".join(t))
@pytest.mark.parametrize("m", [156, 155], ids=["m_even", "m_odd"])
@pytest.mark.parametrize("n", [46, 47], ids=["even", "odd"])
def test_warptile_fp64_interior_loop(layouts, m, n, rng):
    """The unchecked copies between the mmas, then the checked loop for the K tail; blocks in
    grouped order (5 tile rows: a last group of one); interior blocks' straight-line store,
    16 bytes a run (even n) or an element at a time (odd n).  Edge blocks (28 or 27 rows, 14
    or 15 columns) copy unchecked too, re-reading the last row or column inside in place of
    those past the edge, except where a 16-byte chunk would straddle it: odd n with row-major
    B keeps every block on the checked copies, and odd m with column-major A has no 16-byte
    lines at all.  Even k: A's lines start 16-byte aligned, as the unchecked copies require."""
    k = 98
    a = rng.standard_normal((m, k))
    b = rng.standard_normal((k, n))
    out = warptile_dmma(a, b, INTERIOR_CONFIG, alpha=1.5, layout_a=layouts[0], layout_b=layouts[1])
    assert_close(out, a, b, np.dtype(np.float64), alpha=1.5)


def test_warptile_fp64_eight_k_steps(rng):
    """A K tile of eight mma steps (m16n8k4, BK = 32): the steps chain through one device
    function each, every fragment handed from step to step, in the unchecked loop (six full
    K tiles, four stages) and the checked one (the tail of 8)."""
    m, n, k = 156, 46, 200
    a = rng.standard_normal((m, k))
    b = rng.standard_normal((k, n))
    out = warptile_dmma(a, b, dict(INTERIOR_CONFIG, mma=(16, 4), BK=32))
    assert_close(out, a, b, np.dtype(np.float64))


@pytest.mark.parametrize("layouts", [("row", "row"), ("col", "col")], ids=lambda t: "-".join(t))
def test_warptile_fp64_edge_straddling_chunks(layouts, rng):
    """Lines padded to even lengths with NaN around an odd m and n: every operand takes
    16-byte copies, but on the edge the contiguous dimension ends inside a chunk (column-major
    A at m = 155, row-major B at n = 47), so those edge blocks must stay on the checked copies;
    moving their chunk back to end at the edge would misplace a row or column."""
    m, n, k = 155, 47, 98
    a = rng.standard_normal((m, k))
    b = rng.standard_normal((k, n))
    out = warptile_dmma(a, b, INTERIOR_CONFIG, layout_a=layouts[0], layout_b=layouts[1], line_align=2)
    assert_close(out, a, b, np.dtype(np.float64))


@pytest.mark.parametrize("layouts", [("row", "row"), ("col", "col")], ids=lambda t: "-".join(t))
@pytest.mark.parametrize("slices", [2, 3, 5])
def test_warptile_fp64_split_k_slices(layouts, slices, rng):
    """Split-K float64 tile: slice z covers its own K tiles (an empty last slice with five:
    7 K tiles make slices of 2, 2, 2, 1, 0) and writes the z-th m x n matrix of the workspace;
    the slices sum to the product."""
    m, n, k = 5 * 32 - 4, 46, 98
    a = rng.standard_normal((m, k))
    b = rng.standard_normal((k, n))
    out = warptile_dmma(a, b, SPLIT_CONFIG, layout_a=layouts[0], layout_b=layouts[1], slices=slices)
    assert_close(out, a, b, np.dtype(np.float64))


@pytest.mark.parametrize("layouts", [("row", "row"), ("col", "col"), ("row", "col"), ("col", "row")],
                         ids=lambda t: "-".join(t))
def test_warptile_fp64_unchecked_prologue(layouts, rng):
    """``unchecked_prologue``: interior blocks, and edge blocks where safe, copy their first
    NSTAGES - 1 tiles from the loop's copy origins; K = 40 leaves the third prologue tile partial
    (checked), and with K = 98 the prologue's tiles are all full.  Odd m: with column-major A
    the edge blocks take the checked prologue."""
    m = 155
    for k in (40, 98):
        a = rng.standard_normal((m, k))
        b = rng.standard_normal((k, 46))
        out = warptile_dmma(a, b, dict(INTERIOR_CONFIG, BK=16, stages=4, unchecked_prologue=True), alpha=0.5,
                            layout_a=layouts[0], layout_b=layouts[1])
        assert_close(out, a, b, np.dtype(np.float64), alpha=0.5)


def test_warptile_fp64_short_tile(rng):
    """The shipped float64 ``"short"`` tile (the small tile on m16n8k8, for K below 64): an
    interior block and edge blocks, K = 29 leaving a partial last K tile of the four."""
    from dxgemm.kernels.warptile import TILE_CONFIGS

    m, n, k = 150, 70, 29
    a = rng.standard_normal((m, k))
    b = rng.standard_normal((k, n))
    out = warptile_dmma(a, b, TILE_CONFIGS["float64"]["short"], alpha=0.75)
    assert_close(out, a, b, np.dtype(np.float64), alpha=0.75)


@pytest.mark.parametrize("layouts", [("row", "row"), ("col", "col")], ids=lambda t: "-".join(t))
def test_warptile_fp64_medium_tile(layouts, rng):
    """The shipped float64 ``"medium"`` tile as it is (128x64x16, four warps of 64x32 on m16n8k8,
    three stages): one interior block through the unchecked loop and three edge blocks, with
    K = 50 leaving a partial last K tile."""
    from dxgemm.kernels.warptile import TILE_CONFIGS

    m, n, k = 150, 70, 50
    a = rng.standard_normal((m, k))
    b = rng.standard_normal((k, n))
    out = warptile_dmma(a, b, TILE_CONFIGS["float64"]["medium"], alpha=-1.25, layout_a=layouts[0],
                        layout_b=layouts[1])
    assert_close(out, a, b, np.dtype(np.float64), alpha=-1.25)
