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

import math
import struct
import threading
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
        host = getattr(array, "_ary", array)  # inside a simulated kernel: the wrapped numpy array
        interface = getattr(host, "__cuda_array_interface__", None) or host.__array_interface__
        return (interface["data"][0] + int(index) * array.dtype.itemsize) % VEC_BYTES == 0

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


# ---------------------------------------------------------------------------------------
# Loads past L1.  A block that reads what other blocks of the same kernel wrote (split-K's
# serial finish, after their count says they are done) must not hit a line its SM's L1 took
# earlier: L1 is not coherent across SMs.  ``load_l2(array, index)`` is ``ld.global.cg``
# (cached in L2 only) and, being volatile, is never moved above the fence before it.
# ---------------------------------------------------------------------------------------
if SIMULATOR:

    def load_l2(array, index):
        return array[index]

else:

    @intrinsic
    def load_l2(typingctx, array, index):
        """``array[index]`` (float32 or float64) read from L2 (``ld.global.cg``)."""
        if not (isinstance(array, types.Array) and isinstance(index, types.Integer)
                and array.dtype in (types.float32, types.float64)):
            return None
        wide = array.dtype == types.float64
        sig = array.dtype(array, index)

        def codegen(context, builder, sig, args):
            ptr, element = _element_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1])
            address = builder.ptrtoint(ptr, ir.IntType(64))
            asm = ir.InlineAsm(ir.FunctionType(element, [ir.IntType(64)]),
                               f"ld.global.cg.{'f64' if wide else 'f32'} $0, [$1];",
                               f"={'d' if wide else 'f'},l,~{{memory}}", side_effect=True)
            return builder.call(asm, [address])

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


def _chunk_position(plan: _TilePlan) -> Callable:
    """``chunk(tid, it) -> (line, pos)``: where thread ``tid``'s ``it``-th chunk of a tile
    copy lies — which line along the operand's contiguous dimension, and its first element
    on that line.  Loader, stager and asynchronous copier all split a tile this way."""
    NT, W, per_line = plan.NT, plan.W, plan.chunks_per_line

    @cuda.jit(device=True, inline="always")
    def chunk(tid, it):
        q = tid + U(it) * NT
        return q // per_line, (q % per_line) * W

    return chunk


def _chunk_element(plan: _TilePlan) -> Callable:
    """``element(row0, col0, line, pos) -> (row, col)``: the matrix element a chunk at ``(line,
    pos)`` (:func:`_chunk_position`) of the tile at ``(row0, col0)`` starts at."""
    along_cols = plan.along_cols

    @cuda.jit(device=True, inline="always")
    def element(row0, col0, line, pos):
        if along_cols:  # row-major: a line is a row, chunks run along it
            return row0 + line, col0 + pos
        return row0 + pos, col0 + line

    return element


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
    plan = _tile_plan(dtype, layout, rows, cols, smem_layout, nthreads, vec_width(dtype) if vectorize else 1, smem_ld)
    width, along_cols, iters, _, _, W, R, C, smem_row, zero, g_off = plan
    chunk = _chunk_position(plan)

    @cuda.jit(device=True)
    def load(g, ld, row0, col0, nrows, ncols, s, tid, vec_ok):
        for it in range(iters):
            line, pos = chunk(tid, it)
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



