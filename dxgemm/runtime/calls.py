"""Repeat calls of ``dxgemm.gemm``: a call's decisions, kept per call signature.

Why
---
A call spends most of its host time deciding things that do not change from one call to
the next: validating the arrays (``__cuda_array_interface__`` dicts, layouts, devices),
binding the epilogue chain (Numba views, the argument types that select the kernel),
choosing the backend, tile and configuration and finding the loaded kernel.  Any GEMM
shorter than that runs at the host's pace, so a repeat call must cost about what CuPy's
own ``matmul`` does (16-28 microseconds of CPU time on the H100 host).

What is kept
------------
After a call succeeds, :func:`remember` stores what it decided under the call's
*signature* (:func:`signature`): the array type, shape, strides, dtype and device of A, B
and C, the 16-byte alignment of A and B (``auto``'s backend rule reads it), the Python types of
alpha and beta and whether beta is zero, each epilogue stage's
:meth:`~dxgemm.epilogues.Epilogue.call_signature`, the backend and precision asked for.
Addresses are not part of it.  The state that steers the decisions besides the arguments
is checked when an entry is found (:func:`lookup`): for a pipeline call the variables of
:func:`.env.steering_state`, :func:`~dxgemm.pipelines.config.use_config`,
:class:`~.pipeline.use_split_k` and the autotune table's modification time; for ``auto``'s
choice of a handwritten kernel whether ``auto`` may pick the pipeline; for a handwritten call
split over K how its slices are summed (``DXGEMM_SPLIT_REDUCE``); nothing else for a
handwritten kernel named explicitly.  A changed state sends the call the full way, and
that call's decisions replace the entry.

A later call with the same signature skips straight to the launch: it reads the three
data pointers, re-checks what depends on them (C must not overlap A or B; epilogue arrays
must not race with the operands), rebuilds the alpha/beta arguments and launches.  A
handwritten kernel (:class:`~.launch.KernelCall`, split-K's
:class:`~.splitk.SplitKernelCall`) lays its parameter list out once for the signature
(:class:`~.launch.RepeatLaunch`), so its repeat launch writes the addresses, the alignment
flags and alpha/beta into a copy and packs it; a pipeline call
(:class:`~dxgemm.runtime.pipeline.PipelineCall`) gets Matrix views.

Only CuPy arrays take this path (their signature is read from attributes; under Numba's
simulator, its simulated arrays, so CPU tests run it); other array types are validated in
full on every call, as before.  A ``custom`` stage's signature holds
:func:`~dxgemm.epilogues.stable_key` of its function, which covers the globals and closure
values the function reads, so a changed one is bound afresh.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import numpy as np

from .._arrays import check_output_overlap, current_device, data_pointer, matrix_signature, on_device
from .._streams import stream_handle
from ..epilogues._base import Span, check_spans, is_epilogue
from ..pipelines import config
from . import env, tuned
from .launch import Matrix, data_slots, flat_values, matrix_of

__all__ = ["signature", "probe", "epilogue_signature", "lookup", "remember", "clear"]

_NOTHING_TO_SWITCH = contextlib.nullcontext()
_MAX_ENTRIES = 512
_C_SLOT = 6  # C's data pointer among the alpha/beta stage's flattened slots (alpha, beta, C's vector slots, ld)
_entries: dict[tuple, "_KeptCall"] = {}


def _steering_state() -> tuple:
    """What, besides the arguments, changes a pipeline call's decisions."""
    from .pipeline import forced_slices

    return (env.steering_state(), tuple(config._forced), forced_slices(), tuned.table_stamp())


def _auto_state() -> tuple:
    """What, besides the arguments, changes ``auto``'s choice of a handwritten kernel: whether it
    may pick the pipeline instead."""
    return (env.auto_pipeline(),)


def _split_state() -> tuple:
    """What, besides the arguments, changes a handwritten split call's launch: how its slices are
    summed (``DXGEMM_SPLIT_REDUCE``)."""
    return (env.split_reduce_text(),)


