"""Rung 1 — naive: one thread per output element, straight from global memory.

The idea: thread ``(x, y)`` of the grid computes ``D[x, y]`` as a dot product of row ``x``
of A with column ``y`` of B, reading every operand element from global memory.

Memory traffic: each output element reads ``2k`` operand elements, so the kernel asks for
``2mnk`` loads in total — ``k`` times the ``mk + kn`` elements the problem holds.  Worse,
``threadIdx.x`` walks *rows*: for row-major operands the 32 threads of a warp read 32
different rows of A (32 separate 32-byte sectors for 32 useful elements) and store to 32
different rows of D, so most of every memory transaction is thrown away.  Only the cache
hierarchy keeps this from being slower still.

What it reaches at 4096^3 is in ``docs/performance.md`` (the ladder table). It is the floor
the rest of the ladder is compared with.
"""

from __future__ import annotations

from numba import cuda

from ._device import U, make_offset
from ._spec import BuiltKernel, KernelSpec

BLOCK = 16


def build(spec: KernelSpec) -> BuiltKernel:
    a_off = make_offset(spec.layout_a)
    b_off = make_offset(spec.layout_b)
    d_off = make_offset(spec.layout_d)
    epilogue = spec.epilogue_fn
    zero = spec.dtype.type(0)

    def naive_gemm(a, b, d, m, n, k, lda, ldb, ldd, flags, epi_args):
        row = U(cuda.blockIdx.y) * U(BLOCK) + U(cuda.threadIdx.x)
        col = U(cuda.blockIdx.x) * U(BLOCK) + U(cuda.threadIdx.y)
        if row >= U(m) or col >= U(n):
            return
        acc = zero
        for p in range(U(k)):
            acc += a[a_off(row, p, U(lda))] * b[b_off(p, col, U(ldb))]
        d[d_off(row, col, U(ldd))] = epilogue(acc, row, col, epi_args)

    return BuiltKernel(naive_gemm, (BLOCK, BLOCK), BLOCK, BLOCK)
