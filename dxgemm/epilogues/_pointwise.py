"""Stages that are a function of the value alone: activations, ``clamp`` and ``scale``.

Each stage is written once as a device function factory of the accumulator's scalar type
``t`` (``numpy.float32`` or ``numpy.float64``).  Every literal the math needs is a closure
constant cast with ``t`` (``half = t(0.5)``): Numba types a bare ``0.5`` as float64, and a
float32 value multiplied by it would silently run in float64 on the FP64 units, which on
most GPUs are many times slower than the FP32 ones.  ``math.erf``/``math.exp``/``math.tanh``
/``math.exp2`` on a float32 value lower to libdevice's single-precision functions.  The
float32 forms of GELU, tanh-GELU, SiLU and sigmoid are rewritten around one ``exp2`` (and,
for the last three, an approximate division) because in a fused GEMM the epilogue's
instructions compete with the main loop's for issue slots: each SASS instruction per
element is visible in the kernel's time at shallow K.  In float64 the epilogue shares
the FP64 pipe with the DMMA main loop, and ptxas overlaps independent outputs only on
straight-line code, so float64 tanh-GELU, SiLU and sigmoid share one quotient with an
``exp`` and an approximate reciprocal of their own and no branch, and the float64 exact
GELU has its own ``2**t`` (no float64<->float32 conversions).

Scalar parameters (``slope``, ``lo``/``hi``, ``s``) are run-time arguments, cast to the
accumulator's dtype at bind time, so a new value reuses the compiled kernel.  What changes
the generated code (the stage, ``gelu``'s approximation) is the key.

Every stage also states, for the accuracy checks (:mod:`dxgemm.epilogues.reference`), its
float64 reference and a Lipschitz bound, how much it may amplify an error in its input.
NaN passes through every stage, as in PyTorch: comparisons are written so that a NaN input
takes the branch that returns it.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable

import numpy as np
from numba import cuda

from ..kernels._device import (bits_of, divide_approx, double_of, exp2_approx, fma, low_word, rcp_approx64,
                               times_pow2)
from ._base import BoundEpilogue, Epilogue, EpilogueContext


def real_parameter(value: Any, name: str, stage: str) -> float:
    """``value`` as a float, or a ``TypeError``/``ValueError`` naming the parameter."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{stage}: {name} must be a real number, got {value!r} of type {type(value).__name__}")
    value = float(value)
    if math.isnan(value):
        raise ValueError(f"{stage}: {name} must not be NaN")
    return value


LOG2E = math.log2(math.e)


class Pointwise(Epilogue):
    """Base of stages computing ``f(value)`` with run-time scalar parameters.

    Subclasses set ``params`` (name -> float, in argument order), optionally ``variant``
    (compile-time structure, part of the key) and implement :meth:`_device`,
    :meth:`_reference` and :attr:`lipschitz`.
    """

    params: dict[str, float] = {}
    variant: tuple = ()

    @property
    def name(self) -> str:
        return type(self).stage_name

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{type(self).stage_name}({inner})"

    def bind(self, ctx: EpilogueContext) -> BoundEpilogue:
        t = ctx.dtype.type
        args = tuple(t(v) for v in self.params.values())
        variant = self.variant
        factory = type(self)._device
        key = (self.name,) + variant + (ctx.dtype.name,) + self._formula(ctx.dtype)
        return BoundEpilogue(key, args, lambda: factory(t, *variant))

    def _formula(self, dtype: np.dtype) -> tuple:
        """A tag for the key when the device code for ``dtype`` was rewritten (so only its kernels rebuild)."""
        return ()

    @staticmethod
    def _device(t: type, *variant: Any) -> Callable:
        """Device function ``f(value, row, col, args)`` for scalar type ``t``; depends only on the key."""
        raise NotImplementedError

    def _reference(self, x: Any, xp: Any) -> Any:
        """The stage applied to the float64 array ``x`` with NumPy or CuPy (``xp``)."""
        raise NotImplementedError

    @property
    def lipschitz(self) -> float:
        """A bound on ``|f(x) - f(y)| / |x - y|``: how much the stage may amplify an input error."""
        return 1.0


class ReLU(Pointwise):
    """``max(x, 0)``."""

    stage_name = "relu"
    transcendental = False

    @staticmethod
    def _device(t):
        zero = t(0)

        @cuda.jit(device=True)
        def relu(value, row, col, args):
            return zero if value < zero else value

        return relu

    def _reference(self, x, xp):
        return xp.where(x < 0, 0.0, x)


