"""The 3xTF32 method's host side, on the CPU: K extent, cache keys, and the accuracy bound.

The bound test emulates what the GPU does — TF32 round-to-nearest for the split, the
tensor core dropping the low 13 mantissa bits, float32 accumulation over the tripled K —
and checks it against the bound ``dxgemm.testing`` writes down for the method.
"""

from __future__ import annotations

import numpy as np
import pytest

from dxgemm.pipelines.cache import key_fields
from dxgemm.pipelines.config import TF32X3_CONFIGS
from dxgemm.pipelines.tf32x3 import split_extent
from dxgemm.testing import check

VERSIONS = {"nvmath-python": "1.0.0", "libmathdx": "0.3.2.6", "numba-cuda": "0.30.4", "driver": 13000, "nvrtc": "13.5"}


@pytest.mark.parametrize("k, tile_k, depth, expected", [
    (4096, 32, 3, 12288),  # 3k already a tile multiple
    (1000, 32, 3, 3008),  # rounded up to the tile
    (1, 32, 3, 96),  # at least depth tiles
    (40, 32, 2, 128),
])
def test_split_extent(k, tile_k, depth, expected):
    k3 = split_extent(k, tile_k, depth)
    assert k3 == expected and k3 % tile_k == 0 and k3 >= 3 * k and k3 >= depth * tile_k


def test_tf32_kernels_have_their_own_key_and_native_keys_are_unchanged():
    common = dict(cc=(9, 0), config=TF32X3_CONFIGS["large"], dtype="float32", arrangement=("row_major", "col_major"),
                  epilogue_key=("identity",), versions=VERSIONS)
    native = key_fields(**common)
    assert "operands" not in native  # keys of kernels built before the option existed still match
    assert key_fields(**common, operands="native") == native
    tf32 = key_fields(**common, operands="tf32")
    assert tf32["operands"] == "tf32" and tf32 != native


def _round_tf32(x: np.ndarray) -> np.ndarray:
    u = x.astype(np.float32).view(np.uint32)
    finite = (u & 0x7F800000) != 0x7F800000
    return np.where(finite, (u + 0x1000) & 0xFFFFE000, u).astype(np.uint32).view(np.float32)


def _truncate_tf32(x: np.ndarray) -> np.ndarray:
    return (x.astype(np.float32).view(np.uint32) & 0xFFFFE000).astype(np.uint32).view(np.float32)


def _emulated_3xtf32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a_hi = _round_tf32(a)
    a_lo = _round_tf32(a - a_hi)
    b_hi = _round_tf32(b)
    b_lo = _round_tf32(b - b_hi)
    a3 = _truncate_tf32(np.concatenate([a_lo, a_hi, a_hi], axis=1))
    b3 = _truncate_tf32(np.concatenate([b_hi, b_lo, b_hi], axis=0))
    d = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for kk in range(a3.shape[1]):  # one product at a time, rounded to float32: the worst order
        d = (d + a3[:, kk:kk + 1] * b3[kk:kk + 1, :]).astype(np.float32)
    return d


@pytest.mark.parametrize("k", [1, 2, 5, 64, 300])
def test_emulated_3xtf32_meets_its_bound(k):
    rng = np.random.default_rng(k)
    a = rng.standard_normal((40, k)).astype(np.float32)
    b = rng.standard_normal((k, 30)).astype(np.float32)
    d = _emulated_3xtf32(a, b)
    assert check(d, a.astype(np.float64), b.astype(np.float64), np.dtype(np.float32), split=3) <= 1.0


