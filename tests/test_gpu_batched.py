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
from dxgemm.testing import assert_close, check_float32_contract, relative_error, tf32_bound

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
            assert_close(got[index], a64, b64, np.dtype(dtype), unbiased=False)


@pytest.mark.parametrize("backend, dtype", [("auto", np.float64), ("auto", np.float32), ("warptile", np.float32),
                                            ("naive", np.float64), ("tf32wgmma", np.float32), ("tf32mma", np.float32)])
def test_broadcast_batch_at_edge_sizes(rng, backend, dtype):
    m, n, k = (129, 95, 257) if backend == "naive" else (300, 260, 1000)
    a = cp.asarray((rng.uniform(0.5, 1.0, (3, 1, m, k)) * 2.0 ** rng.integers(-6, 7, (3, 1, m, k))).astype(dtype))
    b = cp.asarray(rng.standard_normal((2, k, n)).astype(dtype))
    d = cp.full((3, 2, m, n), cp.nan, dtype)
    dxgemm.gemm(a, b, d, backend=backend)
    _entries(d, a, b, dtype, contract=backend in ("auto", "tf32wgmma", "tf32mma"))


@pytest.mark.parametrize("backend", ["tf32wgmma"])  # named, so conftest skips it where it cannot run
@pytest.mark.parametrize("precision", ["tf32x3", "tf32"])
def test_wgmma_batch_with_reversed_transposed_entries_and_a_bias_each(rng, precision, backend):
    """tf32wgmma over a batch: a negative batch stride, column-major B entries, edge tiles on
    both sides and a bias per entry (a moved epilogue array); tf32x3 held to the float32
    contract, one TF32 pass to TF32's bound (:func:`dxgemm.testing.tf32_bound`)."""
    batch, m, n, k = 5, 200, 330, 777
    a_host = rng.uniform(0.5, 1.5, (batch, m, k)).astype(np.float32)
    b_host = rng.standard_normal((batch, k, n)).astype(np.float32)
    a = cp.asarray(a_host[::-1].copy())[::-1]
    b = cp.asarray(np.swapaxes(b_host, 1, 2).copy()).swapaxes(1, 2)
    v = cp.asarray(rng.standard_normal((batch, n)).astype(np.float32))
    d = cp.full((batch, m, n), cp.nan, np.float32)
    dxgemm.gemm(a, b, d, epilogue=E.bias(v), backend=backend, precision=precision)
    vh = cp.asnumpy(v)
    got = cp.asnumpy(d)
    assert not np.isnan(got).any(), "an output element was left unwritten"
    for i in range(batch):
        a64, b64 = a_host[i].astype(np.float64), b_host[i].astype(np.float64)
        c64 = np.broadcast_to(vh[i].astype(np.float64), (m, n))  # the bias as C with beta = 1
        if precision == "tf32x3":
            sgemm = cp.asnumpy(cp.matmul(cp.asarray(a_host[i]), cp.asarray(b_host[i]))) + vh[i][None, :]
            check_float32_contract(got[i].astype(np.float64), a64, b64, sgemm=sgemm, beta=1.0, c=c64)
        else:
            err = relative_error(got[i].astype(np.float64), a64, b64, beta=1.0, c=c64)
            assert err <= tf32_bound(k), (i, err, tf32_bound(k))


