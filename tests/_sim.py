"""Helpers for tests under the simulator: device arrays in a given layout, views, poison."""

from __future__ import annotations

import numpy as np
from numba import cuda


def device_matrix(host: np.ndarray, layout: str):
    """A simulated device copy of ``host``: "row", "col", "view" (a slice of a bigger matrix) or "T" (a transposed view)."""
    if layout == "row":
        return cuda.to_device(np.ascontiguousarray(host))
    if layout == "col":
        return cuda.to_device(np.asfortranarray(host))
    if layout == "view":
        rows, cols = host.shape
        big = np.full((rows + 5, cols + 7), np.nan, host.dtype)
        big[2:2 + rows, 3:3 + cols] = host
        return cuda.to_device(big)[2:2 + rows, 3:3 + cols]
    if layout == "T":
        return cuda.to_device(np.ascontiguousarray(host.T)).T
    raise ValueError(layout)


def poisoned(shape, dtype, layout="row"):
    """An output matrix full of NaN: any element the kernel fails to write stays NaN."""
    return device_matrix(np.full(shape, np.nan, dtype), layout)
