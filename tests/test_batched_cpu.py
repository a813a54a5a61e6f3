"""Batched ``dxgemm.gemm`` under the CUDA simulator: NumPy ``matmul``'s broadcasting, any strides,
per-entry epilogues, zero sizes and the errors, against a float64 NumPy reference per entry.

Outputs start as NaN (an entry or element left unwritten stays NaN); inputs are same-sign or
wide-range data, never ones (an entry read from the wrong place must change the result).
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda
from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

import dxgemm
from dxgemm import epilogues as E
from dxgemm.runtime import batch_launch
from dxgemm.testing import assert_close

RNG = np.random.default_rng(20261127)



def data(shape, dtype, kind="same_sign"):
    """Inputs that expose a misplaced read: same-sign (a bias survives) or wide-range values."""
    if kind == "same_sign":
        return RNG.uniform(0.5, 1.5, shape).astype(dtype)
    return (RNG.standard_normal(shape) * np.exp2(RNG.integers(-8, 9, shape))).astype(dtype)


def on_device(host, how="row"):
    """A simulated device array over ``host`` arranged ``how``: row (C order), col (Fortran order),
    view (a slice of a larger NaN buffer), reversed (batch dimension 0 reversed),
    T (each matrix a transposed view)."""
    if how == "row":
        return cuda.to_device(np.ascontiguousarray(host))
    if how == "col":  # the whole array in Fortran order: no unit stride within a matrix (an input is copied)
        return FakeCUDAArray(np.asfortranarray(host))
    if how == "view":
        big = np.full(host.shape[:-2] + (host.shape[-2] + 3, host.shape[-1] + 5), np.nan, host.dtype)
        big[..., 1:1 + host.shape[-2], 2:2 + host.shape[-1]] = host
        return FakeCUDAArray(big[..., 1:1 + host.shape[-2], 2:2 + host.shape[-1]])
    if how == "reversed":
        return FakeCUDAArray(np.ascontiguousarray(host[::-1])[::-1])
    if how == "T":
        return FakeCUDAArray(np.ascontiguousarray(np.swapaxes(host, -1, -2)).swapaxes(-1, -2))
    raise ValueError(how)


def expected(a, b, *, alpha=1.0, beta=0.0, c=None):
    """float64 ``alpha * a @ b + beta * c`` with NumPy's broadcasting."""
    out = alpha * np.matmul(a.astype(np.float64), b.astype(np.float64))
    return out + beta * c.astype(np.float64) if c is not None else out


def check_entries(got, a, b, dtype, *, alpha=1.0, beta=0.0, c=None, then=None):
    """Each entry within ``dxgemm.testing.check``'s bound of its float64 reference; ``then``
    (float64 result -> float64) the epilogue's reference, applied before the comparison."""
    batch = got.shape[:-2]
    assert not np.isnan(got).any(), "an output element was left unwritten"
    ab = np.broadcast_to(a, batch + a.shape[-2:])
    bb = np.broadcast_to(b, batch + b.shape[-2:])
    for index in np.ndindex(*batch):
        ce = c[index].astype(np.float64) if c is not None else None
        if then is None:
            assert_close(got[index], ab[index], bb[index], np.dtype(dtype), alpha=alpha, beta=beta, c=ce,
                         unbiased=False)
        else:
            ref = then(index, expected(ab[index], bb[index], alpha=alpha, beta=beta, c=ce))
            scale = np.abs(ref).max() + 1.0
            assert np.abs(got[index] - ref).max() <= 64 * np.finfo(dtype).eps * scale * ab.shape[-1], index


# auto float32 is tf32mma (slow under the simulator) except at m = 1 (gemv): that case runs it
BACKENDS = [("naive", np.float64), ("warptile", np.float64), ("warptile", np.float32), ("tf32mma", np.float32),
            ("auto", np.float64)]

SHAPES = [  # a, b: broadcasting of every kind
    ((3, 1, 5, 9), (4, 9, 6)),
    ((2, 5, 9), (9, 6)),  # a 2-D b broadcasts against a batch
    ((5, 9), (2, 3, 9, 6)),
    ((1, 5, 9), (4, 9, 6)),
    ((2, 1, 9), (2, 9, 7)),  # m = 1: auto's gemv
]


