"""Fused epilogues: functions of the accumulator applied in registers before the single store.

``gemm(a, b, epilogue=bias(v) | gelu())`` computes ``gelu(a @ b + v)`` in one kernel.
Stages compose with ``|`` and apply left to right, after ``alpha``/``beta``:

* :func:`bias` — add a vector per column (``(n,)``, ``(1, n)``) or per row (``(m, 1)``);
* :func:`relu`, :func:`leaky_relu`, :func:`gelu`, :func:`silu`, :func:`sigmoid`,
  :func:`tanh` — activations; :func:`clamp`, :func:`scale` — bounds and scaling;
* :func:`custom` — your own Python function of ``(x, row, col, *arrays)``;
* :func:`store` — write the value at that point of the chain to an extra matrix.

Values (bias vectors, slopes, bounds, arrays) are run-time arguments: changing them never
recompiles.  Structure (which stages, the code of a custom function) is compile-time.
See :mod:`dxgemm.epilogues._base` for the protocol every backend implements.
"""

from ._base import AlphaBeta, BoundEpilogue, Chain, Epilogue, EpilogueContext
from ._custom import PrecisionWarning, custom, stable_key
from ._operands import bias, store
from ._pointwise import clamp, gelu, leaky_relu, relu, scale, sigmoid, silu, tanh

__all__ = [
    "bias", "relu", "leaky_relu", "gelu", "silu", "sigmoid", "tanh", "clamp", "scale", "custom", "store",
    "stable_key", "PrecisionWarning",
    "Epilogue", "Chain", "AlphaBeta", "BoundEpilogue", "EpilogueContext",
]
