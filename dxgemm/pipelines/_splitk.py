"""Split-K pipeline calls: ``S`` K slices on ``S`` streams, then one reduce-and-epilogue pass.

When an output has too few tiles to fill the GPU (:func:`.config.split_k` decides how
many slices), a call runs as:

1. (3xTF32 only) the split of A and B into their TF32 parts, once, on the caller's
   stream; the slices below cut the split operands' tripled K;
2. a fork: each slice's stream waits for an event recorded on the caller's stream, so
   every slice reads operands that work already enqueued there has finished writing;
3. per slice ``s``: the *plain* pipeline kernel of the same configuration (alpha 1,
   beta 0, no epilogue — the kernel the unsplit plain GEMM runs, so nothing new is
   compiled) computes ``A[:, K_s] @ B[K_s, :]`` into slice ``s`` of a workspace.  The
   slices are launched on separate streams so their grids run side by side; on one
   stream each grid would wait for the previous one and the split would gain nothing;
4. a join: the caller's stream waits for every slice's event, then
   :mod:`dxgemm.kernels.splitk_reduce` sums the slices and applies the caller's
   epilogue chain (alpha/beta first) while writing D.

Slice 0 runs on the caller's stream itself (one fork fewer).  The workspace (``S x m x
n`` elements, laid out like D) is kept per caller's stream (:meth:`_Fork.workspace`):
calls on one stream are ordered, and the next call's slices wait for this call's reduce.
The streams and events are made once per device and shared by all calls; a lock keeps
one call's fork/join sequence whole, since two calls interleaving their records on the
same events could lose an ordering.
"""

from __future__ import annotations

import threading
from typing import Any

from ._launch import Matrix, _aligned_ld, _check, _values
from .config import MAX_SPLIT_K, slice_ranges

__all__ = ["SplitKCall"]


class _Fork:
    """``MAX_SPLIT_K - 1`` non-blocking streams and their events on one device, made once,
    and the workspace kept for each caller's stream."""

    def __init__(self, device: int):
        from cuda.bindings import driver
        from cuda.core import Device

        self.device = Device(device)
        self.device.set_current()
        self.workspaces: dict[int, Any] = {}
        self.streams, self.handles, self.done = [], [], []
        for _ in range(MAX_SPLIT_K - 1):
            err, stream = driver.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING)
            _check(err, "cuStreamCreate")
            self.streams.append(stream)
            self.handles.append(int(stream))
            err, event = driver.cuEventCreate(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING)
            _check(err, "cuEventCreate")
            self.done.append(event)
        err, self.start = driver.cuEventCreate(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING)
        _check(err, "cuEventCreate")
        self.lock = threading.Lock()

    def workspace(self, handle: int, stream: Any, nbytes: int) -> int:
        """At least ``nbytes`` of device memory for calls on stream ``handle``, kept between calls.

        Calls on one stream are ordered (each call's slices wait for the work before it on
        that stream, the stream waits for its slices), so they can share one buffer; a
        larger request frees the old buffer in stream order and takes a new one.  Split
        calls have small outputs (at most one tile per SM times the slices), so what is
        kept is small.
        """
        kept = self.workspaces.get(handle)
        if kept is not None and kept.size >= nbytes:
            return int(kept.handle)
        if kept is not None:
            kept.close(stream)
        buf = self.workspaces[handle] = self.device.memory_resource.allocate(nbytes, stream=stream)
        return int(buf.handle)


_forks: dict[int, _Fork] = {}
_forks_lock = threading.Lock()


def _fork(device: int) -> _Fork:
    fork = _forks.get(device)
    if fork is None:
        with _forks_lock:
            fork = _forks.get(device)
            if fork is None:
                fork = _forks[device] = _Fork(device)
    return fork


