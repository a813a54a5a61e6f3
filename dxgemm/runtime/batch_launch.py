"""Launching a batched GEMM: one launch of a rung's batched kernel (:mod:`dxgemm.kernels.batch_entries`).

The validation layer (:mod:`dxgemm._batched`) hands over the operands with their batch
strides and the bound epilogue, whose argument tuple may hold :class:`~dxgemm.epilogues.Moved`
arrays and :class:`~dxgemm.epilogues.BatchIndex` slots.  Here those become the kernel's
compile-time facts (which paths move) and its run-time ``batch`` tuple (extents, strides,
shifts), the batch dimensions are merged where every operand allows it (fewer dimensions,
fewer kernels), and the kernel is launched from the on-disk cache like any rung
(:func:`.rungs.rung_call`), or through Numba under the simulator.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..epilogues._base import BatchIndex, Moved
from ..kernels import KernelSpec, vector_flags
from ..kernels._device import SIMULATOR
from ..kernels.batch_entries import MAX_GRID_Z
from .launch import cu_stream, flat_values
from .rungs import numba_kernel, rung_call

__all__ = ["strip_batch", "merge_dims", "launch_batched"]


def strip_batch(args: Any) -> tuple[Any, list[tuple[tuple[int, ...], Moved]], list[tuple[int, ...]], Any]:
    """``(plain args, moved, index paths, nesting)`` of a bound epilogue's argument tuple: the
    arguments with every :class:`Moved` replaced by its view and every :class:`BatchIndex` by
    ``int64(0)``, the paths and markers of the moved arrays, the paths of the index slots, and
    the tuple's nesting (tuples of None)."""
    moved: list = []
    index_paths: list = []

    def visit(value: Any, path: tuple[int, ...]) -> tuple[Any, Any]:
        if type(value) is tuple:
            pairs = [visit(member, path + (i,)) for i, member in enumerate(value)]
            return tuple(p for p, _ in pairs), tuple(s for _, s in pairs)
        if isinstance(value, Moved):
            moved.append((path, value))
            return value.view, None
        if isinstance(value, BatchIndex):
            index_paths.append(path)
            return np.int64(0), None
        return value, None

    plain, shape = visit(args, ())
    return plain, moved, index_paths, shape


def merge_dims(batch: tuple[int, ...], strides: list[tuple[int, ...]]) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """The batch with extent-1 dimensions dropped and neighbours merged where every operand's
    strides allow (``s_i == s_{i+1} * e_{i+1}``): the same entries in the same order, in as few
    dimensions as possible (at least one)."""
    keep = [d for d, e in enumerate(batch) if e != 1]
    extents = [batch[d] for d in keep] or [1]
    per = [[s[d] for d in keep] or [0] for s in strides]
    d = len(extents) - 2
    while d >= 0:
        if all(p[d] == p[d + 1] * extents[d + 1] for p in per):
            extents[d] *= extents[d + 1]
            del extents[d + 1]
            for p in per:  # the merged dimension steps by the inner one's stride
                del p[d]
        d -= 1
    return tuple(extents), [tuple(p) for p in per]


def launch_batched(backend: str, spec: KernelSpec, bound: Any, device: int, operands: list, m: int, n: int,
                   k: int, handle: int) -> None:
    """Launch ``backend``'s batched kernel for ``spec`` over the batch of A, B, D (``operands``:
    :class:`~dxgemm._arrays.BatchedOperand` s sharing one batch shape) with ``bound``'s epilogue."""
    a, b, d = operands
    plain, moved, index_paths, shape = strip_batch(bound.args)
    batch = d.batch
    count = int(np.prod(batch, dtype=np.int64)) if batch else 1
    strides = [a.strides, b.strides, d.strides] + [mv.strides for _, mv in moved]
    shifts = [a.shift, b.shift, d.shift] + [mv.shift for _, mv in moved]
    extents, strides = merge_dims(batch, strides)
    values: list[int] = [count, *extents[1:]]
    for s, shift in zip(strides, shifts):
        values += [*s, shift]
    batch_values = tuple(int(v) for v in values)
    spec = dataclasses.replace(spec, batch=(len(extents), tuple(p for p, _ in moved), tuple(index_paths), shape))
    bound = dataclasses.replace(bound, args=plain)
    width = 16 // a.dtype.itemsize
    flags = vector_flags(a.entry.ptr, a.entry.ld, b.entry.ptr, b.entry.ld, a.dtype.itemsize)
    if any(s % width for s in a.strides):
        flags &= ~1
    if any(s % width for s in b.strides):
        flags &= ~2
    lds = (a.entry.ld, b.entry.ld, d.entry.ld)
    gz = min(count, MAX_GRID_Z)
    if SIMULATOR:
        from .._streams import numba_stream

        compiled = numba_kernel(backend, spec, plain, bound.make)
        grid = compiled.built.grid(m, n) + (gz,)
        compiled.kernel[grid, compiled.built.block, numba_stream(0), compiled.built.dynamic_smem](
            a.flat(), b.flat(), d.flat(), m, n, k, *lds, flags, plain, batch_values)
        return
    call = rung_call(backend, spec, bound, device)
    slots: list = []
    for op in (a, b, d):
        span = max(op.span, 1)
        slots += [0, 0, span, op.dtype.itemsize, op.lo, span, op.dtype.itemsize]
    params = [*slots, m, n, k, *lds, flags, *flat_values(plain), *batch_values]
    grid = (-(-n // call.tile_n), -(-m // call.tile_m), gz)
    with call._lock:
        call.launch(cu_stream(handle), grid, call.block, call.smem, params)
