"""The checks every entry point shares: backend names and the dtypes each computes, scalars.

``dxgemm.gemm``, its batched form and ``dxgemm.grouped_gemm`` accept the same backends and
scalars and raise the same errors for them, from here.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from . import _arrays, policy
from ._arrays import as_operand
from .kernels._device import SIMULATOR
from .kernels.tf32mma import smem_bytes
from .kernels.tf32wgmma import most_smem_bytes as wgmma_smem_bytes
from .runtime import env
from .kernels import RUNGS

BACKENDS: tuple[str, ...] = RUNGS + ("tf32mma", "tf32wgmma", "pipeline")
"""Names ``backend=`` accepts besides ``"auto"``: the handwritten rungs, slowest first, then
``"tf32mma"`` (float32 on the TF32 tensor cores, :mod:`dxgemm.kernels.tf32mma`), ``"tf32wgmma"``
(the same on Hopper's ``wgmma``, :mod:`dxgemm.kernels.tf32wgmma`) and ``"pipeline"`` (cuBLASDx
device pipeline on tensor cores, :mod:`dxgemm.pipelines`)."""

ONE_MATRIX_BACKENDS: tuple[str, ...] = ("pipeline",)
"""Backends that take one GEMM a launch: batched and grouped calls refuse them."""


def check_one_matrix(backend: str, what: str, unit: str = "matrix") -> None:
    """ValueError when a batched or grouped call (``what``, made of such units) names a backend of
    one GEMM a launch."""
    if backend in ONE_MATRIX_BACKENDS:
        raise ValueError(f"backend={backend!r} takes one {unit} per launch; {what} runs on the handwritten "
                         "kernels: use backend='auto', 'warptile', 'tf32mma' or 'tf32wgmma'")

BACKEND_DTYPES: dict[str, tuple[np.dtype, ...]] = {
    name: (np.dtype(np.float32),) if name in policy.TF32_BACKENDS else (np.dtype(np.float32), np.dtype(np.float64))
    for name in BACKENDS}
"""The dtypes each backend computes (``"tf32mma"`` is float32 only)."""


def check_scalar(value: Any, name: str) -> Any:
    """``value`` if it is a real number (Python or NumPy scalar; a 0-d NumPy array of a real dtype
    becomes its scalar), else TypeError."""
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf":
        value = value[()]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        kind = f"a {value.ndim}-d array of {value.dtype}" if isinstance(value, np.ndarray) else type(value).__name__
        raise TypeError(f"{name} must be a real number (a Python or NumPy scalar, or a 0-d array of a real dtype), "
                        f"got {kind}")
    return value


def check_backend(backend: Any) -> str:
    if backend != "auto" and backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose 'auto' or one of {', '.join(BACKENDS)}")
    return backend


def check_extra(op: Any, name: str, dtype: np.dtype, device: int) -> Any:
    """``op`` (a validated epilogue matrix: C, a store target) if it has the GEMM's dtype and
    lives on its GPU, else TypeError / ValueError naming ``name``."""
    if op.dtype != dtype:
        raise TypeError(f"{name} has dtype {op.dtype}; it must match a and b ({dtype})")
    if _arrays.device_of(op) != device:
        raise ValueError(f"{name} is on GPU {_arrays.device_of(op)} but a and b are on GPU {device}")
    return op


def check_pair(op_a: Any, op_b: Any) -> tuple[int, int, int]:
    """``(m, n, k)`` of validated operands A and B, if their dtypes and inner dimensions agree."""
    if op_a.dtype != op_b.dtype:
        raise TypeError(f"a and b must have the same dtype, got a: {op_a.dtype} and b: {op_b.dtype}")
    (m, k), (k_b, n) = op_a.shape, op_b.shape
    if k != k_b:
        raise ValueError(f"inner dimensions differ: a is {m}x{k}, b is {k_b}x{n} (a.shape[1] must equal b.shape[0])")
    return m, n, k


def output_operand(c: Any, op_a: Any, op_b: Any, device: int) -> tuple[Any, Any]:
    """``(D, what the call returns)``: a new row-major matrix of A's library without ``c``, else
    ``c`` validated as the output of ``A @ B`` (shape, dtype, device, no overlap with A or B)."""
    (m, k), n = op_a.shape, op_b.shape[1]
    if c is None:
        out = _arrays.empty_like_library(op_a, (m, n))
        return as_operand(out, "c", output=True), out
    op_d = as_operand(c, "c", output=True)
    if op_d.shape != (m, n):
        raise ValueError(f"c has shape {op_d.shape}; a {m}x{k} times b {k}x{n} needs c of shape ({m}, {n})")
    if op_d.dtype != op_a.dtype:
        raise TypeError(f"c has dtype {op_d.dtype}, but a and b are {op_a.dtype}; c must match them")
    if _arrays.device_of(op_d) != device:
        raise ValueError(f"c is on GPU {_arrays.device_of(op_d)} but a and b are on GPU {device}")
    _arrays.check_output_overlap(op_d, (("a", op_a), ("b", op_b)))
    return op_d, c


def check_rung_fits(backend: str, precision: str | None, info: Any, device: int) -> None:
    """ValueError when ``backend`` is the TF32 rung and GPU ``device`` (``info``: its
    :class:`~dxgemm.gpus.DeviceInfo`) cannot run it (:func:`dxgemm.policy.tf32_rung_fits`)."""
    if backend == "tf32wgmma":
        if SIMULATOR or not policy.tf32_wgmma_fits(info):
            where = "Numba's CUDA simulator" if SIMULATOR else (
                f"GPU {device} ({info.cc[0]}.{info.cc[1]}, {info.smem_per_block} bytes of shared memory per block"
                f"{', the figures DXGEMM_DEVICE_AS names' if env.device_as() else ''})")
            raise ValueError(f"backend='tf32wgmma' issues Hopper's wgmma: it needs compute capability 9.0 and "
                             f"{wgmma_smem_bytes()} bytes of shared memory per block, and cannot "
                             f"run on {where}: use backend='auto' or 'tf32mma'")
        return
    if backend in policy.TF32_BACKENDS and not policy.tf32_rung_fits(info.cc, info.smem_per_block, precision):
        raise ValueError(f"backend={backend!r} needs compute capability 8.0 and "
                         f"{smem_bytes(policy.tf32_smallest_tile(precision))} bytes of shared memory per block; "
                         f"GPU {device} has "
                         f"{info.cc[0]}.{info.cc[1]} and {info.smem_per_block}"
                         f"{' (the figures DXGEMM_DEVICE_AS names)' if env.device_as() else ''}: "
                         "use backend='auto' or 'warptile'")
