"""float32 GEMM on the TF32 tensor cores, as accurate as float32: the 3xTF32 split.

Why
---
cuBLASDx's float32 pipeline runs on the FP32 SIMT units, well below cuBLAS SGEMM on the
H100 (``docs/performance.md``).
The tensor cores do not take float32 — but they take TF32 (float32's exponent, 10
mantissa bits) and accumulate in float32, at several times the SIMT rate.  Split every
operand into a TF32 head and a TF32 tail::

    x = hi(x) + lo(x),   hi = round_tf32(x),   lo = round_tf32(x - hi)

(``x - hi`` is exact in float32; ``|lo| <= 2^-11 |x|``).  Then

    A @ B  ~=  hi(A) @ hi(B)  +  hi(A) @ lo(B)  +  lo(A) @ hi(B)

drops only ``lo(A) @ lo(B)`` (relative size ``2^-22``) and the rounding of ``lo``
(``2^-22``), both below float32's own ``2^-24`` per-operation rounding once summed over
K: the products are exact in the float32 accumulator, so the result is as accurate as
a float32 GEMM (shown against an fp64 reference in ``tests/test_gpu_pipeline.py``).

How
---
The three products are *one* GEMM with a K three times as deep: a split kernel writes ::

    A3 = [lo(A) | hi(A) | hi(A)]     (m x K3, row-major, K contiguous)
    B3 = [hi(B) ; lo(B) ; hi(B)]     (K3 x n, column-major, K contiguous)

(the two small products first: the tensor cores' float32 accumulation truncates, so the
small terms are summed while the accumulator is still small), with ``K3 = 3k`` rounded
up to the pipeline's K tile (and to its depth) by zero columns,
and the TF32 pipeline (``operands="tf32"`` in :mod:`._build`) computes ``A3 @ B3`` with
the caller's alpha/beta and epilogue.  Both are K-major, the layout the Hopper TF32
tensor-core instructions read from shared memory, so one compiled kernel serves every
arrangement of the user's A and B: the split kernel reads them through their strides
(a shared-memory transpose keeps the reads coalesced when K is not the unit-stride
dimension).

Cost: the split reads A and B once and writes three times their size (``12 (m + n) k``
bytes of traffic), against ``2 m n k`` flops of GEMM — ~6 % of a 4096^3 GEMM on the
H100, less for larger m and n.  The workspace (``12 (m + n) k`` bytes, e.g. 384 MiB at
4096^3) comes from CuPy's memory pool on the caller's stream.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import numpy as np

from ..runtime.launch import KeptBuffers, PackedLaunch, cu_stream, stream_is_capturing

__all__ = ["split_extent", "split_operands", "split_pointers", "run", "kernel_variant", "ARRANGEMENT", "SPLIT_SOURCE"]

ARRANGEMENT = ("row_major", "col_major")
"""A3 and B3 are K-major whatever the user's layouts: one kernel per configuration and epilogue."""


def kernel_variant(dtype: Any, arrangement: tuple[str, str], m: int | None = None,
                   n: int | None = None) -> tuple[tuple[str, str], str]:
    """``(arrangement, operands)`` of the kernel a ``dtype`` GEMM with A/B in ``arrangement``
    and an ``m x n`` output runs.

    Under 3xTF32 that is always :data:`ARRANGEMENT` with TF32 operands; otherwise the
    operands' own arrangement, read natively.
    """
    from .config import uses_tf32x3

    return (ARRANGEMENT, "tf32") if uses_tf32x3(dtype, m, n) else (tuple(arrangement)[:2], "native")

_TILE = 32  # the split kernel's square tile (threads: 32 x 8)