class LeakyReLU(Pointwise):
    """``x`` for ``x >= 0``, ``slope * x`` below."""

    stage_name = "leaky_relu"
    transcendental = False

    def __init__(self, slope: float):
        self.params = {"slope": real_parameter(slope, "slope", "leaky_relu")}

    @staticmethod
    def _device(t):
        zero = t(0)

        @cuda.jit(device=True)
        def leaky_relu(value, row, col, args):
            return args[0] * value if value < zero else value

        return leaky_relu

    def _reference(self, x, xp):
        return xp.where(x < 0, self.params["slope"] * x, x)

    @property
    def lipschitz(self) -> float:
        return max(1.0, abs(self.params["slope"]))


class GELU(Pointwise):
    """``x * Phi(x)`` (``approximate="none"``), or PyTorch's tanh approximation (``"tanh"``)."""

    stage_name = "gelu"

    def __init__(self, approximate: str):
        if approximate not in ("none", "tanh"):
            raise ValueError(f"gelu: approximate must be 'none' (exact, erf) or 'tanh', got {approximate!r}")
        self.params = {}
        self.variant = (approximate,)

    @property
    def name(self) -> str:
        return "gelu" if self.variant == ("none",) else "gelu_tanh"

    def __repr__(self) -> str:
        return "gelu()" if self.variant == ("none",) else "gelu(approximate='tanh')"

    @property
    def wide_walk(self) -> bool:  # type: ignore[override]
        return self.variant == ("none",)  # a degree-9 Horner chain; the tanh form divides (Epilogue.wide_walk)

    @property
    def medium_tile_min_k(self) -> float:
        # both float64 forms are branch-free, and the medium tile, running its epilogue from shared
        # memory, leads at every K measured
        return 0.0

    def _formula(self, dtype: np.dtype) -> tuple:
        if dtype != np.float32:
            return ("q20-exp2-11-int",) if self.variant == ("none",) else ("sigmoid-exp11-rcp2",)
        return ("ex2ftz-poly9",) if self.variant == ("none",) else ("sigmoid-ex2ftz",)

    @staticmethod
    def _device(t, approximate):
        if approximate == "tanh":
            return _gelu_tanh(t)
        return _gelu_float32() if t is np.float32 else _gelu_float64()

    def _reference(self, x, xp):
        if self.variant == ("none",):  # x Phi(x) without 1 + erf's cancellation for negative x
            s = xp.minimum(xp.abs(x), 40.0)  # s Phi(-s) underflows to 0 from ~38 (and inf * 0 would be NaN)
            return xp.maximum(x, 0.0) - 0.5 * s * _erfc(s / math.sqrt(2), xp)
        return 0.5 * x * (1.0 + xp.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))

    @property
    def lipschitz(self) -> float:
        return 1.129  # max |d/dx| of both forms, at x = +-sqrt(2)


GELU_FLOAT32_POLY = (-0.9999999403953552, -1.1511082649230957, -0.45918184518814087, -0.052579525858163834,
                     0.007183723151683807, -0.00022157251078169793, -0.00015956530114635825,
                     3.800922422669828e-05, -3.83517590307747e-06, 1.524719976941924e-07)
"""``q(s) ~ log2(Phi(-s))`` on ``0 <= s <= 6``, lowest degree first: the float32 exact GELU's polynomial.

Fitted by ``tools/gelu_fit.py`` (weighted minimax, weight ``max(Phi(-s), 1e-3)``):
``|2**q(s) - Phi(-s)| <= 4.7e-8`` evaluated in float32, relative error below 2.5e-5
everywhere and 6e-6 for ``s < 3``."""

GELU_FLOAT32_TOP = 6.0
"""Where the float32 polynomial stops: beyond, ``s * Phi(-s) < 6e-9``."""


