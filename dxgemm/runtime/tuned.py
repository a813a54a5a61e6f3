"""The autotune table: the pipeline configuration measured fastest per shape class, on disk.

:func:`dxgemm.autotune.autotune` writes ``<cache>/autotune.json``; :func:`lookup`, which
:func:`dxgemm.runtime.pipeline.suggest` consults before the rule
(:func:`dxgemm.policy.pipeline_config`), reads it back in any later process.

Shape class: each of m, n, k rounded to the nearest power of two (in log scale), so
4000 x 4096 x 4100 and 4096^3 share a decision while 1024^3 and 8192^3 do not.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ..pipelines.config import PipelineConfig, float32_method, parse_config
from . import env

__all__ = ["lookup", "shape_class", "table_path", "table_stamp", "forget", "write"]

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
    return env.cache_dir() / "autotune.json"


def table_stamp() -> tuple:
    """``(path, modification time)`` of the default table (time None when absent).

    Changes whenever a decision is written or forgotten, by this process or another:
    ``dxgemm.gemm``'s repeat-call path (:mod:`.calls`) keys on it.
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


def write(path: Path, dtype: str, cls: str, record: dict) -> None:
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
