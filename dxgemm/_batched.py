"""Batched ``dxgemm.gemm``: ``(..., m, k) @ (..., k, n)`` with NumPy ``matmul`` broadcasting, one launch.

``dxgemm.gemm`` sends a call here when an operand has more than two dimensions.  This
module owns what a batched call accepts and what each mistake raises; the tile rule is
:func:`dxgemm.policy.choose_batched_tile`, the launch :mod:`dxgemm.runtime.batch_launch`.

The leading dimensions broadcast as NumPy's ``matmul`` does (aligned on the right, an extent
of 1 or a missing dimension repeats the same matrix: a batch stride of 0).  Each operand
keeps its own strides per dimension; the matrices themselves may be row-major,
column-major or strided views of either, as in a plain call.  The result is
``(*batch, m, n)``; ``c``, when given, must have exactly that shape (it is the output) and
entries that do not overlap.

Epilogue stages see the batch through :class:`~dxgemm.epilogues.EpilogueContext` ``.batch``:
``bias`` takes a vector per entry (``(*batch, n)``, ``(*batch, 1, n)``, ``(*batch, m, 1)``, or
any shape that broadcasts to them), ``store`` a ``(*batch, m, n)`` target, and a ``custom``
function whose last parameter is named ``batch`` receives the entry's index (row-major over
the batch shape).

Every handwritten rung runs batched (``auto`` picks ``warptile``, ``tf32mma`` or, for
``m == 1``, ``gemv``); K is not split, the batch fills the GPU instead.  The cuBLASDx
pipeline takes one matrix per launch: ``backend="pipeline"`` with a batch is refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _arrays, policy
from ._arrays import BatchedOperand, as_batched_operand
from ._streams import stream_handle
from .epilogues._base import AlphaBeta, Chain, EpilogueContext, Moved
from .kernels import KernelSpec
from .runtime.batch_launch import launch_batched
from .runtime.device import device_info


def batched_gemm(a: Any, b: Any, c: Any, alpha: Any, beta: Any, epilogue: Any, backend: str,
                 precision: str | None, stream: Any, *, check_scalar: Any, check_backend: Any) -> Any:
    """``dxgemm.gemm`` for operands with batch dimensions (module docstring)."""
    op_a = as_batched_operand(a, "a")
    op_b = as_batched_operand(b, "b")
    if op_a.dtype != op_b.dtype:
        raise TypeError(f"a and b must have the same dtype, got a: {op_a.dtype} and b: {op_b.dtype}")
    dtype = op_a.dtype
    (m, k), (k_b, n) = op_a.entry.shape, op_b.entry.shape
    if k != k_b:
        raise ValueError(f"inner dimensions differ: a's matrices are {m}x{k}, b's {k_b}x{n} (a.shape[-1] must equal "
                         "b.shape[-2])")
    try:
        batch = tuple(int(e) for e in np.broadcast_shapes(op_a.batch, op_b.batch))
    except ValueError:
        raise ValueError(f"the batch dimensions of a {op_a.batch} and b {op_b.batch} do not broadcast (NumPy's "
                         "matmul rule: aligned on the right, each pair equal or one of them 1)") from None
    alpha = check_scalar(alpha, "alpha")
    beta = check_scalar(beta, "beta")
    if c is None and beta != 0:
        raise ValueError(f"beta={beta!r} scales c, but no c was given: pass c (the {(*batch, m, n)} array beta "
                         "multiplies, which receives the result) or leave beta at 0")
    backend = check_backend(backend)
    if backend == "pipeline":
        raise ValueError("backend='pipeline' takes one matrix per launch; a batched call runs on the handwritten "
                         "kernels: use backend='auto', 'warptile' or 'tf32mma'")
    precision = policy.resolve_precision(dtype, backend, precision)
    device = _arrays.device_of(op_a.entry)
    if _arrays.device_of(op_b.entry) != device:
        raise ValueError(f"a is on GPU {device} but b is on GPU {_arrays.device_of(op_b.entry)}; put both on one device")
    if c is None:
        out = _arrays.empty_like_library(op_a.entry, (*batch, m, n))
        op_d = as_batched_operand(out, "c", output=True)
    else:
        op_d = as_batched_operand(c, "c", output=True)
        if op_d.batch + op_d.entry.shape != (*batch, m, n):
            raise ValueError(f"c has shape {op_d.batch + op_d.entry.shape}; a {op_a.batch + (m, k)} times b "
                             f"{op_b.batch + (k, n)} needs c of shape {(*batch, m, n)}")
        if op_d.dtype != dtype:
            raise TypeError(f"c has dtype {op_d.dtype}, but a and b are {dtype}; c must match them")
        if _arrays.device_of(op_d.entry) != device:
            raise ValueError(f"c is on GPU {_arrays.device_of(op_d.entry)} but a and b are on GPU {device}")
        _arrays.check_output_overlap(op_d, (("a", op_a), ("b", op_b)))
        out = c
    count = int(np.prod(batch, dtype=np.int64))
    if m == 0 or n == 0 or count == 0:
        return out
    op_a = _broadcast(op_a, batch)
    op_b = _broadcast(op_b, batch)

    def adapt(arr: Any, name: str) -> _EntryOperand:
        op = as_batched_operand(arr, name, output=True)
        if op.dtype != dtype:
            raise TypeError(f"{name} has dtype {op.dtype}; it must match a and b ({dtype})")
        if _arrays.device_of(op.entry) != device:
            raise ValueError(f"{name} is on GPU {_arrays.device_of(op.entry)} but a and b are on GPU {device}")
        if op.batch + op.entry.shape != (*batch, m, n):
            raise ValueError(f"{name} has shape {op.batch + op.entry.shape}; in this batched call it must have the "
                             f"result's shape {(*batch, m, n)}")
        return _EntryOperand(op)

    ctx = EpilogueContext(m, n, dtype, adapt=adapt, device=device, inputs=(op_a, op_b), output=op_d, batch=batch)
    chain = Chain((AlphaBeta(alpha, beta, c if c is not None else None),) + (epilogue.stages if epilogue else ()))
    bound = chain.bind(ctx)
    traits = policy.EpilogueTraits.of(chain)
    handle = stream_handle(stream, op_a.entry.library)
    with _arrays.on_device(device):
        info = device_info(device)
        if backend in policy.TF32_BACKENDS and not policy.tf32_rung_fits(info.cc, info.smem_per_block, precision):
            raise ValueError(f"backend={backend!r} cannot run on GPU {device} (compute capability "
                             f"{info.cc[0]}.{info.cc[1]}): use backend='auto' or 'warptile'")
        if backend == "auto":
            if m == 1:
                backend = "gemv"
            else:
                backend = policy.choose_backend(dtype, m, n, k, pipeline=False, transcendental=traits.transcendental,
                                                medium_min_k=traits.medium_tile_min_k, device=info,
                                                precision=precision)
        if backend in policy.TF32_BACKENDS:
            tile = precision
        else:
            tile = policy.choose_batched_tile(backend, dtype, m, n, k, count, info, traits.medium_tile_min_k)
        spec = KernelSpec(dtype, op_a.entry.layout, op_b.entry.layout, op_d.entry.layout, bound.key, None, tile=tile)
        launch_batched(backend, spec, bound, device, [op_a, op_b, op_d], m, n, k, handle)
    return out


def _broadcast(op: BatchedOperand, batch: tuple[int, ...]) -> BatchedOperand:
    """``op`` with its batch dimensions aligned to ``batch`` (stride 0 where it repeats)."""
    pad = len(batch) - len(op.batch)
    strides = (0,) * pad + tuple(0 if e == 1 else s for e, s in zip(op.batch, op.strides))
    return BatchedOperand(op.entry, batch, strides)


class _EntryOperand:
    """A batched output-shaped array as an epilogue stage sees it (``ctx.adapt``): one entry's
    layout, leading dimension and shape, and a :meth:`flat` that moves with the batch entry."""

    def __init__(self, op: BatchedOperand):
        self._op = op
        self.name, self.layout, self.ld, self.shape = op.name, op.entry.layout, op.entry.ld, op.entry.shape
        self.nbytes_span = op.nbytes_span

    def flat(self) -> Moved:
        op = self._op
        return Moved(op.flat(), op.strides, op.shift, op.entry.obj)
