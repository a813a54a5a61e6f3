"""What a fused GEMM with an epilogue should return, in float64, and how far off it may be.

This extends the GEMM accuracy rule of :mod:`dxgemm.testing` through the chain, stage by
stage, and is the one place that rule is written for epilogues (tests, benchmarks and
examples use it).  With ``x`` the float64 reference entering a stage, ``y = f(x)`` the one
leaving it and ``e`` the admissible error of ``x``::

    e_out = L_f * e + ROUNDING_ULPS * u * (|x| + |y|)

``L_f`` is the stage's Lipschitz bound (how much it may amplify the error already there:
1 for bias/relu/clamp/tanh, 1.129 for GELU, 0.25 for sigmoid, ``|s|`` for scale); the
second term is the stage's own rounding in the dtype with unit round-off ``u``.  Eight
units cover libdevice's single-precision ``expf``/``tanhf``/``exp2f`` and the approximate
division float32 sigmoid/SiLU/tanh-GELU use (at most 2 ulp each, CUDA C++ Programming
Guide, "Mathematical Functions"), float32 GELU's fitted polynomial
(within 3 units of ``|x|``, ``tools/gelu_fit.py``), the handful of roundings in a
stage's formula and the cast of its scalar parameter to the dtype; measuring against
``|x| + |y|`` rather than ``|y|`` absorbs the cancellation in ``1 + erf(x)`` for negative
``x``.  A ``store`` stage checks its target against the reference at that point of the
chain.  A ``custom`` function's Lipschitz bound is unknown to dxgemm: the caller states it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import testing
from ._base import Epilogue
from ._device_arrays import to_xp  # noqa: F401  (part of this module's interface)
from ._operands import Store

ROUNDING_ULPS = 8


@dataclass
class Expected:
    """The float64 reference of D, its admissible error, and the same for every ``store`` target."""

    value: Any
    bound: Any
    stores: list = field(default_factory=list)  # (target array, reference, bound)


def expected(epilogue: Epilogue | None, a: Any, b: Any, dtype: np.dtype, *, alpha: float = 1.0, beta: float = 0.0,
             c: Any = None, custom_lipschitz: float | None = None, split: int = 1) -> Expected:
    """Reference and bound of ``epilogue(alpha * a @ b + beta * c)`` computed in ``dtype``.

    ``a``, ``b``, ``c`` are float64 NumPy or CuPy arrays (the operands' values); ``split=3``
    starts from the 3xTF32 GEMM's bound (:func:`dxgemm.testing.error_bound`).
    """
    xp = testing._xp(a)
    x = testing.reference(a, b, alpha=alpha, beta=beta, c=c)
    bound = testing.error_bound(a, b, dtype, alpha=alpha, beta=beta, c=c, split=split)
    u = float(np.finfo(dtype).eps) / 2
    stores = []
    for stage in epilogue.stages if epilogue is not None else ():
        if isinstance(stage, Store):
            stores.append((stage.out, x, bound))
            continue
        lipschitz = stage.lipschitz if stage.lipschitz is not None else custom_lipschitz
        if lipschitz is None:
            raise ValueError(f"{stage!r} has no known Lipschitz bound; pass custom_lipschitz")
        y = stage._reference(x, xp)
        bound = lipschitz * bound + ROUNDING_ULPS * u * (xp.abs(x) + xp.abs(y))
        x = y
    return Expected(x, bound, stores)


def check(result: Any, epilogue: Epilogue | None, a: Any, b: Any, dtype: np.dtype, **kwargs: Any) -> float:
    """Worst ratio of error to its bound over ``result`` and every ``store`` target (``<= 1`` passes; NaN fails)."""
    xp = testing._xp(a)
    exp = expected(epilogue, a, b, dtype, **kwargs)
    pairs = [(to_xp(result, xp), exp.value, exp.bound)] + [(to_xp(t, xp), r, e) for t, r, e in exp.stores]
    worst = 0.0
    for got, ref, bound in pairs:
        if got.shape != ref.shape:
            raise AssertionError(f"result has shape {got.shape}, expected {ref.shape}")
        if not got.size:
            continue
        ratio = xp.abs(got.astype(np.float64) - ref) / bound
        if bool(xp.isnan(ratio).any()):
            return float("nan")
        worst = max(worst, float(ratio.max()))
    return worst


def assert_close(result: Any, epilogue: Epilogue | None, a: Any, b: Any, dtype: np.dtype, **kwargs: Any) -> None:
    """Raise ``AssertionError`` unless :func:`check` passes."""
    worst = check(result, epilogue, a, b, dtype, **kwargs)
    if not worst <= 1.0:
        raise AssertionError(f"error exceeds the epilogue-propagated bound by a factor {worst:.3g}")