def _auto_split_state() -> tuple:
    """:func:`_auto_state` and :func:`_split_state`, for ``auto``'s handwritten split calls."""
    return (env.auto_pipeline(), env.split_reduce_text())


def signature(a: Any, b: Any, c: Any, alpha: Any, beta: Any, epilogue: Any, backend: str,
              precision: str | None = None) -> tuple | None:
    """The call's signature (module docstring), or None when the call must be validated in full."""
    return probe(a, b, c, alpha, beta, epilogue, backend, precision)[0]


def probe(a: Any, b: Any, c: Any, alpha: Any, beta: Any, epilogue: Any, backend: str,
          precision: str | None = None) -> tuple[tuple | None, list]:
    """``(signature, epilogue addresses)``: the addresses of the epilogue's arrays, in the order
    the signature indexes them (:meth:`~dxgemm.epilogues.Epilogue.call_signature`)."""
    addresses: list = []
    sig_a = matrix_signature(a)
    if sig_a is None:
        return None, addresses
    sig_b = matrix_signature(b)
    if sig_b is None:
        return None, addresses
    sig_c = None
    if c is not None:
        sig_c = matrix_signature(c)
        if sig_c is None:
            return None, addresses
    kind_alpha, kind_beta = type(alpha), type(beta)
    if (kind_alpha is not float and kind_alpha is not int) or (kind_beta is not float and kind_beta is not int):
        return None, addresses
    epi = epilogue_signature(epilogue, addresses)
    if epi is None:
        return None, addresses
    # A's and B's 16-byte alignment: auto's backend rule reads it (the kernels take it per call)
    aligned = (data_pointer(a) % 16 == 0, data_pointer(b) % 16 == 0)
    # the testing switch DXGEMM_DEVICE_AS changes every decision, a handwritten kernel's tile too
    return (sig_a, sig_b, sig_c, kind_alpha, kind_beta, beta == 0, epi, backend, precision, aligned,
            env.device_as_text()), addresses


def epilogue_signature(epilogue: Any, addresses: list) -> tuple | None:
    """What a call's epilogue (None or an :class:`~dxgemm.epilogues.Epilogue`) contributes to
    its signature: each stage's :meth:`~dxgemm.epilogues.Epilogue.call_signature`, the
    addresses of its arrays appended to ``addresses``; None when a stage cannot say (the call
    is validated in full)."""
    if epilogue is None:
        return ()
    if not is_epilogue(epilogue):
        return None
    parts = []
    for stage in epilogue.stages:
        part = stage.call_signature(addresses) if _takes_addresses(type(stage)) else stage.call_signature()
        if part is None:
            return None
        parts.append(part)
    return tuple(parts)


_addressable: dict[type, bool] = {}


def _takes_addresses(kind: type) -> bool:
    """Whether a stage class's ``call_signature`` takes ``addresses`` (one written before it did
    keys its arrays by address, which stays correct)."""
    known = _addressable.get(kind)
    if known is None:
        import inspect

        known = _addressable[kind] = "addresses" in inspect.signature(kind.call_signature).parameters
    return known


def lookup(key: tuple | None) -> "_KeptCall | None":
    """The kept call of ``key``, if any, and if the state that steered its decisions
    (:func:`_steering_state` for a pipeline call, ``auto``'s pipeline switch for one that chose a
    handwritten kernel) is what it was then; otherwise None, and the call goes the full way."""
    if key is None:
        return None
    entry = _entries.get(key)
    if entry is None or (entry.steering is not None and entry.steering() != entry.steered_by):
        return None
    return entry


def clear() -> None:
    """Forget every kept call (the next call of each signature is validated in full)."""
    _entries.clear()


def _span(name: str, matrix: Any) -> Span:
    return Span(name, *matrix.nbytes_span)