def _gelu_float32() -> Callable:
    """Exact GELU in float32 as ``relu(x) - s * Phi(-s)`` with ``s = min(|x|, 6)``, ``Phi(-s) = 2**q(s)``.

    ``x * Phi(x) = relu(x) - |x| * Phi(-|x|)`` for either sign, so one branch-free formula
    serves both and never subtracts nearly equal numbers: ``0.5 x (1 + erf(x / sqrt 2))``
    loses all relative accuracy for x below about -4, where ``1 + erf`` cancels.  The
    correction is a degree-9 polynomial and one ``exp2`` (``exp2_approx``, one ``MUFU.EX2``):
    13 SASS instructions against ~26 for libdevice's ``erff`` and its coefficient selects.  Clamping ``s`` at 6
    costs at most ``6 * Phi(-6) = 6e-9`` absolute, far inside the float32 rounding of ``x``.
    NaN passes through ``relu``; ``+inf`` gives ``+inf``.
    """
    t = np.float32
    c0, c1, c2, c3, c4, c5, c6, c7, c8, c9 = (t(c) for c in GELU_FLOAT32_POLY)
    top, zero = t(GELU_FLOAT32_TOP), t(0.0)

    @cuda.jit(device=True)
    def gelu(value, row, col, args):
        s = min(abs(value), top)
        q = ((((((((c9 * s + c8) * s + c7) * s + c6) * s + c5) * s + c4) * s + c3) * s + c2) * s + c1) * s + c0
        relu = zero if value <= zero else value  # NaN takes the else branch
        return relu - s * exp2_approx(q)

    return gelu


GELU_FLOAT64_POLY = (
    -1.1511040990721495, -0.45922409426408806, -0.05242119331202592, 0.006899128732684732,
    5.335303603602168e-05, -0.00030589304543987035, 7.52640646268627e-05, -2.359979981336737e-06,
    -4.070420047103477e-06, 1.2901682372234594e-06, -6.161864758524309e-08, -9.899906412421351e-08,
    4.871857106644805e-08, -1.3869078925579935e-08, 2.820824529221458e-09, -4.2983389646008636e-10,
    4.9152736073842286e-11, -4.113232560315563e-12, 2.3833218365871567e-13, -8.550433832872914e-15,
    1.4305196630312253e-16,
)
"""``P(s)`` with ``t(s) = s P(s) ~ log2(2 Phi(-s))`` on ``0 <= s <= 8.3``, lowest degree first: the float64
exact GELU's polynomial (``tools/gelu_fit.py --dtype float64``; weighted least squares with
Lawson's iteration, weight ``Phi(-s)``, in mpmath): ``|Phi(-s) * (t - log2(2 Phi(-s)))| < 4.4e-17``."""

GELU_FLOAT64_TOP = 8.3
"""Where the float64 polynomial stops: ``s * Phi(-s) < 5e-16`` beyond, below a unit of ``s``'s rounding."""

EXP2_FLOAT64_POLY = (
    1.0, 0.6931471805599453, 0.2402265069591016, 0.055504108664821625, 0.00961812910758719,
    0.0013333558146406436, 0.00015403530463808858, 1.5252733841601815e-05, 1.3215432492460394e-06,
    1.0178057064573359e-07, 7.074202020682214e-09, 4.455822025014915e-10,
)
"""``2**r`` on ``|r| <= 1 / 2``, lowest degree first (Chebyshev fit, mpmath): relative error 3e-18."""

EXP_FLOAT64_POLY = (
    1.0, 1.0, 0.5000000000000019, 0.1666666666666668, 0.04166666666648768, 0.008333333333319568,
    0.0013888888952424726, 0.00019841269890131665, 2.480148536466595e-05, 2.7557240828098965e-06,
    2.763268316490701e-07, 2.511007107635293e-08,
)
"""``exp(r)`` on ``|r| <= ln(2) / 2``, lowest degree first (fitted in mpmath): relative
error 1.6e-17.  The float64 logistic quotient's ``exp`` (:func:`_quotient_float64`)."""

EXPM1_FLOAT64_Q = (
    0.5, 0.1666666666666667, 0.04166666666666667, 0.008333333333326136, 0.0013888888888883748,
    0.00019841269874820627, 2.4801587325547743e-05, 2.7557255400206422e-06, 2.75572736431103e-07,
    2.5105217004720745e-08, 2.0914686968086876e-09,
)
"""``Q(r) = (expm1(r) - r) / r**2`` on ``|r| <= ln(2) / 2``, lowest degree first (Chebyshev fit in
mpmath, ``tools/fp64_activations.py --fit``): absolute error 1.4e-18.  float64
``tanh``'s ``expm1`` (:func:`_tanh_float64`)."""

TANH_FLOAT64_CLAMP = 22.0
"""float64 ``tanh`` clamps ``|x|`` here: ``tanh(22) = 1 - 1.6e-19`` rounds to 1."""