# ---------------------------------------------------------------------------------------
# Epilogue primitives.  In a fused GEMM the epilogue's instructions compete with the main
# loop's for issue slots, and every one per element shows in the kernel's time at shallow
# K; the first three replace libdevice/Numba forms that cost several instructions more, the
# last three are the pieces of float64 GELU's own ``exp`` (``epilogues._pointwise._gelu_float64``).
#
# ``load_invariant(v, i)``: ``v[i]`` of a 1-D array the kernel never writes, as an LLVM
# load marked ``!invariant.load``.  A plain load of a bias may not move above a store to D
# (Numba's arrays may alias), so a tile walk reloaded each thread's bias values at every
# step and the step's arithmetic waited for them; marked invariant (true: ``gemm`` refuses
# an epilogue array that overlaps an output), the compiler loads them once before the walk.
#
# ``exp2_approx(z)``: float32 ``2**z`` as one ``ex2.approx.ftz.f32`` (``MUFU.EX2``, within
# 2 ulp).  libdevice's ``exp2f`` wraps the same instruction in a range check and two
# predicated multiplies that keep results below 2**-126 as denormals; the epilogues never
# produce one (GELU: ``2**q`` with ``q >= -30``) or add it to 1, where it vanishes anyway.
#
# ``divide_approx(x, y)``: float32 ``x / y`` as ``div.approx`` (``MUFU.RCP`` and a multiply,
# within 2 ulp).  IEEE division adds a range check and a call to a slow path.  It returns 0
# for ``|y| > 2**126``, where ``y = 1 + 2**z`` has overflowed or nearly so and the exact
# quotient is below 1e-37.
#
# ``rcp_approx64(x)``: float64 ``1 / x`` to about 20 bits as ``rcp.approx.ftz.f64`` (one
# ``MUFU.RCP64H``; subnormal results flush to zero), the first guess two Newton steps refine
# (``epilogues._pointwise._quotient_float64``), where IEEE division branches to a slow path.
#
# float64 ``fma(a, b, c)``: one rounding (libdevice's ``fma``, ``DFMA``), where ``a * b + c``
# leaves the contraction to the compiler.  ``low_word(t)``: the low 32 bits of a float64 as
# a signed integer; after ``t = fma(y, c, 1.5 * 2**52)`` they are ``round(y * c)`` (the
# shifter trick: no conversion instruction, which on sm_90 runs at a quarter of the FP64
# rate).  ``times_pow2(y, k)``: ``y * 2**k`` as an integer add to the exponent field, for a
# normal result only (the caller keeps it in range).  ``bits_of(t)`` / ``double_of(i)``: a
# float64's bit pattern as an int64 and back (no instruction): comparisons, clamps and
# selects on those run on the integer pipe, which a float64 GEMM's DMMA main loop leaves free.
#
# The simulator indexes, calls ``math.exp2`` (inf past float64's range, as the instruction) and divides (and
# ``fma`` rounds twice).
# ---------------------------------------------------------------------------------------
if SIMULATOR:

    def load_invariant(array, index):
        return array[index]

    def exp2_approx(z):
        return math.inf if z >= 1024.0 else math.exp2(z)  # ex2.approx overflows to inf (NaN stays NaN)

    def divide_approx(x, y):
        return x / y

    def fma(a, b, c):
        return a * b + c

    def low_word(t):
        low = struct.unpack("<Q", struct.pack("<d", t))[0] & 0xFFFFFFFF
        return low - (1 << 32) if low >= 1 << 31 else low

    def times_pow2(y, k):
        return math.ldexp(y, k)

    def bits_of(t):
        return struct.unpack("<q", struct.pack("<d", t))[0]

    def double_of(i):
        return struct.unpack("<d", struct.pack("<q", int(i)))[0]

    def rcp_approx64(x):
        if not math.isfinite(x) or x == 0:
            return 1.0 / x if x else math.copysign(math.inf, x)
        mantissa, exponent = math.frexp(1.0 / x)  # 1 / x to 20 bits, coarser than the hardware
        return math.ldexp(round(mantissa * 2**20) / 2**20, exponent)

