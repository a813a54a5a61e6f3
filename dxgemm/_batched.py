"""Batched ``dxgemm.gemm``: ``(..., m, k) @ (..., k, n)`` with NumPy ``matmul`` broadcasting, one launch.

``dxgemm.gemm`` sends a call here when an operand has more than two dimensions.  This
module owns what a batched call accepts and what each mistake raises; the backend and tile rule is
:func:`dxgemm.policy.batched_choice`, the launch :mod:`dxgemm.runtime.batch_launch`.

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

Every handwritten rung runs batched (``auto`` picks ``warptile``, ``tf32mma``, on Hopper
``tf32wgmma`` for large float32 entries, or, for ``m == 1``, ``gemv``); K is not split, the
batch fills the GPU instead.  The cuBLASDx
pipeline takes one matrix per launch: ``backend="pipeline"`` with a batch is refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _arrays, policy
from ._arrays import BatchedOperand, as_batched_operand
from ._checks import check_backend, check_extra, check_one_matrix, check_rung_fits, check_scalar
from ._streams import stream_handle
from .epilogues._base import AlphaBeta, Chain, EpilogueContext, Moved, Span, check_spans
from .kernels import KernelSpec
from .kernels._device import SIMULATOR
from ._arrays import data_pointer
from .runtime.batch_launch import launch_batched, strip_batch
from .runtime.calls import output_factory
from .runtime.launch import flat_values
from .runtime.device import device_info


_MAX_KEPT = 256
_kept: dict[tuple, "_KeptBatched"] = {}


def batched_gemm(a: Any, b: Any, c: Any, alpha: Any, beta: Any, epilogue: Any, backend: str,
                 precision: str | None, stream: Any, key: tuple | None = None, addresses: list = ()) -> Any:
    """``dxgemm.gemm`` for operands with batch dimensions (module docstring).

    ``key``, ``addresses``: the call's signature and its epilogue arrays' addresses
    (:func:`dxgemm.runtime.calls.probe`).  A signature seen before repeats that call's decisions
    and laid-out launch with this call's addresses and scalars (:class:`_KeptBatched`), where
    every epilogue array's kernel argument could be placed by its address."""
    kept = _kept.get(key) if key is not None else None
    if kept is not None:
        return kept.run(a, b, c, alpha, beta, stream, addresses)
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
    check_one_matrix(backend, "a batched call")
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
        check_extra(op.entry, name, dtype, device)
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
        check_rung_fits(backend, precision, info, device)
        backend, tile = policy.batched_choice(backend, dtype, m, n, k, count, single_rows=m == 1, traits=traits,
                                              device=info, precision=precision, wgmma=not SIMULATOR)
        spec = KernelSpec(dtype, op_a.entry.layout, op_b.entry.layout, op_d.entry.layout, bound.key, None, tile=tile)
        launch = launch_batched(backend, spec, bound, device, [op_a, op_b, op_d], m, n, k, handle)
    if key is not None and launch is not None and op_a.entry.obj is a and op_b.entry.obj is b:  # inputs not copied
        kept = _KeptBatched(launch, op_a, op_b, op_d, dtype, c is not None and beta != 0, c is None, device)
        plain = strip_batch(bound.args)[0]
        head = flat_values((plain[0],))
        placed = _place(list(addresses), bound, plain, len(head))
        if kept.head(alpha, beta, op_d.lo) == head and placed is not None:
            kept.slots, kept.span_of, kept.reads = placed[0], placed[1], len(bound.reads)
            if len(_kept) >= _MAX_KEPT:
                _kept.clear()
            _kept[key] = kept
    return out