LN2_HI = float.fromhex("0x1.62e42fefa39efp-1")
LN2_LO = float.fromhex("0x1.abc9e3b39803fp-56")
"""``ln 2`` in two parts, ``LN2_HI`` its float64 rounding and ``LN2_LO`` the rest (within 6e-34)."""

EXP_FLOAT64_CLAMP = 708.0
"""The float64 quotient clamps ``|z|`` here: ``exp(708)`` and ``1 + exp(708)`` are finite, and
their reciprocal and ``exp(-708)`` are normal numbers (``rcp.approx.ftz`` flushes subnormals)."""

SHIFTER = 1.5 * 2.0**52
"""``t + SHIFTER`` rounds ``t`` to an integer held in the low word
(:func:`~dxgemm.kernels._device.low_word`)."""

_ABS_MASK = (1 << 63) - 1
_INF_BITS = 0x7FF0000000000000


@cuda.jit(device=True, inline="always")
def degree20_halves(s, c):
    """``c[0] + c[1] s + ... + c[20] s**20`` (a tuple of 21 coefficients) in even and odd halves,
    two chains of half the depth: the float64 exact GELU's ``P`` (:func:`_gelu_float64`)."""
    s2 = s * s
    even = fma(fma(fma(fma(fma(c[20], s2, c[18]), s2, c[16]), s2, c[14]), s2, c[12]), s2, c[10])
    even = fma(fma(fma(fma(fma(even, s2, c[8]), s2, c[6]), s2, c[4]), s2, c[2]), s2, c[0])
    odd = fma(fma(fma(fma(fma(c[19], s2, c[17]), s2, c[15]), s2, c[13]), s2, c[11]), s2, c[9])
    odd = fma(fma(fma(fma(odd, s2, c[7]), s2, c[5]), s2, c[3]), s2, c[1])
    return fma(odd, s, even)


@cuda.jit(device=True, inline="always")
def degree11_halves(r, c):
    """``c[0] + c[1] r + ... + c[11] r**11`` (a tuple of 12 coefficients) in even and odd halves:
    the float64 exact GELU's ``2**r`` (:data:`EXP2_FLOAT64_POLY`, :func:`_gelu_float64`) and the
    logistic quotient's ``exp(r)`` (:data:`EXP_FLOAT64_POLY`, :func:`_quotient_float64`)."""
    r2 = r * r
    even = fma(fma(fma(fma(fma(c[10], r2, c[8]), r2, c[6]), r2, c[4]), r2, c[2]), r2, c[0])
    odd = fma(fma(fma(fma(fma(c[11], r2, c[9]), r2, c[7]), r2, c[5]), r2, c[3]), r2, c[1])
    return fma(odd, r, even)


@cuda.jit(device=True, inline="always")
def degree10_halves(r, c):
    """``c[0] + c[1] r + ... + c[10] r**10`` (a tuple of 11 coefficients) in even and odd halves:
    float64 ``tanh``'s ``Q`` (:data:`EXPM1_FLOAT64_Q`, :func:`_tanh_float64`)."""
    r2 = r * r
    even = fma(fma(fma(fma(fma(c[10], r2, c[8]), r2, c[6]), r2, c[4]), r2, c[2]), r2, c[0])
    odd = fma(fma(fma(fma(c[9], r2, c[7]), r2, c[5]), r2, c[3]), r2, c[1])
    return fma(odd, r, even)


@cuda.jit(device=True, inline="always")
def reduce_ln2(z):
    """``(shifted, r)`` with ``z = j ln 2 + r``: ``j = round(z log2 e)`` in ``shifted``'s low word
    (the shifter trick, :func:`~dxgemm.kernels._device.low_word`) and ``|r| <= ln(2) / 2``, ``ln 2``
    in two parts (:data:`LN2_HI`, :data:`LN2_LO`)."""
    shifted = fma(z, LOG2E, SHIFTER)
    j = shifted - SHIFTER
    return shifted, fma(j, -LN2_LO, fma(j, -LN2_HI, z))


@cuda.jit(device=True, inline="always")
def reciprocal_float64(d):
    """``1 / d`` for a normal ``d`` with a normal reciprocal: ``rcp_approx64``'s ~20 bits and two
    Newton steps, within about a unit (no branch, where IEEE division has a slow path)."""
    y = rcp_approx64(d)
    y = fma(y, fma(-d, y, 1.0), y)
    return fma(y, fma(-d, y, 1.0), y)


