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

from typing import Any, Callable, NamedTuple

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


def make_element_index(layout_d: Layout, tile_m: int, tile_n: int):
    """Device function ``() -> (row, col)``: the output element of this thread, one per thread.

    ``threadIdx.x`` walks D's contiguous dimension (columns for row-major D, rows for
    column-major), so a warp's stores — and reads of anything laid out like D — are
    coalesced.  The block covers ``tile_m x tile_n`` elements.
    """
    if layout_d == Layout.ROW:

        @cuda.jit(device=True)
        def element_index():
            return (U(cuda.blockIdx.y) * U(tile_m) + U(cuda.threadIdx.y),
                    U(cuda.blockIdx.x) * U(tile_n) + U(cuda.threadIdx.x))

    else:

        @cuda.jit(device=True)
        def element_index():
            return (U(cuda.blockIdx.y) * U(tile_m) + U(cuda.threadIdx.x),
                    U(cuda.blockIdx.x) * U(tile_n) + U(cuda.threadIdx.y))

    return element_index


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

    def _element_pointer(context, builder, array_type, array, index_type, index):
        """LLVM pointer to ``array[index]`` (no bounds or wraparound handling) and the element's LLVM type."""
        ary = context.make_array(array_type)(context, builder, value=array)
        idx = context.cast(builder, index, index_type, types.uint64)
        return builder.gep(ary.data, [idx], inbounds=True), context.get_value_type(array_type.dtype)

    @intrinsic
    def load_vec(typingctx, array, index):
        """Load 16 aligned bytes starting at ``array[index]`` as a tuple of elements."""
        if not isinstance(array, types.Array) or not isinstance(index, types.Integer):
            return None
        width = VEC_BYTES // (array.dtype.bitwidth // 8)
        sig = types.UniTuple(array.dtype, width)(array, index)

        def codegen(context, builder, sig, args):
            ptr, element = _element_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1])
            vec_ptr = builder.bitcast(ptr, ir.VectorType(element, width).as_pointer())
            vec = builder.load(vec_ptr, align=VEC_BYTES)
            elems = [builder.extract_element(vec, ir.Constant(ir.IntType(32), i)) for i in range(width)]
            return context.make_tuple(builder, sig.return_type, elems)

        return sig, codegen


if SIMULATOR:

    def store_vec(array, index, values):
        """Simulator stand-in: the same elements, stored one at a time."""
        for i, v in enumerate(values):
            array[index + i] = v

    def is_aligned16(array, index):
        """Simulator stand-in: whether ``array[index]`` starts a 16-byte aligned vector."""
        return (array.__cuda_array_interface__["data"][0] + index * array.dtype.itemsize) % VEC_BYTES == 0

else:

    @intrinsic
    def store_vec(typingctx, array, index, values):
        """Store the tuple ``values`` (16 bytes) at ``array[index]`` with one 128-bit store.

        The caller guarantees the alignment (:func:`is_aligned16`); ptxas then emits one
        ``STG.E.128`` instead of a store per element.
        """
        if (not isinstance(array, types.Array) or not isinstance(index, types.Integer)
                or not isinstance(values, types.UniTuple) or values.dtype != array.dtype
                or values.count * (array.dtype.bitwidth // 8) != VEC_BYTES):
            return None
        sig = types.void(array, index, values)

        def codegen(context, builder, sig, args):
            ptr, element = _element_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1])
            width = sig.args[2].count
            vec = ir.Constant(ir.VectorType(element, width), ir.Undefined)
            for i in range(width):
                vec = builder.insert_element(vec, builder.extract_value(args[2], i), ir.Constant(ir.IntType(32), i))
            builder.store(vec, builder.bitcast(ptr, ir.VectorType(element, width).as_pointer()), align=VEC_BYTES)
            return context.get_dummy_value()

        return sig, codegen

    @intrinsic
    def is_aligned16(typingctx, array, index):
        """Whether the address of ``array[index]`` is a multiple of 16 bytes."""
        if not isinstance(array, types.Array) or not isinstance(index, types.Integer):
            return None
        sig = types.boolean(array, index)

        def codegen(context, builder, sig, args):
            ptr, _ = _element_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1])
            address = builder.ptrtoint(ptr, ir.IntType(64))
            low = builder.and_(address, ir.Constant(ir.IntType(64), VEC_BYTES - 1))
            return builder.icmp_unsigned("==", low, ir.Constant(ir.IntType(64), 0))

        return sig, codegen


