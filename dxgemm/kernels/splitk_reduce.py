"""Split-K reduction: sum the K slices' partial products, then apply the epilogue, in one pass.

Not a rung of the ladder but its helper for problems with too few output tiles to fill
the GPU (``dxgemm.policy.pipeline_split_k``): the pipeline computes ``S`` partial
products ``W_s = A[:, K_s] @ B[K_s, :]`` over disjoint K ranges, each as its own grid, and
this kernel finishes the GEMM::

    D[i, j] = epilogue(W_0[i, j] + W_1[i, j] + ... + W_{S-1}[i, j], i, j)

The epilogue chain (alpha/beta first) is the caller's, applied to the full sum, so a
split call gives what an unsplit one gives: the same stages, once per element, in the
accumulator's dtype.  The slices are summed in order (slice 0 first).

The same sum can finish inside the slices' kernel instead (:func:`make_serial_finish`, the
*serial* split): each block counts its slice in, and the last of a tile's slices sums the
tile and writes D.  One launch instead of two, for calls whose GPU time is short enough
that a launch's host cost and start-up decide their speed.

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

from numba import cuda, int32

from ._device import U, load_l2, make_element_index, make_offset
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


SERIAL_BATCH = 8
"""Slices whose loads the serial finish issues before it adds them (in order): one block sums
its tile alone, so a load a slice, each waiting for the last, would leave it waiting ``S``
L2 latencies an element."""


def make_serial_finish(spec: KernelSpec, tile_m: int, tile_n: int, threads: int):
    """Device function ``finish(w, counters, d, ldd, um, un, row0, col0, tid, epi_args)`` for a
    split kernel's block of ``threads`` threads whose ``tile_m x tile_n`` output tile starts at
    ``(row0, col0)``, called by every thread after it stored its slice ``blockIdx.z`` into the
    workspace ``w`` (slice ``s`` at ``s * um * un``, laid out like D with leading dimension
    ``un`` (row-major) or ``um``).

    The block publishes its stores (a fence, then one atomic add on ``counters[tile]``, the
    tile's arrival count); the block that arrives last sums the tile's slices in order, as the
    separate reduce does, applies ``spec``'s epilogue with ``epi_args`` and writes D, then sets
    the count back to zero for the next call on the stream.  Its reads go past L1
    (:func:`~._device.load_l2`): the other slices were written from other SMs.
    """
    d_off = make_offset(spec.layout_d)
    epilogue = spec.epilogue_fn
    dt = spec.dtype
    zero = dt.type(0)
    rows = spec.layout_d == Layout.ROW
    # consecutive threads walk D's contiguous dimension (coalesced reads and writes)
    along = tile_n if rows else tile_m
    elems = tile_m * tile_n
    one = int32(1)
    uBATCH = U(SERIAL_BATCH)

    @cuda.jit(device=True)
    def finish(w, counters, d, ldd, um, un, row0, col0, tid, epi_args):
        cuda.threadfence()  # this thread's slice stores, visible device-wide before the count
        tile = U(cuda.blockIdx.y) * U(cuda.gridDim.x) + U(cuda.blockIdx.x)
        slices = U(cuda.gridDim.z)
        cuda.syncthreads()
        arrived = 0
        if tid == U(0):
            arrived = 1 if U(cuda.atomic.add(counters, tile, one)) == slices - U(1) else 0
        if not cuda.syncthreads_or(arrived):
            return
        cuda.threadfence()
        ldw = un if rows else um
        stride = um * un
        for e in range(tid, U(elems), U(threads)):
            inner, outer = e % U(along), e // U(along)
            row = row0 + (outer if rows else inner)
            col = col0 + (inner if rows else outer)
            if row < um and col < un:
                at = d_off(row, col, ldw)
                acc = zero
                s = U(0)
                while s + uBATCH <= slices:  # SERIAL_BATCH loads in flight, then added in slice order
                    part = cuda.local.array(SERIAL_BATCH, dt.type)
                    for j in range(SERIAL_BATCH):
                        part[j] = load_l2(w, at + (s + U(j)) * stride)
                    for j in range(SERIAL_BATCH):
                        acc += part[j]
                    s += uBATCH
                while s < slices:
                    acc += load_l2(w, at + s * stride)
                    s += U(1)
                d[d_off(row, col, U(ldd))] = epilogue(acc, row, col, epi_args)
        if tid == U(0):
            counters[tile] = 0

    return finish
