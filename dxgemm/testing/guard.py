"""Guard bands: every operand inside a larger buffer, so that reads and writes past an edge show.

A kernel that reads one column past A's edge multiplies by whatever memory lies there; in a
zero-filled or tightly packed array that is zero or a neighbour and often changes nothing.
:func:`place` puts a matrix inside a larger buffer filled with ``fill`` (NaN for inputs: any
stray read poisons the result; :data:`SENTINEL` for outputs: any stray write changes it),
in one of four layouts, all four with a band around them:

=========  ===========================================================================
``row``    row-major and contiguous: whole rows of band before and after the matrix
``col``    column-major and contiguous: whole columns of band before and after
``view``   a strided row-major view: band on every side and between the rows
``T``      a transposed view (column-major strides) of a row-major buffer: band on every
           side and between the columns
=========  ===========================================================================

:func:`run_guarded` runs one ``dxgemm.gemm`` call on guarded operands and checks that the
inputs' buffers are bit-for-bit untouched and the output's band still holds its sentinel;
the caller then checks the values (an element left unwritten keeps NaN and fails any
accuracy check).  It works on any array library through ``to_device`` / ``to_host``:
Numba's simulator on the CPU, CuPy on a GPU.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

LAYOUTS: tuple[str, ...] = ("row", "col", "view", "T")
"""Operand layouts :func:`place` builds (module docstring)."""

SENTINEL = -1.5 * 2.0 ** 100
"""The output band's fill: finite, exact in float32 and float64, and nothing a GEMM of test data writes."""


@dataclasses.dataclass
class Guarded:
    """A matrix placed inside a guard band: ``buffer`` (the device allocation), ``view`` (the
    matrix, a view into it), ``placed`` (the host image of ``buffer`` as uploaded) and ``inside``
    (a host mask of ``placed``'s shape, True where the matrix lives)."""

    buffer: Any
    view: Any
    placed: np.ndarray
    inside: np.ndarray
    layout: str


def place(host: np.ndarray, layout: str, *, to_device: Callable[[np.ndarray], Any], fill: float = np.nan,
          margin: int = 2) -> Guarded:
    """``host`` on the device inside a band of ``margin`` elements filled with ``fill`` (module docstring)."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; choose one of {', '.join(LAYOUTS)}")
    rows, cols = host.shape
    g = margin
    if layout == "row":
        shape, order, window = (rows + 2 * g, cols), "C", (slice(g, g + rows), slice(0, cols))
    elif layout == "col":
        shape, order, window = (rows, cols + 2 * g), "F", (slice(0, rows), slice(g, g + cols))
    elif layout == "view":
        shape, order, window = (rows + 2 * g, cols + 2 * g + 1), "C", (slice(g, g + rows), slice(g, g + cols))
    else:  # "T": the transpose lives row-major in the buffer
        shape, order, window = (cols + 2 * g, rows + 2 * g + 1), "C", (slice(g, g + cols), slice(g, g + rows))
    placed = np.full(shape, fill, host.dtype, order=order)
    inside = np.zeros(shape, bool)
    inside[window] = True
    placed[window] = host.T if layout == "T" else host
    buffer = to_device(placed)
    view = buffer[window]
    if layout == "T":
        view = view.T
    return Guarded(buffer, view, placed, inside, layout)


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(np.uint64 if x.dtype.itemsize == 8 else np.uint32)


def assert_untouched(g: Guarded, to_host: Callable[[Any], np.ndarray], name: str, *, band_only: bool = False) -> None:
    """Raise ``AssertionError`` if ``g``'s buffer changed: anywhere (an input), or in its band
    (``band_only``: an output).  Names the first changed position."""
    now = np.asarray(to_host(g.buffer)).reshape(g.placed.shape)
    changed = _bits(now) != _bits(g.placed)
    if band_only:
        changed &= ~g.inside
    if changed.any():
        where = tuple(int(i) for i in np.argwhere(changed)[0])
        part = "guard band" if not g.inside[where] else "matrix"
        raise AssertionError(f"{name} ({g.layout}): {int(changed.sum())} element(s) of its {part} changed, first at "
                             f"buffer index {where}: {g.placed[where]!r} -> {now[where]!r}")


def read_inside(g: Guarded, to_host: Callable[[Any], np.ndarray]) -> np.ndarray:
    """The matrix as it now stands in ``g``'s buffer (host copy, in the matrix's orientation)."""
    now = np.asarray(to_host(g.buffer)).reshape(g.placed.shape)
    rows_cols = now[g.inside].reshape(_window_shape(g))
    return rows_cols.T if g.layout == "T" else rows_cols


def _window_shape(g: Guarded) -> tuple[int, int]:
    idx = np.argwhere(g.inside)
    if not idx.size:
        return (0, 0)
    lo, hi = idx.min(axis=0), idx.max(axis=0)
    return int(hi[0] - lo[0] + 1), int(hi[1] - lo[1] + 1)


def run_guarded(a: np.ndarray, b: np.ndarray, c: np.ndarray | None, layouts: tuple[str, str, str], *,
                to_device: Callable[[np.ndarray], Any], to_host: Callable[[Any], np.ndarray],
                backend: str = "auto", alpha: float = 1.0, beta: float = 0.0, epilogue: Any = None) -> np.ndarray:
    """``dxgemm.gemm`` on guarded operands; returns D (host) after checking every band.

    ``layouts``: A's, B's and D's (:data:`LAYOUTS`).  D is ``c`` placed in a :data:`SENTINEL`
    band, or, when ``c`` is None, a NaN-filled matrix (``beta`` must then be 0): an element
    the kernel leaves unwritten stays NaN.  A and B sit in NaN bands and must come back
    bit-for-bit unchanged; D's band must still hold the sentinel.
    """
    import dxgemm

    if c is None and beta != 0:
        raise ValueError("beta != 0 needs c")
    la, lb, ld = layouts
    ga = place(a, la, to_device=to_device)
    gb = place(b, lb, to_device=to_device)
    inner = c if c is not None else np.full((a.shape[0], b.shape[1]), np.nan, a.dtype)
    gd = place(inner, ld, to_device=to_device, fill=SENTINEL)
    out = dxgemm.gemm(ga.view, gb.view, gd.view, alpha=alpha, beta=beta, epilogue=epilogue, backend=backend)
    if out is not gd.view:
        raise AssertionError("gemm did not return the c it was given")
    assert_untouched(ga, to_host, "A")
    assert_untouched(gb, to_host, "B")
    assert_untouched(gd, to_host, "D", band_only=True)
    return read_inside(gd, to_host)
