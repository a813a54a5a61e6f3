"""The deterministic layout grid: every operand in every layout, at tile edges, for each backend.

Four runs per backend and dtype form a Latin square over the layouts of A, B and D (C is D:
``gemm`` writes into the ``c`` it reads), so each operand takes each of ``row``, ``col``,
``view`` and ``T`` exactly once, every one inside a guard band (:mod:`dxgemm.testing.guard`).
The shapes sit one past and one short of the backend's block tile (``T``) and K tile (``BK``),
with 1 as a side; the data kind, alpha and beta change from run to run.  Two runs are placed
where edge bugs show: A as a strided view with a K tail (a read past A's last column meets the
NaN band; a rung using K where lda belongs reads the wrong rows) and D as a column-major view
with a partial tile row (a store one row past the edge lands in the band).
"""

from __future__ import annotations

import numpy as np

from dxgemm.testing import make_data

TILES = {  # backend: (block tile side T, K tile BK), read from dxgemm/kernels/*.py and pipelines/config.py
    "naive": (32, 1), "coalesced": (32, 1), "smem": (32, 32), "blocktile1d": (64, 8), "blocktile2d": (128, 8),
    "vectorized": (128, 8), "warptile": (64, 16), "tf32mma": (128, 32), "tf32wgmma": (128, 32), "pipeline": (128, 32), "auto": (128, 32), "gemv": (32, 8),
}

LATIN = (("row", "col", "view"), ("col", "view", "T"), ("view", "T", "row"), ("T", "row", "col"))


def cases(backend: str, scale: int = 1) -> list[tuple]:
    """``(layouts, (m, n, k), kind, alpha, beta)`` for the four runs of ``backend``; ``scale``
    multiplies the tile sides (a GPU run takes ``scale=2`` for a second ring of edge blocks)."""
    t, bk = TILES[backend]
    t *= scale
    return [
        (LATIN[0], (1, t + 1, bk + 1), "same_sign", 1.5, 0.0),
        (LATIN[1], (t + 1, t - 1, 2 * bk - 1 if bk > 1 else 3), "row_col_scale", -0.75, 1.25),
        (LATIN[2], (t - 1, t + 1, bk + 1 if bk > 1 else 5), "wide_exponent", 1.0, 0.0),
        (LATIN[3], (t + 1, 1, max(bk - 1, 3)), "cancellation", 0.5, -2.0),
    ]


def supports(backend: str, dtype) -> bool:
    """Whether ``backend`` computes ``dtype`` (``auto`` computes both)."""
    import dxgemm

    return backend == "auto" or np.dtype(dtype) in dxgemm.BACKEND_DTYPES[backend]


def split(backend: str, dtype) -> int:
    """The accuracy rule's ``split``: 3 where float32 may run on split TF32 operands
    (the TF32 rungs, the pipeline, and ``auto``, whose float32 default runs on them)."""
    return 3 if np.dtype(dtype) == np.float32 and backend in ("tf32mma", "tf32wgmma", "pipeline", "auto") else 1


def rule(backend: str, dtype) -> dict:
    """``assert_close``'s arguments for ``backend``: the pipeline's float32 3xTF32 sums 3K products in
    one truncating tensor-core accumulator and is held to the split worst case only (its documented
    bound, not float32's default: tests/test_gpu_accuracy.py)."""
    if backend == "pipeline" and np.dtype(dtype) == np.float32:
        return {"split": 3, "rule": "worst_case", "unbiased": False}
    return {"split": split(backend, dtype)}


def case_id(case: tuple) -> str:
    layouts, (m, n, k), kind, _, beta = case
    return f"{'-'.join(layouts)}-{m}x{n}x{k}-{kind}" + ("-beta" if beta else "")


def operands(case: tuple, dtype, seed: int):
    """A, B and C (None when beta is 0) of ``case`` in ``dtype``."""
    _, (m, n, k), kind, _, beta = case
    rng = np.random.default_rng(seed)
    a, b = make_data(kind, (m, k, n), dtype, rng)
    c = make_data("normal" if kind == "cancellation" else kind, (m, n), dtype, rng) if beta else None
    return a, b, c
