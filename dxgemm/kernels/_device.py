"""Device-side building blocks shared by the rungs of the ladder.

Everything here is compiled into the kernels; nothing here runs on the host.

Two Numba-specific habits run through the ladder (see ``shared/notes/numba-gemm.md``):

* **Unsigned 64-bit indices.**  Numba types indices as signed ``int64`` and adds a
  negative-index fix-up to every signed array access.  All hot index arithmetic is done
  in ``uint64`` (:data:`U` constants, ``U(threadIdx.x)``), which removes the fix-up and
  halves the inner-loop instruction count.  Mixing ``uint64`` with a plain ``int``
  literal types as ``float64`` in Numba, so every constant a kernel uses is a ``U``.
* **Compile-time tile sizes.**  Tile sizes are closure constants of a kernel factory, so
  NVVM fully unrolls the inner loops and keeps ``cuda.local.array`` accumulators in
  registers.
"""

from __future__ import annotations

import numpy as np
from numba import config, cuda

from ._spec import Layout

SIMULATOR: bool = bool(config.ENABLE_CUDASIM)
"""True under ``NUMBA_ENABLE_CUDASIM=1``: kernels then run as Python on the CPU."""

U = np.uint64
"""The index type of hot loops; wrap every integer constant in it."""

SMEM_ALIGN = None if SIMULATOR else 16
"""Shared tiles are 16-byte aligned on the GPU so ptxas may emit 128-bit ``LDS.128``."""

VEC_BYTES = 16
"""Width of one vector global load (``LDG.E.128``)."""


def vec_width(dtype: np.dtype) -> int:
    """Elements per 128-bit load: 4 for float32, 2 for float64."""
    return VEC_BYTES // np.dtype(dtype).itemsize


def make_offset(layout: Layout):
    """Device function ``offset(row, col, ld)`` for an operand of the given layout."""
    if layout == Layout.ROW:

        @cuda.jit(device=True)
        def offset(row, col, ld):
            return row * ld + col

    else:

        @cuda.jit(device=True)
        def offset(row, col, ld):
            return row + col * ld

    return offset


# ---------------------------------------------------------------------------------------
# 128-bit global loads.  Numba has no float4 view of an array and, not knowing the
# alignment, splits four scalar loads into four LDG.E.  This intrinsic emits one LLVM
# ``load <W x T>, align 16``, which ptxas turns into a single LDG.E.128.  The caller
# guarantees the alignment (the host checks the base pointer and leading dimension).
# ---------------------------------------------------------------------------------------
if SIMULATOR:

    def load_vec(array, index):
        """Simulator stand-in: the same elements, loaded one at a time."""
        width = VEC_BYTES // array.dtype.itemsize
        return tuple(array[index + i] for i in range(width))

else:
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def load_vec(typingctx, array, index):
        """Load 16 aligned bytes starting at ``array[index]`` as a tuple of elements."""
        if not isinstance(array, types.Array) or not isinstance(index, types.Integer):
            return None
        width = VEC_BYTES // (array.dtype.bitwidth // 8)
        sig = types.UniTuple(array.dtype, width)(array, index)

        def codegen(context, builder, sig, args):
            array_type = sig.args[0]
            ary = context.make_array(array_type)(context, builder, value=args[0])
            element = context.get_value_type(array_type.dtype)
            idx = context.cast(builder, args[1], sig.args[1], types.uint64)
            ptr = builder.gep(ary.data, [idx], inbounds=True)
            vec_ptr = builder.bitcast(ptr, ir.VectorType(element, width).as_pointer())
            vec = builder.load(vec_ptr, align=VEC_BYTES)
            elems = [builder.extract_element(vec, ir.Constant(ir.IntType(32), i)) for i in range(width)]
            return context.make_tuple(builder, sig.return_type, elems)

        return sig, codegen


def make_tile_loader(
    dtype: np.dtype,
    layout: Layout,
    rows: int,
    cols: int,
    smem_layout: Layout,
    nthreads: int,
    vectorize: bool,
):
    """Device function that copies one ``rows x cols`` tile of a global operand into shared memory.

    ``load(g, ld, row0, col0, nrows, ncols, s, tid, vec_ok)`` copies the tile whose top-left
    element is ``(row0, col0)`` of the ``nrows x ncols`` global matrix ``g`` (flat, leading
    dimension ``ld``, layout ``layout``) into the flat shared array ``s``, stored in
    ``smem_layout`` order.  Elements outside the matrix are stored as zero, so the
    multiply-accumulate loop needs no guards and edge tiles add nothing.

    Consecutive threads take consecutive elements along the operand's *contiguous*
    dimension, so every warp's global access is coalesced whatever the layout.  With
    ``vectorize`` each thread moves 16 bytes per load; ``vec_ok`` (a run-time flag the host
    sets when the base pointer is 16-byte aligned and ``ld`` a multiple of the vector
    width) and a whole chunk inside the matrix select that path, otherwise the same thread
    falls back to guarded scalar loads.
    """
    width = vec_width(dtype) if vectorize else 1
    along_cols = layout == Layout.ROW
    line_len = cols if along_cols else rows
    if line_len % width:
        raise ValueError(f"tile dimension {line_len} is not a multiple of the vector width {width}")
    chunks = rows * cols // width
    if chunks % nthreads:
        raise ValueError(f"a {rows}x{cols} tile does not split evenly over {nthreads} threads")
    iters = chunks // nthreads
    chunks_per_line = U(line_len // width)
    NT = U(nthreads)
    W = U(width)
    R = U(rows)
    C = U(cols)
    smem_row = smem_layout == Layout.ROW
    zero = np.dtype(dtype).type(0)
    g_off = make_offset(layout)

    @cuda.jit(device=True)
    def load(g, ld, row0, col0, nrows, ncols, s, tid, vec_ok):
        for it in range(iters):
            q = tid + U(it) * NT
            line = q // chunks_per_line
            pos = (q % chunks_per_line) * W
            if along_cols:
                r = line
                c = pos
            else:
                r = pos
                c = line
            gr = row0 + r
            gc = col0 + c
            full = vec_ok and gr < nrows and gc < ncols
            if along_cols:
                full = full and gc + W <= ncols
            else:
                full = full and gr + W <= nrows
            if width > 1 and full:
                vals = load_vec(g, g_off(gr, gc, ld))
                for v in range(width):
                    rr = r if along_cols else r + U(v)
                    cc = c + U(v) if along_cols else c
                    if smem_row:
                        s[rr * C + cc] = vals[v]
                    else:
                        s[cc * R + rr] = vals[v]
            else:
                for v in range(width):
                    rr = r if along_cols else r + U(v)
                    cc = c + U(v) if along_cols else c
                    val = zero
                    if row0 + rr < nrows and col0 + cc < ncols:
                        val = g[g_off(row0 + rr, col0 + cc, ld)]
                    if smem_row:
                        s[rr * C + cc] = val
                    else:
                        s[cc * R + rr] = val

    return load