def test_plain_float32_bound_is_too_tight_for_3xtf32_at_k_1():
    """Why the method has its own bound: with one product the split's 2^-22 terms dominate."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((200, 1)).astype(np.float32)
    b = rng.standard_normal((1, 150)).astype(np.float32)
    d = _emulated_3xtf32(a, b)
    assert check(d, a.astype(np.float64), b.astype(np.float64), np.dtype(np.float32)) > 1.0


def test_error_bound_rejects_other_splits():
    a = np.ones((2, 2))
    with pytest.raises(ValueError, match="split"):
        check(a, a, a, np.dtype(np.float32), split=2)


def test_store_rule_follows_the_measurements(monkeypatch):
    from dxgemm.pipelines.config import CONFIGS, pipeline_store

    small, large = TF32X3_CONFIGS["small"], TF32X3_CONFIGS["large"]
    f64 = np.dtype(np.float64)
    # every TF32 kernel (the vector variant), and float64 wherever two or more blocks fit an SM: staged,
    # with the full-tile walk
    assert small.resident_blocks(4) == 2 and CONFIGS[f64]["small"].resident_blocks(8) == 3
    shallow = TF32X3_CONFIGS["small"].__class__(128, 128, 32, 256, 2)  # 64 KiB: three blocks by shared memory
    assert shallow.resident_blocks(4) == 3 and shallow.bounded_blocks(4) == 2  # but >= 128 registers a thread
    for config in (small, large):
        assert pipeline_store("tf32", config) == "staged_vec_tile"
    assert pipeline_store("native", CONFIGS[f64]["small"], f64) == "staged_tile"
    # the one-block float64 configuration keeps the loop (its large squares were slower staged)
    assert CONFIGS[f64]["large"].resident_blocks(8) == 1
    assert pipeline_store("native", CONFIGS[f64]["large"], f64) == "loop"
    # two blocks fit by shared memory, but the 128 KiB tile does not fit the 96 KiB buffer it would be staged in
    wide_shallow = small.__class__(128, 128, 16, 256, 3)
    assert wide_shallow.resident_blocks(8) == 2 and pipeline_store("native", wide_shallow, f64) == "loop"


def test_dispatch_routes_float32_through_the_split_and_float64_straight(monkeypatch):
    """``_dispatch.run`` on the CPU with the GPU pieces replaced: which kernel, which operands, which K."""
    from types import SimpleNamespace

    from dxgemm.pipelines import loader as kernels
    from dxgemm.pipelines import tf32x3
    from dxgemm.runtime import pipeline as _dispatch

    calls = []

    class FakeKernel:
        tile_k, depth = 32, 3
        device = "cuda.core device"

        def _stream(self, handle):
            return "cuda.core stream", "CUstream"

        def __call__(self, stream, a, b, d, m, n, k, epi_args):
            calls.append(("launch", a, b, m, n, k))
            return "plan"

    def fake_get_kernel(config, dtype, arrangement, **kwargs):
        calls.append(("kernel", np.dtype(dtype).name, tuple(arrangement), kwargs["operands"]))
        return FakeKernel()

    def fake_split(a, b, m, n, k, k3, device, stream, core_device, core_stream, segments):
        assert segments == 3
        calls.append(("split", m, n, k, k3))
        assert (core_device, core_stream) == ("cuda.core device", "cuda.core stream")
        return 1 << 20, 2 << 20, None

    monkeypatch.setattr(_dispatch, "availability", lambda device: None)
    monkeypatch.setattr(kernels, "get_kernel", fake_get_kernel)
    monkeypatch.setattr(tf32x3, "split_pointers", fake_split)

    def operand(dtype, rows, cols, layout):
        ld = cols if layout == "row" else rows
        return SimpleNamespace(dtype=np.dtype(dtype), shape=(rows, cols), layout=SimpleNamespace(value=layout),
                               ptr=4096, ld=ld)

    bound = SimpleNamespace(key=("chain", ("alphabeta", "no-c")), make=None, args=())
    m, n, k = 300, 170, 50  # both sides over 128: the 3xTF32 method (config.float32_method)
    plan = _dispatch.run(operand(np.float32, m, k, "col"), operand(np.float32, k, n, "row"),
                         operand(np.float32, m, n, "row"), m, n, k, bound, 0, 0,
                         config=TF32X3_CONFIGS["large"])  # suggest would ask the driver
    k3 = split_extent(k, 32, 3)
    assert plan == "plan"
    assert calls[0] == ("kernel", "float32", ("row_major", "col_major"), "tf32")
    assert calls[1] == ("split", m, n, k, k3)
    _, a3, b3, lm, ln, lk = calls[2]
    assert (lm, ln, lk) == (m, n, k3)
    assert (a3.rows, a3.cols, a3.arrangement, b3.rows, b3.cols, b3.arrangement) == (
        m, k3, "row_major", k3, n, "col_major")
    assert (a3.ptr, b3.ptr) == (1 << 20, 2 << 20)

    calls.clear()
    _dispatch.run(operand(np.float64, m, k, "col"), operand(np.float64, k, n, "row"),
                  operand(np.float64, m, n, "row"), m, n, k, bound, 0, 0, config=TF32X3_CONFIGS["large"])
    assert calls[0] == ("kernel", "float64", ("col_major", "row_major"), "native")
    assert calls[1][0] == "launch" and calls[1][3:] == (m, n, k)


def test_split_kernel_compiles_for_sm90():
    """The split kernel's CUDA C++ compiles with NVRTC (no GPU needed) and exports its one entry."""
    nvrtc = pytest.importorskip("cuda.bindings.nvrtc")
    from dxgemm.pipelines.tf32x3 import SPLIT_SOURCE

    try:
        nvrtc.nvrtcVersion()
    except (RuntimeError, OSError) as e:  # the bindings are installed but libnvrtc cannot be loaded
        pytest.skip(f"libnvrtc cannot be loaded: {e}")
    err, prog = nvrtc.nvrtcCreateProgram(SPLIT_SOURCE.encode(), b"split.cu", 0, [], [])
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS
    (err,) = nvrtc.nvrtcCompileProgram(prog, 2, [b"--gpu-architecture=sm_90", b"-std=c++17"])
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        pytest.fail(log.decode(errors="replace"))
    _, size = nvrtc.nvrtcGetPTXSize(prog)
    ptx = b" " * size
    nvrtc.nvrtcGetPTX(prog, ptx)
    assert b".entry dxgemm_split_tf32x3" in ptx


