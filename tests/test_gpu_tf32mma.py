"""The TF32 tensor-core rung on the GPU: both modes against float64 and cuBLAS SGEMM.

The accuracy contract of the float32-accurate mode (issue 34): max |D - D64| / (|A| @ |B|)
at most 2x cuBLAS SGEMM's on the same inputs (or 2^-22, whichever is larger); the data
are same-sign at long K, where a truncating tensor-core sum drifts, and standard normal.
"""

from __future__ import annotations

import numpy as np
import pytest

from dxgemm.epilogues.reference import assert_close

from .test_tf32mma_cpu import U_F32, bound, relative_error, run_tf32mma

pytestmark = pytest.mark.gpu


def _sgemm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    cp = pytest.importorskip("cupy")
    return cp.asnumpy(cp.matmul(cp.asarray(a), cp.asarray(b)))


TILES = [f"{mode}{tile}" for mode in ("tf32x3", "tf32") for tile in ("", "_small", "_narrow", "_flat")]  # every tile


@pytest.mark.parametrize("layouts", ["rrr", "ccc"])  # every layout: benchmarks/tf32mma_bench.py check
@pytest.mark.parametrize("mode", TILES)
def test_layouts_edges(rng, mode, layouts):
    m, n, k = 300, 260, 1000  # aligned lines: interior blocks take the unchecked copies; edges and a partial K tile
    a = (rng.uniform(0.5, 1.0, (m, k)) * 2.0 ** rng.integers(-6, 7, (m, k))).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    out = run_tf32mma(a, b, mode, layouts)
    assert not np.isnan(out).any()
    assert relative_error(out, a, b) <= bound(mode, k)


@pytest.mark.parametrize("tile", ["tf32x3", "tf32x3_small", "tf32x3_narrow", "tf32x3_flat"])
@pytest.mark.parametrize("data,k", [("uniform", 16384), ("uniform", 65536), ("normal", 256), ("normal", 4096)])
def test_accuracy_contract(rng, data, k, tile):
    m = n = 128
    if data == "uniform":
        a, b = rng.random((m, k), np.float32), rng.random((k, n), np.float32)
    else:
        a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    err = relative_error(run_tf32mma(a, b, tile), a, b)
    sgemm = relative_error(_sgemm(a, b), a, b)
    assert err <= 2 * max(sgemm, 2.0**-22), (err, sgemm)


@pytest.mark.parametrize("tile", ["tf32x3", "tf32x3_small"])
def test_nan_inf(rng, tile):
    m, n, k = 64, 72, 4096
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    a[3, 5], a[7, 9], a[9, 2] = np.nan, np.inf, np.float32(3.4e38)
    b[2, :] = np.float32(2.0**-100)
    b[11, 4] = 0
    out = run_tf32mma(a, b, tile)
    with np.errstate(all="ignore"):
        ref = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    assert np.array_equal(np.isnan(out), np.isnan(ref)) and np.array_equal(np.isinf(out), np.isinf(ref))


@pytest.mark.parametrize("shape", [(4099, 16, 3001), (16384, 3, 4096), (13, 777, 2049), (16, 16, 16384), (300, 7, 64),
                                   (5, 4096, 1000)])
def test_auto_thin_outputs_with_an_epilogue(rng, shape):
    """auto's float32 path on outputs with a side <= 16 (tf32mma's thin tiles, split over K where
    the output is small): ``bias | gelu`` fused, into NaN-poisoned D, against float64."""
    cp = pytest.importorskip("cupy")
    import dxgemm
    from dxgemm.epilogues import bias, gelu

    m, n, k = shape
    a = rng.uniform(0.0, 1.0, (m, k)).astype(np.float32)  # same sign: a lost or doubled slice shows
    b = rng.uniform(-1.0, 1.0, (k, n)).astype(np.float32)
    v = rng.standard_normal(n).astype(np.float32)
    d = cp.full((m, n), cp.nan, cp.float32)
    epilogue = bias(cp.asarray(v)) | gelu()
    dxgemm.gemm(cp.asarray(a), cp.asarray(b), d, epilogue=epilogue)
    assert not bool(cp.isnan(d).any())
    assert_close(d, epilogue, cp.asarray(a), cp.asarray(b), np.dtype(np.float32))