def _gelu_float64() -> Callable:
    """Exact GELU in float64 as ``relu(x) - s * Phi(-s)``, ``s = min(|x|, 8.3)``, ``Phi(-s) = 2**t(s) / 2``.

    The float32 form's shape (:func:`_gelu_float32`) with double-precision parts: ``t(s) = s
    P(s)``, ``P`` of degree 20 (:data:`GELU_FLOAT64_POLY`), and ``2**t`` reduced to ``2**j
    2**r`` with ``j = round(t)`` (the shifter trick) and ``r = t - j`` (``|r| <= 1/2``; ``t``
    itself is never rounded: both are one FMA from ``s`` and ``P(s)``),
    ``2**r`` a degree-11 polynomial and ``2**(j - 1)`` an integer add to the exponent; both
    polynomials in even and odd halves, two chains of half the depth, for tiles with few warps
    per SM.  ``|x|``, the clamp and ``relu`` work on the bit pattern, on the integer pipe.
    37 FP64 instructions (sm_90 SASS) and no conversion, where ``0.5 x (1 + erf(x / sqrt
    2))`` with libdevice's ``erf`` took ~45 and three float64<->float32 conversions (a quarter
    of the FP64 rate each) for its own ``exp``: in a fused float64 GEMM the epilogue's FP64
    instructions share one pipe with the DMMA main loop (measured: ``docs/performance.md``), so
    each of them shows.  What matters is ``Phi(-s)``'s absolute error (it is multiplied by ``s
    <= |x|``): at most 0.8 units of ``|x| + |y|`` over ``[-9, 9]`` with exact FMA rounding
    (``tools/gelu_fit.py --dtype float64 --check``), and no cancellation for negative
    ``x``, where ``1 + erf`` loses digits.  NaN stays NaN (``s`` carries it); ``+inf`` gives
    ``+inf`` and ``-inf`` gives ``-8.3 Phi(-8.3)``, about ``-4e-16``.
    """
    poly, exp2_poly = GELU_FLOAT64_POLY, EXP2_FLOAT64_POLY
    top, shifter = GELU_FLOAT64_TOP, SHIFTER
    top_bits, inf_bits, abs_mask = int(np.float64(top).view(np.int64)), _INF_BITS, _ABS_MASK

    @cuda.jit(device=True)
    def gelu(value, row, col, args):
        bits = bits_of(value)
        s_bits = bits & abs_mask
        s = top if top_bits < s_bits <= inf_bits else double_of(s_bits)  # NaN stays NaN
        p = degree20_halves(s, poly)
        shifted = fma(s, p, shifter)  # t = s p rounded to an integer j, held in the low word
        r = fma(s, p, shifter - shifted)  # t - j, |r| <= 1/2
        relu = double_of(bits & ~(bits >> 63))  # value, or +0 when its sign bit is set
        return fma(-s, times_pow2(degree11_halves(r, exp2_poly), low_word(shifted) - 1), relu)

    return gelu


def _over_one_plus_exp(t: type) -> tuple[Callable, float]:
    """``num / (1 + exp(z))`` in dtype ``t`` as a device function ``(num, z)``, and the factor
    ``z`` carries: its callers multiply their constants by it.

    float32 reads ``z`` in base 2 (factor ``log2 e``) and computes one ``exp2_approx`` (one
    ``MUFU.EX2``) and one ``divide_approx`` (``div.approx``, 2 ulp), both in
    :mod:`dxgemm.kernels._device`: 4-5 SASS instructions where ``expf`` and IEEE division
    took about 20.  float64 (factor 1): :func:`_quotient_float64`, one path of 24 FP64
    instructions.  The logistic stages and the tanh GELU are all this quotient
    (``sigmoid(w) = 1 / (1 + exp(-w))``), so none subtracts nearly equal numbers."""
    if t is np.float64:
        return _quotient_float64(), 1.0
    one = t(1)

    @cuda.jit(device=True)
    def quotient(num, z):
        return divide_approx(num, one + exp2_approx(z))

    return quotient, LOG2E


