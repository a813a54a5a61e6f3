"""Repeat calls of ``dxgemm.gemm``: a call's decisions, kept per call signature.

Why
---
A pipeline call spends most of its host time deciding things that do not change from
one call to the next: validating the arrays (``__cuda_array_interface__`` dicts, layouts,
devices), binding the epilogue chain (Numba views, the argument types that select the
kernel), choosing the configuration and finding the loaded kernel.  On the H100 host
that was 250-460 microseconds per call against 23-31 for CuPy's own ``matmul``
(``benchmarks/results/h100_host_breakdown.log``), so any GEMM shorter than that ran at
the host's pace.

What is kept
------------
After a call succeeds, :func:`remember` stores what it decided under the call's
*signature* (:func:`signature`): the shapes, strides, dtypes and devices of A, B and C,
the Python types of alpha and beta and whether beta is zero, each epilogue stage's
:meth:`~dxgemm.epilogues.Epilogue.call_signature`, the backend asked for, and the state
that steers the decisions (the ``DXGEMM_*`` variables, :func:`~dxgemm.pipelines.config.use_config`,
the autotune table's modification time).  Addresses are not part of it.  A later call
with the same signature skips straight to the launch: it reads the three data
pointers, re-checks what depends on them (C must not overlap A or B; epilogue arrays
must not race with the operands), rebuilds the alpha/beta arguments and launches the
recorded :class:`~dxgemm.pipelines._dispatch.PipelineCall`.

The same holds for the handwritten kernels (:class:`KernelCall`): on a GPU every call,
the first one too, launches the rung's cubin (kept on disk by :mod:`dxgemm._rung_cache`)
with packed parameters instead of through Numba's argument handling.
Only CuPy arrays take this path (their signature is read from attributes); other array
types are validated in full on every call, as before.  A ``custom`` stage's signature
holds :func:`~dxgemm.epilogues.stable_key` of its function, which covers the globals and
closure values the function reads, so a changed one is bound afresh.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ._arrays import check_output_overlap, matrix_signature, on_device
from ._streams import stream_handle
from .epilogues._base import Epilogue, Span, check_spans
from .kernels import vector_flags

__all__ = ["signature", "lookup", "remember", "clear"]

_MAX_ENTRIES = 512
_entries: dict[tuple, "_KeptCall"] = {}
_STEERING_VARIABLES = ("DXGEMM_AUTO_PIPELINE", "DXGEMM_FLOAT32_PIPELINE", "DXGEMM_PIPELINE_STORE",
                       "DXGEMM_WALK_UNROLL", "DXGEMM_SPLIT_K", "DXGEMM_CACHE_DIR", "XDG_CACHE_HOME")


def _steering_state() -> tuple:
    """What, besides the arguments, changes a pipeline call's decisions."""
    from .pipelines import config, tuning

    env = os.environ
    return (tuple(env.get(name) for name in _STEERING_VARIABLES), tuple(config._forced), tuning.table_stamp())


def signature(a: Any, b: Any, c: Any, alpha: Any, beta: Any, epilogue: Any, backend: str) -> tuple | None:
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
    return (sig_a, sig_b, sig_c, type(alpha), type(beta), beta == 0, epi, backend, _steering_state())


def lookup(key: tuple | None) -> "_KeptCall | None":
    return None if key is None else _entries.get(key)


def clear() -> None:
    """Forget every kept call (the next call of each signature is validated in full)."""
    _entries.clear()


def _span(name: str, matrix: Any) -> Span:
    return Span(name, *matrix.nbytes_span)