def test_batch_past_the_grid_limit(rng):
    """More entries than gridDim.z takes (65535): each block runs several entries in turn."""
    count, m, n, k = 70000, 9, 10, 11
    a = cp.asarray(rng.uniform(0.5, 1.5, (count, m, k)))
    b = cp.asarray(rng.standard_normal((count, k, n)))
    d = cp.full((count, m, n), cp.nan)
    dxgemm.gemm(a, b, d)
    assert not bool(cp.isnan(d).any())
    _entries(d, a, b, np.float64, picks=[(0,), (65534,), (65535,), (69999,)])


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
@pytest.mark.parametrize("tile, count, m, n", [("tiny_batched", 700, 70, 100), ("micro_batched", 3000, 30, 50)])
def test_batch_of_small_odd_entries_on_the_batched_tiny_tiles(rng, dtype, tile, count, m, n):
    """Entries of 70 x 100 and 30 x 50 (part blocks on both sides) and K = 37 (a part K tile), enough
    of them for ``warptile``'s batched small tiles; a bias per entry."""
    from dxgemm import policy
    from dxgemm.runtime.device import device_info

    k = 37
    assert policy.choose_batched_tile("warptile", np.dtype(dtype), m, n, k, count,
                                      device_info(cp.cuda.Device().id)) == tile
    a = cp.asarray(rng.uniform(0.5, 1.5, (count, m, k)).astype(dtype))
    b = cp.asarray((rng.standard_normal((count, k, n)) * np.exp2(rng.integers(-8, 8, (count, k, n)))).astype(dtype))
    v = cp.asarray(rng.standard_normal((count, 1, n)).astype(dtype))
    d = cp.full((count, m, n), cp.nan, dtype)
    dxgemm.gemm(a, b, d, backend="warptile", epilogue=E.bias(v.reshape(count, n)))
    vh = cp.asnumpy(v).astype(np.float64)
    _entries(d, a, b, dtype, then=lambda i, x: x + vh[i], picks=[(0,), (1,), (350,), (count - 1,)])


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
@pytest.mark.parametrize("tile", ["large", "batched_wide", "batched"])
def test_single_row_entries_take_gemv(rng, dtype, tile):
    """A short batch of single rows runs gemv's single-call tile, longer ones its batched tiles
    (n is chosen from this GPU's SM count so that the batch just reaches the tile's threshold, with
    a part block at the edge; a multiple of the vector width, so B's rows stay 16-byte aligned)."""
    from dxgemm import policy
    from dxgemm.kernels.gemv import TILE_CONFIGS
    from dxgemm.runtime.device import device_info

    device = device_info(cp.cuda.Device().id)
    count, k = 2, 4096
    n = 1000
    if tile != "large":
        cols, lanes, _ = TILE_CONFIGS[np.dtype(dtype).name][tile]
        blocks = -(-policy.GEMV_BATCHED_THREADS_PER_SM[tile] * device.sm_count // (32 * lanes))
        n = cols * -(-blocks // count) - 16 // np.dtype(dtype).itemsize
    assert policy.choose_batched_tile("gemv", np.dtype(dtype), 1, n, k, count, device) == tile
    a = cp.asarray(rng.uniform(0.5, 1.5, (count, 1, k)).astype(dtype))
    b = cp.asarray(rng.standard_normal((count, k, n)).astype(dtype))
    d = cp.full((count, 1, n), cp.nan, dtype)
    dxgemm.gemm(a, b, d)
    _entries(d, a, b, dtype, picks=[(0,), (count - 1,)])


def test_beta_reads_each_entry_of_c(rng):
    a = cp.asarray(rng.standard_normal((4, 200, 300)))
    b = cp.asarray(rng.standard_normal((300, 150)))
    c0 = rng.standard_normal((4, 200, 150))
    c = cp.asarray(c0)
    dxgemm.gemm(a, b, c, alpha=0.5, beta=-2.0)
    ah, bh = cp.asnumpy(a), cp.asnumpy(b)
    for i in range(4):
        assert_close(cp.asnumpy(c[i]), ah[i], bh, np.dtype(np.float64), alpha=0.5, beta=-2.0, c=c0[i], unbiased=False)


@pytest.mark.parametrize("dtype, backend", [(np.float64, "auto"), (np.float32, "auto"), (np.float32, "tf32wgmma")])
def test_grouped_problems_of_every_shape(rng, dtype, backend):
    """Problems of different m, n, k (tile edges, a single row, K = 0, an empty one), each with its
    own bias, in one launch."""
    shapes = [(300, 260, 1000), (1, 4096, 512), (129, 1, 77), (0, 64, 64), (64, 64, 0), (2048, 512, 1024),
              (17, 33, 5)]
    problems, host, biases = [], [], []
    for m, n, k in shapes:
        a = rng.uniform(0.5, 1.5, (m, k)).astype(dtype)
        b = rng.standard_normal((k, n)).astype(dtype)
        v = rng.standard_normal(n).astype(dtype)
        host.append((a, b, v))
        problems.append((cp.asarray(a), cp.asarray(b), cp.full((m, n), cp.nan, dtype)))
        biases.append(cp.asarray(v))
    outs = dxgemm.grouped_gemm(problems, epilogue=[E.bias(v) | E.relu() for v in biases], backend=backend)
    for g, ((a, b, v), out) in enumerate(zip(host, outs)):
        assert out is problems[g][2]
        got = cp.asnumpy(out)
        assert not np.isnan(got).any(), g
        ref = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + v, 0)
        scale = (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)) + np.abs(v)).max() if got.size else 1
        assert np.abs(got - ref).max(initial=0) <= 8 * np.sqrt(max(a.shape[1], 1)) * np.finfo(dtype).eps * scale, g