@pytest.mark.parametrize("backend, dtype", BACKENDS, ids=[f"{b}-{np.dtype(t).name}" for b, t in BACKENDS])
@pytest.mark.parametrize("shapes", SHAPES, ids=lambda s: f"{s[0]}@{s[1]}")
def test_broadcasting_matches_numpy_matmul(backend, dtype, shapes):
    if backend == "tf32mma" and shapes[0] == (3, 1, 5, 9):
        shapes = ((3, 1, 5, 9), (2, 9, 6))  # the same broadcast in fewer entries: 256-thread blocks are slow here
    _check_broadcast(backend, dtype, shapes)


def test_auto_float32_single_rows_take_gemv():
    _check_broadcast("auto", np.float32, ((2, 1, 9), (2, 9, 7)))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("how_b, n, tile", [("row", 40, "batched"), ("row", 40, "batched_wide"), ("padded", 41, "batched"),
                                            ("shifted", 41, "batched"), ("T", 41, "batched")])
def test_single_rows_on_gemvs_batched_tile(monkeypatch, dtype, how_b, n, tile):
    """gemv's batched tiles (chosen where a batch of single rows fills the GPU; forced here): K = 200
    runs the four-load loop and the tail, and the columns end in a part block.  B row-major takes
    the vector loads; ``padded`` (41 columns of rows 48 apart) ends in a part vector, read element
    by element; ``shifted`` (one element into its buffer) is not 16-byte aligned, so every thread
    reads element by element; ``T`` (column-major) runs the scalar kernel with lanes along K."""
    from dxgemm import policy

    monkeypatch.setattr(policy, "GEMV_BATCHED_THREADS_PER_SM", {tile: 0})
    assert policy.choose_batched_tile("gemv", np.dtype(dtype), 1, n, 200, 2) == tile
    a = data((2, 1, 200), dtype, "wide")
    b = data((2, 200, n), dtype)
    v = data((2, n), dtype, "wide")
    if how_b in ("padded", "shifted"):
        buffer = np.full((2, 200, 48), np.nan, dtype)
        start = 1 if how_b == "shifted" else 0
        buffer[:, :, start:start + n] = b
        b_dev = FakeCUDAArray(buffer[:, :, start:start + n])
    else:
        b_dev = on_device(b, how_b)
    d = cuda.to_device(np.full((2, 1, n), np.nan, dtype))
    dxgemm.gemm(on_device(a), b_dev, d, epilogue=E.bias(on_device(v)))
    check_entries(d.copy_to_host(), a, b, dtype, then=lambda i, x: x + v[i].astype(np.float64)[None, :])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("tile, m, n", [("tiny_batched", 70, 65), ("micro_batched", 20, 45)])
@pytest.mark.parametrize("how_a, how_b", [("row", "T"), ("col", "row"), ("view", "view")])
def test_small_entries_on_warptiles_batched_tiny_tiles(monkeypatch, dtype, tile, m, n, how_a, how_b):
    """``warptile``'s batched small tiles (chosen for many small entries; forced here): 70 x 65 and
    20 x 45 entries leave part blocks on both sides, K = 37 a part K tile; A and B row-major,
    column-major and unaligned views."""
    from dxgemm import policy

    monkeypatch.setattr(policy, "TINY_BATCHED_MIN_BLOCKS_PER_SM", 0)
    assert policy.choose_batched_tile("warptile", np.dtype(dtype), m, n, 37, 2) == tile
    a = data((2, m, 37), dtype, "wide")
    b = data((2, 37, n), dtype)
    d = cuda.to_device(np.full((2, m, n), np.nan, dtype))
    dxgemm.gemm(on_device(a, how_a), on_device(b, how_b), d, backend="warptile")
    check_entries(d.copy_to_host(), a, b, dtype)


def _check_broadcast(backend, dtype, shapes):
    a = data(shapes[0], dtype)
    b = data(shapes[1], dtype, "wide")
    got = dxgemm.gemm(on_device(a), on_device(b), backend=backend).copy_to_host()
    assert got.shape == np.matmul(a, b).shape
    check_entries(got, a, b, dtype)