SPLIT_SOURCE = r"""
// dxgemm 3xTF32 split: dst row r = [seg0 | seg1 | seg2 | zero pad] with each segment the
// TF32 head or tail of source row r (src element (r, kk) at src[r * s_r + kk * s_k]).
// lo_segment says which of the three segments holds the tail (A: 0, B: 1).  With
// segments == 1, dst row r = [head | zero pad]: the operand rounded to TF32 (one pass).
__device__ __forceinline__ float dxgemm_round_tf32(float x) {
    // round to nearest (ties away) on the 10-bit TF32 mantissa; inf/nan pass through
    unsigned u = __float_as_uint(x);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
    return __uint_as_float(u);
}

extern "C" __global__ void dxgemm_split_tf32x3(
    const float* __restrict__ a, long long a_sr, long long a_sk, long long m, float* __restrict__ a3,
    const float* __restrict__ b, long long b_sr, long long b_sk, long long n, float* __restrict__ b3,
    long long k, long long k3, long long segments)
{
    // blockIdx.z picks the operand: 0 splits A into A3 (tail first), 1 splits B into B3
    // (tail second); one launch for both keeps a kernel boundary off every call
    __shared__ float tile[32][33];
    const bool is_b = blockIdx.z == 1;
    const float* src = is_b ? b : a;
    const long long s_r = is_b ? b_sr : a_sr, s_k = is_b ? b_sk : a_sk, rows = is_b ? n : m;
    float* dst = is_b ? b3 : a3;
    const int lo_segment = is_b ? 1 : 0;
    const long long r0 = (long long)blockIdx.y * 32, k0 = (long long)blockIdx.x * 32;
    if (r0 >= rows) return;  // the grid covers the taller operand
    const int tx = threadIdx.x, ty = threadIdx.y;
    // load a 32 x 32 block of the source, coalesced along its unit-stride dimension
    for (int j = ty; j < 32; j += 8) {
        long long r, kk;
        if (s_k == 1) { r = r0 + j; kk = k0 + tx; } else { r = r0 + tx; kk = k0 + j; }
        float v = 0.0f;
        if (r < rows && kk < k) v = src[r * s_r + kk * s_k];
        if (s_k == 1) tile[j][tx] = v; else tile[tx][j] = v;
    }
    __syncthreads();
    // write the three segments, coalesced along K; the first K tile's blocks zero the pad
    for (int j = ty; j < 32; j += 8) {
        const long long r = r0 + j, kk = k0 + tx;
        if (r >= rows) continue;
        float* row = dst + r * k3;
        if (blockIdx.x == 0)
            for (long long c = segments * k + tx; c < k3; c += 32) row[c] = 0.0f;
        if (kk >= k) continue;
        const float x = tile[j][tx];
        const float hi = dxgemm_round_tf32(x);
        if (segments == 1) { row[kk] = hi; continue; }
        const float lo = dxgemm_round_tf32(x - hi);
        row[kk] = lo_segment == 0 ? lo : hi;
        row[k + kk] = lo_segment == 1 ? lo : hi;
        row[2 * k + kk] = lo_segment == 2 ? lo : hi;
    }
}
"""


@functools.lru_cache(maxsize=None)
def _kernel(device: int) -> Any:
    import cupy

    with cupy.cuda.Device(device):
        return cupy.RawModule(code=SPLIT_SOURCE, options=("-std=c++17",)).get_function("dxgemm_split_tf32x3")


_streams: dict[tuple[int, int], Any] = {}


def _cupy_stream(handle: int, device: int) -> Any:
    """CuPy's view of the caller's stream, made once per handle (it is on every call's path)."""
    stream = _streams.get((handle, device))
    if stream is None:
        import warnings

        import cupy

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # CuPy 14 prefers Stream.from_external
            stream = cupy.cuda.ExternalStream(handle, device)
        if len(_streams) > 256:
            _streams.clear()
        _streams[(handle, device)] = stream
    return stream


