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


@pytest.mark.parametrize("precision", ["tf32x3", "tf32"])
def test_batches_take_wgmma_on_hopper_where_the_wave_model_says(precision):
    """A batch chooses as its entries' outputs stacked would: wgmma for many large entries, tf32mma
    where an entry has a side of at most 64, where the caller cannot launch wgmma, and off Hopper."""
    h100, traits = DEVICES["H100"], policy.EpilogueTraits()
    f32 = np.dtype(np.float32)

    def choice(m, n, k, count, device=h100, **kw):
        return policy.batched_choice("auto", f32, m, n, k, count, single_rows=m == 1, traits=traits, device=device,
                                     precision=precision, **kw)

    for m, n, k, count in ((512, 512, 512, 256), (4096, 4096, 1024, 8), (1024, 1024, 1024, 16)):
        assert choice(m, n, k, count, wgmma=True) == ("tf32wgmma", precision), (m, n, k, count)
        assert choice(m, n, k, count)[0] == "tf32mma"  # the caller cannot launch it (the simulator)
    assert choice(64, 64, 256, 4096, wgmma=True) == ("tf32mma", f"{precision}_small")
    assert choice(4096, 16, 1024, 8, wgmma=True)[0] == "tf32mma"
    for name, device in DEVICES.items():
        if tuple(device.cc) != (9, 0):
            assert choice(512, 512, 512, 256, device, wgmma=True)[0] != "tf32wgmma", name
    # named backends keep their rung
    assert policy.batched_choice("tf32wgmma", f32, 512, 512, 512, 4, single_rows=False, traits=traits,
                                 precision=precision, wgmma=True) == ("tf32wgmma", precision)
    assert policy.batched_choice("tf32mma", f32, 512, 512, 512, 256, single_rows=False, traits=traits,
                                 precision=precision, wgmma=True)[0] == "tf32mma"


def test_refused_with_a_clear_error_where_it_cannot_run():
    """Under Numba's simulator (this suite) the backend is not available, and asking for it says
    why, for one matrix, a batch and a group alike; float64 is refused naming what it takes."""
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
    with pytest.raises(ValueError, match="tf32wgmma.*wgmma.*simulator"):  # batches run it on Hopper
        dxgemm.gemm(batch, b, backend="tf32wgmma")
    with pytest.raises(ValueError, match="tf32wgmma.*wgmma.*simulator"):
        dxgemm.grouped_gemm([(a, b)], backend="tf32wgmma")
