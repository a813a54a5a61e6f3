"""Split-K pipeline calls: ``S`` K slices in one launch, then one reduce-and-epilogue pass.

When an output has too few tiles to fill the GPU (:func:`.config.split_k` decides how
many slices), a call runs as:

1. (3xTF32 only) the split of A and B into their TF32 parts, once; the slices below cut
   the split operands' tripled K;
2. the *split-K variant* of the plain pipeline kernel (alpha 1, beta 0, no epilogue;
   ``_build._gemm_pyfunc`` with ``slice_bytes``) on a grid whose z dimension is the slice:
   block ``(i, j, s)`` computes tile ``(i, j)`` of ``A[:, K_s] @ B[K_s, :]`` into slice
   ``s`` of a workspace, through the device pipelines the init kernel filled for ``K_s``;
3. :mod:`dxgemm.kernels.splitk_reduce` sums the slices and applies the caller's epilogue
   chain (alpha/beta first) while writing D.

Everything runs on the caller's stream.  The first version ran each slice as its own
launch of the plain kernel on its own stream (a fork and a join of events around them):
the launches' skew and the events cost ~15 microseconds of GPU time and several launches'
worth of host time per call (``benchmarks/results/h100_split_k_launch.log`` compares the
two in one run; the script that did, with its copy of the first version, is
``benchmarks/split_k_launch.py`` at commit f6fef38).  The workspace (``S x m x n``
elements, laid out like D) is kept per caller's stream: calls on one stream are ordered,
so they can share it.
"""

from __future__ import annotations

from typing import Any

from ._launch import KeptBuffers, Matrix, _aligned_ld, _values

__all__ = ["SplitKCall"]

_workspaces = KeptBuffers()


def workspace(device: int, core_device: Any, handle: int, stream: Any, nbytes: int) -> int:
    """At least ``nbytes`` of device memory for split calls on stream ``handle``, kept between calls.

    ``core_device``/``stream``: the cuda.core device and stream it is allocated from.  Split
    calls have small outputs (at most one tile per SM times the slices), so what is kept is
    small (:class:`~._launch.KeptBuffers`).
    """
    return _workspaces.get((device, handle), core_device, stream, nbytes)[0]


class SplitKCall:
    """A pipeline call split into K slices (module docstring); same interface as ``PipelineCall``.

    ``kernel``: the loaded split-K variant of the *plain* pipeline kernel; ``reduce``: the
    :class:`dxgemm._calls.KernelCall` of the reduce kernel compiled with the caller's
    epilogue; ``one``: the plain kernel's flattened alpha (1 in the dtype).
    """

    __slots__ = ("kernel", "reduce", "slices", "tf32x3", "device", "one")

    def __init__(self, kernel: Any, reduce: Any, slices: int, tf32x3: bool, device: int, one: list):
        self.kernel, self.reduce, self.slices = kernel, reduce, slices
        self.tf32x3, self.device, self.one = tf32x3, device, one

    def __call__(self, a: Matrix, b: Matrix, d: Matrix, m: int, n: int, k: int, epi_args: tuple | list,
                 stream: int) -> Any:
        """Launch on ``stream`` (an integer handle); returns the slices' launch :class:`~._launch.Plan`."""
        kernel = self.kernel
        handle = int(getattr(stream, "handle", stream))
        main, _ = kernel._stream(handle)
        epi_slots = epi_args if type(epi_args) is list else _values(tuple(epi_args))
        if self.tf32x3:
            from .tf32x3 import split_extent, split_pointers

            k_total = split_extent(k, kernel.tile_k, kernel.depth)
            a3, b3, keep = split_pointers(a, b, m, n, k, k_total, self.device, handle, kernel.device, main)
            a = Matrix(a3, m, k_total, k_total, "row_major", 4)
            b = Matrix(b3, k_total, n, k_total, "col_major", 4)
        else:
            k_total, keep = k, None
        slices, itemsize = self.slices, d.itemsize
        row_major = d.arrangement == "row_major"
        ld_w = _aligned_ld(n if row_major else m, itemsize)
        slice_stride = ld_w * (m if row_major else n)
        w = workspace(self.device, kernel.device, handle, main, slices * slice_stride * itemsize)
        # the slices stacked: the kernel finds slice s at s * m * ld_w (s * n * ld_w) elements
        stacked = (Matrix(w, slices * m, n, ld_w, "row_major", itemsize) if row_major
                   else Matrix(w, m, slices * n, ld_w, "col_major", itemsize))
        p = kernel(handle, a, b, stacked, m, n, k_total, self.one, slices=slices)
        # the reduce learns the slices' stride from its "B" operand
        stride_view = Matrix(w, 1, 1, slice_stride, "row_major", itemsize)
        self.reduce(stacked, stride_view, d, m, n, slices, epi_slots, handle)
        del keep  # a CuPy-pool split may go back to the pool once the GEMM is enqueued
        return p


def prepare_split(config: Any, dtype: Any, arrangement: tuple[str, str], operands: str, bound: Any,
                  d_arrangement: str, slices: int, device: int) -> SplitKCall:
    """Load the split-K variant of the plain pipeline kernel and the reduce compiled with ``bound``
    (the caller's chain)."""
    from .kernels import get_kernel
    from .warmup import plain_epilogue

    plain = plain_epilogue(dtype)
    kernel = get_kernel(config, dtype, arrangement, device=device, operands=operands,
                        epilogue_key=plain.key, make_epilogue=plain.make, epi_args=plain.args, split_k=True)
    reduce = reduce_kernel(dtype, d_arrangement, bound, device)
    return SplitKCall(kernel, reduce, slices, operands == "tf32", device, _values(plain.args))


def reduce_kernel(dtype: Any, d_arrangement: str, bound: Any, device: int, cache: Any = None) -> Any:
    """The split-K reduce (:mod:`dxgemm.kernels.splitk_reduce`) for ``bound``'s chain, as a ``KernelCall``.

    A rung like the others, kept on disk by :mod:`dxgemm._rung_cache`, so a new process's
    first split call compiles nothing: Numba took about 2 s to build it, most of a warm
    start's 3-second budget.  Memoized per process.
    """
    import numpy as np

    from .._rung_cache import rung_call
    from ..kernels import KernelSpec, Layout

    layout = Layout.ROW if d_arrangement == "row_major" else Layout.COL
    spec = KernelSpec(np.dtype(dtype), layout, layout, layout, bound.key, None)
    return rung_call("splitk_reduce", spec, bound, device, cache=cache)