class _KeptCall:
    """One signature's decisions; :meth:`run` is the whole repeat call.

    ``call`` launches: a :class:`~dxgemm.runtime.pipeline.PipelineCall` or a
    :class:`~.launch.KernelCall`, both taking Matrix views and the flattened epilogue arguments;
    ``fast``, when the launcher offers one (``call.repeat``: the handwritten kernels), is that
    launch with its parameters laid out for this problem (:class:`~.launch.RepeatLaunch`),
    taking the three addresses.  ``steering``/``steered_by``: see :func:`lookup`.
    """

    __slots__ = ("call", "m", "n", "k", "scalar", "a", "b", "d", "with_c", "tail", "reads", "writes", "new_output",
                 "library", "fast", "bytes_a", "bytes_b", "bytes_d", "device", "steering", "steered_by",
                 "moved", "span_of")

    def __init__(self, call: Any, m: int, n: int, k: int, scalar: type, a: Any, b: Any, d: Any, with_c: bool,
                 tail: list, reads: tuple, writes: tuple, new_output: Any, library: str = "cupy", device: int = 0):
        self.call, self.m, self.n, self.k, self.scalar = call, m, n, k, scalar
        self.a, self.b, self.d = a, b, d  # Matrix fields after the address: rows, cols, ld, arrangement, itemsize
        self.with_c, self.tail, self.reads, self.writes, self.new_output = with_c, tail, reads, writes, new_output
        self.library, self.device, self.fast = library, device, None
        self.bytes_a, self.bytes_b, self.bytes_d = (Matrix(0, *rest).nbytes_span[1] for rest in (a, b, d))
        self.steering: Callable[[], tuple] | None = None
        self.steered_by: tuple = ()
        self.moved: tuple = ()  # (epilogue slot, address index) of every epilogue array's address
        self.span_of: tuple = ()  # per read, then per write: a fixed Span, or (name, address index, lo, hi)

    def head(self, alpha: Any, beta: Any, d: Any) -> list:
        """The alpha/beta stage's flattened kernel arguments (``AlphaBeta.bind``'s, in slots)."""
        scalar = self.scalar
        if self.with_c:
            return [scalar(alpha), scalar(beta), *d.vector_slots(), np.int64(d.ld)]
        return [scalar(alpha)]

    def spans(self, addresses: list) -> tuple[list, list]:
        """The epilogue's read and write spans at this call's ``addresses``."""
        out = []
        for span in self.span_of:
            if type(span) is tuple:
                name, index, lo, hi = span
                span = Span(name, addresses[index] + lo, addresses[index] + hi)
            out.append(span)
        return out[:len(self.reads)], out[len(self.reads):]

    def run(self, a: Any, b: Any, c: Any, alpha: Any, beta: Any, stream: Any, addresses: list = ()) -> Any:
        """The repeat call: ``addresses`` are this call's epilogue array addresses (:func:`probe`).
        Reads the three data pointers, re-checks what depends on addresses, launches; returns D."""
        if self.fast is None:
            return self._run_views(a, b, c, alpha, beta, stream, addresses)
        handle = stream_handle(stream, self.library)
        out = c if c is not None else self.new_output()
        pa, pb, pd = data_pointer(a), data_pointer(b), data_pointer(out)
        end_a, end_b, end_d = pa + self.bytes_a, pb + self.bytes_b, pd + self.bytes_d
        if c is not None and end_d > pd:  # C must not overlap A or B (check_output_overlap's rule)
            if pd < end_a and pa < end_d and end_a > pa:
                raise ValueError("c overlaps a in memory; the output must not share memory with an input")
            if pd < end_b and pb < end_d and end_b > pb:
                raise ValueError("c overlaps b in memory; the output must not share memory with an input")
        if self.span_of:  # epilogue arrays indexed by address: their spans follow this call's addresses
            if self.writes:
                reads, writes = self.spans(addresses)
                check_spans([Span("a", pa, end_a), Span("b", pb, end_b)], Span("c", pd, end_d), reads, writes)
            else:  # reads only: each against D (reads never race with each other or with A and B)
                for span in self.span_of:
                    if type(span) is tuple:
                        base = addresses[span[1]]
                        lo, hi = base + span[2], base + span[3]
                    else:
                        lo, hi = span.lo, span.hi
                    if lo < end_d and pd < hi and hi > lo and end_d > pd:
                        check_spans([Span("a", pa, end_a), Span("b", pb, end_b)], Span("c", pd, end_d),
                                    self.spans(addresses)[0], [])  # raises, with check_spans' message
        elif self.reads or self.writes:
            self._check_races(pa, end_a, pb, end_b, pd, end_d)
        # alpha (and beta with C's address: the alpha/beta stage's slots 0, 1 and 6, AlphaBeta.bind's
        # flattened arguments) and each moved epilogue array's address
        if self.with_c:
            scalars: tuple = (alpha, beta)
            patches = [(_C_SLOT, pd)]
        else:
            scalars, patches = (alpha,), []
        for slot, index in self.moved:
            patches.append((slot, addresses[index]))
        if current_device() == self.device:  # _on_arrays_device inlined: a `with` costs ~0.2 us a call here
            self.fast(pa, pb, pd, scalars, handle, patches)
        else:
            with on_device(self.device):
                self.fast(pa, pb, pd, scalars, handle, patches)
        return out

    def _on_arrays_device(self) -> Any:
        """The launch's context: the arrays' GPU (the signature holds it) made current for it,
        or nothing to do when it already is (the usual case, and a device switch costs)."""
        return _NOTHING_TO_SWITCH if current_device() == self.device else on_device(self.device)

    def _check_races(self, pa: int, end_a: int, pb: int, end_b: int, pd: int, end_d: int) -> None:
        """:func:`~dxgemm.epilogues._base.check_spans` for new addresses of A, B and D when the
        epilogue's own arrays are keyed by address (a stage whose ``call_signature`` takes no
        ``addresses``): what they do to each other was checked when the call was first made;
        what remains is each write against A, B and D, and each read against D, in
        check_spans' order and with its messages."""
        operands = (("a", pa, end_a), ("b", pb, end_b))
        for w in self.writes:
            for name, lo, hi in operands + (("c", pd, end_d),):
                if w.lo < hi and lo < w.hi and w.hi > w.lo and hi > lo:
                    check_spans([Span(*operands[0]), Span(*operands[1])], Span("c", pd, end_d), self.reads,
                                self.writes)  # raises, naming the first overlap as on the full path
        for r in self.reads:
            if r.lo < end_d and pd < r.hi and r.hi > r.lo and end_d > pd:
                check_spans([Span(*operands[0]), Span(*operands[1])], Span("c", pd, end_d), self.reads, self.writes)

    def _run_views(self, a: Any, b: Any, c: Any, alpha: Any, beta: Any, stream: Any, addresses: list = ()) -> Any:
        """The repeat call of a launcher that takes Matrix views (the pipeline's), or of one whose
        epilogue arrays may have moved."""
        handle = stream_handle(stream, self.library)
        out = c if c is not None else self.new_output()
        mat_a = Matrix(data_pointer(a), *self.a)
        mat_b = Matrix(data_pointer(b), *self.b)
        mat_d = Matrix(data_pointer(out), *self.d)
        if c is not None:
            check_output_overlap(mat_d, (("a", mat_a), ("b", mat_b)))
        reads, writes = self.spans(addresses) if self.span_of else (self.reads, self.writes)
        if reads or writes:
            check_spans([_span("a", mat_a), _span("b", mat_b)], _span("c", mat_d), reads, writes)
        head = self.head(alpha, beta, mat_d)
        epi = head + self.tail
        for slot, index in self.moved:
            epi[slot] = addresses[index]
        with self._on_arrays_device():
            self.call(mat_a, mat_b, mat_d, self.m, self.n, self.k, epi, handle)
        return out


