"""Repeat calls of ``dxgemm.gemm``: a call's decisions, kept per call signature.

Why
---
A pipeline call spends most of its host time deciding things that do not change from
one call to the next: validating the arrays (``__cuda_array_interface__`` dicts, layouts,
devices), binding the epilogue chain (Numba views, the argument types that select the
kernel), choosing the configuration and finding the loaded kernel.  On the H100 host
that was 250-460 microseconds per call against 23-31 for CuPy's own ``matmul``, so any GEMM shorter than that ran at
the host's pace.

What is kept
------------
After a call succeeds, :func:`remember` stores what it decided under the call's
*signature* (:func:`signature`): the shapes, strides, dtypes and devices of A, B and C,
the Python types of alpha and beta and whether beta is zero, each epilogue stage's
:meth:`~dxgemm.epilogues.Epilogue.call_signature`, the backend asked for, and the state
that steers the decisions (the variables of :func:`.env.steering_state`, :func:`~dxgemm.pipelines.config.use_config`,
:class:`~.pipeline.use_split_k`,
the autotune table's modification time).  Addresses are not part of it.  A later call
with the same signature skips straight to the launch: it reads the three data
pointers, re-checks what depends on them (C must not overlap A or B; epilogue arrays
must not race with the operands), rebuilds the alpha/beta arguments and launches the
recorded :class:`~dxgemm.runtime.pipeline.PipelineCall`.

The same holds for the handwritten kernels (:class:`~.launch.KernelCall`): on a GPU every call,
the first one too, launches the rung's cubin (kept on disk by :mod:`.rungs`)
with packed parameters instead of through Numba's argument handling.
Only CuPy arrays take this path (their signature is read from attributes); other array
types are validated in full on every call, as before.  A ``custom`` stage's signature
holds :func:`~dxgemm.epilogues.stable_key` of its function, which covers the globals and
closure values the function reads, so a changed one is bound afresh.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._arrays import check_output_overlap, matrix_signature, on_device
from .._streams import stream_handle
from ..epilogues._base import Epilogue, Span, check_spans
from ..pipelines import config
from . import env, tuned
from .launch import Matrix, flat_values, matrix_of

__all__ = ["signature", "lookup", "remember", "clear"]

_MAX_ENTRIES = 512
_entries: dict[tuple, "_KeptCall"] = {}


def _steering_state() -> tuple:
    """What, besides the arguments, changes a pipeline call's decisions."""
    from .pipeline import forced_slices

    return (env.steering_state(), tuple(config._forced), forced_slices(), tuned.table_stamp())


def signature(a: Any, b: Any, c: Any, alpha: Any, beta: Any, epilogue: Any, backend: str,
              precision: str | None = None) -> tuple | None:
    """The call's signature (module docstring), or None when the call must be validated in full."""
    sig_a = matrix_signature(a)
    sig_b = matrix_signature(b)
    if sig_a is None or sig_b is None:
        return None
    sig_c = None
    if c is not None:
        sig_c = matrix_signature(c)
        if sig_c is None:
            return None
    if type(alpha) not in (float, int) or type(beta) not in (float, int):
        return None
    epi: tuple = ()
    if epilogue is not None:
        if not isinstance(epilogue, Epilogue):
            return None
        parts = []
        for stage in epilogue.stages:
            part = stage.call_signature()
            if part is None:
                return None
            parts.append(part)
        epi = tuple(parts)
    return (sig_a, sig_b, sig_c, type(alpha), type(beta), beta == 0, epi, backend, precision, _steering_state())


def lookup(key: tuple | None) -> "_KeptCall | None":
    return None if key is None else _entries.get(key)


def clear() -> None:
    """Forget every kept call (the next call of each signature is validated in full)."""
    _entries.clear()


def _span(name: str, matrix: Any) -> Span:
    return Span(name, *matrix.nbytes_span)


