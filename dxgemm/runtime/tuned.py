"""``autotune``: time the candidate configurations on the GPU and remember the winner.

:func:`~.config.suggest` reasons from device properties and the shape; that is a model,
and the measured table in :mod:`.config` shows configurations within a few percent of
each other whose order changes with the shape.  :func:`autotune` settles it for one
*shape class* by measurement — CUDA events around the real call (init + GEMM), median
of ``reps`` after a warm-up call — and writes the winner to
``<cache>/autotune.json``.  :func:`lookup`, which :func:`~.config.suggest` consults
first, reads it back in any later process.

Shape class: each of m, n, k rounded to the nearest power of two (in log scale), so
4000 x 4096 x 4100 and 4096^3 share a decision while 1024^3 and 8192^3 do not.
Candidates are compiled on first use like any other kernel (cached on disk), so a tuning
run over the default set costs one cold compile per candidate not yet cached.
"""

from __future__ import annotations

import functools
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from .config import CONFIGS, PipelineConfig, configs_for, float32_method, parse_config

__all__ = ["autotune", "lookup", "shape_class", "table_path", "forget"]

_memo: dict[str, Any] = {"mtime": None, "table": {}}


def shape_class(m: int, n: int, k: int) -> str:
    """``"4096x4096x4096"``: each extent rounded to the nearest power of two (log scale)."""
    def bucket(x: int) -> int:
        return 1 << max(round(math.log2(max(int(x), 1))), 0)

    return f"{bucket(m)}x{bucket(n)}x{bucket(k)}"


def table_path(root: str | os.PathLike[str] | None = None) -> Path:
    """Where the decisions live: ``<cache dir>/autotune.json``."""
    if root is not None:
        return Path(root) / "autotune.json"
    return _default_table_path(os.environ.get("DXGEMM_CACHE_DIR"), os.environ.get("XDG_CACHE_HOME"))


@functools.lru_cache(maxsize=16)
def _default_table_path(_cache_dir_env: str | None, _xdg_env: str | None) -> Path:
    """The default table's path, computed once per value of the variables that move it (every call looks)."""
    from .cache import default_cache_dir

    return default_cache_dir() / "autotune.json"


def table_stamp() -> tuple:
    """``(path, modification time)`` of the default table (time None when absent).

    Changes whenever a decision is written or forgotten, by this process or another:
    ``dxgemm.gemm``'s repeat-call path (:mod:`dxgemm._calls`) keys on it.
    """
    path = table_path()
    try:
        return (path, path.stat().st_mtime_ns)
    except OSError:
        return (path, None)


def _read(path: Path) -> dict:
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        return {}
    if _memo["mtime"] != (str(path), mtime):
        try:
            table = json.loads(path.read_text())
            if not isinstance(table, dict):
                table = {}
        except (OSError, ValueError):
            table = {}  # a damaged table only loses tuning decisions
        _memo.update(mtime=(str(path), mtime), table=table)
    return _memo["table"]


def _table_key(dtype: Any, m: int, n: int) -> str:
    """Decisions are kept per dtype and, for float32, per method (their kernels differ)."""
    dt = np.dtype(dtype)
    return f"{dt.name}-{float32_method(m, n)}" if dt == np.dtype(np.float32) else dt.name


def lookup(m: int, n: int, k: int, dtype: Any, *, root: str | os.PathLike[str] | None = None) -> PipelineConfig | None:
    """The tuned configuration for this shape class and dtype, or None."""
    table = _read(table_path(root))
    if not table:  # nothing tuned (the usual case): skip the key arithmetic
        return None
    entry = table.get(_table_key(dtype, m, n), {}).get(shape_class(m, n, k))
    if not entry:
        return None
    try:
        return parse_config(entry["config"], dtype)
    except (KeyError, TypeError, ValueError):
        return None


def _write(path: Path, dtype: str, cls: str, record: dict) -> None:
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock", timeout=60):
        try:
            table = json.loads(path.read_text())
        except (OSError, ValueError):
            table = {}
        table.setdefault(dtype, {})[cls] = record
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(table, f, indent=1, sort_keys=True)
        os.replace(tmp, path)


def forget(root: str | os.PathLike[str] | None = None) -> None:
    """Delete every tuning decision."""
    try:
        table_path(root).unlink()
    except OSError:
        pass


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

    ``candidates`` default to the fixed set for ``dtype`` and this shape (:func:`~.config.configs_for`).  Needs
    CuPy for the operands and events.  Returns the winning :class:`PipelineConfig`.
    """
    import cupy as cp

    import dxgemm

    from .config import use_config

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
            dxgemm.gemm(a, b, d, backend="pipeline")  # compiles or loads; warms up
            events = [cp.cuda.Event() for _ in range(reps + 1)]
            events[0].record()
            for i in range(reps):
                dxgemm.gemm(a, b, d, backend="pipeline")
                events[i + 1].record()
            events[-1].synchronize()
            times = sorted(cp.cuda.get_elapsed_time(events[i], events[i + 1]) for i in range(reps))
            timings[config.name] = times[len(times) // 2]
    best = min(configs, key=lambda c: timings[c.name])
    if persist:
        _write(table_path(root), _table_key(dt, m, n), shape_class(m, n, k),
               {"config": best.name, "ms": timings, "shape": [m, n, k]})
    return best
