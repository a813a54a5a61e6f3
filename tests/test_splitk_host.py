"""Split-K on the CPU: the slice-count rule, the K ranges, and the reduce kernel under the simulator.

The launcher's side of a split call (per-slice pipeline inits, the grid's z dimension)
runs here against a recording stand-in for the driver; the split calls themselves
(workspace, the split-K kernel, the reduce) run in ``tests/test_gpu_pipeline.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from dxgemm.pipelines.config import CONFIGS, H100, MAX_SPLIT_K, TF32X3_CONFIGS, slice_ranges
from dxgemm.runtime.pipeline import split_k, use_split_k

F64 = np.dtype(np.float64)
F32 = np.dtype(np.float32)


@pytest.mark.parametrize("shape, dtype, config, expected", [
    ((4096, 64, 4096), F64, CONFIGS[F64]["small"], 4),  # 64 tiles of 64 x 64, two blocks per SM
    ((4096, 64, 4096), F64, CONFIGS[F64]["large"], 4),  # 32 tiles, one block per SM
    ((4096, 128, 4096), F64, CONFIGS[F64]["small"], 2),  # 128 tiles
    ((1000, 1000, 1000), F64, CONFIGS[F64]["small"], 1),  # 256 tiles: two per SM already
    ((1000, 1000, 1000), F32, TF32X3_CONFIGS["small"], 2),  # 64 tiles of 128 x 128
    ((4096, 64, 4096), F32, TF32X3_CONFIGS["small"], 4),
    ((4096, 4096, 40), F64, CONFIGS[F64]["small"], 1),  # 2048 tiles
    ((8192, 8192, 8192), F64, CONFIGS[F64]["large"], 1),
    ((300, 200, 300), F64, CONFIGS[F64]["small"], 1),  # 300 < 2 slices x 8 tiles x 32
    ((300, 200, 600), F64, CONFIGS[F64]["small"], 2),  # 20 tiles, but K holds only 2 slices
    ((64, 64, 100000), F64, CONFIGS[F64]["small"], MAX_SPLIT_K),  # one tile: capped
    ((100, 100, 100), F32, TF32X3_CONFIGS["small"], 1),  # K3 = 300: one slice's minimum
])
def test_split_count(shape, dtype, config, expected):
    assert split_k(*shape, config, dtype, device=H100) == expected


def test_split_override_is_bounded_and_checked():
    small = CONFIGS[F64]["small"]
    with use_split_k(3):
        assert split_k(8192, 8192, 8192, small, F64, device=H100) == 3
        assert split_k(64, 64, 300, small, F64, device=H100) == 1  # 300 holds no 8-tile slice
    with use_split_k(1):
        assert split_k(4096, 64, 4096, small, F64, device=H100) == 1
    assert split_k(4096, 64, 4096, small, F64, device=H100) == 4  # the rule again outside the block
    for bad in (0, 9, "two", -2, True):
        with pytest.raises(ValueError, match="split-K slices must be an integer from 1 to 8"):
            use_split_k(bad)


@pytest.mark.parametrize("k, slices, tile_k", [(4096, 8, 32), (1000, 3, 32), (12288, 4, 32), (33, 1, 32),
                                               (5, 1, 32), (999, 7, 16)])
def test_slice_ranges_cover_k_on_tile_boundaries(k, slices, tile_k):
    ranges = slice_ranges(k, slices, tile_k)
    assert len(ranges) == slices
    assert ranges[0][0] == 0 and sum(ks for _, ks in ranges) == k
    for (k0, ks), (k1, _) in zip(ranges, ranges[1:]):
        assert k1 == k0 + ks and k0 % tile_k == 0 and ks % tile_k == 0 and ks >= tile_k
    sizes = [ks // tile_k for _, ks in ranges[:-1]]
    assert not sizes or max(sizes) - min(sizes) <= 1


def test_slice_ranges_refuse_more_slices_than_tiles():
    with pytest.raises(ValueError, match="too few"):
        slice_ranges(64, 3, 32)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["row", "col"])
def test_reduce_kernel_sums_slices_then_applies_the_epilogue(dtype, layout, rng):
    """``dxgemm.kernels.splitk_reduce`` under the simulator: 3 slices of a 33x47x29 product, then
    alpha/beta with C, bias and GELU; D poisoned; checked against the fp64 reference."""
    from numba import cuda

    from dxgemm import epilogues as E
    from dxgemm._arrays import as_operand
    from dxgemm._gemm import _adapt_extra
    from dxgemm.epilogues._base import AlphaBeta, Chain, EpilogueContext
    from dxgemm.epilogues.reference import check
    from dxgemm.kernels import KernelSpec, Layout
    from dxgemm.runtime.rungs import numba_kernel as get_kernel

    from ._sim import device_matrix

    dt = np.dtype(dtype)
    m, n, k = 33, 47, 29
    a = rng.standard_normal((m, k))
    b = rng.standard_normal((k, n))
    c = rng.standard_normal((m, n)).astype(dt)
    v = rng.standard_normal(n).astype(dt)
    cuts = [0, 10, 20, k]
    row_major = layout == "row"
    ldw = n + 3 if row_major else m + 3  # a padded workspace: ld is honoured
    stride = ldw * (m if row_major else n) + 5
    work = np.full(stride * 3, np.nan, dt)
    for s in range(3):
        part = (a[:, cuts[s]:cuts[s + 1]] @ b[cuts[s]:cuts[s + 1]]).astype(dt)
        for i in range(m):
            for j in range(n):
                work[s * stride + (i * ldw + j if row_major else i + j * ldw)] = part[i, j]
    d = device_matrix(c, layout)
    op_d = as_operand(d, "c", output=True)
    alpha, beta = -0.75, 1.5
    chain = E.bias(cuda.to_device(v)) | E.gelu()
    ctx = EpilogueContext(m, n, dt, adapt=lambda arr, name: _adapt_extra(arr, name, dt, 0, (m, n)), device=0,
                          output=op_d)
    bound = Chain((AlphaBeta(alpha, beta, d),) + chain.stages).bind(ctx)
    lay = Layout.ROW if row_major else Layout.COL
    compiled = get_kernel("splitk_reduce", KernelSpec(dt, lay, lay, lay, bound.key, None), bound.args, bound.make)
    w = cuda.to_device(work)
    compiled.launch(0, w, w, op_d.flat(), m, n, 3, ldw, stride, op_d.ld, 0, bound.args)
    worst = check(d.copy_to_host(), E.bias(v) | E.gelu(), a, b, dt, alpha=alpha, beta=beta,
                  c=c.astype(np.float64))
    assert worst <= 1.0


def _recording_kernel(slice_bytes: int = 320, stride: int = 80):
    """A ``PipelineKernel`` for 128x64x32 depth-2 float64 whose launches are recorded, not run."""
    import threading

    from dxgemm.pipelines._launch import PipelineKernel

    kernel = object.__new__(PipelineKernel)
    kernel.key, kernel.device, kernel.block, kernel._smem = "recorded", None, (128,), 0
    kernel.arrangement = ("row_major", "row_major")
    kernel.tile_m, kernel.tile_n, kernel.tile_k, kernel.depth, kernel.itemsize = 128, 64, 32, 2, 8
    kernel._store, kernel._bounded_loads = "staged", False
    kernel._plans, kernel._initialized, kernel._pair_lock = {}, {}, threading.Lock()
    kernel._storage_stride, kernel._slice_bytes = stride, slice_bytes
    kernel._init_grid, kernel._init_block = (4, 1), (1,)
    kernel._stream = lambda handle: (None, None)
    kernel._storage = lambda handle, stream, slices=1: 1 << 20
    launches: list = []
    kernel._launch_init = lambda cu, grid, block, smem, values: launches.append(("init", values))
    kernel._launch_gemm = lambda cu, grid, block, smem, values: launches.append(("gemm", grid, values))
    return kernel, launches


def test_split_launch_inits_each_slice_and_runs_them_as_the_grid_z():
    from dxgemm.pipelines._launch import ShapeError
    from dxgemm.runtime.launch import Matrix

    kernel, launches = _recording_kernel()
    m, n, k = 4096, 64, 4100  # a K tail of 4: the kernel's own (the last slice adds it)
    a = Matrix(1 << 32, m, k, k + 4, "row_major", 8)
    b = Matrix(1 << 33, k, n, n, "row_major", 8)
    w = Matrix(1 << 34, 4 * m, n, n, "row_major", 8)
    p = kernel(0, a, b, w, m, n, k, [np.float64(1)], slices=4)
    assert (p.k_main, p.k_tail_start) == (4096, 4096)
    inits = [v for kind, v, *_ in launches if kind == "init"]
    assert len(inits) == 4
    for s, values in enumerate(inits):
        storage, stride, a_ptr, a_rows, a_cols, lda = values[:6]
        b_ptr, b_rows, b_cols = values[9:12]
        assert storage == (1 << 20) + 320 * s and stride == 80  # slice s's four pipelines
        assert a_ptr == a.at(0, 1024 * s) and (a_rows, a_cols, lda) == (m, 1024, k + 4)
        assert b_ptr == b.at(1024 * s, 0) and (b_rows, b_cols) == (1024, n)
    (_, grid, values), = [x for x in launches if x[0] == "gemm"]
    assert grid == (32, 1, 4)
    launches.clear()
    kernel(0, a, b, w, m, n, k, [np.float64(1)], slices=4)
    assert [x[0] for x in launches] == ["gemm"]  # the slices' storage already holds these operands
    launches.clear()
    d = Matrix(1 << 35, m, n, n, "row_major", 8)
    kernel(0, a, b, d, m, n, k, [np.float64(1)])
    (kind, values), gemm = launches[0], launches[1]
    assert kind == "init" and values[4] == 4096 and gemm[1] == (32, 1, 1)  # slice 0's region: all of K
    with pytest.raises(ShapeError, match="4 K slices"):
        kernel(0, a, b, d, m, n, k, [np.float64(1)], slices=4)  # D is not the stacked workspace


def test_split_launch_needs_the_split_kernel():
    from dxgemm.runtime.launch import Matrix

    kernel, _ = _recording_kernel(slice_bytes=0)
    a = Matrix(1 << 32, 256, 512, 512, "row_major", 8)
    b = Matrix(1 << 33, 512, 64, 64, "row_major", 8)
    w = Matrix(1 << 34, 512, 64, 64, "row_major", 8)
    with pytest.raises(ValueError, match="split_k"):
        kernel(0, a, b, w, 256, 64, 512, [np.float64(1)], slices=2)


class _Buffer:
    def __init__(self, handle: int, size: int, log: list):
        self.handle, self.size, self._log = handle, size, log

    def close(self, stream=None):
        self._log.append(("close", self.handle, stream))


class _Device:
    """A stand-in for ``cuda.core.Device``: its memory resource hands out numbered buffers."""

    def __init__(self):
        self.log: list = []
        self.memory_resource = self

    def allocate(self, nbytes, stream=None):
        buf = _Buffer(0x1000 * (len(self.log) + 1), nbytes, self.log)
        self.log.append(("allocate", buf.handle, nbytes, stream))
        return buf


def test_kept_buffers_reuse_grow_in_stream_order_and_keep_keys_apart():
    from dxgemm.runtime.launch import KeptBuffers

    device, kept = _Device(), KeptBuffers()
    first, replaced = kept.get(7, device, "s7", 256)
    assert replaced and device.log == [("allocate", first, 256, "s7")]
    assert kept.get(7, device, "s7", 100) == (first, False)  # smaller: the same buffer
    assert kept.get(7, device, "s7", 256) == (first, False)
    assert len(device.log) == 1
    other, replaced = kept.get(8, device, "s8", 64)  # another stream: its own buffer
    assert replaced and other != first
    bigger, replaced = kept.get(7, device, "s7", 1024)
    assert replaced and bigger not in (first, other)
    # the old buffer is retired, not freed (a captured CUDA graph may still read it)
    assert device.log[-1] == ("allocate", bigger, 1024, "s7")
    assert not any(entry[0] == "close" for entry in device.log)
    assert kept.get(8, device, "s8", 64) == (other, False)
    # growth at least doubles: what is retired stays below the live buffer
    doubled, replaced = kept.get(7, device, "s7", 1100)
    assert replaced and device.log[-1] == ("allocate", doubled, 2048, "s7")
    kept.release()  # at exit: every buffer, retired ones too, freed
    assert sorted(e[1] for e in device.log if e[0] == "close") == sorted([first, other, bigger, doubled])


def test_a_dropped_kept_buffers_frees_nothing_until_exit(monkeypatch):
    """A buffer must not be freed on the stream it was allocated on when its KeptBuffers dies
    (a pipeline kernel unloaded, a kept call forgotten): that stream may be destroyed, and the
    driver crashes freeing on it.  The buffers wait for exit, freed on the default stream."""
    import gc

    from dxgemm.runtime import launch

    class Dying(_Buffer):
        """As a cuda.core buffer: freed once, and when the last reference goes, on its allocation stream."""

        def close(self, stream=None):
            if self.handle:
                super().close(stream)
                self.handle = 0

        def __del__(self):
            self.close("its allocation stream")

    class Device(_Device):
        def allocate(self, nbytes, stream=None):
            self.log.append(("allocate", 0x1000 * (len(self.log) + 1)))
            return Dying(self.log[-1][1], nbytes, self.log)

    monkeypatch.setattr(launch, "_ORPHANS", [])
    device, kept = Device(), launch.KeptBuffers()
    live, _ = kept.get(1, device, "s1", 64)
    retired, _ = kept.get(2, device, "s2", 64)
    newer, _ = kept.get(2, device, "s2", 256)
    del kept
    gc.collect()
    assert not any(entry[0] == "close" for entry in device.log)
    assert sorted(buf.handle for buf in launch._ORPHANS) == sorted([live, retired, newer])
    launch._release_kept_buffers()
    closed = [e for e in device.log if e[0] == "close"]
    assert sorted(e[1] for e in closed) == sorted([live, retired, newer])
    assert "its allocation stream" not in [e[2] for e in closed]
    assert launch._ORPHANS == []
