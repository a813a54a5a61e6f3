"""``autotune``: time the candidate pipeline configurations on the GPU and remember the winner.

:func:`dxgemm.policy.pipeline_config` reasons from device properties and the shape; that is a
model, and configurations within a few percent of each other change order with the shape.
:func:`autotune` settles it for one *shape class* (each of m, n, k rounded to the nearest
power of two) by measurement: CUDA events around the real call, median of ``reps`` after
a warm-up call.  The winner goes to the autotune table (:mod:`dxgemm.runtime.tuned`), which
every later process consults first.  Candidates are compiled on first use like any other
kernel, so a run costs one cold compile per candidate not yet cached.
"""

from __future__ import annotations

import os
from typing import Any, Iterable

import numpy as np

from ._gemm import gemm
from .pipelines.config import CONFIGS, PipelineConfig, configs_for, parse_config, use_config
from .runtime import tuned

__all__ = ["autotune"]


def autotune(
    m: int,
    n: int,
    k: int,
    dtype: Any,
    *,
    candidates: Iterable[str | PipelineConfig] | None = None,
    reps: int = 10,
    persist: bool = True,
    root: str | os.PathLike[str] | None = None,
) -> PipelineConfig:
    """Time each candidate on an ``m x n x k`` problem; return (and by default persist) the fastest.

    ``candidates`` default to the fixed set for ``dtype`` and this shape (:func:`~dxgemm.pipelines.config.configs_for`).  Needs
    CuPy for the operands and events.  Returns the winning :class:`PipelineConfig`.
    """
    import cupy as cp

    dt = np.dtype(dtype)
    if dt not in CONFIGS:
        raise TypeError(f"pipeline GEMM supports float32 and float64, not {dt}")
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    configs = [parse_config(c, dt) for c in (candidates if candidates is not None else configs_for(dt, m, n).values())]
    if not configs:
        raise ValueError("candidates must name at least one configuration")
    rng = cp.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float64).astype(dt)
    b = rng.standard_normal((k, n), dtype=np.float64).astype(dt)
    d = cp.empty((m, n), dt)
    timings: dict[str, float] = {}
    for config in configs:
        with use_config(config):
            gemm(a, b, d, backend="pipeline")  # compiles or loads; warms up
            events = [cp.cuda.Event() for _ in range(reps + 1)]
            events[0].record()
            for i in range(reps):
                gemm(a, b, d, backend="pipeline")
                events[i + 1].record()
            events[-1].synchronize()
            times = sorted(cp.cuda.get_elapsed_time(events[i], events[i + 1]) for i in range(reps))
            timings[config.name] = times[len(times) // 2]
    best = min(configs, key=lambda c: timings[c.name])
    if persist:
        tuned.write(tuned.table_path(root), tuned._table_key(dt, m, n), tuned.shape_class(m, n, k),
               {"config": best.name, "ms": timings, "shape": [m, n, k]})
    return best
