"""The same checks on a real GPU, at real sizes: ``python -m pytest -m gpu``."""

from __future__ import annotations

import numpy as np
import pytest

import dxgemm
from dxgemm.kernels import RUNGS  # the handwritten ladder; the pipeline has its own tests
from dxgemm.testing import assert_close

from ._dmma import SMALL_CONFIGS, warptile_dmma

pytestmark = pytest.mark.gpu

SHAPES = [(1, 1, 1), (17, 17, 17), (1000, 1000, 1000), (4096, 4096, 4096), (4096, 64, 4096), (1, 4096, 4096),
          (333, 1, 77)]
DTYPES = [np.float32, np.float64]


@pytest.fixture(scope="module")
def cp():
    return pytest.importorskip("cupy")


def _operands(cp, m, n, k, dtype, seed=0):
    rng = cp.random.default_rng(seed)
    a = rng.standard_normal((m, k), dtype=np.float64).astype(dtype)
    b = rng.standard_normal((k, n), dtype=np.float64).astype(dtype)
    return a, b


@pytest.mark.parametrize("backend", RUNGS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_shapes(cp, backend, dtype, shape):
    m, n, k = shape
    if backend in ("naive", "coalesced") and m * n * k > 2**34:
        pytest.skip("the first rungs are too slow for this size to be worth the device time")
    a, b = _operands(cp, m, n, k, dtype)
    c = cp.full((m, n), cp.nan, dtype)
    out = dxgemm.gemm(a, b, c, backend=backend)
    assert out is c
    assert_close(c, a.astype(np.float64), b.astype(np.float64), np.dtype(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("m,k", [(4099, 3001), (16384, 16384), (9, 100003)])
def test_single_column_streams_a(cp, dtype, order, m, k):
    """``n = 1`` under ``auto``: gemv's rows tile, A row- or column-major, into a poisoned D."""
    a, b = _operands(cp, m, 1, k, dtype, seed=3)
    a = cp.asarray(a, order=order)
    c = cp.full((m, 1), cp.nan, dtype)
    dxgemm.gemm(a, b, c)
    assert_close(c, a.astype(np.float64), b.astype(np.float64), np.dtype(dtype))


@pytest.mark.parametrize("backend", RUNGS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_views_alpha_beta(cp, backend, dtype):
    m, n, k = 1000, 777, 513
    rng = cp.random.default_rng(7)
    big_a = rng.standard_normal((m + 9, k + 11), dtype=np.float64).astype(dtype)
    a = big_a[4:4 + m, 3:3 + k]                      # strided view (unaligned, odd leading dimension)
    b = rng.standard_normal((n, k), dtype=np.float64).astype(dtype).T  # transposed view
    c0 = rng.standard_normal((m, n), dtype=np.float64).astype(dtype)
    c = cp.asfortranarray(c0)
    dxgemm.gemm(a, b, c, alpha=0.5, beta=-2.0, backend=backend)
    assert_close(c, a.astype(np.float64), b.astype(np.float64), np.dtype(dtype), alpha=0.5, beta=-2.0,
                 c=c0.astype(np.float64))


@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_tensors_and_streams(cp, dtype):
    torch = pytest.importorskip("torch")
    m, n, k = 1000, 1000, 1000
    tdt = getattr(torch, np.dtype(dtype).name)
    a = torch.randn(m, k, device="cuda", dtype=tdt)
    b = torch.randn(k, n, device="cuda", dtype=tdt)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        out = dxgemm.gemm(a, b)
    stream.synchronize()
    assert isinstance(out, torch.Tensor) and out.device == a.device and out.dtype == tdt
    a64, b64, d = (cp.asarray(x).astype(np.float64) for x in (a, b, out))
    assert_close(d, a64, b64, np.dtype(dtype))
    out2 = dxgemm.gemm(a, b, stream=stream)  # explicit PyTorch stream
    stream.synchronize()
    assert_close(cp.asarray(out2).astype(np.float64), a64, b64, np.dtype(dtype))


def test_numba_device_arrays(cp):
    from numba import cuda

    a, b = _operands(cp, 300, 200, 100, np.float64)
    out = dxgemm.gemm(cuda.as_cuda_array(a), cuda.as_cuda_array(b))
    assert isinstance(out, cuda.devicearray.DeviceNDArray)
    cuda.synchronize()
    assert_close(cp.asarray(out), a, b, np.dtype(np.float64))


def test_cupy_stream_and_raw_handle(cp):
    a, b = _operands(cp, 512, 384, 256, np.float32)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        a2, b2 = a.copy(), b.copy()
        out = dxgemm.gemm(a2, b2)  # CuPy's current stream is s
        out2 = dxgemm.gemm(a2, b2, stream=s.ptr)
    s.synchronize()
    for d in (out, out2):
        assert_close(d, a.astype(np.float64), b.astype(np.float64), np.dtype(np.float32))


def test_nan_in_c_does_not_leak_with_beta_zero(cp):
    a, b = _operands(cp, 129, 131, 67, np.float64)
    c = cp.full((129, 131), cp.nan)
    dxgemm.gemm(a, b, c, beta=0.0)
    assert_close(c, a, b, np.dtype(np.float64))  # every element written, right, and no NaN from C


def test_no_recompilation_across_sizes(cp):
    from dxgemm.kernels import compile_count

    a, b = _operands(cp, 256, 256, 256, np.float32)
    dxgemm.gemm(a, b, backend="warptile")
    before = compile_count()
    for m, n, k in [(100, 200, 300), (4096, 64, 4096), (3, 5, 7)]:
        a, b = _operands(cp, m, n, k, np.float32)
        dxgemm.gemm(a, b, backend="warptile")
    assert compile_count() == before


@pytest.mark.parametrize("shape", [(2048, 2048, 256), (2001, 1999, 301), (4096, 4096, 64)],
                         ids=lambda s: "x".join(map(str, s)))
def test_warptile_fp64_medium_tile(cp, shape):
    """float64 ``warptile`` where ``choose_tile`` takes the medium tile (no epilogue, two blocks per
    SM): aligned operands (unchecked copies) and odd leading dimensions (checked copies), into
    row- and column-major C with alpha and beta."""
    _check_chosen_float64_tile(cp, shape, "medium", alpha=-0.5, beta=1.5)


@pytest.mark.parametrize("shape", [(8192, 8192, 512), (4099, 8191, 520)], ids=lambda s: "x".join(map(str, s)))
def test_warptile_fp64_medium_grouped_tile(cp, shape):
    """float64 ``warptile`` where ``choose_tile`` groups the medium tile's blocks (B over half of an
    H100's L2): aligned and odd operands, into row- and column-major C with alpha and beta."""
    _check_chosen_float64_tile(cp, shape, "medium_grouped", alpha=1.25, beta=-0.5)


@pytest.mark.parametrize("shape", [(4096, 4096, 40), (2001, 1999, 33)], ids=lambda s: "x".join(map(str, s)))
def test_warptile_fp64_short_tile(cp, shape):
    """float64 ``warptile`` below K = 64, where ``choose_tile`` takes the short tile (the small
    tile on m16n8k8): aligned and odd operands, into row- and column-major C with alpha and beta."""
    _check_chosen_float64_tile(cp, shape, "short", alpha=0.75, beta=-1.5)


@pytest.mark.parametrize("shape,tile", [((16384, 16, 16384), "n16"), ((4099, 13, 3001), "n16"), ((16, 4096, 4096), "m16"),
                                        ((11, 777, 2049), "m16"), ((300, 16, 64), "n16")],
                         ids=lambda s: "x".join(map(str, s)) if isinstance(s, tuple) else s)
def test_warptile_fp64_thin_tiles(cp, shape, tile):
    """float64 outputs with a side <= 16 on ``warptile``'s thin tiles, split over K where deep:
    aligned and odd operands, into row- and column-major C with alpha and beta."""
    _check_chosen_float64_tile(cp, shape, tile, alpha=0.5, beta=2.0)


def _check_chosen_float64_tile(cp, shape, tile, alpha, beta):
    """``choose_tile`` takes ``tile`` for ``shape``, and ``warptile`` on it computes ``alpha A B +
    beta C`` into row- and column-major C."""
    from dxgemm.policy import choose_tile
    from dxgemm.runtime.device import device_info

    from dxgemm.runtime import env

    m, n, k = shape
    chosen = choose_tile("warptile", np.float64, m, n, k, device_info())
    if chosen != tile and env.device_as() is not None:  # another GPU's figures choose another tile
        pytest.skip(f"the {env.device_as().name}'s figures (DXGEMM_DEVICE_AS) choose {chosen!r}, not {tile!r}")
    assert chosen == tile
    a, b = _operands(cp, m, n, k, np.float64, seed=k)
    c0 = cp.random.default_rng(m).standard_normal((m, n))
    for order in ("C", "F"):
        c = cp.array(c0, order=order)
        dxgemm.gemm(a, b, c, alpha=alpha, beta=beta, backend="warptile")
        assert_close(c, a, b, np.dtype(np.float64), alpha=alpha, beta=beta, c=c0)


@pytest.mark.parametrize("order", ["C", "F"])
def test_warptile_split_k_repeat_calls(cp, order):
    """float64 ``warptile`` split over K (few output tiles, deep K) on a non-default stream: the
    first call of each shape and its remembered repeats (``dxgemm.runtime.splitk.SplitKernelCall``),
    new operand values and alpha each time; the repeats take their workspace from the
    one buffer kept for the stream (``dxgemm.runtime.splitk.workspace``)."""
    from dxgemm import epilogues
    from dxgemm.runtime import calls as _calls
    from dxgemm.policy import choose_split_k, choose_tile, tile_fits
    from dxgemm.runtime.device import device_info
    from dxgemm.runtime import splitk as _splitk

    if not tile_fits(device_info(), np.float64, "split"):  # 99 KiB a block (an Ada GPU, or DXGEMM_DEVICE_AS=L40S)
        pytest.skip("float64 warptile's split-K tile does not fit this GPU's shared memory: no call splits")

    stream = cp.cuda.Stream(non_blocking=True)
    _calls.clear()
    largest = 0
    with stream:
        for m, n, k in [(2048, 256, 8192), (4096, 64, 4096), (200, 300, 4000)]:
            info = device_info()
            slices = choose_split_k("warptile", np.float64, m, n, k, choose_tile("warptile", np.float64, m, n, k, info),
                                    info)
            assert slices > 1, (m, n, k)
            largest = max(largest, slices * m * n * 8)
            a, b = _operands(cp, m, n, k, np.float64, seed=m)
            c0 = cp.random.default_rng(n).standard_normal((m, n))
            for call, alpha in enumerate((0.5, 2.0, -4.0)):  # one signature: alpha's value is not part of it
                a[:] = cp.random.default_rng(call).standard_normal((m, k))
                d = cp.array(c0, order=order)  # a copy in either order
                dxgemm.gemm(a, b, d, alpha=alpha, beta=-2.0, epilogue=epilogues.scale(0.5), backend="warptile")
                # scale(0.5) is exact: the reference scales alpha and beta instead
                assert_close(d, a, b, np.dtype(np.float64), alpha=0.5 * alpha, beta=-1.0, c=c0)
    stream.synchronize()
    remembered = [e.call for e in _calls._entries.values() if isinstance(e.call, _splitk.SplitKernelCall)]
    assert len(remembered) == 3
    kept = [buf for (device, handle), buf in _splitk._workspaces._buffers.items() if handle == stream.ptr]
    assert len(kept) == 1 and kept[0].size >= largest


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_serial_split_k(cp, monkeypatch, dtype):
    """``DXGEMM_SPLIT_REDUCE=serial``: split calls whose tiles' last slices sum them in the slices'
    kernel (``dxgemm.runtime.splitk.SerialSplitCall``), on a non-default stream, shapes of one and
    of many output tiles, thin and square, plain and ``bias | gelu``, each first call and its
    remembered repeats with new values and alpha; results on poisoned outputs within the bound,
    and every arrival count back at zero afterwards (the next call on the stream relies on it)."""
    from dxgemm.epilogues import bias, gelu
    from dxgemm.epilogues.reference import check
    from dxgemm.policy import (TF32_BACKENDS, choose_backend, choose_split_k, choose_tf32_tile, choose_tile,
                               resolve_precision)
    from dxgemm.runtime import calls as _calls
    from dxgemm.runtime import splitk as _splitk
    from dxgemm.runtime.device import device_info

    monkeypatch.setenv("DXGEMM_SPLIT_REDUCE", "serial")
    monkeypatch.setenv("DXGEMM_AUTO_PIPELINE", "0")
    info, dt = device_info(), np.dtype(dtype)
    from dxgemm.policy import tile_fits

    if dt == np.float64 and not tile_fits(info, dt, "split"):  # 99 KiB a block (an Ada GPU, DXGEMM_DEVICE_AS=L40S)
        pytest.skip("float64 warptile's split-K tile does not fit this GPU's shared memory: no call splits")
    stream = cp.cuda.Stream(non_blocking=True)
    _calls.clear()
    ran = 0
    with stream:
        for m, n, k in [(16384, 16, 16384), (13, 4099, 3001), (200, 300, 4000), (64, 64, 16384), (1000, 1000, 8192)]:
            precision = resolve_precision(dt, "auto", None)
            backend = choose_backend(dt, m, n, k, device=info, precision=precision)
            tile = (choose_tf32_tile(precision, m, n, k, info) if backend in TF32_BACKENDS
                    else choose_tile(backend, dt, m, n, k, info))
            if choose_split_k(backend, dt, m, n, k, tile, info) == 1:
                continue
            ran += 1
            b = cp.random.default_rng(k).standard_normal((k, n), dtype=dt)
            v = cp.random.default_rng(n).standard_normal(n, dtype=dt)
            for call, alpha in enumerate((0.5, -2.0, 1.0)):
                a = cp.random.default_rng(call).standard_normal((m, k), dtype=dt)
                for epi in (None, bias(v) | gelu()):
                    d = cp.full((m, n), cp.nan, dt)
                    dxgemm.gemm(a, b, d, alpha=alpha, epilogue=epi, stream=stream)
                    ratio = check(d, epi, a.astype(np.float64), b.astype(np.float64), dt, alpha=alpha)
                    assert ratio <= 1, ((m, n, k), call, epi, ratio)
    stream.synchronize()
    assert ran >= 2, "no shape split on this GPU"
    remembered = [e.call for e in _calls._entries.values() if isinstance(e.call, _splitk.SerialSplitCall)]
    assert len(remembered) == 2 * ran
    counts = _splitk._counts._buffers[(0, stream.ptr)]
    left = cp.ndarray((counts.size // 4,), np.int32, cp.cuda.MemoryPointer(
        cp.cuda.UnownedMemory(int(counts.handle), counts.size, counts), 0))
    assert int(cp.count_nonzero(left)) == 0


@pytest.mark.parametrize("backend", ["warptile", "auto", "pipeline"])
def test_arrays_on_a_gpu_that_is_not_current(cp, backend):
    """Operands on GPU 1 while GPU 0 is current: the kernel is loaded and launched on GPU 1 (first
    call and its remembered repeat, both dtypes) and GPU 0 is current again afterwards."""
    if cp.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    for dtype in DTYPES:
        with cp.cuda.Device(1):
            a, b = _operands(cp, 300, 257, 129, dtype, seed=9)
        for repeat in range(2):
            assert cp.cuda.runtime.getDevice() == 0
            d = dxgemm.gemm(a, b, backend=backend)
            assert cp.cuda.runtime.getDevice() == 0, "the call left another GPU current"
            assert d.device.id == 1
            with cp.cuda.Device(1):
                assert_close(d, a.astype(np.float64), b.astype(np.float64), np.dtype(dtype))


def test_devices_must_match(cp):
    if cp.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    a, _ = _operands(cp, 8, 8, 8, np.float64)
    with cp.cuda.Device(1):
        b = cp.ones((8, 8))
    with pytest.raises(ValueError, match="a is on GPU 0 but b is on GPU 1"):
        dxgemm.gemm(a, b)


@pytest.mark.parametrize("shape", list(SMALL_CONFIGS), ids=lambda s: f"m{s[0]}n8k{s[1]}")
def test_warptile_every_fp64_mma_shape(cp, shape):
    """Each FP64 mma shape's register fragments (the simulator cannot check them), at an odd size."""
    from numba import cuda

    if shape != (8, 4) and cuda.get_current_device().compute_capability < (9, 0):
        pytest.skip("m16n8kK float64 mma needs sm_90")
    m, n, k = 1000, 777, 513
    a, b = _operands(cp, m, n, k, np.float64, seed=3)
    out = warptile_dmma(a.get(), b.get(), SMALL_CONFIGS[shape], alpha=-0.75)
    assert_close(out, a.get(), b.get(), np.dtype(np.float64), alpha=-0.75)


@pytest.mark.parametrize("shape", [(8, 4), (16, 4), (16, 16)], ids=lambda s: f"m{s[0]}n8k{s[1]}")
def test_warptile_fp64_shipped_tile_with_other_mma_shapes(cp, shape):
    """The shipped tile with the other mma shapes (the sweep's candidates) stays exact."""
    from numba import cuda

    if shape != (8, 4) and cuda.get_current_device().compute_capability < (9, 0):
        pytest.skip("m16n8kK float64 mma needs sm_90")
    from dxgemm.kernels import warptile

    cfg = dict(warptile.CONFIGS["float64"], mma=shape)
    cfg["BK"] = max(cfg["BK"], shape[1])
    m, n, k = 1000, 777, 513
    a, b = _operands(cp, m, n, k, np.float64, seed=4)
    out = warptile_dmma(a.get(), b.get(), cfg)
    assert_close(out, a.get(), b.get(), np.dtype(np.float64))


@pytest.mark.parametrize("layouts", [("row", "row"), ("col", "col"), ("row", "col"), ("col", "row")],
                         ids=lambda t: "-".join(t))
@pytest.mark.parametrize("n, k", [(776, 514), (777, 513)], ids=["16-byte", "one-element"])
def test_warptile_fp64_async_copies(cp, layouts, n, k):
    """The shipped float64 tile (cp.async, m16n8k16 on sm_90) at a real size and an odd one,
    shared tiles in each operand layout: with even sizes interior blocks run the unchecked
    copies between the mmas, with odd ones every block takes the checked loop."""
    from dxgemm.kernels import warptile

    m = 1000
    a, b = _operands(cp, m, n, k, np.float64, seed=5)
    out = warptile_dmma(a.get(), b.get(), warptile.CONFIGS["float64"], layout_a=layouts[0], layout_b=layouts[1])
    assert_close(out, a.get(), b.get(), np.dtype(np.float64))


_RUNGS_FROM_DISK = r"""
import time
t0 = time.perf_counter()
import cupy as cp, numpy as np
import dxgemm
from dxgemm import epilogues as E
from dxgemm.epilogues.reference import check
from dxgemm.kernels import compile_count

def scaled(x, row, col, w):
    return x * w[row, col] + 0.25 * col

rng = cp.random.default_rng(5)
worst = 0.0
# a medium tile with an activation, a custom function with an extra array, and a call split over K
for (m, n, k), epilogue, lipschitz in [
        ((1031, 517, 263), E.bias(rng.standard_normal(517)) | E.gelu(), None),
        ((1031, 517, 263), E.custom(scaled, rng.standard_normal((1031, 517))), 1.0),
        ((200, 300, 4000), E.silu(), None)]:
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    d = cp.full((m, n), cp.nan)
    dxgemm.gemm(a, b, d, epilogue=epilogue, backend="warptile")
    worst = max(worst, check(d, epilogue, a, b, np.dtype(np.float64), custom_lipschitz=lipschitz))
print(f"RUNGS {time.perf_counter() - t0:.3f} compiles={compile_count()} worst={worst:.3g}")
"""


def test_rung_kernels_load_from_disk_in_a_new_process(tmp_path):
    """``dxgemm._rung_cache``: the first process compiles the float64 warptile kernels (and the
    split-K pair) and stores their cubins; a second process with the same cache folder compiles
    nothing, loads them and gets the same checked results."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, DXGEMM_CACHE_DIR=str(tmp_path),
               PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    lines = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", _RUNGS_FROM_DISK], capture_output=True, text=True, env=env,
                             timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        lines.append([x for x in out.stdout.splitlines() if x.startswith("RUNGS")][-1].split())
    print("cold:", " ".join(lines[0][1:]), "| from disk:", " ".join(lines[1][1:]))
    (_, cold_s, cold_compiles, cold_worst), (_, warm_s, warm_compiles, warm_worst) = lines
    assert cold_compiles != "compiles=0" and warm_compiles == "compiles=0"
    assert float(cold_worst.split("=")[1]) <= 1.0 and float(warm_worst.split("=")[1]) <= 1.0
    # one entry per kernel compiled: medium bias|gelu, small custom, and the silu call's kernel, or its
    # split part and reduce where it splits (not where the split tile does not fit: DXGEMM_DEVICE_AS=L40S)
    from dxgemm.policy import choose_split_k, choose_tile
    from dxgemm.runtime.device import device_info

    info = device_info()
    split = choose_split_k("warptile", np.float64, 200, 300, 4000,
                           choose_tile("warptile", np.float64, 200, 300, 4000, info), info) > 1
    assert len(list((tmp_path / "kernels").glob("*.dxk"))) == int(cold_compiles.split("=")[1]) == 3 + split


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1000, 777, 513), (64, 64, 1024), (64, 4096, 4096), (1, 4096, 512), (300, 1, 700),
                                   (200, 300, 64)], ids=lambda s: "x".join(map(str, s)))
def test_auto_repeat_calls_with_new_arrays_and_scalars(cp, dtype, shape):
    """``auto``'s repeat calls (the kept launch, ``dxgemm.runtime.launch.RepeatLaunch``, which writes only
    the slots a call changes into a buffer packed once): new operands, outputs, bias vectors and
    alpha/beta on every call, plain and fused, at shapes that take one tile launch, a split over K,
    the single-row and single-column kernels and short K; each result checked against float64."""
    from dxgemm import epilogues as E
    from dxgemm.epilogues.reference import check
    from dxgemm.runtime import calls as _calls

    m, n, k = shape
    rng = cp.random.default_rng(m * 7 + k)
    for fused in (False, True):
        for call, (alpha, beta) in enumerate([(1.0, 0.0), (-2.5, 0.0), (0.75, 0.0), (1.0, 0.5), (3.0, -1.25)]):
            a = rng.uniform(0.5, 1.0, (m, k)).astype(dtype)  # same-sign data: a stale address or scalar shows
            b = rng.uniform(0.5, 1.0, (k, n)).astype(dtype)
            c0 = rng.standard_normal((m, n)).astype(dtype)
            c = c0.copy() if beta else cp.full((m, n), cp.nan, dtype)  # poisoned where C is not read
            epilogue = E.bias(rng.standard_normal(n).astype(dtype)) | E.gelu() if fused else None
            kept = _calls.lookup(_calls.signature(a, b, c, alpha, beta, epilogue, "auto")) is not None
            dxgemm.gemm(a, b, c, alpha=alpha, beta=beta, epilogue=epilogue)
            assert kept == (call not in (0, 3)), f"call {call}: served from the memo {kept}"
            worst = check(c, epilogue, a.astype(np.float64), b.astype(np.float64), np.dtype(dtype), alpha=alpha,
                          beta=beta, c=c0.astype(np.float64))
            assert worst <= 1.0, f"fused={fused} call {call} (alpha {alpha}, beta {beta}): {worst:.3g} x the bound"
