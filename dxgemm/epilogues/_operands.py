"""Stages that touch memory besides the GEMM's own: ``bias`` reads a vector, ``store`` writes a matrix.

Both arrays are run-time arguments; the key holds only what changes the generated code:
which index the bias follows (column or row) and the layout of the store target.  The
views' Numba types (contiguous or strided) reach the cache key through ``numba.typeof``
of the argument tuple.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda

from ..kernels._device import U, load_invariant, make_offset
from ._device_arrays import device_array, to_xp
from ._base import BoundEpilogue, Epilogue, EpilogueContext, Moved, Span


def bias_orientation(shape: tuple[int, ...], m: int, n: int) -> str | None:
    """``"col"`` when a bias of ``shape`` adds ``v[j]`` to column j, ``"row"`` for ``v[i]`` to row i, else None.

    ``(n,)`` and ``(1, n)`` follow the ``x @ W + b`` convention (one value per output
    feature, i.e. per column); ``(m, 1)`` is a column vector, one value per row.
    """
    if tuple(shape) in ((n,), (1, n)):
        return "col"
    if tuple(shape) == (m, 1):
        return "row"
    return None


class Bias(Epilogue):
    """Adds a vector along the rows or the columns of the result.  See :func:`bias`."""

    transcendental = False

    def __init__(self, v: Any):
        self.v = v

    @property
    def name(self) -> str:
        return "bias"

    def __repr__(self) -> str:
        return f"bias({_describe(self.v)})"

    def bind(self, ctx: EpilogueContext) -> BoundEpilogue:
        arr = device_array(self.v, "bias", ctx)
        if arr.dtype != ctx.dtype:
            raise TypeError(f"bias has dtype {arr.dtype}; it must match a and b ({ctx.dtype})")
        core = _bias_core(arr.shape, ctx)
        orientation = bias_orientation(arr.shape[len(arr.shape) - core:], ctx.m, ctx.n) if core else None
        if orientation is None:
            batched = f", each with leading dimensions that broadcast to the batch shape {ctx.batch}" if ctx.batch else ""
            raise ValueError(
                f"bias has shape {arr.shape}; for a {ctx.m}x{ctx.n} result it must have shape ({ctx.n},) or "
                f"(1, {ctx.n}) to add v[j] to column j, or ({ctx.m}, 1) to add v[i] to row i{batched}"
            )
        lead = len(arr.shape) - core
        length, stride = (ctx.n, arr.strides[-1]) if orientation == "col" else (ctx.m, arr.strides[-2])
        key = ("bias", orientation, ctx.dtype.name, "invariant")
        strides = ctx.batch_strides("bias", arr.shape[:lead], arr.strides[:lead], arr.dtype.itemsize)
        if not any(strides):  # one vector for every entry
            args = (arr.view((length,), (stride,)),)
        else:  # a vector per entry: moved to it by the batched kernel
            from .. import _arrays

            if stride != arr.dtype.itemsize:  # entries whole elements apart in one contiguous view
                arr = device_array(_arrays.contiguous_copy(arr.obj), "bias", ctx)
                strides = ctx.batch_strides("bias", arr.shape[:lead], arr.strides[:lead], arr.dtype.itemsize)
            below, above = _arrays.batch_reach(ctx.batch, strides)
            view = _arrays.flat_view(arr.obj, arr.ptr - below * arr.dtype.itemsize, below + above + length, arr.dtype)
            args = (Moved(view, strides, below, arr.obj),)
        return BoundEpilogue(key, args, lambda: _bias_device(orientation), reads=(arr.span,),
                             preload=lambda: _bias_read(orientation))

    def _reference(self, x: Any, xp: Any) -> Any:
        v = to_xp(self.v, xp).astype(np.float64)
        m, n = x.shape
        return x + (v.reshape(1, n) if bias_orientation(v.shape, m, n) == "col" else v.reshape(m, 1))

    lipschitz = 1.0


def _bias_core(shape: tuple[int, ...], ctx: EpilogueContext) -> int:
    """How many trailing dimensions of a bias of ``shape`` are the vector itself (the rest are
    batch dimensions): 2 for a trailing ``(1, n)`` or ``(m, 1)``, 1 for ``(n,)``, 0 for neither.
    A plain GEMM takes no batch dimensions."""
    for core in (2, 1):
        if len(shape) >= core and (ctx.batch or len(shape) == core) and \
                bias_orientation(shape[len(shape) - core:], ctx.m, ctx.n) is not None:
            return core
    return 0


def _bias_read(orientation: str):
    """The bias element at ``(row, col)``: the stage's one read, and its ``preload`` (see
    :class:`BoundEpilogue`): the same load in both, so the compiler serves the stage's from the
    early one.  ``load_invariant``: the bias is read once per thread before a tile walk, not at
    every step."""
    if orientation == "col":

        @cuda.jit(device=True)
        def bias_col_read(row, col, args):
            return load_invariant(args[0], U(col))

        return bias_col_read

    @cuda.jit(device=True)
    def bias_row_read(row, col, args):
        return load_invariant(args[0], U(row))

    return bias_row_read


def _bias_device(orientation: str):
    read = _bias_read(orientation)

    @cuda.jit(device=True)
    def bias(value, row, col, args):
        return value + read(row, col, args)

    return bias


class Store(Epilogue):
    """Writes the value at this point of the chain into an extra matrix.  See :func:`store`."""

    transcendental = False

    def __init__(self, out: Any):
        self.out = out

    @property
    def name(self) -> str:
        return "store"

    def __repr__(self) -> str:
        return f"store({_describe(self.out)})"

    def bind(self, ctx: EpilogueContext) -> BoundEpilogue:
        op = ctx.adapt(self.out, "store target")
        if op.shape != (ctx.m, ctx.n):
            raise ValueError(f"store target has shape {op.shape}; it must have the result's shape ({ctx.m}, {ctx.n})")
        layout = op.layout
        args = (op.flat(), np.int64(op.ld))
        lo, hi = op.nbytes_span
        return BoundEpilogue(("store", layout.value, ctx.dtype.name), args, lambda: _store_device(layout),
                             writes=(Span("store target", lo, hi),))

    def _reference(self, x: Any, xp: Any) -> Any:
        return x

    lipschitz = 1.0


def _store_device(layout):
    offset = make_offset(layout)

    @cuda.jit(device=True)
    def store(value, row, col, args):
        args[0][offset(U(row), U(col), U(args[1]))] = value
        return value

    return store


def _describe(array: Any) -> str:
    shape = getattr(array, "shape", None)
    dtype = getattr(array, "dtype", None)
    if shape is None:
        return f"<{type(array).__name__}>"
    return f"<{type(array).__module__.split('.')[0]} {tuple(shape)} {dtype}>"


def bias(v: Any) -> Epilogue:
    """Add a bias vector: ``v`` of shape ``(n,)`` or ``(1, n)`` adds ``v[j]`` to column ``j``
    (the ``x @ W + b`` convention); shape ``(m, 1)`` adds ``v[i]`` to row ``i``.

    ``v`` is a device array of the GEMM's dtype on its GPU (any stride; no copy is made).
    It is a run-time argument: a new vector of the same kind reuses the compiled kernel.
    Checked when the GEMM is called (``TypeError`` for a host array or another dtype,
    ``ValueError`` for another shape or GPU).
    """
    return Bias(v)


def store(out: Any) -> Epilogue:
    """Write the value at this point of the chain into ``out`` and pass it on unchanged.

    ``out`` is an ``(m, n)`` device matrix of the GEMM's dtype with unit stride in one
    dimension (row- or column-major, or a slice of one); it must not overlap the GEMM's
    operands or another epilogue array.  ``bias(b) | store(pre) | gelu()`` keeps the
    pre-activation a backward pass needs, in the same kernel.
    """
    return Store(out)
