"""``precision=`` under Numba's CUDA simulator: each value reaches its path, bad ones are refused."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

import dxgemm
from dxgemm import testing

M, K, N = 19, 45, 23


def _operands(kind: str = "same_sign"):
    a, b = testing.make_data(kind, (M, K, N), np.float32, np.random.default_rng(34))
    return a, b, cuda.to_device(a), cuda.to_device(b)


@pytest.mark.parametrize("precision", [None, "tf32x3", "ieee"])
def test_float32_accuracy_paths(precision):
    a, b, a_d, b_d = _operands()
    d = cuda.to_device(np.full((M, N), np.nan, np.float32))
    dxgemm.gemm(a_d, b_d, d, **({} if precision is None else {"precision": precision}))
    out = d.copy_to_host()
    split = 1 if precision == "ieee" else 3
    testing.assert_close(out, a.astype(np.float64), b.astype(np.float64), np.dtype(np.float32), split=split)


def test_tf32_is_tf32():
    """One TF32 pass: within TF32's bound, and visibly less accurate than float32 on random data."""
    a, b, a_d, b_d = _operands("normal")
    d = dxgemm.gemm(a_d, b_d, precision="tf32").copy_to_host()
    err = testing.relative_error(d, a.astype(np.float64), b.astype(np.float64))
    assert 2.0**-20 < err <= testing.tf32_bound(K)


@pytest.mark.parametrize("dtype, kwargs, error, match", [
    (np.float32, {"precision": "bf16"}, ValueError, "unknown precision"),
    (np.float64, {"precision": "tf32"}, ValueError, "applies to float32"),
    (np.float64, {"backend": "tf32mma"}, TypeError, "float32 only"),
    (np.float32, {"backend": "warptile", "precision": "tf32x3"}, ValueError, "'ieee' only"),
    (np.float32, {"backend": "tf32mma", "precision": "ieee"}, ValueError, "'tf32x3' or 'tf32'"),
])
def test_refused(dtype, kwargs, error, match):
    a = cuda.to_device(np.ones((3, 4), dtype))
    b = cuda.to_device(np.ones((4, 5), dtype))
    d = cuda.to_device(np.full((3, 5), 7.0, dtype))
    with pytest.raises(error, match=match):
        dxgemm.gemm(a, b, d, **kwargs)
    assert (d.copy_to_host() == 7.0).all()  # refused before anything ran


def test_tf32mma_split_k_rule():
    """tf32mma slices K for outputs of few tiles (at most half the blocks the GPU holds) with K
    from TF32MMA_SPLIT_MIN_K, filling the SMs, at least TF32MMA_MIN_SLICE_K of K a slice, at
    most TF32MMA_MAX_SLICES; its slices run the tile's split variant."""
    from dxgemm.gpus import DEVICES
    from dxgemm.kernels.tf32mma import CONFIGS
    from dxgemm.policy import (TF32MMA_MAX_SLICES, TF32MMA_MIN_SLICE_K, TF32MMA_SPLIT_MIN_K, choose_split_k,
                               split_part_tile)

    f32 = np.dtype(np.float32)
    h100 = DEVICES["H100"]
    assert choose_split_k("tf32mma", f32, 16, 16, 16384, "tf32x3_small", h100) == TF32MMA_MAX_SLICES
    assert choose_split_k("tf32mma", f32, 256, 256, 4096, "tf32", h100) == 4096 // TF32MMA_MIN_SLICE_K  # 4 tiles
    assert choose_split_k("tf32mma", f32, 1024, 1024, 16384, "tf32x3", h100) == 2  # 64 tiles on 132 SMs
    assert choose_split_k("tf32mma", f32, 1024, 1024, 16384, "tf32x3_small", h100) == 1  # 256 of 396 resident
    assert choose_split_k("tf32mma", f32, 4096, 4096, 4096, "tf32x3", h100) == 1  # a full GPU of tiles
    assert choose_split_k("tf32mma", f32, 16, 16, TF32MMA_SPLIT_MIN_K - 1, "tf32x3", h100) == 1  # K too short
    for tile in [t for t in CONFIGS if t != "large" and not t.endswith("_split")]:
        assert split_part_tile("tf32mma", tile, 16, 16, np.float32) in CONFIGS
        assert CONFIGS[split_part_tile("tf32mma", tile, 16, 16, np.float32)]["mode"] == tile.split("_")[0]
    assert split_part_tile("warptile", "small", 4096, 64, np.float64) == "split_narrow"
    assert split_part_tile("warptile", "small", 64, 4096, np.float64) == "split_wide"
    assert split_part_tile("warptile", "small", 4096, 64, np.float32) == "split"


def test_thin_outputs_take_the_thin_tiles():
    """An output side <= 16 runs tf32mma's 128x16 (few columns) or 16x128 (few rows) tile,
    unbatched and batched; 17 and wider the wave model's 64x64 or 128x128 tile."""
    from dxgemm.policy import EpilogueTraits, THIN_SIDE, batched_choice, choose_tf32_tile

    f32 = np.dtype(np.float32)
    assert choose_tf32_tile("tf32x3", 16384, 16, 16384) == "tf32x3_narrow"
    assert choose_tf32_tile("tf32", 4096, 1, 4096) == "tf32_narrow"
    assert choose_tf32_tile("tf32x3", 16, 4096, 4096) == "tf32x3_flat"
    assert choose_tf32_tile("tf32x3", 16, 16, 16384) == "tf32x3_narrow"  # a tie: the columns decide
    assert choose_tf32_tile("tf32x3", 4096, THIN_SIDE + 1, 4096) == "tf32x3_small"
    assert choose_tf32_tile("tf32x3", 4096, 4096, 4096) == "tf32x3"
    traits = EpilogueTraits.of(None)
    assert batched_choice("auto", f32, 4096, 8, 4096, 32, single_rows=False, traits=traits,
                          precision="tf32x3") == ("tf32mma", "tf32x3_narrow")
    assert batched_choice("auto", f32, 64, 64, 256, 4096, single_rows=False, traits=traits,
                          precision="tf32x3") == ("tf32mma", "tf32x3_small")


def test_float64_thin_outputs_take_warptile_thin_tiles():
    """float64 with an output side <= THIN_SIDE runs warptile's 128x16 or 16x128 tile under
    auto (not the pipeline), split with the slots of its two blocks a SM; where two do not
    fit an SM (Ada, A100) the 64x64 tile."""
    from dxgemm.gpus import DEVICES
    from dxgemm.policy import THIN_SIDE, choose_backend, choose_split_k, choose_split_tile, choose_tile

    f64 = np.dtype(np.float64)
    h100 = DEVICES["H100"]
    assert choose_backend(f64, 16384, 16, 16384, pipeline=True, device=h100) == "warptile"
    assert choose_tile("warptile", f64, 16384, 16, 16384, h100) == "n16"
    assert choose_tile("warptile", f64, 16, 4096, 4096, h100) == "m16"
    assert choose_tile("warptile", f64, 4096, THIN_SIDE + 1, 4096, h100) != "n16"
    assert choose_split_tile(16384, 16) == "split_n16" and choose_split_tile(16, 4096) == "split_m16"
    assert choose_split_k("warptile", f64, 16384, 16, 16384, "n16", h100) == 2  # 128 tiles in 264 slots
    assert choose_split_k("warptile", f64, 16, 4096, 4096, "m16", h100) == 8  # 32 tiles in 264 slots
    assert choose_tile("warptile", f64, 16384, 16, 16384, DEVICES["L40S"]) == "tiny"
    assert choose_tile("warptile", f64, 16384, 16, 16384, DEVICES["A100"]) == "tiny"
