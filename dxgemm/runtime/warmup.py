"""Pre-compile pipeline kernels into the on-disk cache (``python -m dxgemm warmup``).

A first ``dxgemm.gemm(..., backend="pipeline")`` of a configuration that is not cached
compiles (see :mod:`._build` for the cost).  ``warmup`` moves that cost to a moment of
the user's choosing: it compiles the default configurations (:data:`~.config.CONFIGS`)
for the requested dtypes, every A/B arrangement, with the epilogue a plain GEMM uses
(alpha scaling, no C: the chain ``dxgemm.gemm`` binds when ``beta == 0`` and no
epilogue is given).  Kernels already cached cost nothing.

Kernels are built one after another, each spreading its own NVRTC work over worker
processes (:mod:`._lto`); ``jobs > 1`` builds several kernels at once instead, which
suits a machine with many cores and several kernels to build.  Works on a machine
without a GPU (through :mod:`._standin`), for compute capability 9.0.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from typing import Any, Callable, Iterable

import numpy as np

from .config import CONFIGS, SIMT_FLOAT32_MAX_SIDE, parse_config
from .tf32x3 import kernel_variant

__all__ = ["warmup", "build_all", "plain_epilogue", "ARRANGEMENT_PAIRS"]

ARRANGEMENT_PAIRS = tuple(itertools.product(("row_major", "col_major"), repeat=2))


def plain_epilogue(dtype: Any):
    """The bound epilogue of a plain ``dxgemm.gemm(a, b)``: ``alpha * acc``, no C."""
    from ..epilogues._base import AlphaBeta, Chain, EpilogueContext

    return Chain((AlphaBeta(1.0, 0.0),)).bind(EpilogueContext(1, 1, np.dtype(dtype), adapt=None))


def _build_one(job: tuple) -> dict:
    config, dtype, arrangement, cache_root, workers, operands, split = job
    from . import _standin
    from .cache import KernelCache
    from .kernels import get_entry

    _standin.activate((9, 0))  # no-op with a GPU; must precede nvmath's import without one
    bound = plain_epilogue(dtype)
    if workers is not None:
        import os

        os.environ["DXGEMM_COMPILE_WORKERS"] = str(workers)
    t0 = time.perf_counter()
    entry = get_entry(config, dtype, arrangement, epilogue_key=bound.key, make_epilogue=bound.make,
                      epi_args=bound.args, cache=KernelCache(cache_root), operands=operands, split_k=split)
    return {"config": config.name, "dtype": np.dtype(dtype).name, "operands": operands,
            "arrangement": list(arrangement), "split_k": split,
            "seconds": round(time.perf_counter() - t0, 1), "path": str(entry.path),
            "build_times_s": entry.meta.get("build_times_s")}


def warmup(
    dtypes: Iterable[Any] = ("float64", "float32"),
    *,
    configs: Iterable[str] = ("large", "small"),
    arrangements: Iterable[tuple[str, str]] = ARRANGEMENT_PAIRS,
    split_k_configs: Iterable[str] = ("small",),
    cache_root: str | None = None,
    jobs: int = 1,
    workers: int | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
) -> list[dict]:
    """Compile every (config, dtype, arrangement) into the cache; returns one record per kernel.

    float32 under the ``"tf32x3"`` method (:func:`~.config.float32_method`) needs one
    arrangement only (its split operands are always K-major, :mod:`.tf32x3`); its outputs
    with a side of at most 128 run the SIMT method, whose small configuration is built
    for every arrangement as well.
    ``split_k_configs``: those of ``configs`` whose split-K variant (:mod:`._splitk`) is
    built as well — by default the small ones, which :func:`~.config.suggest` gives the
    outputs with few tiles that :func:`~.config.split_k` splits.
    """
    todo = []
    split_names = set(split_k_configs)
    for dtype in dtypes:
        dt = np.dtype(dtype)
        if dt not in CONFIGS:
            raise TypeError(f"dtypes: pipeline GEMM supports float32 and float64, not {dt}")
        # (m, n) of each output class: any shape; in float32 also a side of at most
        # SIMT_FLOAT32_MAX_SIDE, which runs another method (config.float32_method) and only
        # ever the small configuration (config.suggest: the large tile would be mostly padding)
        classes = [(None, None, configs)]
        if dt == np.dtype(np.float32) and "small" in configs:
            classes.append((SIMT_FLOAT32_MAX_SIDE, SIMT_FLOAT32_MAX_SIDE, ("small",)))
        for m, n, names in classes:
            variants = dict.fromkeys(kernel_variant(dt, arrangement, m, n) for arrangement in arrangements)
            for name in dict.fromkeys(names):
                config = parse_config(name, dt, m, n)
                for arrangement, operands in variants:
                    for split in (False, True) if name in split_names else (False,):
                        job = (config, dt.name, arrangement, cache_root, workers, operands, split)
                        if job not in todo:
                            todo.append(job)
    return build_all(_build_one, todo, jobs=jobs, desc="dxgemm warmup", progress=progress, log=log,
                     describe=lambda r: f"{r['config']} {r['dtype']} {'/'.join(r['arrangement'])}"
                                        f"{' split-K' if r['split_k'] else ''}: {r['seconds']} s")


def build_all(build: Callable[[Any], dict], todo: list, *, jobs: int = 1, desc: str = "dxgemm warmup",
              progress: bool = True, log: Callable[[str], None] | None = None,
              describe: Callable[[dict], str] = str) -> list[dict]:
    """``[build(job) for job in todo]``, in ``jobs`` spawned processes when ``jobs > 1`` (``build``
    must then be a module-level function), with a progress bar and ``log(describe(record))``
    per finished kernel; the records in ``todo``'s order.  Both warmups (this module's and
    :func:`dxgemm._rung_cache.warmup`) run through it."""
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(todo), desc=desc, unit="kernel")
    if jobs == 1:
        results: Iterable[dict] = (build(job) for job in todo)
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        pool = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"))
        results = pool.map(build, todo)
    out = []
    try:
        for record in results:
            out.append(record)
            if log is not None:
                with bar.external_write_mode() if bar is not None else contextlib.nullcontext():
                    log(describe(record))
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
        if jobs > 1:
            pool.shutdown(cancel_futures=True)
    return out
