"""CPU emulations of float32 GEMM methods, to test the accuracy rule against known behaviour.

Each takes float32 ``a`` (``m x k``) and ``b`` (``k x n``) and returns float32 ``m x n``; the
loops run over K with the whole ``m x n`` tile vectorised, so keep ``m`` and ``n`` small
(8 x 8 at K = 16384 runs in well under a second).

* :func:`float32_sum`: one running float32 sum per output, each product added with one
  rounding to nearest (a fused multiply-add: the float32 product is exact in float64, the
  sum is rounded to float32 once — up to a rare double rounding through float64).
* :func:`bfloat16_inputs`: the same sum over inputs first rounded to bfloat16 (8 bits).
* :func:`tf32x3`: the 3xTF32 split (``hi = round_tf32(x)``, ``lo = round_tf32(x - hi)``;
  ``A3 = [lo(A) | hi(A) | hi(A)]``, ``B3 = [hi(B); lo(B); hi(B)]``, as
  :mod:`dxgemm.pipelines.tf32x3` lays them out) summed in steps of ``step`` (8: one
  ``k8`` tensor-core instruction): each step adds its exact products to the float32
  accumulator and rounds the sum once, to nearest (``accumulate="round"``) or toward zero
  (``"truncate"``, what the tensor cores' float32 accumulation does).
"""

from __future__ import annotations

import numpy as np


def round_tf32(x: np.ndarray) -> np.ndarray:
    """float32 ``x`` rounded to TF32 (10 explicit mantissa bits), ties away from zero; inf/NaN pass."""
    u = np.asarray(x, np.float32).view(np.uint32)
    finite = (u & 0x7F800000) != 0x7F800000
    return np.where(finite, (u + 0x1000) & 0xFFFFE000, u).astype(np.uint32).view(np.float32)


def round_bfloat16(x: np.ndarray) -> np.ndarray:
    """float32 ``x`` rounded to bfloat16 (7 explicit mantissa bits), to nearest even; inf/NaN pass."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    finite = (u & 0x7F800000) != 0x7F800000
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return np.where(finite, rounded, u).astype(np.uint32).view(np.float32)


def to_float32_toward_zero(x: np.ndarray) -> np.ndarray:
    """float64 ``x`` rounded to float32 toward zero (truncation)."""
    near = x.astype(np.float32)
    over = np.abs(near.astype(np.float64)) > np.abs(x)
    return np.where(over, np.nextafter(near, np.float32(0)), near)


def _steps(a: np.ndarray, b: np.ndarray, step: int, accumulate: str) -> np.ndarray:
    if accumulate not in ("round", "truncate"):
        raise ValueError(f"accumulate must be 'round' or 'truncate', got {accumulate!r}")
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for k0 in range(0, a.shape[1], step):
        total = acc.astype(np.float64) + a64[:, k0:k0 + step] @ b64[k0:k0 + step]
        if accumulate == "truncate":
            acc = to_float32_toward_zero(total)
        else:
            acc = total.astype(np.float32)
    return acc


def float32_sum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One running float32 sum per output, one rounding to nearest per product (FMA)."""
    return _steps(np.asarray(a, np.float32), np.asarray(b, np.float32), 1, "round")


def bfloat16_inputs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """:func:`float32_sum` of the inputs rounded to bfloat16."""
    return float32_sum(round_bfloat16(a), round_bfloat16(b))


def tf32_split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(hi, lo)`` with ``hi = round_tf32(x)``, ``lo = round_tf32(x - hi)`` (``x - hi`` is exact in float32)."""
    x = np.asarray(x, np.float32)
    hi = round_tf32(x)
    lo = round_tf32(x - hi)
    return hi, lo


def tf32x3(a: np.ndarray, b: np.ndarray, *, accumulate: str = "round", step: int = 8) -> np.ndarray:
    """The 3xTF32 method (module docstring): ``accumulate="truncate"`` models the tensor cores."""
    a_hi, a_lo = tf32_split(a)
    b_hi, b_lo = tf32_split(b)
    a3 = np.concatenate([a_lo, a_hi, a_hi], axis=1)
    b3 = np.concatenate([b_hi, b_lo, b_hi], axis=0)
    return _steps(a3, b3, step, accumulate)