# ---------------------------------------------------------------------------------------
# tf32wgmma: the same checks on Hopper's wgmma kernel (sm_90 only).
def _wgmma_or_skip():
    import dxgemm

    if "tf32wgmma" not in dxgemm.available_backends(0):
        pytest.skip("tf32wgmma runs on compute capability 9.0 only")


@pytest.mark.parametrize("layouts", ["rrr", "crr", "rcr", "ccr", "rrc", "ccc"])
@pytest.mark.parametrize("mode", ["tf32x3", "tf32"])
def test_wgmma_layouts_edges(rng, mode, layouts):
    """Every layout of A, B and D; edge blocks in both directions, a partial K tile, K tiles past
    the fold (second-level sum), unaligned operands through the checked copies."""
    _wgmma_or_skip()
    for (m, n, k), aligned in (((300, 260, 1000), True), ((129, 383, 2081), True), ((130, 200, 77), False)):
        a = (rng.uniform(0.5, 1.0, (m, k)) * 2.0 ** rng.integers(-6, 7, (m, k))).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        out = run_tf32mma(a, b, mode, layouts, aligned=aligned, rung="tf32wgmma")
        assert not np.isnan(out).any()
        assert relative_error(out, a, b) <= bound(mode, k), (m, n, k, aligned)


def test_wgmma_epilogue(rng):
    from dxgemm import epilogues as E

    _wgmma_or_skip()
    m, n, k = 257, 300, 1500
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    v = (rng.standard_normal(n) * 4).astype(np.float32)
    from numba import cuda

    out = run_tf32mma(a, b, "tf32x3", "rrc", epilogue=E.bias(cuda.to_device(v)) | E.relu(), rung="tf32wgmma")
    ref = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + v, 0)
    # the bias adds a float32 rounding of |v| on top of the product's bound
    assert relative_error(out, a, b, ref) <= bound("tf32x3", k) + 2 * U_F32 * np.max(np.abs(v)) / 1e-3
    assert (out >= 0).all() and (out == 0).any()


@pytest.mark.parametrize("data,k", [("uniform", 16384), ("uniform", 65536), ("normal", 256), ("normal", 4096)])
def test_wgmma_accuracy_contract(rng, data, k):
    _wgmma_or_skip()
    m = n = 128
    if data == "uniform":
        a, b = rng.random((m, k), np.float32), rng.random((k, n), np.float32)
    else:
        a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    err = relative_error(run_tf32mma(a, b, "tf32x3", rung="tf32wgmma"), a, b)
    sgemm = relative_error(_sgemm(a, b), a, b)
    assert err <= 2 * max(sgemm, 2.0**-22), (err, sgemm)


def test_auto_runs_wgmma_on_hopper(rng):
    """``auto`` sends a large float32 call to tf32wgmma on Hopper, and it is right."""
    cp = pytest.importorskip("cupy")
    _wgmma_or_skip()
    import dxgemm
    from dxgemm.runtime.memo import KERNELS

    a = cp.asarray(rng.standard_normal((2048, 2048)).astype(np.float32))
    b = cp.asarray(rng.standard_normal((2048, 2048)).astype(np.float32))
    d = cp.full((2048, 2048), cp.nan, cp.float32)
    dxgemm.gemm(a, b, d)
    assert any(key[:2] == ("rung", "tf32wgmma") for key in KERNELS.keys())
    err = relative_error(cp.asnumpy(d), cp.asnumpy(a), cp.asnumpy(b))
    assert err <= bound("tf32x3", 2048)