def _quotient_float64() -> Callable:
    """float64 ``num / (1 + exp(z))`` with no branch, as a device function ``(num, z)``.

    libdevice's ``exp`` and IEEE division take ~29 FP64 instructions and a dozen branches
    (their special-case paths), and ptxas does not overlap independent outputs' chains across
    branches, so on the warptile medium tile, whose epilogue runs eight outputs a lane from
    shared memory, they cost far more than their instruction count (``docs/performance.md``).  Here ``z`` is clamped to +-708 on its bit pattern (NaN
    kept), ``exp(z) = 2**j exp(r)`` with ``j = round(z log2 e)`` (the shifter trick), ``r = z -
    j ln 2`` with ``ln 2`` in two parts and ``exp(r)`` of degree 11 (:data:`EXP_FLOAT64_POLY`,
    even and odd halves), ``2**j`` an integer add to the exponent; the quotient is
    ``rcp_approx64``'s first guess, two Newton steps and one correction of the product.
    24 FP64 instructions and one MUFU, no branch, so independent outputs overlap.  Beyond ``z = 708`` the quotient,
    below ``1e-307 |num|``, is 0 (NaN for an infinite ``num``, as ``num / inf``); below ``z =
    -708`` it is ``num`` to the last bit, without the correction (``inf - inf`` would make it
    NaN).  Worst errors, replayed with exact FMA rounding and a coarser first guess than the
    hardware's (``tools/fp64_activations.py``): SiLU 0.95, sigmoid 1.5,
    the tanh GELU 0.86 units of ``|x| + |y|``."""
    exp_poly = EXP_FLOAT64_POLY
    top_bits, inf_bits, abs_mask = int(np.float64(EXP_FLOAT64_CLAMP).view(np.int64)), _INF_BITS, _ABS_MASK
    sign, one, zero = -(1 << 63), 1.0, 0.0  # the sign bit as a signed 64-bit integer

    @cuda.jit(device=True)
    def quotient(num, z):
        bits = bits_of(z)
        z_bits = bits & abs_mask
        beyond = top_bits < z_bits <= inf_bits  # |z| > 708, not NaN
        if beyond:
            z = double_of((bits & sign) | top_bits)
        shifted, r = reduce_ln2(z)
        d = one + times_pow2(degree11_halves(r, exp_poly), low_word(shifted))
        y = reciprocal_float64(d)
        q = num * (zero if beyond and bits >= 0 else y)
        return q if top_bits < z_bits else fma(fma(-d, q, num), y, q)

    return quotient


def _gelu_tanh(t: type) -> Callable:
    """PyTorch's tanh GELU as ``x / (1 + exp(z))``, ``z = -2 sqrt(2/pi) (x + 0.044715 x^3)``
    (:func:`_over_one_plus_exp`).

    ``(1 + tanh(u)) / 2 = sigmoid(2u)``, so ``0.5 x (1 + tanh(u)) = x / (1 + exp(-2u))``.
    float32: 7 SASS instructions where libdevice's ``tanhf`` took 18.  float64: 27 FP64
    instructions and no branch (:func:`_quotient_float64`), where libdevice's ``tanh`` has two
    branches (a polynomial below |u| = 0.55, an ``exp`` and a reciprocal above) that a warp
    of GEMM outputs usually takes both of, ~46 in all, and its ``exp`` and IEEE division ~31.
    No cancellation in ``1 + tanh(u)`` for negative ``x``.  The error: one unit of ``z``
    moves the result by at most ``0.22 |z| u |x|`` (``sigmoid'(w) w`` peaks at 0.22); ``exp``
    and the division add about 2 units (float32) or 1.5 (float64).  NaN
    gives NaN, ``+inf`` gives ``+inf`` and ``-inf`` NaN, as the tanh form does.
    """
    quotient, scale = _over_one_plus_exp(t)
    c0 = t(-2 * scale * math.sqrt(2 / math.pi))
    c1 = t(-2 * scale * math.sqrt(2 / math.pi) * 0.044715)

    @cuda.jit(device=True)
    def gelu_tanh(value, row, col, args):
        return quotient(value, value * (c0 + c1 * value * value))

    return gelu_tanh


def _logistic(t: type, times_value: bool) -> Callable:
    """``x * sigmoid(x)`` (``times_value``) or ``sigmoid(x)`` in dtype ``t``, as ``1 / (1 + exp(-x))``
    (:func:`_over_one_plus_exp`; in float32 the rounding of ``-x log2 e`` moves the result by
    at most ``0.22 u`` of it)."""
    quotient, scale = _over_one_plus_exp(t)
    one, minus_scale = t(1), t(-scale)

    @cuda.jit(device=True)
    def logistic(value):
        return quotient(value if times_value else one, value * minus_scale)

    return logistic


