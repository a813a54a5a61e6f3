"""The checks every entry point shares: backend names and the dtypes each computes, scalars.

``dxgemm.gemm``, its batched form and ``dxgemm.grouped_gemm`` accept the same backends and
scalars and raise the same errors for them, from here.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from . import _arrays, policy
from .kernels import RUNGS

BACKENDS: tuple[str, ...] = RUNGS + ("tf32mma", "pipeline")
"""Names ``backend=`` accepts besides ``"auto"``: the handwritten rungs, slowest first, then
``"tf32mma"`` (float32 on the TF32 tensor cores, :mod:`dxgemm.kernels.tf32mma`) and
``"pipeline"`` (cuBLASDx device pipeline on tensor cores, :mod:`dxgemm.pipelines`)."""

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