def output_factory(library: str, device_id: int, shape: tuple[int, int], dtype: np.dtype):
    """What ``gemm`` allocates when no C is given (``_arrays.empty_like_library``)."""
    if library == "numba":  # Numba's simulator
        from numba import cuda

        return lambda: cuda.device_array(shape, dtype)
    import cupy

    device = cupy.cuda.Device(device_id)

    def new_output():
        with device:
            return cupy.empty(shape, dtype)

    return new_output


def remember(key: tuple | None, call: Any, op_a: Any, op_b: Any, op_d: Any, originals: tuple, m: int, n: int,
             k: int, bound: Any, alpha: Any, beta: Any, c_given: bool, *, pipeline: bool = True,
             addresses: list = (), split: bool = False) -> None:
    """Keep a successful call's decisions under ``key`` (from :func:`signature`); ``call`` launches it.

    ``originals``: the caller's A and B; a call whose inputs had to be copied (no unit
    stride) is not kept, since a repeat would have to copy too.  The recorded arguments
    are checked against the ones this call launched with, and nothing is kept if the
    repeat path would build different ones.  ``addresses``: the epilogue arrays' addresses
    (:func:`probe`), which the signature holds by index only: each must be found where the
    arguments and spans hold it (a kernel argument's data pointer, a span around it), or the
    call is not kept.  ``pipeline``: whether the decisions may depend on
    the pipeline's steering state (:func:`lookup`); False for a handwritten kernel, which then
    depends only on ``auto``'s pipeline switch when ``auto`` chose it and, ``split`` over K, on
    how its slices are summed.
    """
    if key is None or op_a.obj is not originals[0] or op_b.obj is not originals[1]:
        return
    dtype = np.dtype(op_a.dtype)
    mat_a, mat_b, mat_d = matrix_of(op_a), matrix_of(op_b), matrix_of(op_d)
    library = op_a.library
    new_output = None if c_given else output_factory(library, _device_of(op_a), (m, n), dtype)

    def rest(mat: Any) -> tuple:
        return (mat.rows, mat.cols, mat.ld, mat.arrangement, mat.itemsize)

    entry = _KeptCall(call, m, n, k, dtype.type, rest(mat_a), rest(mat_b), rest(mat_d), c_given and beta != 0,
                      flat_values(tuple(bound.args[1:])), tuple(bound.reads), tuple(bound.writes), new_output,
                      library, _device_of(op_a))
    head = flat_values((bound.args[0],))
    if entry.head(alpha, beta, mat_d) != head or (entry.with_c and head[_C_SLOT] != mat_d.ptr):
        return
    if addresses:
        placed = _place(addresses, bound, len(head))
        if placed is None:
            return
        entry.moved, entry.span_of = placed
    if hasattr(call, "repeat"):
        entry.fast = call.repeat(mat_a, mat_b, mat_d, m, n, k, head + entry.tail)
    if pipeline:
        entry.steering = _steering_state
    elif key[7] == "auto":
        entry.steering = _auto_split_state if split else _auto_state
    elif split:
        entry.steering = _split_state
    if entry.steering is not None:
        entry.steered_by = entry.steering()
    if len(_entries) >= _MAX_ENTRIES:
        _entries.clear()
    _entries[key] = entry