else:
    from numba.core import cgutils
    from numba.cuda import libdevice

    @intrinsic
    def load_invariant(typingctx, array, index):
        """``array[index]`` of a 1-D array the kernel never writes (see above)."""
        if not (isinstance(array, types.Array) and array.ndim == 1 and isinstance(index, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            ary = context.make_array(sig.args[0])(context, builder, value=args[0])
            idx = context.cast(builder, args[1], sig.args[1], types.intp)
            ptr = cgutils.get_item_pointer(context, builder, sig.args[0], ary, [idx], wraparound=False)
            value = builder.load(ptr)
            value.set_metadata("invariant.load", builder.module.add_metadata([]))
            return value

        return array.dtype(array, index), codegen

    def _one_instruction(ptx: str, scalar: types.Float, ir_type: ir.Type, constraint: str, doc: str):
        """An intrinsic that runs the PTX instruction ``ptx`` (``$0`` its result, ``$1`` its operand)
        on one ``scalar``; ``constraint`` is the PTX register class (``f``, ``d``)."""

        @intrinsic
        def one_instruction(typingctx, x):
            if x != scalar:
                return None

            def codegen(context, builder, sig, args):
                asm = ir.InlineAsm(ir.FunctionType(ir_type, [ir_type]), ptx, f"={constraint},{constraint}")
                return builder.call(asm, [args[0]])

            return scalar(x), codegen

        one_instruction.__doc__ = doc
        return one_instruction

    exp2_approx = _one_instruction("ex2.approx.ftz.f32 $0, $1;", types.float32, ir.FloatType(), "f",
                                   "float32 ``2**z`` as one ``ex2.approx.ftz.f32`` (see above).")
    rcp_approx64 = _one_instruction("rcp.approx.ftz.f64 $0, $1;", types.float64, ir.DoubleType(), "d",
                                    "float64 ``1 / x`` to about 20 bits as one ``rcp.approx.ftz.f64`` (see above).")

    divide_approx = libdevice.fast_fdividef
    fma = libdevice.fma
    low_word = libdevice.double2loint
    bits_of = libdevice.double_as_longlong
    double_of = libdevice.longlong_as_double

    @cuda.jit(device=True)
    def times_pow2(y, k):
        return libdevice.hiloint2double(libdevice.double2hiint(y) + (k << 20), libdevice.double2loint(y))


# ---------------------------------------------------------------------------------------
# Asynchronous copies (``cp.async``, sm_80 and later): global -> shared without passing
# through registers.  A thread issues copies, closes them into a group with
# ``cp_async_commit()``, and ``cp_async_wait[n]()`` waits until at most ``n`` of its groups
# are still in flight; a barrier then makes every thread's copies visible.  ``src_bytes``
# below the copy size fills the rest of the destination with zeros (edges of the matrix).
# ---------------------------------------------------------------------------------------
if SIMULATOR:
    # The simulator holds each thread's copies back until a wait retires their group, as
    # late as the hardware may land them: a read of a stage before its wait sees stale data.
    _sim_copies = threading.local()

    def _sim_state():
        if not hasattr(_sim_copies, "groups"):
            _sim_copies.groups, _sim_copies.open = [], []
        return _sim_copies

    def _sim_cp_async(width):
        def cp_async(dst, dst_index, src, src_index, src_bytes):
            valid = int(src_bytes) // dst.dtype.itemsize
            values = [src[src_index + v] if v < valid else 0 for v in range(width)]
            _sim_state().open.append((dst, int(dst_index), values))
        return cp_async

    def cp_async_commit():
        """Simulator: close this thread's open copies into a group."""
        state = _sim_state()
        state.groups.append(state.open)
        state.open = []

    def _sim_wait(n):
        def cp_async_wait_n():
            state = _sim_state()
            while len(state.groups) > n:
                for dst, index, values in state.groups.pop(0):
                    for v, x in enumerate(values):
                        dst[index + v] = x
        return cp_async_wait_n

    cp_async_wait = {n: _sim_wait(n) for n in range(6)}

    def make_cp_async(nbytes: int, itemsize: int) -> Callable:
        return _sim_cp_async(nbytes // itemsize)

    def make_cp_async_moved(nbytes: int, itemsize: int) -> Callable:
        copy = _sim_cp_async(nbytes // itemsize)

        def cp_async_moved(dst, dst_index, src, src_origin, src_delta):
            copy(dst, dst_index, src, src_origin + src_delta, nbytes)
        return cp_async_moved

else:

    def _emit_cp_async(builder, to, frm, nbytes: int, count=None) -> None:
        """One ``cp.async`` of ``nbytes`` from the global element pointer or i64 address ``frm``
        to the shared element pointer ``to``; ``count``: the source bytes (an i32) to read, the
        rest zero-filled, or None for all of them (the instruction then carries no source size)."""
        i64, i32 = ir.IntType(64), ir.IntType(32)
        cache = ".cg" if nbytes == 16 else ".ca"  # .cg (L2 only) exists for 16-byte copies alone
        # The shared address as a 32-bit shared-window value, converted outside the asm, where
        # LLVM can fold the conversion into the shared array's own address and keep copies
        # a constant apart as one base plus immediates.
        shared = builder.ptrtoint(builder.addrspacecast(to, ir.PointerType(to.type.pointee, 3)), i32)
        if isinstance(frm.type, ir.PointerType):
            frm = builder.ptrtoint(frm, i64)
        size, operands, types_, constraints = "", [shared, frm], [i32, i64], "r,l"
        if count is not None:
            size, operands, types_, constraints = ", $2", operands + [count], types_ + [i32], "r,l,r"
        asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), types_), f"cp.async{cache}.shared.global [$0], [$1], "
                           f"{nbytes}{size};", constraints + ",~{memory}", side_effect=True)
        builder.call(asm, operands)

    def make_cp_async(nbytes: int, itemsize: int) -> Callable:
        """``cp_async(dst, dst_index, src, src_index, src_bytes)``: copy ``nbytes`` (4, 8 or 16)
        from ``src[src_index]`` (global, ``nbytes``-aligned) to ``dst[dst_index]`` (shared),
        zero-filling past ``src_bytes``."""

        @intrinsic
        def cp_async(typingctx, dst, dst_index, src, src_index, src_bytes):
            if not (isinstance(dst, types.Array) and isinstance(src, types.Array)
                    and isinstance(dst_index, types.Integer) and isinstance(src_index, types.Integer)
                    and isinstance(src_bytes, types.Integer)):
                return None
            sig = types.void(dst, dst_index, src, src_index, src_bytes)

            def codegen(context, builder, sig, args):
                to, _ = _element_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1])
                frm, _ = _element_pointer(context, builder, sig.args[2], args[2], sig.args[3], args[3])
                count = context.cast(builder, args[4], sig.args[4], types.uint32)
                _emit_cp_async(builder, to, frm, nbytes, count)
                return context.get_dummy_value()

            return sig, codegen

        return cp_async

    def make_cp_async_moved(nbytes: int, itemsize: int) -> Callable:
        """``cp_async_moved(dst, dst_index, src, src_origin, src_delta)``: :func:`make_cp_async`'s
        whole copy from ``src[src_origin + src_delta]``, its address formed as ``&src[src_origin]``
        moved ``src_delta`` elements.  A K loop's copies keep their origins and move all by
        one delta: the first address does not change from tile to tile, so the compiler keeps
        it in registers and each copy pays one 64-bit add, where the summed index cost two more
        (the sum's add and its scaling by the element size)."""

        @intrinsic
        def cp_async_moved(typingctx, dst, dst_index, src, src_origin, src_delta):
            if not (isinstance(dst, types.Array) and isinstance(src, types.Array)
                    and all(isinstance(x, types.Integer) for x in (dst_index, src_origin, src_delta))):
                return None
            sig = types.void(dst, dst_index, src, src_origin, src_delta)

            def codegen(context, builder, sig, args):
                to, _ = _element_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1])
                origin, _ = _element_pointer(context, builder, sig.args[2], args[2], sig.args[3], args[3])
                i64 = ir.IntType(64)
                # An integer add, not a second GEP: LLVM merges consecutive GEPs back into one
                # summed index.
                delta = context.cast(builder, args[4], sig.args[4], types.uint64)
                frm = builder.add(builder.ptrtoint(origin, i64), builder.mul(delta, ir.Constant(i64, itemsize)))
                _emit_cp_async(builder, to, frm, nbytes)
                return context.get_dummy_value()

            return sig, codegen

        return cp_async_moved

    def _asm_statement(text: str) -> Callable:
        @intrinsic
        def statement(typingctx):
            def codegen(context, builder, sig, args):
                asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), text, "~{memory}", side_effect=True)
                builder.call(asm, [])
                return context.get_dummy_value()

            return types.void(), codegen

        return statement

    cp_async_commit = _asm_statement("cp.async.commit_group;")
    cp_async_wait = {n: _asm_statement(f"cp.async.wait_group {n};") for n in range(6)}