class SplitKCall:
    """A pipeline call split into K slices (module docstring); same interface as ``PipelineCall``.

    ``kernel``: the loaded *plain* pipeline kernel the slices run; ``reduce``: the
    :class:`dxgemm._calls.KernelCall` of the reduce kernel compiled with the caller's
    epilogue; ``one``: the plain kernel's flattened alpha (1 in the dtype).
    """

    __slots__ = ("kernel", "reduce", "slices", "tf32x3", "device", "one")

    def __init__(self, kernel: Any, reduce: Any, slices: int, tf32x3: bool, device: int, one: list):
        self.kernel, self.reduce, self.slices = kernel, reduce, slices
        self.tf32x3, self.device, self.one = tf32x3, device, one

    def __call__(self, a: Matrix, b: Matrix, d: Matrix, m: int, n: int, k: int, epi_args: tuple | list,
                 stream: int) -> list[tuple[int, int]]:
        """Launch on ``stream`` (an integer handle); returns the K ranges the slices ran."""
        kernel = self.kernel
        handle = int(getattr(stream, "handle", stream))
        main, main_cu = kernel._stream(handle)
        epi_slots = epi_args if type(epi_args) is list else _values(tuple(epi_args))
        if self.tf32x3:
            from .tf32x3 import split_extent, split_operands

            k_total = split_extent(k, kernel.tile_k, kernel.depth)
            a3, b3 = split_operands(a, b, m, n, k, k_total, self.device, handle)
            a = Matrix(int(a3.data.ptr), m, k_total, k_total, "row_major", 4)
            b = Matrix(int(b3.data.ptr), k_total, n, k_total, "col_major", 4)
        else:
            k_total = k
        ranges = slice_ranges(k_total, self.slices, kernel.tile_k)
        itemsize = d.itemsize
        row_major = d.arrangement == "row_major"
        ld_w = _aligned_ld(n if row_major else m, itemsize)
        slice_stride = ld_w * (m if row_major else n)
        fork = _fork(self.device)
        with fork.lock:
            w = fork.workspace(handle, main, len(ranges) * slice_stride * itemsize)
            self._slices(fork, a, b, w, ld_w, slice_stride, d.arrangement, itemsize, m, n, ranges, handle, main_cu)
            # the reduce reads the slices as one stacked matrix and learns their stride from the "B" operand
            stacked = (Matrix(w, len(ranges) * m, n, ld_w, "row_major", itemsize) if row_major
                       else Matrix(w, m, len(ranges) * n, ld_w, "col_major", itemsize))
            stride_view = Matrix(w, 1, 1, slice_stride, "row_major", itemsize)
            self.reduce(stacked, stride_view, d, m, n, len(ranges), epi_slots, handle)
        return ranges

    def _slices(self, fork: _Fork, a: Matrix, b: Matrix, w: int, ld_w: int, slice_stride: int, arrangement: str,
                itemsize: int, m: int, n: int, ranges: list, handle: int, main_cu: Any) -> None:
        """Fork, one plain pipeline GEMM per K range into the workspace, join (module docstring).

        Slice 0 runs on the caller's stream itself; the others on the fork's streams.
        """
        from cuda.bindings import driver

        _check(driver.cuEventRecord(fork.start, main_cu), "cuEventRecord")
        for s, (k0, ks) in enumerate(ranges):
            a_s = Matrix(a.at(0, k0), m, ks, a.ld, a.arrangement, a.itemsize)
            b_s = Matrix(b.at(k0, 0), ks, n, b.ld, b.arrangement, b.itemsize)
            w_s = Matrix(w + s * slice_stride * itemsize, m, n, ld_w, arrangement, itemsize)
            if s == 0:
                self.kernel(handle, a_s, b_s, w_s, m, n, ks, self.one)
                continue
            aux = fork.streams[s - 1]
            _check(driver.cuStreamWaitEvent(aux, fork.start, 0), "cuStreamWaitEvent")
            self.kernel(fork.handles[s - 1], a_s, b_s, w_s, m, n, ks, self.one)
            _check(driver.cuEventRecord(fork.done[s - 1], aux), "cuEventRecord")
        for s in range(1, len(ranges)):
            _check(driver.cuStreamWaitEvent(main_cu, fork.done[s - 1], 0), "cuStreamWaitEvent")


def prepare_split(config: Any, dtype: Any, arrangement: tuple[str, str], operands: str, bound: Any,
                  d_arrangement: str, slices: int, device: int) -> SplitKCall:
    """Load the plain pipeline kernel and the reduce compiled with ``bound`` (the caller's chain)."""
    from .kernels import get_kernel
    from .warmup import plain_epilogue

    plain = plain_epilogue(dtype)
    kernel = get_kernel(config, dtype, arrangement, device=device, operands=operands,
                        epilogue_key=plain.key, make_epilogue=plain.make, epi_args=plain.args)
    reduce = reduce_kernel(dtype, d_arrangement, bound, device)
    return SplitKCall(kernel, reduce, slices, operands == "tf32", device, _values(plain.args))


_reduces: dict[tuple, Any] = {}


def reduce_kernel(dtype: Any, d_arrangement: str, bound: Any, device: int, cache: Any = None) -> Any:
    """The split-K reduce (:mod:`dxgemm.kernels.splitk_reduce`) for ``bound``'s chain, as a ``KernelCall``.

    Kept in the pipeline's on-disk cache like the GEMM kernels (its cubin, entry name and
    parameter layout), so a new process's first split call compiles nothing: Numba took
    about 2 s to build it, most of a warm start's 3-second budget.  Memoized per process.
    """
    import numpy as np

    from .._calls import KernelCall
    from .cache import KernelCache, key_fields
    from .kernels import _numba_type_text

    dtype = np.dtype(dtype)
    arg_types = _numba_type_text(bound.args)
    memo_key = (dtype.name, d_arrangement, bound.key, arg_types, device)
    hit = _reduces.get(memo_key)
    if hit is not None:
        return hit
    fields = key_fields(cc=(9, 0), config={"block": [32, 8]}, dtype=dtype.name,
                        arrangement=(d_arrangement, d_arrangement), epilogue_key=(bound.key, arg_types),
                        kind="splitk_reduce")

    def build() -> tuple[dict, dict]:
        from .._calls import launch_layout
        from ..kernels import KernelSpec, Layout, get_kernel as get_rung

        layout = Layout.ROW if d_arrangement == "row_major" else Layout.COL
        compiled = get_rung("splitk_reduce", KernelSpec(dtype, layout, layout, layout, bound.key, None),
                            bound.args, bound.make)
        overload, kinds, block, tile, _ = launch_layout(compiled)
        library = overload.library
        meta = {"kind": "splitk_reduce", "name": "splitk_reduce", "dtype": dtype.name,
                "arrangement": [d_arrangement, d_arrangement], "entry": library._entry_name,
                "params": kinds, "block": list(block), "tile": list(tile)}
        cubin = library.get_cubin(cc=(9, 0))  # a cuda.core ObjectCode (older numba-cuda: bytes)
        return meta, {"cubin": bytes(getattr(cubin, "code", cubin))}

    entry = (cache or KernelCache()).get_or_build(fields, build)
    meta = entry.meta
    hit = KernelCall.from_cubin(entry.blobs["cubin"], meta["entry"], meta["params"], tuple(meta["block"]),
                                tuple(meta["tile"]), device)
    _reduces[memo_key] = hit
    return hit
