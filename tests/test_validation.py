"""Every bad input gets a clear Python exception naming the argument."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

import dxgemm


def dev(shape, dtype=np.float64):
    return cuda.to_device(np.ones(shape, dtype))


def test_mismatched_inner_dimensions():
    with pytest.raises(ValueError, match=r"inner dimensions.*a is 3x4, b is 5x2"):
        dxgemm.gemm(dev((3, 4)), dev((5, 2)))


def test_c_of_wrong_shape():
    with pytest.raises(ValueError, match=r"c has shape \(3, 3\).*\(3, 2\)"):
        dxgemm.gemm(dev((3, 4)), dev((4, 2)), dev((3, 3)))


def test_mixed_dtypes():
    with pytest.raises(TypeError, match="same dtype.*float64.*float32"):
        dxgemm.gemm(dev((3, 4)), dev((4, 2), np.float32))


def test_c_of_other_dtype():
    with pytest.raises(TypeError, match="c has dtype float32"):
        dxgemm.gemm(dev((3, 4)), dev((4, 2)), dev((3, 2), np.float32))


@pytest.mark.parametrize("dtype", [np.float16, np.int32, np.complex64])
def test_unsupported_dtypes(dtype):
    with pytest.raises(TypeError, match="float32 and float64"):
        dxgemm.gemm(dev((3, 4), dtype), dev((4, 2), dtype))


def test_not_a_matrix():
    with pytest.raises(ValueError, match=r"a must be a 2-D matrix or a batch of them .*got 1-D"):
        dxgemm.gemm(dev((12,)), dev((4, 2)))


def test_three_dimensions_are_a_batch():
    assert dxgemm.gemm(dev((2, 3, 4)), dev((4, 2))).shape == (2, 3, 2)


def test_host_numpy_arrays_refused():
    with pytest.raises(TypeError, match="b is a NumPy array in host memory"):
        dxgemm.gemm(dev((3, 4)), np.ones((4, 2)))


def test_unknown_objects_refused():
    with pytest.raises(TypeError, match="a of type list is not a GPU array"):
        dxgemm.gemm([[1.0]], dev((1, 1)))


def test_unknown_backend():
    with pytest.raises(ValueError, match="unknown backend 'fast'.*naive, coalesced"):
        dxgemm.gemm(dev((3, 4)), dev((4, 2)), backend="fast")


def test_output_overlapping_input():
    buf = cuda.to_device(np.ones((4, 8)))
    with pytest.raises(ValueError, match="c overlaps a"):
        dxgemm.gemm(buf[:, :4], dev((4, 4)), buf[:, 4:])


def test_output_without_unit_stride():
    c = cuda.to_device(np.ones((6, 6)))[::2, ::2]
    with pytest.raises(ValueError, match="c has strides.*unit stride"):
        dxgemm.gemm(dev((3, 4)), dev((4, 3)), c)


def test_input_without_unit_stride_is_copied():
    from dxgemm.testing import assert_close, make_data

    host, b = make_data("wide_exponent", (6, 8, 3), np.float64, np.random.default_rng(6))  # B not ones: columns differ
    a = cuda.to_device(host)[::2, ::2]
    b = np.ascontiguousarray(b[::2])
    out = dxgemm.gemm(a, cuda.to_device(b), backend="naive").copy_to_host()
    assert_close(out, host[::2, ::2], b, np.dtype(np.float64))


def test_epilogue_must_be_an_epilogue():
    with pytest.raises(TypeError, match="epilogue must be a dxgemm.epilogues.Epilogue"):
        dxgemm.gemm(dev((3, 4)), dev((4, 2)), epilogue=lambda x: x)


@pytest.mark.parametrize("name,value", [("alpha", "2"), ("beta", None), ("alpha", True)])
def test_scalars_must_be_real(name, value):
    with pytest.raises(TypeError, match=f"{name} must be a real number"):
        dxgemm.gemm(dev((3, 4)), dev((4, 2)), **{name: value})


def test_bad_stream():
    with pytest.raises(TypeError, match="stream of type str"):
        dxgemm.gemm(dev((3, 4)), dev((4, 2)), stream="fast")


@pytest.mark.parametrize("backend", ["naive", "warptile"])
def test_rows_past_the_grid_limit_are_refused_before_anything_runs(backend):
    """CUDA caps ``gridDim.y``, which walks the row blocks: more rows than one launch can cover
    raise ValueError naming the limit, and the output is left as it was."""
    from dxgemm.kernels._spec import MAX_GRID_Y

    tile_m = 16 if backend == "naive" else 128  # float64's 128x16 tile for a 3-column output
    m = MAX_GRID_Y * tile_m + 1
    a = cuda.to_device(np.full((m, 1), 1.5))
    b = cuda.to_device(np.full((1, 3), 2.0))
    c = cuda.to_device(np.full((m, 3), np.nan))
    with pytest.raises(ValueError, match=rf"m = {m} rows need .* at most {MAX_GRID_Y} \(CUDA's grid limit\)"):
        dxgemm.gemm(a, b, c, backend=backend)
    assert np.isnan(c.copy_to_host()).all()
    from dxgemm.kernels._spec import launch_grid

    assert launch_grid(MAX_GRID_Y * tile_m, 3, tile_m, 16) == (1, MAX_GRID_Y)  # the last row that fits
