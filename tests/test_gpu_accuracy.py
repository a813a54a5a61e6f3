"""The float32 accuracy contract on a real GPU: ``python -m pytest -m gpu tests/test_gpu_accuracy.py``.

Every float32 path (each ``precision=`` value through ``auto``, and each float32 backend
forced) is run on every data class of :func:`dxgemm.testing.make_data` at K up to 65536
(small m and n keep it quick), beside cuBLAS SGEMM on the same inputs:

* ``precision="tf32x3"`` (the default): the contract, error at most
  ``max(2 x SGEMM's error, 2^-22)`` relative to ``|A| @ |B|``
  (:func:`dxgemm.testing.check_float32_contract`), and on the TF32 rung forced;
* ``precision="ieee"``: a rounding float32 sum, :func:`dxgemm.testing.assert_close`'s
  statistical bound and no one-sided error;
* ``precision="tf32"``: TF32's own bound (inputs rounded to 10 mantissa bits), through
  ``auto`` and through the pipeline's one TF32 pass;
* the cuBLASDx pipeline's single-accumulator 3xTF32 (``backend="pipeline"``) is kept as a
  strict expected failure on same-sign data at long K: the truncating tensor-core
  accumulation is why it is not the default.

Results with inf, NaN or zeros must have them exactly where float64-then-rounded does.
"""

from __future__ import annotations

import numpy as np
import pytest

import dxgemm
from dxgemm import policy, testing
from dxgemm.runtime.device import device_info
from dxgemm.testing import tf32_bound

pytestmark = pytest.mark.gpu

M, N = 24, 40  # small outputs: long K stays quick, and neither side is a tile multiple
KS = [1, 16, 24, 48, 96, 128, 129, 257, 4096, 16384, 65536]  # short K: the blocked FMA sum up to 128 (policy.TF32X3_MIN_K), the TF32 rungs from 129
KINDS = ["normal", "wide_exponent", "same_sign", "positive_outer", "cancellation", "row_col_scale",
         "near_underflow"]


@pytest.fixture(scope="module")
def cp():
    return pytest.importorskip("cupy", reason="the GPU tests need CuPy")


def _inputs(cp, kind, k, seed):
    """float32 operands on the GPU and their exact float64 copies on the host."""
    a, b = testing.make_data(kind, (M, k, N), np.float32, np.random.default_rng(seed))
    return a.astype(np.float64), b.astype(np.float64), cp.asarray(a), cp.asarray(b)


def _sgemm(cp, a_d, b_d):
    """cuBLAS SGEMM in true float32 (CuPy's matmul with TF32 off) on the same inputs."""
    import os

    old = os.environ.get("CUPY_TF32")
    os.environ["CUPY_TF32"] = "0"
    try:
        return cp.asnumpy(cp.matmul(a_d, b_d))
    finally:
        if old is not None:
            os.environ["CUPY_TF32"] = old


def _run(cp, a_d, b_d, **kwargs):
    d = cp.full((M, N), cp.nan, dtype=cp.float32)  # poisoned: an unwritten element fails
    dxgemm.gemm(a_d, b_d, d, **kwargs)
    return cp.asnumpy(d)


PATHS = [{}, {"precision": "tf32x3"}, {"backend": "tf32mma"}, {"backend": "tf32wgmma"}]
# the TF32 rungs forced below policy.TF32X3_MIN_K meet their split bound, not the contract (the default runs
# the FMA chain there)
CONTRACT = [(k, kw) for k in KS for kw in PATHS if "backend" not in kw or k >= policy.TF32X3_MIN_K]


@pytest.mark.parametrize("k, kwargs", CONTRACT, ids=[f"{k}-{kw}" for k, kw in CONTRACT])
@pytest.mark.parametrize("kind", KINDS)
def test_contract(cp, kind, k, kwargs):
    a, b, a_d, b_d = _inputs(cp, kind, k, seed=k + 7)
    d = _run(cp, a_d, b_d, **kwargs)
    testing.check_float32_contract(d, a, b, sgemm=_sgemm(cp, a_d, b_d))


@pytest.mark.parametrize("kind", ["same_sign", "positive_outer", "wide_exponent"])
def test_contract_on_a_large_output(cp, kind):
    """The default on a 1024 x 1024 output at K = 4096: many tiles (no split over K), where each
    output's sum is one tile's K loop; on IEEE ``warptile`` (DXGEMM_DEVICE_AS=L40S) its blocked tiles."""
    m, n, k = 1024, 1024, 4096
    a32, b32 = testing.make_data(kind, (m, k, n), np.float32, np.random.default_rng(k + 3))
    a_d, b_d = cp.asarray(a32), cp.asarray(b32)
    d = cp.full((m, n), cp.nan, dtype=cp.float32)
    dxgemm.gemm(a_d, b_d, d)
    testing.check_float32_contract(cp.asnumpy(d), a32.astype(np.float64), b32.astype(np.float64),
                                   sgemm=_sgemm(cp, a_d, b_d))


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("kind", KINDS)
def test_ieee(cp, kind, k):
    a, b, a_d, b_d = _inputs(cp, kind, k, seed=k + 5)
    d = _run(cp, a_d, b_d, precision="ieee")
    testing.assert_close(d, a, b, np.dtype(np.float32))