@pytest.mark.parametrize("backend, dtype", [("warptile", np.float64), ("tf32mma", np.float32), ("naive", np.float32)])
@pytest.mark.parametrize("how_a, how_b", [("col", "T"), ("view", "reversed"), ("T", "view"), ("reversed", "col")])
def test_every_layout_and_batch_stride(backend, dtype, how_a, how_b):
    a = data((3, 7, 10), dtype, "wide")
    b = data((3, 10, 5), dtype)
    c = on_device(np.full((3, 7, 5), np.nan, dtype), "view")  # entries apart, NaN outside and inside
    out = dxgemm.gemm(on_device(a, how_a), on_device(b, how_b), c, backend=backend)
    assert out is c
    check_entries(c.copy_to_host(), a, b, dtype)


def test_a_zero_batch_stride_reads_one_matrix_for_every_entry():
    a = data((6, 8), np.float64)
    b = data((4, 8, 5), np.float64, "wide")
    repeated = FakeCUDAArray(np.lib.stride_tricks.as_strided(a, shape=(4, 6, 8), strides=(0,) + a.strides))
    got = dxgemm.gemm(repeated, on_device(b), backend="warptile").copy_to_host()
    check_entries(got, np.broadcast_to(a, (4, 6, 8)), b, np.float64)


def test_a_batch_beyond_the_grid_loops_over_it(monkeypatch):
    """More entries than ``gridDim.z`` may hold: each block walks entries ``z, z + gz, ...``."""
    monkeypatch.setattr(batch_launch, "MAX_GRID_Z", 2)
    a = data((5, 4, 6), np.float32)
    b = data((5, 6, 3), np.float32, "wide")
    got = dxgemm.gemm(on_device(a), on_device(b), backend="naive").copy_to_host()
    check_entries(got, a, b, np.float32)


def test_alpha_beta_with_a_batched_c():
    a = data((2, 3, 5, 7), np.float64)
    b = data((3, 7, 4), np.float64, "wide")
    c_host = data((2, 3, 5, 4), np.float64, "wide")
    c = on_device(c_host, "T")
    dxgemm.gemm(on_device(a), on_device(b), c, alpha=-0.75, beta=1.5, backend="warptile")
    check_entries(c.copy_to_host(), a, b, np.float64, alpha=-0.75, beta=1.5, c=c_host)


@pytest.mark.parametrize("backend, dtype", [("warptile", np.float64), ("naive", np.float32)])
def test_bias_per_entry_in_every_shape(backend, dtype):
    a = data((2, 3, 5, 7), dtype)
    b = data((3, 7, 6), dtype, "wide")
    for shape, expand in (((2, 3, 6), lambda v, i: v[i][None, :]),  # a column bias per entry
                          ((3, 1, 6), lambda v, i: v[i[1:]]),  # per entry of the second batch dimension
                          ((2, 3, 5, 1), lambda v, i: v[i]),  # a row bias per entry
                          ((6,), lambda v, i: v[None, :])):  # one bias for every entry
        v = data(shape, dtype, "wide")
        got = dxgemm.gemm(on_device(a), on_device(b), epilogue=E.bias(on_device(v)) | E.relu(),
                          backend=backend).copy_to_host()
        check_entries(got, a, b, dtype, then=lambda i, x, v=v, expand=expand: np.maximum(x + expand(v, i), 0))


def test_a_strided_bias_per_entry_is_read_right():
    """A per-entry bias whose vectors are not contiguous (a column of a matrix, transposed)."""
    a = data((4, 5, 7), np.float64)
    b = data((4, 7, 6), np.float64, "wide")
    v = data((6, 4), np.float64, "wide")
    got = dxgemm.gemm(on_device(a), on_device(b), epilogue=E.bias(FakeCUDAArray(v).T),
                      backend="warptile").copy_to_host()
    check_entries(got, a, b, np.float64, then=lambda i, x: x + v[:, i[0]][None, :])


def test_store_and_custom_see_their_entry():
    dtype = np.float32
    a = data((3, 5, 7), dtype)
    b = data((3, 7, 6), dtype, "wide")
    scale = data((3, 6), dtype)
    pre = on_device(np.full((3, 5, 6), np.nan, dtype))

    def scaled(x, row, col, table, batch):
        return x * table[batch, col]

    got = dxgemm.gemm(on_device(a), on_device(b), backend="warptile",
                      epilogue=E.store(pre) | E.custom(scaled, on_device(scale))).copy_to_host()
    check_entries(pre.copy_to_host(), a, b, dtype)
    check_entries(got, a, b, dtype, then=lambda i, x: x * scale[i[0]][None, :])