def make_tile_async_copier(dtype: np.dtype, layout: Layout, rows: int, cols: int, nthreads: int,
                           smem_ld: int) -> Callable:
    """Device function that starts the asynchronous copy of one ``rows x cols`` operand tile.

    ``copy(g, ld, row0, col0, nrows, ncols, s, tid, vec_ok)``: the same arguments as
    :func:`make_tile_loader`, but the shared tile keeps the global layout (a 16-byte copy
    cannot transpose), with lines ``smem_ld`` elements apart: element ``(r, c)`` of a
    row-major operand at ``r * smem_ld + c``, of a column-major one at ``c * smem_ld + r``.
    With ``vec_ok`` each thread copies 16-byte chunks, else one element per copy; parts
    outside the matrix are zero-filled.  The caller commits, waits and synchronises.
    """
    width = vec_width(dtype)
    plan = _tile_plan(dtype, layout, rows, cols, layout, nthreads, width, smem_ld)
    iters, along_cols, W, g_off, LD = plan.iters, plan.along_cols, plan.W, plan.g_off, U(smem_ld)
    chunk, element = _chunk_position(plan), _chunk_element(plan)
    itemsize = np.dtype(dtype).itemsize
    copy_vec, copy_one = make_cp_async(16, itemsize), make_cp_async(itemsize, itemsize)
    uI = U(itemsize)

    @cuda.jit(device=True)
    def copy(g, ld, row0, col0, nrows, ncols, s, tid, vec_ok):
        for it in range(iters):
            line, pos = chunk(tid, it)
            dst = line * LD + pos
            gr, gc = element(row0, col0, line, pos)
            if along_cols:
                line_end, other_ok, start = ncols, gr < nrows, gc
            else:
                line_end, other_ok, start = nrows, gc < ncols, gr
            if vec_ok:
                valid = U(0)
                if other_ok and start < line_end:
                    valid = min(line_end - start, W)
                src = g_off(gr, gc, ld) if valid > U(0) else U(0)
                copy_vec(s, dst, g, src, valid * uI)
            else:
                for v in range(width):
                    inside = other_ok and start + U(v) < line_end
                    src = U(0)
                    if inside:
                        src = g_off(gr, gc + U(v), ld) if along_cols else g_off(gr + U(v), gc, ld)
                    copy_one(s, dst + U(v), g, src, uI if inside else U(0))

    return copy


