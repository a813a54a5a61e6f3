"""Every host decision is valid on every GPU of :data:`dxgemm.runtime.device.DEVICES`.

The policy is fed each device's published figures (no GPU needed) and a grid of shapes; each
choice must be one that device can run: the chosen kernel's shared memory fits a block, its
threads fit a block, the occupancy its tile is tuned for fits an SM, the pipeline only on
its targets, TF32 and FP64 tensor-core paths only from compute capability 8.0.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from dxgemm import policy
from dxgemm.gpus import tf32_tensor_ratio
from dxgemm.kernels import tf32mma
from dxgemm.pipelines.config import TARGETS
from dxgemm.runtime.device import DEVICES, H100, target_device

SIDES = (1, 17, 64, 128, 300, 1000, 2048, 4096, 8192)
KS = (1, 7, 40, 128, 512, 1023, 2048, 8192)
SHAPES = [(m, n, k) for m, n in itertools.combinations_with_replacement(SIDES, 2) for k in KS]
SHAPES += [(n, m, k) for m, n, k in SHAPES if m != n]
MAX_THREADS_PER_BLOCK = 1024


def check_warptile(device, dtype, tile, where):
    smem, block, min_blocks = policy.tile_smem(dtype, tile)
    threads = math.prod(block)
    assert threads <= MAX_THREADS_PER_BLOCK, where
    assert smem <= device.smem_per_block, f"{where}: {smem} bytes of shared memory a block"
    resident = max(1, min_blocks)
    assert resident * (smem + 1024) <= device.sm_smem, f"{where}: {resident} blocks of {smem} bytes an SM"
    assert resident * threads <= device.threads_per_sm, where
    # launch bounds cap registers to fit min_blocks blocks: the cap must leave a kernel at least 64
    assert device.regs_per_sm // (resident * threads) >= 64, where
    if np.dtype(dtype) == np.float64:
        assert device.cc >= (8, 0), f"{where}: DMMA needs 8.0"


@pytest.mark.parametrize("name", sorted(DEVICES))
def test_every_decision_fits_the_device(name):
    device = DEVICES[name]
    counts = {}
    for dtype, precision in (("float64", None), ("float32", "ieee"), ("float32", "tf32x3"), ("float32", "tf32")):
        dt = np.dtype(dtype)
        for (m, n, k), aligned, (tr, mk) in itertools.product(SHAPES, (True, False), ((False, math.inf), (True, 512))):
            where = f"{name} {dtype} {precision} {m}x{n}x{k} aligned={aligned} tr={tr}"
            backend = policy.choose_backend(dt, m, n, k, pipeline=True, aligned=aligned, transcendental=tr,
                                            medium_min_k=mk, device=device, precision=precision)
            counts[backend] = counts.get(backend, 0) + 1
            if backend == "pipeline":
                assert device.cc in TARGETS, where
                config = policy.pipeline_config(m, n, k, dt, device)
                assert config.smem_bytes(dt.itemsize) <= device.smem_per_block, where
                assert config.block_size <= MAX_THREADS_PER_BLOCK, where
                slices = policy.pipeline_split_k(m, n, k, config, dt, device)
                assert 1 <= slices <= policy.MAX_SPLIT_K, where
                continue
            if backend == "tf32mma":
                assert dt == np.float32 and precision in ("tf32x3", "tf32") and device.cc >= (8, 0), where
                tile = policy.choose_tf32_tile(precision, m, n, k, device)
                assert tile.startswith(precision) and tf32mma.smem_bytes(tile) <= device.smem_per_block, where
                assert tf32mma.CONFIGS[tile]["threads"] <= MAX_THREADS_PER_BLOCK, where
                slices = policy.choose_split_k(backend, dt, m, n, k, tile, device)
                assert 1 <= slices <= policy.TF32MMA_MAX_SLICES, where
                if slices > 1:
                    assert tf32mma.smem_bytes(policy.split_part_tile(backend, tile, m, n, dt)) <= device.smem_per_block, where
                continue
            assert backend == "warptile", where
            tile = policy.choose_tile(backend, dt, m, n, k, device, 0.0 if mk == math.inf else mk)
            check_warptile(device, dt, tile, f"{where} tile {tile}")
            slices = policy.choose_split_k(backend, dt, m, n, k, tile, device)
            assert 1 <= slices <= max(policy.F64_MAX_SLICES, policy.F32_MAX_SLICES), where
            if slices > 1:
                check_warptile(device, dt, policy.split_part_tile(backend, tile, m, n, dt), f"{where} split tile")
    # the choices follow the device, not one GPU's figures
    assert ("pipeline" in counts) == (device.cc in TARGETS), counts
    # the tensor cores where they fit and pay: several times the FMA units' rate (gpus.TF32_TENSOR_PER_FP32)
    tf32_pays = device.smem_per_block >= tf32mma.smem_bytes("tf32x3_small") and tf32_tensor_ratio(device.cc) >= 4
    assert ("tf32mma" in counts) == tf32_pays, counts


def test_the_table_and_what_it_decides():
    assert H100 is DEVICES["H100"] and (H100.sm_count, H100.smem_per_block, H100.l2_bytes) == (132, 227 * 1024, 50 * 2**20)
    assert {d.cc for d in DEVICES.values()} >= {(8, 0), (8, 9), (9, 0), (10, 0), (12, 0)}
    # auto's float32 takes the tensor cores where they are several times the FMA units (not Ada,
    # not consumer Blackwell); the large tile's 172 KiB fits the 227 KiB of sm_90 and sm_100 only
    assert [n for n, d in DEVICES.items() if policy.tf32_auto(d)] == ["H100", "H200", "B200", "A100"]
    assert [n for n, d in DEVICES.items() if policy.tf32_tile_fits(d, "tf32x3")] == ["H100", "H200", "B200"]
    f64 = np.dtype(np.float64)
    assert policy.choose_tile("warptile", f64, 4096, 4096, 4096, H100) == "large"
    # 99 KiB a block: float64 keeps the tiny tile (48 KiB), no split; on an A100 the large tile fits (160 KiB)
    assert policy.choose_tile("warptile", f64, 4096, 4096, 4096, DEVICES["RTX 4090"]) == "tiny"
    assert policy.choose_split_k("warptile", f64, 4096, 64, 4096, "tiny", DEVICES["RTX 5090"]) == 1
    assert policy.choose_tile("warptile", f64, 4096, 4096, 4096, DEVICES["A100"]) == "large"
    assert not policy.tile_fits(DEVICES["A100"], f64, "medium")  # two 100 KiB blocks exceed 164 KiB an SM
    assert policy.choose_backend(np.dtype(np.float32), 4096, 4096, 4096, device=DEVICES["L40S"],
                                 precision="tf32x3") == "warptile"
    assert policy.choose_backend(f64, 4097, 4097, 4097, pipeline=True, aligned=False, device=DEVICES["B200"]) \
        == "warptile"
    assert target_device((8, 9)).smem_per_block == 99 * 1024
    with pytest.raises(ValueError, match="known"):
        target_device((7, 5))


def test_warmup_lists_what_a_plain_call_runs_on_each_target():
    from dxgemm.runtime.warmup import plain_kernels

    def listed(device):
        return {(b, d, t) for b, d, _, t in plain_kernels(["float32", "float64"], [("row_major", "row_major")], device)}

    h100, ada = listed(H100), listed(DEVICES["RTX 4090"])
    assert {("tf32mma", "float32", "tf32x3"), ("warptile", "float64", "large"), ("warptile", "float64", "split"),
            ("splitk_reduce", "float64", "large")} <= h100
    assert {t for b, d, t in ada if b == "warptile" and d == "float64"} == {"tiny"}
    assert not any(b == "tf32mma" for b, _, _ in ada)
    # float32's deep K on IEEE warptile there: its split tile and the reduce (float64's split tiles do not fit)
    assert {("warptile", "float32", "split"), ("splitk_reduce", "float32", "large")} <= ada
    assert ("warptile", "float32", "small_blocked") in ada  # the contract's 64x128 tile at deep K
    assert ("warptile", "float32", "split") not in h100  # the H100 runs deep float32 K on tf32mma
    assert ("warptile", "float32", "small_blocked") not in h100
    for name, device in DEVICES.items():  # every tile the policy picks there is built
        for dtype in (np.dtype(np.float32), np.dtype(np.float64)):
            for m, n, k in SHAPES[::7]:
                if dtype == np.float32 and policy.tf32_auto(device) and k >= policy.TF32X3_MIN_K:
                    continue  # auto runs tf32mma there
                tile = policy.choose_tile("warptile", dtype, m, n, k, device)
                if policy.choose_split_k("warptile", dtype, m, n, k, tile, device) > 1:
                    tile = policy.split_part_tile("warptile", tile, m, n, dtype)
                assert ("warptile", dtype.name, tile) in listed(device), (name, m, n, k, tile)


def test_warmup_refuses_an_unknown_target():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "dxgemm", "warmup", "--cc", "7.5"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2 and "--cc takes compute capabilities among 8.0,8.9,9.0,10.0,12.0" in out.stderr


def test_single_column_tiles_follow_k_and_the_sm_count():
    """n = 1 runs gemv's rows tile; from K = 4096 the deep one where the rows are few for the
    GPU's SMs (its threshold scales with the SM count), from K = 16384 on any number of rows."""
    f32 = np.dtype(np.float32)
    assert policy.gemv_column(4096, 1) and not policy.gemv_column(1, 1) and not policy.gemv_column(4096, 2)
    assert policy.choose_tile("gemv", f32, 1024, 1, 1024, H100) == "rows"
    assert policy.choose_tile("gemv", f32, 1024, 1, 4096, H100) == "rows_deep"
    assert policy.choose_tile("gemv", f32, 16384, 1, 4096, H100) == "rows"
    assert policy.choose_tile("gemv", f32, 16384, 1, 16384, H100) == "rows_deep"
    rows = policy.GEMV_DEEP_ROWS_PER_SM
    small, big = DEVICES["RTX 4090"], DEVICES["RTX 5090"]  # 128 and 170 SMs
    m = rows * small.sm_count + 1
    assert policy.choose_tile("gemv", f32, m, 1, 4096, small) == "rows"
    assert policy.choose_tile("gemv", f32, m, 1, 4096, big) == "rows_deep"
    assert policy.choose_tile("gemv", f32, 1, 4096, 4096, H100) == "large"  # one row: the row tile