class _KeptCall:
    """One signature's decisions; :meth:`run` is the whole repeat call.

    ``call`` launches: a :class:`~dxgemm.pipelines._dispatch.PipelineCall` or a
    :class:`KernelCall`, both taking Matrix views and the flattened epilogue arguments.
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
        from .pipelines._launch import Matrix

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


class KernelCall:
    """A handwritten kernel (``dxgemm.kernels``) launched like a pipeline: packed parameters, ``cuLaunchKernel``.

    Numba's own launch re-types and marshals every argument (tens of microseconds, more
    than a single-row GEMM takes on the GPU); the kernel's compiled signature gives the
    parameter layout once (:func:`dxgemm.pipelines._build._param_layout`), and the flat
    array arguments are rebuilt from addresses per call.  Made from a Numba-compiled
    kernel (:meth:`of`) or from a cubin with its recorded layout (:meth:`from_cubin`:
    every rung on a GPU, kept in the on-disk cache by :mod:`dxgemm._rung_cache`).
    """

    def __init__(self, function: Any, kinds: list, block: tuple, tile: tuple[int, int], smem: int = 0,
                 slices: int = 1):
        import threading
        from types import SimpleNamespace

        from .pipelines._launch import PackedLaunch, cu_stream

        self.launch = PackedLaunch(SimpleNamespace(handle=function), kinds)
        self.block, self.tile_m, self.tile_n, self.smem = tuple(block), int(tile[0]), int(tile[1]), int(smem)
        self.slices = int(slices)  # K slices over gridDim.z (a split-K kernel)
        self._cu_stream = cu_stream
        self._lock = threading.Lock()

    @classmethod
    def of(cls, compiled: Any, slices: int = 1) -> "KernelCall":
        """The launcher of a :class:`dxgemm.kernels.CompiledKernel` (its one Numba overload)."""
        overload, kinds, block, tile, smem = launch_layout(compiled)
        return cls(overload.library.get_cufunc().handle, kinds, block, tile, smem, slices)

    @classmethod
    def from_cubin(cls, cubin: bytes, entry: str, kinds: list, block: tuple, tile: tuple[int, int],
                   device: int, smem: int = 0, slices: int = 1) -> "KernelCall":
        """The launcher of kernel ``entry`` in ``cubin``, loaded with cuda.core on ``device``.

        ``smem``: the dynamic shared memory each block needs (the kernel's limit is raised to
        it); the driver's view of the parameters must match ``kinds``, or it raises."""
        from cuda.bindings import driver
        from cuda.core import Device, ObjectCode

        from .pipelines._launch import _check_params

        Device(device).set_current()
        kernel = ObjectCode.from_cubin(cubin).get_kernel(entry)
        _check_params(kernel, kinds, entry)
        if smem > 0:
            (err,) = driver.cuKernelSetAttribute(
                driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem, kernel.handle,
                device)
            if err != driver.CUresult.CUDA_SUCCESS:
                raise RuntimeError(f"cannot raise {entry[:40]}...'s dynamic shared memory to {smem} bytes: {err!r}")
        call = cls(kernel.handle, kinds, block, tile, smem, slices)
        call._module = kernel  # keep the loaded module alive with the launcher
        return call

    def __call__(self, a: Any, b: Any, d: Any, m: int, n: int, k: int, epi_args: list, stream: int) -> None:
        flags = vector_flags(a.ptr, a.ld, b.ptr, b.ld, a.itemsize)
        values = [*a.vector_slots(), *b.vector_slots(), *d.vector_slots(), m, n, k, a.ld, b.ld, d.ld, flags,
                  *epi_args]
        grid = (-(-n // self.tile_n), -(-m // self.tile_m)) + ((self.slices,) if self.slices > 1 else ())
        with self._lock:
            self.launch(self._cu_stream(stream), grid, self.block, self.smem, values)


class SplitKernelCall:
    """A float64 ``warptile`` call split into K slices (``dxgemm._gemm._warptile_split_k``),
    remembered like :class:`KernelCall`: the slices' kernel into a workspace, then the reduce
    with the caller's epilogue arguments.

    The workspace is the one the pipeline's split calls keep per device and stream
    (:func:`dxgemm.pipelines._splitk.workspace`): calls on one stream are ordered, so every
    split call there, of any signature, reuses one buffer, grown in stream order when a
    larger one needs it.  (Each remembered call had kept its own ``slices x m x n``
    workspace, for as long as it was remembered.)"""

    def __init__(self, part: KernelCall, reduce: KernelCall, slices: int, plain_args: list, device: int):
        from cuda.core import Device

        self.part, self.reduce, self.slices, self.plain_args = part, reduce, slices, plain_args
        self.device, self._core_device = device, Device(device)

    def __call__(self, a: Any, b: Any, d: Any, m: int, n: int, k: int, epi_args: list, stream: int) -> None:
        from .pipelines._launch import Matrix, core_stream
        from .pipelines._splitk import workspace

        rows = d.arrangement == "row_major"
        ldw = n if rows else m
        w = workspace(self.device, self._core_device, stream, core_stream(self._core_device, stream),
                      self.slices * m * n * d.itemsize)
        stacked = (Matrix(w, self.slices * m, n, ldw, "row_major", d.itemsize) if rows
                   else Matrix(w, m, self.slices * n, ldw, "col_major", d.itemsize))
        self.part(a, b, stacked, m, n, k, self.plain_args, stream)
        # the reduce learns the slices' stride from its "B" operand's ld (kernels/splitk_reduce)
        stride_view = Matrix(w, 1, 1, m * n, "row_major", d.itemsize)
        self.reduce(stacked, stride_view, d, m, n, self.slices, epi_args, stream)


def launch_layout(compiled: Any) -> tuple[Any, list, tuple, tuple[int, int], int]:
    """``(overload, parameter kinds, block, (tile_m, tile_n), dynamic smem)`` of a
    :class:`dxgemm.kernels.CompiledKernel`: what a packed launch of its one Numba overload needs."""
    from .pipelines._build import _param_layout

    (argtypes,) = compiled.kernel.overloads.keys()
    (overload,) = compiled.kernel.overloads.values()
    built = compiled.built
    return overload, _param_layout(list(argtypes)), tuple(built.block), (built.tile_m, built.tile_n), \
        built.dynamic_smem


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
    from .pipelines._dispatch import matrix_of
    from .pipelines._launch import _values

    dtype = np.dtype(op_a.dtype)
    mat_a, mat_b, mat_d = matrix_of(op_a), matrix_of(op_b), matrix_of(op_d)
    new_output = None if c_given else _output_factory(op_a.obj.device.id, (m, n), dtype)
    def rest(mat: Any) -> tuple:
        return (mat.rows, mat.cols, mat.ld, mat.arrangement, mat.itemsize)

    entry = _KeptCall(call, m, n, k, dtype.type, rest(mat_a), rest(mat_b), rest(mat_d), c_given and beta != 0,
                           _values(tuple(bound.args[1:])), tuple(bound.reads), tuple(bound.writes), new_output)
    if entry.head(alpha, beta, mat_d) != _values((bound.args[0],)):
        return
    if len(_entries) >= _MAX_ENTRIES:
        _entries.clear()
    _entries[key] = entry