class AsyncTileStream(NamedTuple):
    """One thread's share of a tile copied with unchecked 16-byte ``cp.async``, for operands
    with 16-byte aligned lines and tiles wholly inside the matrix along K.

    The thread copies ``iters`` chunks, each as many tile lines after the last as the
    threads cover at once: chunk ``c`` of the tile at ``(row0, col0)`` starts at global
    offset ``origin(ld, row0, col0, tid) + c * step(ld)`` and lands at ``place(tid) + c *
    place_step`` of a shared stage; moving the tile ``dk`` along K adds ``dk *
    k_stride(ld)``.  ``copy(s, dst, g, origin, dk)`` starts one copy, from ``g[origin +
    dk]``.  A kernel keeps each chunk's origin in a register and issues the copies between
    its mma instructions: the bounds checks of :func:`make_tile_async_copier` cost more
    issue slots than the copies themselves.

    A tile that crosses the matrix's edge across K (``limit``: A's rows, B's columns) is
    copied unchecked too, chunk ``c`` from ``edge_origin(ld, row0, col0, tid, c, limit)``: a
    chunk past the edge re-reads the last line (or chunk) inside, filling rows or columns of
    the tile that are never stored.  That needs every chunk wholly inside or wholly outside,
    which ``edge_ok(start, limit)`` tells for the tile starting at ``start`` across K.
    Without it a float64 1000^3 spent its time in the edge blocks' checked copies: one wave
    of 128 blocks waits for its slowest.
    """

    iters: int
    place_step: Any
    origin: Callable
    step: Callable
    edge_origin: Callable
    edge_ok: Callable
    k_stride: Callable
    place: Callable
    copy: Callable