def _place(addresses: list, bound: Any, plain: tuple, head: int) -> tuple[list, list] | None:
    """Where each epilogue array of a batched call sits: ``(slots, spans)``, each entry an
    ``(address index, offset)`` (the kernel argument's data pointer, and each read and write
    span's ends, relative to the array's address), or None when one cannot be told for sure
    (the call is then validated in full every time).

    A kernel argument's view starts at its array (a plain view) or before it (a view moved
    per entry starts at the lowest entry), and spans at most the array's memory: the
    address found inside it must be unique."""
    from .runtime.launch import data_slots

    def owner(lo: int, hi: int) -> int | None:
        inside = [i for i, p in enumerate(addresses) if lo <= p < max(hi, lo + 1)]
        return inside[0] if len(set(addresses[i] for i in inside)) == 1 else None

    slots = []
    flat_tail = flat_values(tuple(plain[1:]))
    for slot, ptr in data_slots(tuple(plain[1:])):
        nbytes = int(flat_tail[slot - 4 + 2]) * int(flat_tail[slot - 4 + 3])  # nitems * itemsize of that view
        index = owner(ptr, ptr + nbytes)
        if index is None:
            return None
        slots.append((head + slot, index, ptr - addresses[index]))
    spans = []
    for span in list(bound.reads) + list(bound.writes):
        index = owner(span.lo, span.hi)
        if index is None:
            return None
        spans.append((span.name, index, span.lo - addresses[index], span.hi - addresses[index]))
    return slots, spans


class _KeptBatched:
    """A batched call's decisions and laid-out launch, for the next call of its signature: the
    signature fixes shapes, strides, dtype, device and the epilogue's structure, so a repeat call
    reads three addresses, re-checks that C overlaps neither input, and launches."""

    def __init__(self, launch: Any, op_a: BatchedOperand, op_b: BatchedOperand, op_d: BatchedOperand,
                 dtype: np.dtype, with_c: bool, new_output: bool, device: int):
        self.launch, self.scalar, self.with_c, self.device = launch, dtype.type, with_c, device
        self.itemsize = dtype.itemsize
        self.shifts = (op_a.shift, op_b.shift, op_d.shift)
        self.spans = (op_a.span * self.itemsize, op_b.span * self.itemsize, op_d.span * self.itemsize)
        self.d_span, self.d_ld = max(op_d.span, 1), np.int64(op_d.entry.ld)
        self.library = op_a.entry.library
        self.new_output = output_factory(self.library, device, op_d.batch + op_d.entry.shape, dtype) \
            if new_output else None
        self.slots: list = []  # (kernel parameter, address index, offset) of each epilogue array's view
        self.span_of: list = []  # (name, address index, lo, hi) of each read, then each write
        self.reads = 0

    def head(self, alpha: Any, beta: Any, d_lo: int) -> list:
        """The alpha/beta stage's flattened kernel arguments (C's flat view from the lowest entry)."""
        if self.with_c:
            return [self.scalar(alpha), self.scalar(beta), 0, 0, self.d_span, self.itemsize, d_lo, self.d_span,
                    self.itemsize, self.d_ld]
        return [self.scalar(alpha)]

    def run(self, a: Any, b: Any, c: Any, alpha: Any, beta: Any, stream: Any, addresses: list = ()) -> Any:
        out = c if c is not None else self.new_output()
        pa, pb, pd = data_pointer(a), data_pointer(b), data_pointer(out)
        size = self.itemsize
        lo = [p - s * size for p, s in zip((pa, pb, pd), self.shifts)]
        if c is not None:
            for name, x in (("a", 0), ("b", 1)):
                if lo[2] < lo[x] + self.spans[x] and lo[x] < lo[2] + self.spans[2]:
                    raise ValueError(f"c overlaps {name} in memory; the output must not share memory with an input")
        patches = ()
        if self.slots or self.span_of:
            spans = [Span(name, addresses[i] + l0, addresses[i] + h0) for name, i, l0, h0 in self.span_of]
            check_spans([Span("a", lo[0], lo[0] + self.spans[0]), Span("b", lo[1], lo[1] + self.spans[1])],
                        Span("c", lo[2], lo[2] + self.spans[2]), spans[:self.reads], spans[self.reads:])
            patches = [(slot, addresses[i] + delta) for slot, i, delta in self.slots]
        handle = stream_handle(stream, self.library)
        with _arrays.on_device(self.device):
            self.launch(lo[0], lo[1], lo[2], pa, pb, self.head(alpha, beta, lo[2]), handle, patches)
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