def test_batched_single_rows_take_the_batched_gemv_tile_where_the_batch_fills_the_gpu():
    """Single-row entries run the first of gemv's batched tiles whose threads number at least
    GEMV_BATCHED_THREADS_PER_SM an SM of any device, just at that count and not one block below
    it; else the single call's tile.  Entries of more than one row never take them."""
    from dxgemm.kernels.gemv import TILE_CONFIGS

    for name in ("H100", "RTX 4090", "B200"):
        device = DEVICES[name]
        for dtype in (np.dtype(np.float32), np.dtype(np.float64)):
            tiles = TILE_CONFIGS[dtype.name]
            for tile, least in policy.GEMV_BATCHED_THREADS_PER_SM.items():
                cols, lanes, _ = tiles[tile]
                blocks = -(-least * device.sm_count // (32 * lanes))  # the fewest blocks that reach it
                assert policy.choose_batched_tile("gemv", dtype, 1, cols * blocks, 4096, 1, device) == tile
                assert policy.choose_batched_tile("gemv", dtype, 1, cols * blocks // 2 - 1, 4096, 2, device) == tile
                below = policy.choose_batched_tile("gemv", dtype, 1, cols * (blocks - 1), 4096, 1, device)
                assert below == ("batched_wide" if tile == "batched" else "large"), (name, dtype, tile)
            assert policy.choose_batched_tile("gemv", dtype, 1, 4096, 4096, 1, device) == "large"
            assert policy.choose_batched_tile("gemv", dtype, 2, 4096, 4096, 64, device) == "large"
            assert policy.batched_choice("auto", dtype, 1, 4096, 4096, 32, single_rows=True,
                                         traits=policy.EpilogueTraits(), device=device) == ("gemv", "batched")


def test_batches_of_small_entries_take_the_batched_tiny_tile_where_they_fill_the_gpu():
    """Entries narrower than the tile but at least 64 on both sides run ``"tiny_batched"``, entries
    with a side of at most 32 ``"micro_batched"``, from TINY_BATCHED_MIN_BLOCKS_PER_SM of their
    blocks an SM of any device where it fits, else ``"tiny"``; entries in between keep ``"tiny"``."""
    for name in ("H100", "RTX 4090", "B200", "RTX 5090"):
        device = DEVICES[name]
        need = policy.TINY_BATCHED_MIN_BLOCKS_PER_SM * device.sm_count
        for dtype in (np.dtype(np.float32), np.dtype(np.float64)):
            fits = policy.tile_fits(device, dtype, "tiny_batched")
            assert fits or name == "RTX 4090", (name, dtype)  # 99 KiB a block is enough for its 64 KiB
            assert policy.choose_batched_tile("warptile", dtype, 64, 64, 64, need, device) == (
                "tiny_batched" if fits else "tiny")
            assert policy.choose_batched_tile("warptile", dtype, 64, 64, 64, need - 1, device) == "tiny"
            assert policy.choose_batched_tile("warptile", dtype, 70, 100, 37, -(-need // 4), device) == (
                "tiny_batched" if fits else "tiny")  # 2 x 2 blocks an entry
            assert policy.choose_batched_tile("warptile", dtype, 64, 48, 64, 100 * need, device) == "tiny"
            micro = policy.tile_fits(device, dtype, "micro_batched")
            assert micro, (name, dtype)
            assert policy.choose_batched_tile("warptile", dtype, 32, 32, 64, need, device) == "micro_batched"
            assert policy.choose_batched_tile("warptile", dtype, 32, 32, 64, need - 1, device) == "tiny"
            assert policy.choose_batched_tile("warptile", dtype, 20, 100, 64, -(-need // 4), device) == "micro_batched"