def _pipeline_or_skip() -> None:
    from dxgemm.runtime.pipeline import availability

    if availability(0) is not None:
        pytest.skip(f"needs the sm_90 pipeline: {availability(0)}")


@pytest.mark.parametrize("backend", ["auto", "pipeline"])
@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("kind", ["normal", "same_sign", "wide_exponent"])
def test_tf32(cp, kind, k, backend):
    """One TF32 pass (:func:`dxgemm.testing.tf32_bound`), through ``auto`` and through the pipeline's TF32 kernel."""
    if backend == "pipeline":
        _pipeline_or_skip()
    a, b, a_d, b_d = _inputs(cp, kind, k, seed=k + 11)
    d = _run(cp, a_d, b_d, precision="tf32", backend=backend)
    err = testing.relative_error(d, a, b)
    assert err <= tf32_bound(k), f"TF32 error {err:.3g} exceeds {tf32_bound(k):.3g} at K = {k}"
    # and it is TF32, not silently float32: some error of TF32's size on random data, wherever a
    # TF32 path runs (auto runs IEEE warptile on a GPU without one: an L40S, or DXGEMM_DEVICE_AS=L40S)
    tf32_here = backend == "pipeline" or policy.tf32_auto(device_info(), "tf32")
    if kind == "normal" and k >= 257 and tf32_here:
        assert err > 2.0**-20


@pytest.mark.parametrize("layouts", ["rr", "cr", "rc", "cc"])
@pytest.mark.parametrize("shape", [(300, 257, 129), (129, 1000, 4097)])
def test_tf32_pipeline_layouts_edges_epilogue(cp, shape, layouts):
    """The pipeline's one TF32 pass on odd shapes (tile edges, a K tail), every arrangement of A
    and B, alpha/beta and a fused bias, in a poisoned output."""
    _pipeline_or_skip()
    from dxgemm.epilogues import bias

    m, n, k = shape
    rng = np.random.default_rng(m + n + k)
    a32, b32 = testing.make_data("same_sign", (m, k, n), np.float32, rng)
    c32 = rng.standard_normal((m, n)).astype(np.float32)
    v32 = rng.standard_normal(n).astype(np.float32)
    a_d = cp.asarray(a32) if layouts[0] == "r" else cp.asfortranarray(cp.asarray(a32))
    b_d = cp.asarray(b32) if layouts[1] == "r" else cp.asfortranarray(cp.asarray(b32))
    d = cp.asarray(c32)
    dxgemm.gemm(a_d, b_d, d, alpha=0.75, beta=-0.5, epilogue=bias(cp.asarray(v32)), backend="pipeline",
                precision="tf32")
    a, b = a32.astype(np.float64), b32.astype(np.float64)
    expect = 0.75 * (a @ b) - 0.5 * c32 + v32
    err = float(np.max(np.abs(cp.asnumpy(d) - expect) / (0.75 * (np.abs(a) @ np.abs(b)) + 0.5 * np.abs(c32)
                                                          + np.abs(v32))))
    assert err <= tf32_bound(k), f"TF32 error {err:.3g} exceeds {tf32_bound(k):.3g}"


@pytest.mark.parametrize("k", [16384, 65536])
def test_single_accumulator_3xtf32_misses_contract(cp, k):
    """The cuBLASDx pipeline's 3xTF32 sums 3K products in one truncating accumulator: on
    same-sign data its error is a one-sided bias that grows with K, far above SGEMM's."""
    _pipeline_or_skip()
    rng = np.random.default_rng(k)
    a32, b32 = testing.make_data("same_sign", (256, k, 256), np.float32, rng)  # sides > 128: the 3xTF32 method
    a_d, b_d = cp.asarray(a32), cp.asarray(b32)
    d = cp.asnumpy(dxgemm.gemm(a_d, b_d, backend="pipeline"))
    with pytest.raises(AssertionError, match="float32 contract broken"):
        testing.check_float32_contract(d, a32.astype(np.float64), b32.astype(np.float64), sgemm=_sgemm(cp, a_d, b_d))
    with pytest.raises(AssertionError, match="one-sided"):
        testing.check_unbiased(d, a32.astype(np.float64), b32.astype(np.float64))


@pytest.mark.parametrize("precision", ["tf32x3", "tf32", "ieee"])
@pytest.mark.parametrize("kind", ["near_overflow", "nonfinite"])
def test_special_values(cp, kind, precision):
    """inf, NaN and 0 exactly where the float64 product, rounded to float32, has them."""
    a, b, a_d, b_d = _inputs(cp, kind, 301, seed=3)
    d = _run(cp, a_d, b_d, precision=precision)
    with np.errstate(over="ignore", invalid="ignore"):
        expect = (a @ b).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(d), np.isnan(expect))
    np.testing.assert_array_equal(np.isinf(d), np.isinf(expect))
    np.testing.assert_array_equal(d[np.isinf(expect)], expect[np.isinf(expect)])
    np.testing.assert_array_equal(d == 0, expect == 0)
