"""What a compiled handwritten kernel depends on, and nothing else.

A kernel is specialised on the element type, on how each operand is laid out in memory
and on the epilogue's *structure*.  Sizes, leading dimensions, pointers, alpha, beta and
bias values are run-time arguments, so a new problem size never compiles a new kernel.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable

import numpy as np


class Layout(str, enum.Enum):
    """How a 2-D operand sits in memory: which index has unit stride.

    ``ROW``: element (i, j) lives at ``i * ld + j`` (C order, a row is contiguous).
    ``COL``: element (i, j) lives at ``i + j * ld`` (Fortran order, a column is contiguous).
    """

    ROW = "row"
    COL = "col"


@dataclass(frozen=True)
class KernelSpec:
    """The compile-time part of one GEMM launch.

    ``epilogue_fn`` is the device function ``f(value, row, col, args)`` built from the
    epilogue chain; ``epilogue_key`` identifies it (its structure and argument types) and
    is what the in-process kernel cache hashes, never the function object itself.
    ``tile`` names the tile configuration for rungs that have more than one (``warptile``
    in both dtypes: ``"large"``, ``"small"`` or ``"tiny"``, and float64's ``"medium"``,
    ``"medium_grouped"`` and ``"short"``; the host picks it, ``dxgemm.policy.choose_tile``).
    """

    dtype: np.dtype
    layout_a: Layout
    layout_b: Layout
    layout_d: Layout
    epilogue_key: tuple
    epilogue_fn: Callable = None  # excluded from hashing below
    tile: str = "large"  # a rung with several tile configurations picks one by this name
    batch: tuple = ()
    """A batched kernel's compile-time facts (:mod:`dxgemm.kernels.batch_entries`): ``(rank, moved
    epilogue array paths, batch-index paths, the epilogue arguments' nesting)``; ``()`` for one GEMM."""

    def _identity(self) -> tuple:
        return (self.dtype.str, self.layout_a, self.layout_b, self.layout_d, self.epilogue_key, self.tile, self.batch)

    def __hash__(self) -> int:
        return hash(self._identity())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KernelSpec) and self._identity() == other._identity()


@dataclass(frozen=True)
class BuiltKernel:
    """A rung specialised for one :class:`KernelSpec`: the kernel's Python function (compiled
    by :mod:`dxgemm.kernels` with an explicit signature), its block shape, and the output
    tile one block covers.

    The grid is ``(ceil(n / tile_n), ceil(m / tile_m))``: ``blockIdx.x`` walks output
    columns, ``blockIdx.y`` output rows.  ``dynamic_smem`` is the dynamic shared memory
    (bytes) each block needs; above 48 KiB the launcher raises the kernel's limit.
    ``min_blocks`` (if set) asks the compiler to fit that many blocks per SM in registers.
    """

    pyfunc: Callable
    block: tuple[int, ...]
    tile_m: int
    tile_n: int
    dynamic_smem: int = 0
    min_blocks: int = 0

    def grid(self, m: int, n: int) -> tuple[int, int]:
        return launch_grid(m, n, self.tile_m, self.tile_n)


MAX_GRID_Y = 65535
"""CUDA's limit on ``gridDim.y`` (and ``z``); ``x`` takes up to 2**31 - 1."""


def launch_grid(m: int, n: int, tile_m: int, tile_n: int) -> tuple[int, int]:
    """``(ceil(n / tile_n), ceil(m / tile_m))``, the handwritten kernels' grid; a ValueError where
    the row blocks exceed CUDA's ``gridDim.y`` limit (before anything is launched), since no
    launch can cover those rows.  Far from any real limit on columns: ``x`` takes 2**31 - 1."""
    rows = -(-m // tile_m)
    if rows > MAX_GRID_Y:
        raise ValueError(f"m = {m} rows need {rows} row blocks of this kernel's {tile_m}-row tile; one launch takes "
                         f"at most {MAX_GRID_Y} (CUDA's grid limit): call it on row slices of a (and of c and any "
                         f"per-row epilogue array) of at most {MAX_GRID_Y * tile_m} rows")
    return (-(-n // tile_n), rows)