class _KeptCall:
    """One signature's decisions; :meth:`run` is the whole repeat call.

    ``call`` launches: a :class:`~dxgemm.runtime.pipeline.PipelineCall` or a
    :class:`~.launch.KernelCall`, both taking Matrix views and the flattened epilogue arguments.
    """

    __slots__ = ("call", "m", "n", "k", "scalar", "a", "b", "d", "with_c", "tail", "reads", "writes", "new_output")

    def __init__(self, call: Any, m: int, n: int, k: int, scalar: type, a: Any, b: Any, d: Any, with_c: bool,
                 tail: list, reads: tuple, writes: tuple, new_output: Any):
        self.call, self.m, self.n, self.k, self.scalar = call, m, n, k, scalar
        self.a, self.b, self.d = a, b, d  # Matrix fields after the address: rows, cols, ld, arrangement, itemsize
        self.with_c, self.tail, self.reads, self.writes, self.new_output = with_c, tail, reads, writes, new_output

    def head(self, alpha: Any, beta: Any, d: Any) -> list:
        """The alpha/beta stage's flattened kernel arguments (``AlphaBeta.bind``'s, in slots)."""
        scalar = self.scalar
        if self.with_c:
            return [scalar(alpha), scalar(beta), *d.vector_slots(), np.int64(d.ld)]
        return [scalar(alpha)]

    def run(self, a: Any, b: Any, c: Any, alpha: Any, beta: Any, stream: Any) -> Any:
        handle = stream_handle(stream, "cupy")
        out = c if c is not None else self.new_output()
        mat_a = Matrix(a.data.ptr, *self.a)
        mat_b = Matrix(b.data.ptr, *self.b)
        mat_d = Matrix(out.data.ptr, *self.d)
        if c is not None:
            check_output_overlap(mat_d, (("a", mat_a), ("b", mat_b)))
        if self.reads or self.writes:
            check_spans([_span("a", mat_a), _span("b", mat_b)], _span("c", mat_d), self.reads, self.writes)
        with on_device(a.device.id):  # launch on the arrays' GPU (the signature holds it), whichever is current
            self.call(mat_a, mat_b, mat_d, self.m, self.n, self.k, self.head(alpha, beta, mat_d) + self.tail, handle)
        return out


def _output_factory(device_id: int, shape: tuple[int, int], dtype: np.dtype):
    """What ``gemm`` allocates when no C is given (``_arrays.empty_like_library`` for CuPy)."""
    import cupy

    device = cupy.cuda.Device(device_id)

    def new_output():
        with device:
            return cupy.empty(shape, dtype)

    return new_output


def remember(key: tuple | None, call: Any, op_a: Any, op_b: Any, op_d: Any, originals: tuple, m: int, n: int,
             k: int, bound: Any, alpha: Any, beta: Any, c_given: bool) -> None:
    """Keep a successful call's decisions under ``key`` (from :func:`signature`); ``call`` launches it.

    ``originals``: the caller's A and B; a call whose inputs had to be copied (no unit
    stride) is not kept, since a repeat would have to copy too.  The recorded arguments
    are checked against the ones this call launched with, and nothing is kept if the
    repeat path would build different ones.
    """
    if key is None or op_a.obj is not originals[0] or op_b.obj is not originals[1]:
        return
    dtype = np.dtype(op_a.dtype)
    mat_a, mat_b, mat_d = matrix_of(op_a), matrix_of(op_b), matrix_of(op_d)
    new_output = None if c_given else _output_factory(op_a.obj.device.id, (m, n), dtype)
    def rest(mat: Any) -> tuple:
        return (mat.rows, mat.cols, mat.ld, mat.arrangement, mat.itemsize)

    entry = _KeptCall(call, m, n, k, dtype.type, rest(mat_a), rest(mat_b), rest(mat_d), c_given and beta != 0,
                           flat_values(tuple(bound.args[1:])), tuple(bound.reads), tuple(bound.writes), new_output)
    if entry.head(alpha, beta, mat_d) != flat_values((bound.args[0],)):
        return
    if len(_entries) >= _MAX_ENTRIES:
        _entries.clear()
    _entries[key] = entry
