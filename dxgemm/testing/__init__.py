"""Testing tools for dxgemm and for code that uses it: the accuracy rule, data, guard bands.

* :mod:`.accuracy` — the rule every check uses, written once: the worst-case and the
  statistical bound, the one-sidedness check, and the float32 contract (issue 34).
* :mod:`.data` — :func:`make_data`: data classes that expose faults (same sign, wide
  exponent range, row/column scales, cancellation, near overflow/underflow, NaN/Inf).
* :mod:`.emulate` — CPU emulations of float32 GEMM methods (a rounding float32 sum,
  bfloat16 inputs, 3xTF32 with rounding or truncating accumulation).
* :mod:`.guard` — operands inside NaN bands and outputs inside sentinel bands.
* :mod:`.mutants` — ``python -m dxgemm.testing.mutants``: plant known bugs in a copy of the
  package and check that the fast CPU tests catch each.
"""

from .accuracy import (CONTRACT_FLOOR, STAT_C, assert_close, bias_ratio, bias_threshold, check,
                       check_float32_contract, check_unbiased, error_bound, float32_contract, magnitude, reference,
                       relative_error, statistical_bound, tf32_bound, underflow_floor, TF32_UNIT)
from .data import KINDS, make_data

# kept for callers that reached the private helper (dxgemm.epilogues.reference)
from .accuracy import _xp  # noqa: F401

__all__ = ["error_bound", "statistical_bound", "underflow_floor", "magnitude", "reference", "check", "assert_close",
           "bias_ratio", "bias_threshold", "check_unbiased", "relative_error", "float32_contract",
           "check_float32_contract", "tf32_bound", "TF32_UNIT", "make_data", "KINDS", "STAT_C", "CONTRACT_FLOOR"]