def test_repeat_calls_take_new_addresses_and_scalars(rng):
    """The second call of a signature runs the kept launch: new arrays, alpha and beta must reach it."""
    shape_a, shape_b = (3, 2, 70, 90), (2, 90, 50)
    for alpha, beta in ((1.0, 0.0), (-0.5, 0.0), (2.0, 0.5), (0.25, -1.0)):
        a = cp.asarray(rng.uniform(0.5, 1.5, shape_a))
        b = cp.asarray(rng.standard_normal(shape_b))
        c0 = rng.standard_normal((3, 2, 70, 50))
        c = cp.asarray(c0)
        dxgemm.gemm(a, b, c, alpha=alpha, beta=beta)
        ah, bh = cp.asnumpy(a), cp.asnumpy(b)
        for i in np.ndindex(3, 2):
            assert_close(cp.asnumpy(c[i]), ah[i], bh[i[1]], np.dtype(np.float64), alpha=alpha, beta=beta,
                  c=c0[i] if beta else None, unbiased=False)
    for _ in range(3):  # a per-entry bias: its new address each call
        v = cp.asarray(rng.standard_normal((3, 2, 50)))
        d = dxgemm.gemm(a, b, epilogue=E.bias(v))
        vh = cp.asnumpy(v)
        _entries(d, a, b, np.float64, then=lambda i, x: x + vh[i][None, :])
    d1 = dxgemm.gemm(a, b)
    d2 = dxgemm.gemm(a, b)  # a new output each call
    assert d1.data.ptr != d2.data.ptr
    np.testing.assert_array_equal(cp.asnumpy(d1), cp.asnumpy(d2))


@pytest.mark.parametrize("kind", ["same_sign", "positive_outer"])
@pytest.mark.parametrize("m, n, k, count", [(24, 40, 4096, 256), (64, 64, 4096, 8), (100, 70, 16384, 3)])
def test_float32_default_keeps_the_contract_at_deep_k(kind, m, n, k, count):
    """The float32 default over a batch of small entries at deep K, which a batch does not split:
    each entry within the contract of its own SGEMM.  On Hopper the TF32 rungs; where IEEE
    warptile runs it (DXGEMM_DEVICE_AS=L40S) the three-level sums of the 32x32 batched tile (256
    entries of 24x40 fill the SMs' blocks) and of the tiny tile (the policy's choice over the
    64x64 batched one at that K)."""
    from dxgemm.testing import make_data

    rng = np.random.default_rng(m + k + count)
    pairs = [make_data(kind, (m, k, n), np.float32, rng) for _ in range(count)]
    a = cp.asarray(np.stack([p[0] for p in pairs]))
    b = cp.asarray(np.stack([p[1] for p in pairs]))
    d = cp.full((count, m, n), cp.nan, cp.float32)
    dxgemm.gemm(a, b, d)
    _entries(d, a, b, np.float32, picks=[(i,) for i in range(0, count, max(1, count // 8))])
