"""tf32wgmma without a GPU: its shared-memory layout, descriptor, policy and errors.

The kernel itself runs on Hopper only (``wgmma``); the GPU suite checks its results
(``tests/test_gpu_tf32mma.py``), ``tests/test_targets_build.py`` that it builds for sm_90a.
"""

from __future__ import annotations

import numpy as np
import pytest

import dxgemm
from dxgemm import policy
from dxgemm.gpus import DEVICES
from dxgemm.kernels import compile_target
from dxgemm.kernels import tf32wgmma as W


@pytest.mark.parametrize("bn", [64, 128, 256])
def test_swizzled_lines_are_a_permutation_within_each_line(bn):
    """Every (n, k) of a B tile has its own float, inside its own 128-byte line, and the chunks
    of eight consecutive columns at one k land in eight different 16-byte bank groups (the
    split's stores: conflict-free)."""
    places = {W.swizzled_index(n, k): (n, k) for n in range(bn) for k in range(W.BK)}
    assert sorted(places) == list(range(bn * W.BK))
    assert all(place // W.BK == n for place, (n, _) in places.items())
    for n0 in range(0, bn, 8):
        for k in range(0, W.BK, 4):
            groups = {(W.swizzled_index(n, k) % 32) // 4 for n in range(n0, n0 + 8)}
            assert len(groups) == 8


def test_descriptor_fields():
    """Start address / 16 in bits 0-13, leading offset 16 B, stride 1024 B, 128-byte swizzle."""
    d = W.descriptor(0x1_2340)
    assert d & 0x3FFF == (0x1_2340 >> 4) & 0x3FFF
    assert (d >> 16) & 0x3FFF == 1
    assert (d >> 32) & 0x3FFF == 1024 >> 4
    assert (d >> 49) & 0x7 == 0 and d >> 62 == 1
    with pytest.raises(ValueError, match="tiles"):
        W.tile_config("tf32x3_small")


def test_compiled_for_the_architecture_specific_target():
    assert compile_target("tf32wgmma", (9, 0)) == (9, 0, "a")
    assert compile_target("tf32mma", (9, 0)) == (9, 0)
    assert compile_target("warptile", (8, 9)) == (8, 9)


def test_shared_memory_fits_hopper_only():
    for tile in W.CONFIGS:
        assert W.smem_bytes(tile) <= DEVICES["H100"].smem_per_block
    assert policy.tf32_wgmma_fits(DEVICES["H100"]) and policy.tf32_wgmma_fits(DEVICES["H200"])
    for name, device in DEVICES.items():
        if tuple(device.cc) != (9, 0):
            assert not policy.tf32_wgmma_fits(device), name


@pytest.mark.parametrize("precision", ["tf32x3", "tf32"])
def test_auto_takes_wgmma_on_hopper_where_the_wave_model_says(precision):
    h100 = DEVICES["H100"]
    for m, n, k in ((4096, 4096, 4096), (2048, 2048, 2048), (8192, 4096, 1024), (16384, 16384, 256)):
        assert policy.choose_tf32_rung(precision, m, n, k, h100) == ("tf32wgmma", precision), (m, n, k)
    # thin outputs, sides of 64 and few output tiles over a long K (split) stay on tf32mma
    for m, n, k in ((4096, 16, 4096), (64, 4096, 4096), (256, 256, 16384)):
        assert policy.choose_tf32_rung(precision, m, n, k, h100)[0] == "tf32mma", (m, n, k)
    assert policy.choose_tf32_rung(precision, 4096, 4096, 4096, h100, wgmma=False)[0] == "tf32mma"
    for name, device in DEVICES.items():
        if tuple(device.cc) != (9, 0):
            assert policy.choose_tf32_rung(precision, 4096, 4096, 4096, device)[0] == "tf32mma", name
    assert policy.choose_split_k("tf32wgmma", np.float32, 256, 256, 65536, precision, h100) == 1


def test_refused_with_a_clear_error_where_it_cannot_run():
    """Under Numba's simulator (this suite) the backend is not available, and asking for it says
    why; float64, batches and groups are refused naming what they take instead."""
    assert "tf32wgmma" in dxgemm.BACKENDS and dxgemm.BACKEND_DTYPES["tf32wgmma"] == (np.dtype(np.float32),)
    assert "tf32wgmma" not in dxgemm.available_backends()
    from numba import cuda

    rng = np.random.default_rng(3)
    a = cuda.to_device(rng.standard_normal((9, 7)).astype(np.float32))
    b = cuda.to_device(rng.standard_normal((7, 5)).astype(np.float32))
    with pytest.raises(ValueError, match="tf32wgmma.*wgmma.*simulator"):
        dxgemm.gemm(a, b, backend="tf32wgmma")
    with pytest.raises(ValueError, match="precision"):
        dxgemm.gemm(a, b, backend="tf32wgmma", precision="ieee")
    a64 = cuda.to_device(rng.standard_normal((9, 7)))
    with pytest.raises(TypeError, match="float32 only"):
        dxgemm.gemm(a64, cuda.to_device(rng.standard_normal((7, 5))), backend="tf32wgmma")
    batch = cuda.to_device(rng.standard_normal((2, 9, 7)).astype(np.float32))
    with pytest.raises(ValueError, match="one matrix per launch"):
        dxgemm.gemm(batch, b, backend="tf32wgmma")
    with pytest.raises(ValueError, match="one problem per launch"):
        dxgemm.grouped_gemm([(a, b)], backend="tf32wgmma")