def test_a_custom_function_without_batch_keeps_working():
    a = data((2, 4, 6), np.float64)
    b = data((2, 6, 3), np.float64, "wide")

    def shift(x, row, col):
        return x + row - col

    got = dxgemm.gemm(on_device(a), on_device(b), epilogue=E.custom(shift), backend="naive").copy_to_host()
    check_entries(got, a, b, np.float64, then=lambda i, x: x + np.arange(4)[:, None] - np.arange(3)[None, :])


@pytest.mark.parametrize("a_shape, b_shape, out_shape", [
    ((0, 4, 6), (6, 3), (0, 4, 3)),  # no entries
    ((2, 0, 6), (2, 6, 3), (2, 0, 3)),  # empty matrices
    ((2, 4, 0), (2, 0, 3), (2, 4, 3)),  # K = 0: the epilogue of zero
])
def test_zero_sizes(a_shape, b_shape, out_shape):
    a = data(a_shape, np.float64)
    b = data(b_shape, np.float64)
    got = dxgemm.gemm(on_device(a), on_device(b), epilogue=E.bias(on_device(np.full(3, 2.5))),
                      backend="warptile").copy_to_host()
    assert got.shape == out_shape
    np.testing.assert_array_equal(got, np.matmul(a, b) + 2.5)


def test_errors_name_what_is_wrong():
    a = on_device(data((3, 4, 5), np.float64))
    b = on_device(data((2, 5, 6), np.float64))
    with pytest.raises(ValueError, match=r"batch dimensions of a \(3,\) and b \(2,\) do not broadcast"):
        dxgemm.gemm(a, b)
    b = on_device(data((3, 5, 6), np.float64))
    with pytest.raises(ValueError, match=r"c of shape \(3, 4, 6\)"):
        dxgemm.gemm(a, b, on_device(np.zeros((4, 6))))
    with pytest.raises(ValueError, match="takes one matrix per launch"):
        dxgemm.gemm(a, b, backend="pipeline")
    with pytest.raises(ValueError, match=r"inner dimensions differ"):
        dxgemm.gemm(a, on_device(data((3, 4, 6), np.float64)))
    shared = FakeCUDAArray(np.lib.stride_tricks.as_strided(np.zeros((4, 6)), shape=(3, 4, 6), strides=(0, 48, 8)))
    with pytest.raises(ValueError, match="batch stride of 0"):
        dxgemm.gemm(a, b, shared)
    overlapping = FakeCUDAArray(np.lib.stride_tricks.as_strided(np.zeros(40), shape=(3, 4, 6), strides=(8, 48, 8)))
    with pytest.raises(ValueError, match="entries overlap"):
        dxgemm.gemm(a, b, overlapping)
    with pytest.raises(ValueError, match=r"bias's leading dimensions \(2,\) do not broadcast to the batch shape"):
        dxgemm.gemm(a, b, epilogue=E.bias(on_device(np.ones((2, 6)))))
    with pytest.raises(ValueError, match=r"store target has shape \(4, 6\); in this batched call"):
        dxgemm.gemm(a, b, epilogue=E.store(on_device(np.zeros((4, 6)))))
    with pytest.raises(TypeError, match="same dtype"):
        dxgemm.gemm(a, on_device(data((3, 5, 6), np.float32)))
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        dxgemm.gemm(a, on_device(np.ones(5)))


def test_merge_dims_keeps_the_order_of_entries():
    # (2, 3) contiguous for both: one dimension of 6; a broadcast operand blocks the merge
    assert batch_launch.merge_dims((2, 3), [(3, 1), (6, 2)]) == ((6,), [(1,), (2,)])
    assert batch_launch.merge_dims((2, 3), [(0, 0), (162, 54)]) == ((6,), [(0,), (54,)])
    assert batch_launch.merge_dims((2, 3), [(3, 1), (0, 2)]) == ((2, 3), [(3, 1), (0, 2)])
    assert batch_launch.merge_dims((1, 4, 1), [(9, 2, 9)]) == ((4,), [(2,)])
    assert batch_launch.merge_dims((1,), [(5,)]) == ((1,), [(0,)])