def split_extent(k: int, tile_k: int, depth: int, segments: int = 3) -> int:
    """``K3``: ``segments * k`` rounded up to a multiple of ``tile_k`` and to at least ``depth`` tiles.

    A multiple of the tile leaves the pipeline no K tail, and ``depth`` tiles fill it,
    so the launcher copies nothing more (:func:`._launch.plan`).
    """
    k3 = -(-int(segments) * int(k) // tile_k) * tile_k
    return max(k3, depth * tile_k)


_SPLIT_KINDS = ("ptr", "i64", "i64", "i64", "ptr", "ptr", "i64", "i64", "i64", "ptr", "i64", "i64", "i64")
"""The split kernel's parameters, in order, as :class:`._launch.PackedLaunch` kinds."""

KEPT_SPLIT_BYTES = 32 << 20
"""Splits up to this size (``(m + n) * K3`` float32) go into a buffer kept per stream.

Those are the calls whose host time exceeds their GPU time, where a CuPy allocation and
its device and stream contexts are a measurable part of the call; larger splits take
CuPy's pool, so that no large buffer stays held."""

_split_buffers = KeptBuffers()
_split_lock = threading.Lock()


class _FunctionHandle:
    """What :class:`._launch.PackedLaunch` reads from a kernel: its ``CUfunction`` as ``handle``."""

    def __init__(self, handle: int):
        self.handle = handle


@functools.lru_cache(maxsize=None)
def _split_launch(device: int) -> PackedLaunch:
    import cupy

    with cupy.cuda.Device(device):  # CuPy loads the module on first use, on the current device
        function = _kernel(device).kernel
    return PackedLaunch(_FunctionHandle(int(function.ptr)), _SPLIT_KINDS)


def _launch_split(a: Any, b: Any, m: int, n: int, k: int, k3: int, a3: int, b3: int, device: int,
                  stream_handle: int, segments: int = 3) -> None:
    """Launch the split of ``a`` and ``b`` into the float32 buffers at ``a3`` and ``b3`` on the stream
    (``segments``: 3 for the 3xTF32 split, 1 for the operands rounded to TF32)."""
    a_rs, a_cs = a.strides
    b_rs, b_cs = b.strides
    grid = (-(-k // _TILE), -(-max(m, n) // _TILE), 2)
    # row j of B3 is column j of B: B is read with its strides swapped
    values = (a.ptr, a_rs, a_cs, m, a3, b.ptr, b_cs, b_rs, n, b3, k, k3, segments)
    launch = _split_launch(device)
    with _split_lock:  # one PackedLaunch reuses its parameter buffer
        launch(cu_stream(int(stream_handle)), grid, (_TILE, 8), 0, values)


def split_operands(a: Any, b: Any, m: int, n: int, k: int, k3: int, device: int, stream_handle: int,
                   out: Any = None, segments: int = 3):
    """``(A3, B3)`` for ``A @ B`` (module docstring): CuPy arrays of shape ``(m, k3)`` and ``(n, k3)``.

    ``a`` and ``b`` are :class:`._launch.Matrix` views of the float32 operands (any
    arrangement); ``A3`` is row-major ``m x k3`` and ``B3`` — stored as ``n x k3``
    row-major — is the column-major ``k3 x n`` matrix the TF32 kernel reads.  Both live in
    one allocation from CuPy's pool on ``stream_handle`` (or in ``out``, ``(m + n) k3``
    float32 elements), so they may be dropped as soon as the GEMM is enqueued on the
    same stream; one launch writes both.
    """
    import cupy

    stream = _cupy_stream(int(stream_handle), device)
    with cupy.cuda.Device(device), stream:
        buf = cupy.empty((m + n) * k3, dtype=np.float32) if out is None else out
        a3 = buf[:m * k3].reshape(m, k3)
        b3 = buf[m * k3:(m + n) * k3].reshape(n, k3)
    _launch_split(a, b, m, n, k, k3, int(a3.data.ptr), int(b3.data.ptr), device, stream_handle, segments)
    return a3, b3


def split_pointers(a: Any, b: Any, m: int, n: int, k: int, k3: int, device: int, stream_handle: int,
                   core_device: Any, core_stream: Any, segments: int = 3) -> tuple[int, int, Any]:
    """The split as device pointers ``(A3, B3, keep)`` (layouts as in :func:`split_operands`).

    Up to :data:`KEPT_SPLIT_BYTES`, and for any size while the stream is captured into a CUDA
    graph (a pool allocation would not outlive the call), the split goes into a buffer kept for the stream
    (``core_device``/``core_stream``: its cuda.core device and stream; calls on one stream
    are ordered, so the next call's split waits for this call's GEMM); beyond, into CuPy
    arrays, returned as ``keep`` for the caller to hold until the GEMM is enqueued.
    """
    nbytes = (m + n) * k3 * 4
    if nbytes > KEPT_SPLIT_BYTES and not stream_is_capturing(stream_handle):
        a3, b3 = split_operands(a, b, m, n, k, k3, device, stream_handle, segments=segments)
        return int(a3.data.ptr), int(b3.data.ptr), (a3, b3)
    a3, _ = _split_buffers.get((device, int(stream_handle)), core_device, core_stream, nbytes)
    b3 = a3 + m * k3 * 4
    _launch_split(a, b, m, n, k, k3, a3, b3, device, stream_handle, segments)
    return a3, b3, None


def run(kernel: Any, a: Any, b: Any, d: Any, m: int, n: int, k: int, epi_args: tuple, stream: Any, device: int,
        segments: int = 3):
    """``D = epilogue(A @ B)`` for float32: split A and B, then run the TF32 ``kernel`` on them.

    ``segments``: 3 for the 3xTF32 split (float32 accuracy, one accumulator), 1 for one TF32
    pass on the operands rounded to nearest TF32 (``precision="tf32"``): the same kernel
    with ``K`` in place of ``3 K``, and the rounding that the tensor cores' own reading of
    float32 (dropping the low mantissa bits) would otherwise make a one-sided error.

    ``kernel``: the loaded TF32 pipeline kernel (:func:`kernel_variant` names its
    arrangement and operands); ``a``, ``b``, ``d``: :class:`._launch.Matrix` views of the
    float32 operands; ``epi_args``: the bound epilogue's run-time arguments.  Returns the
    launch :class:`._launch.Plan`.
    """
    from ..runtime.launch import Matrix

    handle = int(getattr(stream, "handle", stream))
    k3 = split_extent(k, kernel.tile_k, kernel.depth, segments)
    core_stream, _ = kernel._stream(handle)
    a3, b3, keep = split_pointers(a, b, m, n, k, k3, device, handle, kernel.device, core_stream, segments)
    a3_view = Matrix(a3, m, k3, k3, "row_major", 4)
    b3_view = Matrix(b3, k3, n, k3, "col_major", 4)
    # CuPy-pool splits (``keep``) go back to the pool for this stream when they die: later
    # work on the stream is ordered after the GEMM that reads them
    plan = kernel(stream, a3_view, b3_view, d, m, n, k3, epi_args)
    del keep
    return plan
