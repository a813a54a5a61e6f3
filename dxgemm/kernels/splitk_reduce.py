"""Split-K reduction: sum the K slices' partial products, then apply the epilogue, in one pass.

Not a rung of the ladder but its helper for problems with too few output tiles to fill
the GPU (``dxgemm.policy.pipeline_split_k``): the pipeline computes ``S`` partial
products ``W_s = A[:, K_s] @ B[K_s, :]`` over disjoint K ranges, each as its own grid, and
this kernel finishes the GEMM::

    D[i, j] = epilogue(W_0[i, j] + W_1[i, j] + ... + W_{S-1}[i, j], i, j)

The epilogue chain (alpha/beta first) is the caller's, applied to the full sum, so a
split call gives what an unsplit one gives: the same stages, once per element, in the
accumulator's dtype.  The slices are summed in order (slice 0 first).

Memory traffic: ``S + 1`` reads (``+ 1`` when beta reads C) and one write of ``m x n``
elements: for 4096 x 64 in float64 with four slices, 10 MB, a few microseconds on the
H100 against the ~50 microseconds the GEMM takes — the price of filling 128 SMs
instead of 32.

It takes the ladder's argument list (``dxgemm.kernels``), read as::

    kernel(w, w, d, m, n, slices, ldw, slice_stride, ldd, flags, epi_args)

``w`` is the workspace, laid out like ``D`` (``spec.layout_d``; ``spec.layout_a`` is the
same): slice ``s`` is an ``m x n`` matrix with leading dimension ``ldw`` starting
``s * slice_stride`` elements in.  The second operand is unused; ``flags`` too.  Threads
of a warp walk D's contiguous dimension, so the workspace reads and the D write are
both coalesced.
"""

from __future__ import annotations

from ._device import U, make_element_index, make_offset
from ._spec import BuiltKernel, KernelSpec, Layout

ALONG = 32  # threads along D's contiguous dimension (a warp)
ACROSS = 8  # threads along the other one


def build(spec: KernelSpec) -> BuiltKernel:
    d_off = make_offset(spec.layout_d)
    epilogue = spec.epilogue_fn
    zero = spec.dtype.type(0)
    rows_fast = spec.layout_d == Layout.COL

    tile_m, tile_n = (ALONG, ACROSS) if rows_fast else (ACROSS, ALONG)
    element_index = make_element_index(spec.layout_d, tile_m, tile_n)

    def splitk_reduce(w, unused, d, m, n, slices, ldw, slice_stride, ldd, flags, epi_args):
        row, col = element_index()
        if row >= U(m) or col >= U(n):
            return
        at = d_off(row, col, U(ldw))
        acc = zero
        for s in range(U(slices)):
            acc += w[at + s * U(slice_stride)]
        d[d_off(row, col, U(ldd))] = epilogue(acc, row, col, epi_args)

    return BuiltKernel(splitk_reduce, block=(ALONG, ACROSS), tile_m=tile_m, tile_n=tile_n)