def test_small_splits_use_the_kept_buffer_and_large_ones_the_pool(monkeypatch):
    """split_pointers: up to KEPT_SPLIT_BYTES into the stream's kept buffer (B3 right after A3), beyond
    into CuPy arrays that the caller keeps alive until the GEMM is enqueued."""
    from types import SimpleNamespace

    from dxgemm.pipelines import tf32x3

    launched, got = [], []

    class Kept:
        def get(self, key, device, stream, nbytes):
            got.append((key, device, stream, nbytes))
            return 1 << 30, True

    def fake_pool(a, b, m, n, k, k3, device, handle, segments=3):
        return SimpleNamespace(data=SimpleNamespace(ptr=7 << 20)), SimpleNamespace(data=SimpleNamespace(ptr=9 << 20))

    monkeypatch.setattr(tf32x3, "_split_buffers", Kept())
    monkeypatch.setattr(tf32x3, "split_operands", fake_pool)
    monkeypatch.setattr(tf32x3, "_launch_split", lambda *args: launched.append(args[6:8]))
    m, n, k3 = 512, 256, 96
    a3, b3, keep = tf32x3.split_pointers("a", "b", m, n, 32, k3, 0, 5, "device", "stream")
    assert (a3, b3, keep) == (1 << 30, (1 << 30) + m * k3 * 4, None)
    assert got == [((0, 5), "device", "stream", (m + n) * k3 * 4)] and launched == [(a3, b3)]
    big = tf32x3.KEPT_SPLIT_BYTES // (4 * (m + n) * 32) + 1  # K3 tiles that pass the limit
    a3, b3, keep = tf32x3.split_pointers("a", "b", m, n, 32 * big, 32 * big * 3, 0, 5, "device", "stream")
    assert (a3, b3) == (7 << 20, 9 << 20) and keep is not None and len(got) == 1


def test_one_tf32_pass_plan():
    """precision='tf32' on the pipeline: the TF32-operand configurations, K not tripled (its
    split extent, shallow-K rule and K slices count K once), also for skinny outputs that the
    shape's own float32 method would send to the SIMT configurations."""
    from dxgemm.pipelines.config import CONFIGS, H100, TF32X3_CONFIGS
    from dxgemm.policy import pipeline_config, pipeline_split_k

    f32 = np.dtype(np.float32)
    assert split_extent(1000, 32, 3, segments=1) == 1024
    assert split_extent(1000, 32, 3, segments=3) == split_extent(1000, 32, 3) == 3008
    assert split_extent(5, 32, 3, segments=1) == 96  # at least depth tiles
    assert pipeline_config(4096, 4096, 4096, f32, H100, "tf32") == TF32X3_CONFIGS["large"]
    assert pipeline_config(64, 4096, 4096, f32, H100, "tf32") == TF32X3_CONFIGS["small"]
    assert pipeline_config(64, 4096, 4096, f32, H100) == CONFIGS[f32]["small"]  # the shape's SIMT method
    # K = 1024 holds 32 large K tiles: shallow for one pass (<= 64), deep under 3xTF32's 3 K
    assert pipeline_config(8192, 8192, 1024, f32, H100, "tf32") == TF32X3_CONFIGS["small"]
    assert pipeline_config(8192, 8192, 1024, f32, H100) == TF32X3_CONFIGS["large"]
    small = TF32X3_CONFIGS["small"]
    # K slices: 3xTF32 counts 3 K, one pass K
    assert pipeline_split_k(256, 256, 512, small, f32, H100, segments=1) < pipeline_split_k(256, 256, 512, small, f32,
                                                                                               H100, segments=3)