def _device_of(op: Any) -> int:
    """The GPU of a remembered call's operands (0 under the simulator)."""
    return op.obj.device.id if op.library == "cupy" else 0


def _place(addresses: list, bound: Any, head: int) -> tuple[tuple, tuple] | None:
    """Where each epilogue array's address sits: ``(moved, span_of)`` for :class:`_KeptCall`, or
    None when that cannot be told for sure (a span holding two of the addresses; a kernel
    argument pointing inside an array but not at its start), and the call is not kept."""
    spans = list(bound.reads) + list(bound.writes)
    span_of: list = []
    for span in spans:
        inside = {p for p in addresses if span.lo <= p < span.hi or p == span.lo}
        if len(inside) > 1:
            return None
        if not inside:  # an array keyed by its address (a stage written before addresses were indexed)
            span_of.append(span)
            continue
        p = inside.pop()
        span_of.append((span.name, addresses.index(p), span.lo - p, span.hi - p))
    moved = []
    for slot, ptr in data_slots(tuple(bound.args[1:])):
        if ptr in addresses:
            moved.append((head + slot, addresses.index(ptr)))
        elif any(type(s) is tuple and spans[i].lo <= ptr < spans[i].hi for i, s in enumerate(span_of)):
            return None
    return tuple(moved), tuple(span_of)
