"""Batched ``dxgemm.gemm`` on the GPU at real sizes, against a float64 reference per entry.

The semantics (broadcasting, strides, zero sizes, errors) are covered under the simulator
(``tests/test_batched_cpu.py``); here each backend runs its batched kernel at sizes with
interior and edge tiles, many entries, broadcast and reversed batch strides, per-entry
epilogues, and the float32 default is held to the float32 contract (twice cuBLAS SGEMM's
error on the same inputs).  Outputs start as NaN.
"""

from __future__ import annotations

import numpy as np
import pytest

import dxgemm
from dxgemm import epilogues as E
from dxgemm.testing import check, check_float32_contract

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")


def _entries(got, a, b, dtype, *, then=None, picks=None, contract=True):
    """Check entries ``picks`` (default: all) of a batched result against float64 per entry
    (float32: the float32 contract of the default precision, or with ``contract=False`` the
    statistical bound of an IEEE float32 sum)."""
    got = cp.asnumpy(got)
    batch = got.shape[:-2]
    assert not np.isnan(got).any(), "an output element was left unwritten"
    a = np.broadcast_to(cp.asnumpy(a), batch + a.shape[-2:])
    b = np.broadcast_to(cp.asnumpy(b), batch + b.shape[-2:])
    for index in picks or list(np.ndindex(*batch)):
        a64, b64 = a[index].astype(np.float64), b[index].astype(np.float64)
        if then is not None:
            ref = then(index, a64 @ b64)
            err = np.abs(got[index] - ref).max() / (np.abs(a64) @ np.abs(b64) + np.abs(ref)).max()
            assert err <= 8 * np.sqrt(a64.shape[1]) * np.finfo(dtype).eps, (index, err)
        elif np.dtype(dtype) == np.float32 and contract:
            check_float32_contract(got[index].astype(np.float64), a64, b64,
                                   sgemm=cp.asnumpy(cp.matmul(cp.asarray(a[index]), cp.asarray(b[index]))))
        else:
            check(got[index], a64, b64, np.dtype(dtype))


@pytest.mark.parametrize("backend, dtype", [("auto", np.float64), ("auto", np.float32), ("warptile", np.float32),
                                            ("naive", np.float64)])
def test_broadcast_batch_at_edge_sizes(rng, backend, dtype):
    m, n, k = (129, 95, 257) if backend == "naive" else (300, 260, 1000)
    a = cp.asarray((rng.uniform(0.5, 1.0, (3, 1, m, k)) * 2.0 ** rng.integers(-6, 7, (3, 1, m, k))).astype(dtype))
    b = cp.asarray(rng.standard_normal((2, k, n)).astype(dtype))
    d = cp.full((3, 2, m, n), cp.nan, dtype)
    dxgemm.gemm(a, b, d, backend=backend)
    _entries(d, a, b, dtype, contract=backend == "auto")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_many_small_entries_with_reversed_and_transposed_operands(rng, dtype):
    a_host = rng.uniform(0.5, 1.5, (4096, 64, 64)).astype(dtype)
    b_host = rng.standard_normal((4096, 64, 64)).astype(dtype)
    a = cp.asarray(a_host[::-1].copy())[::-1]  # batch stride negative
    b = cp.asarray(np.swapaxes(b_host, 1, 2).copy()).swapaxes(1, 2)  # each matrix column-major
    d = cp.full((4096, 64, 64), cp.nan, dtype)
    dxgemm.gemm(a, b, d)
    _entries(d, a, b, dtype, picks=[(0,), (1,), (2047,), (4095,)])
    np.testing.assert_array_equal(cp.asnumpy(cp.isnan(d).any(axis=(1, 2))), False)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_per_entry_bias_gelu_and_store(rng, dtype):
    batch, m, n, k = 6, 257, 384, 512
    a = cp.asarray(rng.standard_normal((batch, m, k)).astype(dtype))
    b = cp.asarray(rng.standard_normal((batch, k, n)).astype(dtype))
    v = cp.asarray(rng.standard_normal((batch, n)).astype(dtype))
    pre = cp.full((batch, m, n), cp.nan, dtype)
    d = dxgemm.gemm(a, b, epilogue=E.bias(v) | E.store(pre) | E.gelu())
    vh = cp.asnumpy(v).astype(np.float64)
    from math import erf

    gelu = np.vectorize(lambda x: 0.5 * x * (1 + erf(x / np.sqrt(2))))
    _entries(pre, a, b, dtype, then=lambda i, x: x + vh[i[0]][None, :], picks=[(0,), (5,)])
    _entries(d, a, b, dtype, then=lambda i, x: gelu(x + vh[i[0]][None, :]), picks=[(0,), (5,)])


def test_custom_reads_its_entry_of_a_table(rng):
    batch, m, n, k = 5, 130, 200, 300
    a = cp.asarray(rng.uniform(0.5, 1.5, (batch, m, k)))
    b = cp.asarray(rng.standard_normal((batch, k, n)))
    table = cp.asarray(rng.uniform(-2, 2, (batch, n)))

    def scaled(x, row, col, t, batch):
        return x * t[batch, col] + row

    d = dxgemm.gemm(a, b, epilogue=E.custom(scaled, table))
    th = cp.asnumpy(table)
    _entries(d, a, b, np.float64, then=lambda i, x: x * th[i[0]][None, :] + np.arange(m)[:, None])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_single_row_entries_take_gemv(rng, dtype):
    a = cp.asarray(rng.uniform(0.5, 1.5, (32, 1, 4096)).astype(dtype))
    b = cp.asarray(rng.standard_normal((32, 4096, 1000)).astype(dtype))
    d = cp.full((32, 1, 1000), cp.nan, dtype)
    dxgemm.gemm(a, b, d)
    _entries(d, a, b, dtype, picks=[(0,), (31,)])


def test_beta_reads_each_entry_of_c(rng):
    a = cp.asarray(rng.standard_normal((4, 200, 300)))
    b = cp.asarray(rng.standard_normal((300, 150)))
    c0 = rng.standard_normal((4, 200, 150))
    c = cp.asarray(c0)
    dxgemm.gemm(a, b, c, alpha=0.5, beta=-2.0)
    ah, bh = cp.asnumpy(a), cp.asnumpy(b)
    for i in range(4):
        check(cp.asnumpy(c[i]), ah[i], bh, np.dtype(np.float64), alpha=0.5, beta=-2.0, c=c0[i])