class SiLU(Pointwise):
    """``x * sigmoid(x)`` (also called swish)."""

    stage_name = "silu"

    def _formula(self, dtype: np.dtype) -> tuple:
        return ("ex2ftz-fastdiv",) if dtype == np.float32 else ("exp11-rcp2",)

    @property
    def medium_tile_min_k(self) -> float:
        return 0.0  # branch-free in float64 (_quotient_float64): runs on the medium tile

    @staticmethod
    def _device(t):
        logistic = _logistic(t, times_value=True)

        @cuda.jit(device=True)
        def silu(value, row, col, args):
            return logistic(value)

        return silu

    def _reference(self, x, xp):
        with np.errstate(over="ignore"):
            return x / (1.0 + xp.exp(-x))

    @property
    def lipschitz(self) -> float:
        return 1.1  # max |d/dx| = 1.0998...


class Sigmoid(Pointwise):
    """``1 / (1 + exp(-x))``."""

    stage_name = "sigmoid"

    def _formula(self, dtype: np.dtype) -> tuple:
        return ("ex2ftz-fastdiv",) if dtype == np.float32 else ("exp11-rcp2",)

    @property
    def medium_tile_min_k(self) -> float:
        return 0.0  # branch-free in float64 (_quotient_float64): runs on the medium tile

    @staticmethod
    def _device(t):
        logistic = _logistic(t, times_value=False)

        @cuda.jit(device=True)
        def sigmoid(value, row, col, args):
            return logistic(value)

        return sigmoid

    def _reference(self, x, xp):
        with np.errstate(over="ignore"):
            return 1.0 / (1.0 + xp.exp(-x))

    @property
    def lipschitz(self) -> float:
        return 0.25


def _tanh_float64() -> Callable:
    """float64 ``tanh`` with no branch, as ``sign(x) T(a)``, ``a = min(|x|, 22)`` on the bit pattern.

    libdevice's ``tanh`` has two paths (a polynomial below ``|x| = 0.55``, an ``exp`` and a
    reciprocal above), which a warp of GEMM outputs usually takes both of, and branches keep
    ptxas from overlapping independent outputs (:func:`_quotient_float64`).  Here, with
    ``e = expm1(-2a)``, ``T(a) = -e / (2 + e)``: no ``1 - exp`` cancellation for small ``a``.
    ``expm1(z) = 2**j expm1(r) + (2**j - 1)`` (:func:`reduce_ln2`; ``2**j - 1`` is exact for
    the ``j`` that matter), ``expm1(r) = r + r**2 Q(r)`` (:data:`EXPM1_FLOAT64_Q`), and the
    quotient :func:`reciprocal_float64` and one correction; the sign goes back on the bit
    pattern, so ``-0`` stays ``-0``.  27 FP64 instructions and one MUFU, where libdevice's
    paths hold 33 and branch, so independent outputs overlap.  Worst error, replayed with
    exact FMA rounding (``tools/fp64_activations.py``): 1.16 units of ``|x| + |y|`` (2.5 units of ``y``).  NaN stays NaN."""
    q_poly = EXPM1_FLOAT64_Q
    top_bits, inf_bits, abs_mask = int(np.float64(TANH_FLOAT64_CLAMP).view(np.int64)), _INF_BITS, _ABS_MASK
    sign, one, two = -(1 << 63), 1.0, 2.0

    @cuda.jit(device=True)
    def tanh(value, row, col, args):
        bits = bits_of(value)
        a_bits = bits & abs_mask
        if top_bits < a_bits <= inf_bits:  # |x| > 22, not NaN
            a_bits = top_bits
        a = double_of(a_bits)
        shifted, r = reduce_ln2(-(a + a))
        t = times_pow2(one, low_word(shifted))  # 2**j, j <= 0
        e = fma(t, fma(r * r, degree10_halves(r, q_poly), r), t - one)  # expm1(-2a), in (-1, 0]
        d = two + e
        y = reciprocal_float64(d)
        q = -e * y
        q = fma(fma(-d, q, -e), y, q)
        return double_of((bits_of(q) & abs_mask) | (bits & sign))

    return tanh