class _TilePlan(NamedTuple):
    """How ``nthreads`` threads split a ``rows x cols`` tile copy (shared by loader and stager)."""

    width: int  # elements per chunk (a 16-byte vector, or 1)
    along_cols: bool  # chunks run along columns (row-major global operand)
    iters: int  # chunks per thread
    chunks_per_line: Any
    NT: Any
    W: Any
    R: Any  # shared line length when the shared tile is column-major
    C: Any  # ... and when it is row-major
    smem_row: bool
    zero: Any
    g_off: Callable


def _tile_plan(dtype: np.dtype, layout: Layout, rows: int, cols: int, smem_layout: Layout, nthreads: int,
               width: int, smem_ld: int | None) -> _TilePlan:
    """Validate a tile copy and compute its constants: consecutive threads take consecutive
    ``width``-element chunks along the operand's contiguous dimension."""
    along_cols = layout == Layout.ROW
    line_len = cols if along_cols else rows
    if line_len % width:
        raise ValueError(f"tile dimension {line_len} is not a multiple of the vector width {width}")
    chunks = rows * cols // width
    if chunks % nthreads:
        raise ValueError(f"a {rows}x{cols} tile does not split evenly over {nthreads} threads")
    return _TilePlan(
        width=width,
        along_cols=along_cols,
        iters=chunks // nthreads,
        chunks_per_line=U(line_len // width),
        NT=U(nthreads),
        W=U(width),
        R=U(rows if smem_ld is None else smem_ld),
        C=U(cols if smem_ld is None else smem_ld),
        smem_row=smem_layout == Layout.ROW,
        zero=np.dtype(dtype).type(0),
        g_off=make_offset(layout),
    )


def make_tile_loader(
    dtype: np.dtype,
    layout: Layout,
    rows: int,
    cols: int,
    smem_layout: Layout,
    nthreads: int,
    vectorize: bool,
    smem_ld: int | None = None,
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

    ``smem_ld`` pads the shared tile: the distance between consecutive lines of ``s``
    (rows when ``smem_layout`` is ROW, columns when COL); default unpadded.  Padding
    shifts each line onto other banks, which the tensor-core fragment loads need.
    """
    width, along_cols, iters, chunks_per_line, NT, W, R, C, smem_row, zero, g_off = _tile_plan(
        dtype, layout, rows, cols, smem_layout, nthreads, vec_width(dtype) if vectorize else 1, smem_ld)

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



class TileStager(NamedTuple):
    """A tile copy split in two halves, so the global loads can be in flight during compute.

    ``fetch(g, ld, row0, col0, nrows, ncols, tid, vec_ok, regs)`` issues this thread's global
    loads of the tile into ``regs`` (a ``cuda.local.array(nregs, dtype)``; zero outside the
    matrix); ``put(s, tid, regs)`` stores them into the shared tile.  A kernel fetches the
    next K tile, multiplies the current one while the loads are in flight, then puts: the
    global latency hides behind the multiply-adds instead of stalling every warp.
    """

    fetch: Callable
    put: Callable
    nregs: int


def make_tile_stager(
    dtype: np.dtype,
    layout: Layout,
    rows: int,
    cols: int,
    smem_layout: Layout,
    nthreads: int,
    smem_ld: int | None = None,
) -> TileStager:
    """:class:`TileStager` for a tile; the same chunking and arguments as :func:`make_tile_loader`."""
    width, along_cols, iters, chunks_per_line, NT, W, R, C, smem_row, zero, g_off = _tile_plan(
        dtype, layout, rows, cols, smem_layout, nthreads, vec_width(dtype), smem_ld)

    @cuda.jit(device=True)
    def chunk(tid, it):
        q = tid + U(it) * NT
        line = q // chunks_per_line
        pos = (q % chunks_per_line) * W
        if along_cols:
            return line, pos
        return pos, line

    @cuda.jit(device=True)
    def fetch(g, ld, row0, col0, nrows, ncols, tid, vec_ok, regs):
        for it in range(iters):
            r, c = chunk(tid, it)
            gr = row0 + r
            gc = col0 + c
            full = vec_ok and gr < nrows and gc < ncols
            if along_cols:
                full = full and gc + W <= ncols
            else:
                full = full and gr + W <= nrows
            if full:
                vals = load_vec(g, g_off(gr, gc, ld))
                for v in range(width):
                    regs[it * width + v] = vals[v]
            else:
                for v in range(width):
                    rr = r if along_cols else r + U(v)
                    cc = c + U(v) if along_cols else c
                    val = zero
                    if row0 + rr < nrows and col0 + cc < ncols:
                        val = g[g_off(row0 + rr, col0 + cc, ld)]
                    regs[it * width + v] = val

    @cuda.jit(device=True)
    def put(s, tid, regs):
        for it in range(iters):
            r, c = chunk(tid, it)
            for v in range(width):
                rr = r if along_cols else r + U(v)
                cc = c + U(v) if along_cols else c
                if smem_row:
                    s[rr * C + cc] = regs[it * width + v]
                else:
                    s[cc * R + rr] = regs[it * width + v]

    return TileStager(fetch, put, iters * width)

# ---------------------------------------------------------------------------------------
# FP64 tensor cores (DMMA).  numba-cuda has no mma API, so one warp-wide
# ``mma.sync.aligned.m8n8k4.row.col.f64`` is emitted as inline PTX.  Its fragments, per
# lane (``g = lane // 4``, ``t = lane % 4``):
#   A (8x4):  one element, A[g, t]        B (4x8):  one element, B[t, g]
#   C, D (8x8): two elements, C[g, 2t] and C[g, 2t + 1]
# Both shared tiles are stored K-major (element (k, i) at ``k * ld + i``), so one index
# formula loads either fragment.
#
# Under the simulator a lane cannot see its neighbours' registers, so there a "fragment"
# is a reference (tile, base, ld) and the multiply reads the 8x4 / 4x8 blocks straight
# from shared memory: the same arithmetic and the same shared-memory indexing, checked
# on the CPU; the register exchange itself is checked by the GPU tests.
# ---------------------------------------------------------------------------------------
if SIMULATOR:

    def load_frag(tile, base, ld, lane):
        """Simulator: the fragment is its block's position in the tile (kept in a float register array)."""
        return float(base)

    def mma_f64(a, b, c0, c1, lane, a_tile, a_ld, b_tile, b_ld):
        """Simulator: this lane's two elements of ``C + A @ B`` for one 8x8x4 step, read from the tiles."""
        ba, bb = int(a), int(b)
        g, t2 = lane // 4, (lane % 4) * 2
        for kk in range(4):
            av = a_tile[ba + kk * a_ld + g]
            c0 = c0 + av * b_tile[bb + kk * b_ld + t2]
            c1 = c1 + av * b_tile[bb + kk * b_ld + t2 + 1]
        return c0, c1

else:

    @cuda.jit(device=True)
    def load_frag(tile, base, ld, lane):
        """This lane's element of the 8x4 A (or 4x8 B) fragment whose K-major block starts at ``tile[base]``."""
        return tile[base + (lane & U(3)) * ld + (lane >> U(2))]

    @intrinsic
    def _mma_m8n8k4_f64(typingctx, a, b, c0, c1):
        f64 = types.float64
        if not all(x == f64 for x in (a, b, c0, c1)):
            return None
        sig = types.UniTuple(f64, 2)(f64, f64, f64, f64)

        def codegen(context, builder, sig, args):
            d = ir.DoubleType()
            fnty = ir.FunctionType(ir.LiteralStructType([d, d]), [d, d, d, d])
            asm = ir.InlineAsm(
                fnty,
                "mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {$0, $1}, {$2}, {$3}, {$4, $5};",
                "=d,=d,d,d,d,d",
            )
            res = builder.call(asm, args)
            return context.make_tuple(builder, sig.return_type, [builder.extract_value(res, i) for i in range(2)])

        return sig, codegen

    @cuda.jit(device=True)
    def mma_f64(a, b, c0, c1, lane, a_tile, a_ld, b_tile, b_ld):
        """One warp-wide 8x8x4 FP64 tensor-core step on register fragments; returns this lane's two C elements.

        The tile arguments are unused here (the simulator version reads them).
        """
        return _mma_m8n8k4_f64(a, b, c0, c1)