def make_async_tile_stream(dtype: np.dtype, layout: Layout, rows: int, cols: int, nthreads: int, smem_ld: int,
                           k_along_rows: bool) -> AsyncTileStream:
    """:class:`AsyncTileStream` for a ``rows x cols`` tile of an operand in ``layout``, split
    as :func:`make_tile_async_copier` splits it; ``k_along_rows``: K runs down the tile's
    rows (B) rather than along its columns (A)."""
    width = vec_width(dtype)
    plan = _tile_plan(dtype, layout, rows, cols, layout, nthreads, width, smem_ld)
    per_line, NT = int(plan.chunks_per_line), int(plan.NT)
    if NT % per_line:
        raise ValueError(f"{nthreads} threads do not cover whole lines of a {rows}x{cols} tile "
                         f"({per_line} chunks a line)")
    along_cols, g_off, LD = plan.along_cols, plan.g_off, U(smem_ld)
    LINES = U(NT // per_line)
    chunk, element = _chunk_position(plan), _chunk_element(plan)
    copy16 = make_cp_async_moved(16, np.dtype(dtype).itemsize)
    # Moving K by one moves along the contiguous dimension (stride 1) or across it (stride ld).
    k_contiguous = k_along_rows != along_cols

    # Across K the tile spans the contiguous dimension (A column-major, B row-major), where
    # a chunk is W elements, or the strided one, where it is one line.
    across_contiguous = k_along_rows == along_cols
    EXTENT, W = U(cols if k_along_rows else rows), U(width)
    EDGE_STEP = W if across_contiguous else U(1)

    @cuda.jit(device=True, inline="always")
    def origin(ld, row0, col0, tid):
        line, pos = chunk(tid, 0)
        row, col = element(row0, col0, line, pos)
        return g_off(row, col, ld)

    @cuda.jit(device=True, inline="always")
    def step(ld):
        return LINES * ld

    @cuda.jit(device=True, inline="always")
    def edge_origin(ld, row0, col0, tid, c, limit):
        line, pos = chunk(tid, c)
        row, col = element(row0, col0, line, pos)
        if k_along_rows:
            col = min(col, limit - EDGE_STEP)
        else:
            row = min(row, limit - EDGE_STEP)
        return g_off(row, col, ld)

    @cuda.jit(device=True, inline="always")
    def edge_ok(start, limit):
        return start + EXTENT <= limit or not across_contiguous or limit % W == U(0)

    @cuda.jit(device=True, inline="always")
    def k_stride(ld):
        return U(1) if k_contiguous else ld

    @cuda.jit(device=True, inline="always")
    def place(tid):
        line, pos = chunk(tid, 0)
        return line * LD + pos

    @cuda.jit(device=True, inline="always")
    def copy(s, dst, g, origin, dk):
        copy16(s, dst, g, origin, dk)

    return AsyncTileStream(plan.iters, LINES * LD, origin, step, edge_origin, edge_ok, k_stride, place, copy)


class StreamPair(NamedTuple):
    """A's and B's :class:`AsyncTileStream` for a K loop that copies whole tiles between its
    multiplies (the TF32 rungs; warptile interleaves its copies with the mmas instead).

    ``origins(lda, ldb, row0, col0, tid, a_src, b_src)`` fills each chunk's global origin for
    the block's tiles at K = 0 (``a_src``/``b_src``: ``cuda.local.array(iters, uint64)``, kept in
    registers); ``placement(lda, ldb, tid)`` is ``(a_ks, b_ks, a_place, b_place)``, the K
    strides and the shared placements; ``copy(a_tile, b_tile, stage, a, b, a_src, b_src, dk,
    a_ks, b_ks, a_place, b_place)`` starts this thread's copies of the tiles ``dk`` along K
    into ``stage``."""

    origins: Callable
    placement: Callable
    copy: Callable


def make_stream_pair(stream_a: AsyncTileStream, stream_b: AsyncTileStream, a_stage: int, b_stage: int) -> StreamPair:
    """:class:`StreamPair` of ``stream_a`` and ``stream_b`` with stages ``a_stage``/``b_stage``
    elements apart in their shared tiles."""
    A_IT, B_IT = stream_a.iters, stream_b.iters
    A_PSTEP, B_PSTEP = stream_a.place_step, stream_b.place_step
    uA_STAGE, uB_STAGE = U(a_stage), U(b_stage)

    @cuda.jit(device=True, inline="always")
    def origins(lda, ldb, row0, col0, tid, a_src, b_src):
        a_origin, a_step = stream_a.origin(lda, row0, U(0), tid), stream_a.step(lda)
        b_origin, b_step = stream_b.origin(ldb, U(0), col0, tid), stream_b.step(ldb)
        for c in range(A_IT):
            a_src[c] = a_origin + U(c) * a_step
        for c in range(B_IT):
            b_src[c] = b_origin + U(c) * b_step

    @cuda.jit(device=True, inline="always")
    def placement(lda, ldb, tid):
        return stream_a.k_stride(lda), stream_b.k_stride(ldb), stream_a.place(tid), stream_b.place(tid)

    @cuda.jit(device=True, inline="always")
    def copy(a_tile, b_tile, stage, a, b, a_src, b_src, dk, a_ks, b_ks, a_place, b_place):
        for c in range(A_IT):
            stream_a.copy(a_tile, stage * uA_STAGE + a_place + U(c) * A_PSTEP, a, a_src[c], dk * a_ks)
        for c in range(B_IT):
            stream_b.copy(b_tile, stage * uB_STAGE + b_place + U(c) * B_PSTEP, b, b_src[c], dk * b_ks)

    return StreamPair(origins, placement, copy)


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
    plan = _tile_plan(dtype, layout, rows, cols, smem_layout, nthreads, vec_width(dtype), smem_ld)
    width, along_cols, iters, _, _, W, R, C, smem_row, zero, g_off = plan
    line_chunk = _chunk_position(plan)

    @cuda.jit(device=True)
    def chunk(tid, it):
        line, pos = line_chunk(tid, it)
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
# ``mma.sync.aligned.m{M}n8k{K}.row.col.f64`` is emitted as inline PTX.  Four shapes exist:
# m8n8k4 (sm_80 and later) and m16n8k4 / m16n8k8 / m16n8k16 (sm_90).  With ``g = lane // 4``
# and ``t = lane % 4``, one formula gives every shape's fragments, per lane:
#   A (M x K):  value ``vm + (M // 8) * vk`` is A[g + 8 vm, t + 4 vk]
#   B (K x 8):  value ``vk`` is B[t + 4 vk, g]
#   C, D (M x 8): value ``h + 2 vm`` is C[g + 8 vm, 2 t + h]
# for vm < M // 8, vk < K // 4, h < 2.  Both shared tiles are stored K-major (element
# (k, i) at ``k * ld + i``), so one index expression loads either operand.
#
# Why the shape matters: m8n8k4 reaches half the FP64 tensor-core peak; m16n8k4 reaches it
# only with many independent accumulators and warps, m16n8k8 and m16n8k16 with a few
# (register-only loops on the H100, docs/performance.md).
#
# Under the simulator a lane cannot see its neighbours' registers, so there a fragment
# is its block's position in the tile and the multiply reads A and B straight from
# shared memory: the same arithmetic and the same shared-memory indexing, checked on the
# CPU; the register exchange itself is checked by the GPU tests.
# ---------------------------------------------------------------------------------------
DMMA_SHAPES = ((8, 4), (16, 4), (16, 8), (16, 16))
"""The FP64 ``mma.sync`` shapes (M, K); N is always 8."""


def make_block_tile(group_m: int) -> Callable:
    """``block_tile() -> (tile row, tile column)`` of this block in a grid of ``gridDim.y`` x
    ``gridDim.x`` output tiles: with ``group_m`` consecutive blocks sweep that many tile rows
    column by column, so a wave of blocks shares fewer B column panels in L2; with 0, the
    block's own indices."""
    group = U(max(group_m, 1))

    @cuda.jit(device=True, inline="always")
    def block_tile():
        if group_m:
            tiles_n, tiles_m = U(cuda.gridDim.x), U(cuda.gridDim.y)
            pid = U(cuda.blockIdx.y) * tiles_n + U(cuda.blockIdx.x)
            per_group = group * tiles_n
            first = (pid // per_group) * group
            rows = min(tiles_m - first, group)
            within = pid % per_group
            return first + within % rows, within // rows
        return U(cuda.blockIdx.y), U(cuda.blockIdx.x)

    return block_tile


_numba_devices_lock = threading.Lock()
_numba_devices_ready = False


def numba_devices_ready() -> None:
    """Make numba-cuda's table of devices once, under a lock, before anything compiles or loads.

    numba-cuda creates a GPU's ``Device`` object the first time it is asked for, without a lock,
    into a dict that refuses a second entry: two threads whose first calls compile at once
    collide there ("key already in dictionary: 0").  Listing the GPUs once fills the table."""
    global _numba_devices_ready
    if _numba_devices_ready or SIMULATOR:
        return
    with _numba_devices_lock:
        if not _numba_devices_ready:
            try:
                if cuda.is_available():
                    len(cuda.gpus)
            except Exception:  # no driver: nothing to make, and the caller's own error says so
                pass
            _numba_devices_ready = True


def current_cc() -> tuple[int, int]:
    """The compute capability kernels are compiled for now: the current device's (the stand-in
    driver's target when building without a GPU), sm_90 under the simulator."""
    return (9, 0) if SIMULATOR else tuple(cuda.get_current_device().compute_capability)


def dmma_shape_for(cc: tuple[int, int]) -> tuple[int, int]:
    """The FP64 mma shape a kernel for compute capability ``cc`` uses unless its tile names
    its own (``mma_sm90``): m16n8k4 on sm_90 and later, m8n8k4 before.  In warptile's
    register-path tiles m16n8k4 is fastest: the longer shapes' fragments must all be loaded
    before the first mma can issue.  The cp.async tile in cuBLAS's shape, whose fragments
    stream behind the mmas, is the other way round and names m16n8k16 itself."""
    return (16, 4) if tuple(cc) >= (9, 0) else (8, 4)


class Dmma(NamedTuple):
    """Device functions for one FP64 mma shape (see the note above :data:`DMMA_SHAPES`).

    ``load_a(tile, base, ld, lane, frag, i)`` / ``load_b(...)`` fill row ``i`` of a
    ``cuda.local.array((count, nvals), float64)`` fragment array with this lane's values of
    the block whose K-major corner is ``tile[base]``; ``mma(a_frag, i, b_frag, j, acc, lo,
    hi)`` adds A-block ``i`` times B-block ``j`` into the accumulator pairs ``acc[lo],
    acc[lo + 1]`` (rows ``g``) and ``acc[hi], acc[hi + 1]`` (rows ``g + 8``; unused when M
    is 8).  The multiply reads registers only: a fragment can be reloaded as soon as its
    last mma has been issued.
    """

    m: int
    k: int
    a_vals: int
    b_vals: int
    load_a: Callable
    load_b: Callable
    mma: Callable


_DMMA_CACHE: dict = {}


def make_dmma(shape: tuple[int, int], a_kmajor: bool = True, b_kmajor: bool = True) -> Dmma:
    """:class:`Dmma` for the mma shape ``(M, K)`` in :data:`DMMA_SHAPES`.

    ``a_kmajor``: the shared A tile holds element ``(i, k)`` at ``k * ld + i`` (else at
    ``i * ld + k``); ``b_kmajor``: the shared B tile holds ``(k, j)`` at ``k * ld + j`` (else
    at ``j * ld + k``).  ``base`` is always the block's element ``(0, 0)``.
    """
    if shape not in DMMA_SHAPES:
        raise ValueError(f"FP64 mma shape must be one of {DMMA_SHAPES}, got {shape}")
    key = (shape, a_kmajor, b_kmajor)
    if key not in _DMMA_CACHE:
        _DMMA_CACHE[key] = _make_dmma(*shape, a_kmajor, b_kmajor)
    return _DMMA_CACHE[key]


def _make_dmma(M: int, K: int, a_kmajor: bool, b_kmajor: bool) -> Dmma:
    VM, VK = M // 8, K // 4
    NA, NB = VM * VK, VK
    ns: dict[str, Any] = {"cuda": cuda, "U": U, "float": float}
    # Index of A's (row, k) and B's (k, col) relative to the block's corner, as source text.
    a_at = (lambda r, k: f"({k}) * ld + {r}") if a_kmajor else (lambda r, k: f"({r}) * ld + {k}")
    b_at = (lambda k, c: f"({k}) * ld + {c}") if b_kmajor else (lambda k, c: f"({c}) * ld + {k}")
    if SIMULATOR:
        # Each lane loads the whole rows of A and columns of B its accumulators need, so the
        # values are read from shared memory when loaded, as on the GPU, not when multiplied.
        sim_a = a_at("g + 8 * vm", "kk")
        sim_b0 = b_at("kk", "t2")
        sim_b1 = b_at("kk", "t2 + 1")
        src = f"""
def load_a(tile, base, ld, lane, frag, i):
    g = lane // 4
    for vm in range({VM}):
        for kk in range({K}):
            frag[i, vm * {K} + kk] = tile[base + {sim_a}]

def load_b(tile, base, ld, lane, frag, j):
    t2 = (lane % 4) * 2
    for kk in range({K}):
        frag[j, 2 * kk] = tile[base + {sim_b0}]
        frag[j, 2 * kk + 1] = tile[base + {sim_b1}]

def mma(a_frag, i, b_frag, j, acc, lo, hi):
    for vm in range({VM}):
        c = lo if vm == 0 else hi
        for kk in range({K}):
            av = a_frag[i, vm * {K} + kk]
            acc[c] = acc[c] + av * b_frag[j, 2 * kk]
            acc[c + 1] = acc[c + 1] + av * b_frag[j, 2 * kk + 1]
"""
        exec(src, ns)
        return Dmma(M, K, VM * K, 2 * K, ns["load_a"], ns["load_b"], ns["mma"])

    ns["asm"] = _dmma_intrinsic(M, K, NA, NB)
    # Value vm + VM vk of A is A[g + 8 vm, t + 4 vk]; value vk of B is B[t + 4 vk, g].
    a_loads = "\n".join(
        f"    frag[i, {vm + VM * vk}] = tile[base + {a_at(f'g + U({8 * vm})', f't + U({4 * vk})')}]"
        for vk in range(VK) for vm in range(VM))
    b_loads = "\n".join(
        f"    frag[j, {vk}] = tile[base + {b_at(f't + U({4 * vk})', 'g')}]" for vk in range(VK))
    a_args = ", ".join(f"a_frag[i, {v}]" for v in range(NA))
    b_args = ", ".join(f"b_frag[j, {v}]" for v in range(NB))
    if VM == 2:
        c_in, c_out = "acc[lo], acc[lo + 1], acc[hi], acc[hi + 1]", "acc[lo], acc[lo + 1], acc[hi], acc[hi + 1]"
    else:
        c_in, c_out = "acc[lo], acc[lo + 1]", "acc[lo], acc[lo + 1]"
    src = f"""
def load_a(tile, base, ld, lane, frag, i):
    g = lane >> U(2)
    t = lane & U(3)
{a_loads}

def load_b(tile, base, ld, lane, frag, j):
    g = lane >> U(2)
    t = lane & U(3)
{b_loads}

def mma(a_frag, i, b_frag, j, acc, lo, hi):
    {c_out} = asm(({a_args},), ({b_args},), ({c_in},))
"""
    exec(src, ns)
    dev = cuda.jit(device=True)
    return Dmma(M, K, NA, NB, dev(ns["load_a"]), dev(ns["load_b"]), dev(ns["mma"]))


def _dmma_intrinsic(M: int, K: int, NA: int, NB: int) -> Callable:
    """``asm(a, b, c) -> d``: one ``mma.sync.aligned.m{M}n8k{K}.row.col.f64`` on UniTuples of float64."""
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    NC = 2 * (M // 8)

    @intrinsic
    def asm(typingctx, a, b, c):
        f64 = types.float64
        if (a, b, c) != (types.UniTuple(f64, NA), types.UniTuple(f64, NB), types.UniTuple(f64, NC)):
            return None
        sig = types.UniTuple(f64, NC)(a, b, c)

        def codegen(context, builder, sig, args):
            d = ir.DoubleType()
            ins = [builder.extract_value(args[x], i) for x, cnt in enumerate((NA, NB, NC)) for i in range(cnt)]
            ops = iter(range(NC + NA + NB + NC))
            group = lambda cnt: "{" + ", ".join(f"${next(ops)}" for _ in range(cnt)) + "}"
            text = f"mma.sync.aligned.m{M}n8k{K}.row.col.f64.f64.f64.f64 {group(NC)}, {group(NA)}, {group(NB)}, {group(NC)};"
            fnty = ir.FunctionType(ir.LiteralStructType([d] * NC), [d] * (NA + NB + NC))
            res = builder.call(ir.InlineAsm(fnty, text, ",".join(["=d"] * NC + ["d"] * (NA + NB + NC))), ins)
            return context.make_tuple(builder, sig.return_type, [builder.extract_value(res, i) for i in range(NC)])

        return sig, codegen

    return asm