class Tanh(Pointwise):
    """``tanh(x)``."""

    stage_name = "tanh"
    wide_walk = True  # libdevice tanhf in float32: a long polynomial (Epilogue.wide_walk)

    def _formula(self, dtype: np.dtype) -> tuple:
        return ("expm1-q10-rcp2",) if dtype == np.float64 else ()

    @property
    def medium_tile_min_k(self) -> float:
        return 0.0  # branch-free in float64 (_tanh_float64): runs on the medium tile

    @staticmethod
    def _device(t):
        if t is np.float64:
            return _tanh_float64()

        @cuda.jit(device=True)
        def tanh(value, row, col, args):
            return math.tanh(value)

        return tanh

    def _reference(self, x, xp):
        return xp.tanh(x)


class Clamp(Pointwise):
    """``min(max(x, lo), hi)``."""

    stage_name = "clamp"
    transcendental = False

    def __init__(self, lo: float, hi: float):
        lo = real_parameter(lo, "lo", "clamp")
        hi = real_parameter(hi, "hi", "clamp")
        if lo > hi:
            raise ValueError(f"clamp: lo must not exceed hi, got lo={lo!r} > hi={hi!r}")
        self.params = {"lo": lo, "hi": hi}

    @staticmethod
    def _device(t):
        @cuda.jit(device=True)
        def clamp(value, row, col, args):
            if value < args[0]:
                return args[0]
            if value > args[1]:
                return args[1]
            return value

        return clamp

    def _reference(self, x, xp):
        return xp.minimum(xp.maximum(x, self.params["lo"]), self.params["hi"])


class Scale(Pointwise):
    """``s * x``."""

    stage_name = "scale"
    transcendental = False

    def __init__(self, s: float):
        self.params = {"s": real_parameter(s, "s", "scale")}

    @staticmethod
    def _device(t):
        @cuda.jit(device=True)
        def scale(value, row, col, args):
            return args[0] * value

        return scale

    def _reference(self, x, xp):
        return self.params["s"] * x

    @property
    def lipschitz(self) -> float:
        return abs(self.params["s"])


def _erfc(x: Any, xp: Any) -> Any:
    """float64 erfc on NumPy (through :func:`math.erfc`) or CuPy arrays."""
    if xp is np:
        return np.vectorize(math.erfc, otypes=[np.float64])(x)
    from cupyx.scipy.special import erfc

    return erfc(x)


def relu() -> Epilogue:
    """``max(x, 0)``, applied to every element."""
    return ReLU()


def leaky_relu(slope: float = 0.01) -> Epilogue:
    """``x`` where ``x >= 0``, else ``slope * x``.  ``slope`` is a run-time argument: changing it never recompiles."""
    return LeakyReLU(slope)


def gelu(approximate: str = "none") -> Epilogue:
    """GELU, ``x * Phi(x)``: ``approximate="none"`` is the exact erf form, ``"tanh"`` PyTorch's tanh approximation.

    The exact form runs in the accumulator's dtype, in both as ``relu(x) - s Phi(-s)``, ``s =
    |x|`` clamped, with ``Phi(-s)`` the exponential of a fitted polynomial: no cancellation for
    negative ``x``, within 3 float32 units of ``|x|`` in float32 (``exp2``, 6) and within 0.8
    float64 units of ``|x| + |gelu(x)|`` in float64 (``exp`` reduced by hand, 8.3).  The tanh
    form is ``0.5 x (1 + tanh(u))``, ``u = sqrt(2/pi) (x + 0.044715 x^3)``, computed as the
    equal ``x / (1 + exp(-2u))``: in float32 with ``exp2`` and an approximate division, in
    float64 with ``exp`` and IEEE division.
    """
    return GELU(approximate)


def silu() -> Epilogue:
    """SiLU (swish), ``x * sigmoid(x)`` (float32: ``exp2`` and an approximate division, within 2 ulp)."""
    return SiLU()


def sigmoid() -> Epilogue:
    """The logistic function ``1 / (1 + exp(-x))`` (float32: ``exp2`` and an approximate division)."""
    return Sigmoid()


def tanh() -> Epilogue:
    """``tanh(x)``."""
    return Tanh()


def clamp(lo: float, hi: float) -> Epilogue:
    """``min(max(x, lo), hi)``; ``lo``/``hi`` may be infinite and are run-time arguments.

    Raises:
        TypeError: ``lo`` or ``hi`` is not a real number.
        ValueError: ``lo > hi`` or either is NaN.
    """
    return Clamp(lo, hi)


def scale(s: float) -> Epilogue:
    """``s * x``; ``s`` is a run-time argument (``alpha`` scales before ``beta * C``, ``scale`` after it)."""
    return Scale(s)
