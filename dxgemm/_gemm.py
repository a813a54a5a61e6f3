"""``dxgemm.gemm``: validate -> bind the epilogue -> decide (:mod:`.policy`) -> launch (:mod:`.runtime`).

This module owns the public contract (what is accepted, what each mistake raises) and the
order of the steps; the rules live in :mod:`dxgemm.policy`, the kernels' caches, launches
and split-K in :mod:`dxgemm.runtime`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _arrays, policy
from ._arrays import Operand, as_operand
from ._batched import batched_gemm
from ._checks import (BACKEND_DTYPES, BACKENDS, check_backend, check_extra, check_pair, check_rung_fits,
                      check_scalar, output_operand)
from ._streams import stream_handle
from .epilogues._base import AlphaBeta, Chain, Epilogue, EpilogueContext
from .kernels import FLAG_VEC_A, FLAG_VEC_B, RUNGS, KernelSpec, vector_flags
from .kernels._device import SIMULATOR
from .runtime import calls as _calls
from .runtime import env
from .runtime import pipeline as _pipeline
from .runtime.device import device_info, gpu_usable
from .runtime.launch import flat_values, matrix_of
from .runtime.rungs import rung_call
from .runtime.splitk import SimulatedCall, launch_simulated, rung_serial_split, rung_split

def gemm(
    a: Any,
    b: Any,
    c: Any = None,
    *,
    alpha: float = 1.0,
    beta: float = 0.0,
    epilogue: Epilogue | None = None,
    backend: str = "auto",
    precision: str | None = None,
    stream: Any = None,
) -> Any:
    """``D = epilogue(alpha * A @ B + beta * C)`` on the GPU, in one kernel.

    Args:
        a: ``(m, k)`` device matrix (CuPy array, PyTorch CUDA tensor, Numba device array,
            or anything with ``__cuda_array_interface__`` / CUDA DLPack), float32 or float64,
            row-major, column-major or a strided view of either.
        b: ``(k, n)`` device matrix of the same dtype and device.
        c: optional ``(m, n)`` matrix.  When given, the result is written into ``c`` and
            ``c`` is returned; it is read only when ``beta != 0`` (BLAS semantics: with
            ``beta == 0`` NaN in ``c`` does not leak).  ``beta != 0`` needs ``c``.  It must have unit stride in one
            dimension and must not overlap ``a`` or ``b``.
        alpha, beta: real scalars (Python or NumPy, or 0-d arrays of a real dtype), applied in
            the matrices' dtype.
        epilogue: an :class:`~dxgemm.epilogues.Epilogue` (or a chain ``e1 | e2``) applied
            to every element in registers after alpha/beta, before the single store.
        backend: ``"auto"`` (the fastest available for the dtype and shape) or one of
            :data:`BACKENDS`.  ``"auto"`` and ``"pipeline"`` run a single-row problem
            (``m == 1``) on :mod:`dxgemm.kernels.gemv`, which streams B once; ``"auto"``
            runs a single-column one (``n == 1``) there too, streaming A once.
        precision: float32 only (:data:`dxgemm.policy.PRECISIONS`): ``"tf32x3"`` (the
            default: float32 accuracy on the TF32 tensor cores, within twice cuBLAS SGEMM's
            error), ``"tf32"`` (one TF32 pass: TF32 speed and accuracy) or ``"ieee"``
            (float32 FMA on the SIMT units).  float64 takes None or ``"ieee"``.  A backend
            named explicitly takes only the precisions it computes (see the guide).
        stream: the stream to launch on; default the current stream of ``a``'s library.

    Returns:
        ``c`` when given, otherwise a new row-major ``(m, n)`` matrix of ``a``'s library.

    Raises:
        TypeError: host arrays, unsupported or mixed dtypes, a non-epilogue ``epilogue``, a
            ``custom`` epilogue function Numba cannot compile (raised before anything runs).
        ValueError: non-2-D inputs, mismatched shapes, arrays on different devices, an
            output overlapping an input, an unknown backend, ``beta != 0`` without ``c``, a
            precision the dtype or the backend does not compute.
    """
    key, addresses = _calls.probe(a, b, c, alpha, beta, epilogue, backend, precision)
    repeat = _calls.lookup(key)
    if repeat is not None:  # same signature as an earlier call: its decisions hold
        return repeat.run(a, b, c, alpha, beta, stream, addresses)
    if _arrays.ndim_of(a) > 2 or _arrays.ndim_of(b) > 2 or (c is not None and _arrays.ndim_of(c) > 2):
        if epilogue is not None and not isinstance(epilogue, Epilogue):
            raise TypeError(f"epilogue must be a dxgemm.epilogues.Epilogue (e.g. epilogues.relu()), got "
                            f"{type(epilogue).__name__}")
        return batched_gemm(a, b, c, alpha, beta, epilogue, backend, precision, stream, key, addresses)
    op_a = as_operand(a, "a")
    op_b = as_operand(b, "b")
    m, n, k = check_pair(op_a, op_b)
    dtype = op_a.dtype
    alpha = check_scalar(alpha, "alpha")
    beta = check_scalar(beta, "beta")
    if c is None and beta != 0:
        raise ValueError(f"beta={beta!r} scales c, but no c was given: pass c (the (m, n) matrix beta multiplies, "
                         "which receives the result) or leave beta at 0")
    if epilogue is not None and not isinstance(epilogue, Epilogue):
        raise TypeError(
            f"epilogue must be a dxgemm.epilogues.Epilogue (e.g. epilogues.relu()), got {type(epilogue).__name__}"
        )
    backend = check_backend(backend)
    precision = policy.resolve_precision(dtype, backend, precision)
    explicit_pipeline = backend == "pipeline"

    device = _arrays.device_of(op_a)
    if _arrays.device_of(op_b) != device:
        raise ValueError(f"a is on GPU {device} but b is on GPU {_arrays.device_of(op_b)}; put both on one device")
    op_d, out = output_operand(c, op_a, op_b, device)
    if m == 0 or n == 0:
        return out

    ctx = EpilogueContext(m, n, dtype, adapt=lambda arr, name: _adapt_extra(arr, name, dtype, device, (m, n)),
                          device=device, inputs=(op_a, op_b), output=op_d)
    chain = Chain((AlphaBeta(alpha, beta, c if c is not None else None),) + (epilogue.stages if epilogue else ()))
    bound = chain.bind(ctx)
    handle = stream_handle(stream, op_a.library)
    if (m == 1 and backend in ("auto", "pipeline")) or (backend == "auto" and policy.gemv_column(m, n)):
        backend = "gemv"  # one output row or column: no reuse to tile for (dxgemm.kernels.gemv)
    flags = vector_flags(op_a.ptr, op_a.ld, op_b.ptr, op_b.ld, dtype.itemsize)
    traits = policy.EpilogueTraits.of(chain)
    with _arrays.on_device(device):  # choose, load and launch on the arrays' GPU
        info = device_info(device)
        check_rung_fits(backend, precision, info, device)
        chosen = backend == "auto"
        if backend == "auto":
            backend = policy.choose_backend(dtype, m, n, k, pipeline=_pipeline_reason(device) is None,
                                            aligned=flags == FLAG_VEC_A | FLAG_VEC_B,
                                            transcendental=traits.transcendental,
                                            medium_min_k=traits.medium_tile_min_k, device=info,
                                            precision=precision)
        if backend == "pipeline":
            mat_a, mat_b, mat_d = matrix_of(op_a), matrix_of(op_b), matrix_of(op_d)
            try:
                call = _pipeline.prepare(dtype, (mat_a.arrangement, mat_b.arrangement), m, n, k, bound, device,
                                         d_arrangement=mat_d.arrangement,
                                         precision="tf32" if precision == "tf32" else None)
            except _pipeline.PipelineUnavailable as e:
                if explicit_pipeline:
                    raise ValueError(f"backend='pipeline' cannot run this call: {e}") from None
                call = None
                backend = "warptile"
            if call is not None:
                call(mat_a, mat_b, mat_d, m, n, k, bound.args, handle)
                _calls.remember(key, call, op_a, op_b, op_d, (a, b), m, n, k, bound, alpha, beta, c is not None,
                                addresses=addresses)
                return out
        if backend == "tf32mma" and chosen:
            backend, tile = policy.choose_tf32_rung(precision, m, n, k, info, wgmma=not SIMULATOR)
        elif backend == "tf32wgmma":
            tile = precision  # one tile a precision, never split
        elif backend == "tf32mma":
            tile = policy.choose_tf32_tile(precision, m, n, k, info)
        else:
            tile = policy.choose_tile(backend, dtype, m, n, k, info, traits.medium_tile_min_k, precision)
        slices = policy.choose_split_k(backend, dtype, m, n, k, tile, info)
        spec = KernelSpec(dtype, op_a.layout, op_b.layout, op_d.layout, bound.key, None, tile=tile)
        forced = env.split_reduce()
        serial = slices > 1 and (forced == "serial" if forced else policy.split_sum_serial(m, n, slices))
        if SIMULATOR and slices > 1:  # nothing is compiled: Numba's simulated launches, not kept
            launch_simulated(backend, spec, op_a, op_b, op_d, m, n, k, flags, bound, slices,
                             policy.split_part_tile(backend, tile, m, n, dtype), serial=serial)
            return out
        if SIMULATOR:  # Numba's simulated launch from addresses, as the packed launch on a GPU
            call = SimulatedCall(backend, spec, bound)
        elif serial:
            call = rung_serial_split(backend, spec, bound, device, slices,
                                     policy.split_part_tile(backend, tile, m, n, dtype), m, n, handle)
        elif slices > 1:
            call = rung_split(backend, spec, bound, device, slices, policy.split_part_tile(backend, tile, m, n, dtype))
        else:
            call = rung_call(backend, spec, bound, device)
        call(matrix_of(op_a), matrix_of(op_b), matrix_of(op_d), m, n, k, flat_values(bound.args), handle)
        _calls.remember(key, call, op_a, op_b, op_d, (a, b), m, n, k, bound, alpha, beta, c is not None,
                        pipeline=False, addresses=addresses, split=slices > 1)
        return out


def available_backends(device: int = 0) -> tuple[str, ...]:
    """The members of :data:`BACKENDS` that can run on GPU ``device``: none without a usable CUDA
    driver and GPU (outside Numba's simulator, which runs every rung); ``"pipeline"`` only on an
    sm_90 GPU with cuda.core, outside the simulator; ``"tf32mma"`` where
    :func:`dxgemm.policy.tf32_rung_fits` (and under the simulator); ``"tf32wgmma"`` where
    :func:`dxgemm.policy.tf32_wgmma_fits`, outside the simulator.  Under ``DXGEMM_DEVICE_AS``
    both are judged for the GPU it names (:func:`dxgemm.runtime.device.device_info`).  Test suites parametrize over this with :data:`BACKEND_DTYPES`."""
    if not gpu_usable(device):
        return ()
    info = device_info(device)
    tf32 = ("tf32mma",) if policy.tf32_rung_fits(info.cc, info.smem_per_block) else ()
    wgmma = ("tf32wgmma",) if not SIMULATOR and policy.tf32_wgmma_fits(info) else ()
    return RUNGS + tf32 + wgmma + (("pipeline",) if _pipeline.availability(device) is None else ())


def _pipeline_reason(device: int) -> str | None:
    """Why ``auto`` may not pick the pipeline on ``device`` (None when it may); imports no nvmath.

    ``DXGEMM_AUTO_PIPELINE=0`` keeps ``auto`` on the handwritten rungs (no pipeline compile
    behind the caller's back, e.g. in a test suite); ``backend="pipeline"`` still works.
    ``DXGEMM_DEVICE_AS`` naming a GPU without the pipeline keeps both off it (testing the
    path such a GPU takes).
    """
    if not env.auto_pipeline():
        return "DXGEMM_AUTO_PIPELINE=0"
    return _pipeline.availability(device)


def _adapt_extra(arr: Any, name: str, dtype: np.dtype, device: int, shape: tuple[int, int] | None) -> Operand:
    return check_extra(as_operand(arr, name, output=True), name, dtype, device)
