"""Pre-compile kernels into the on-disk cache (``python -m dxgemm warmup``): both backends.

A first call of a kernel that is not cached compiles it: a pipeline kernel takes minutes
(:mod:`dxgemm.pipelines._build`), a float64 ``warptile`` tile 8-30 s.  :func:`warmup`
(pipeline) and :func:`warmup_rungs` (handwritten kernels) move that cost to a moment of the
user's choosing: they compile the kernels a plain GEMM runs (alpha scaling, no C: the chain
``dxgemm.gemm`` binds when ``beta == 0`` and no epilogue is given) for the requested dtypes
and arrangements.  Kernels already cached cost a file read.

Both run through :func:`build_all`: one kernel after another, or ``jobs`` at once in worker
processes.  Both work on a machine without a GPU (through
:mod:`dxgemm.pipelines._standin`): the handwritten kernels for any compute capability of
:data:`dxgemm.runtime.device.DEVICES` (one per process: the stand-in reports one), the
pipeline for its targets (:data:`dxgemm.pipelines.config.TARGETS`, 9.0).
"""

from __future__ import annotations

import contextlib
import itertools
import time
from typing import Any, Callable, Iterable

import numpy as np

from ..kernels import KernelSpec
from ..pipelines.config import CONFIGS, SIMT_FLOAT32_MAX_SIDE, parse_config
from ..pipelines.tf32x3 import kernel_variant
from .device import H100, DeviceInfo, target_device
from .rungs import plain_epilogue, stored
from .splitk import serial_tile

__all__ = ["warmup", "warmup_rungs", "plain_kernels", "build_all", "ARRANGEMENT_PAIRS"]

ARRANGEMENT_PAIRS = tuple(itertools.product(("row_major", "col_major"), repeat=2))


def _build_one(job: tuple) -> dict:
    config, dtype, arrangement, cache_root, workers, operands, split = job
    from ..pipelines import _standin
    from ..pipelines.cache import KernelCache
    from ..pipelines.loader import get_entry

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

    float32 under the ``"tf32x3"`` method (:func:`~dxgemm.pipelines.config.float32_method`) needs one
    arrangement only (its split operands are always K-major, :mod:`.tf32x3`); its outputs
    with a side of at most 128 run the SIMT method, whose small configuration is built
    for every arrangement as well.
    ``split_k_configs``: those of ``configs`` whose split-K variant (:mod:`.splitk`) is
    built as well — by default the small ones, which :func:`dxgemm.policy.pipeline_config` gives the
    outputs with few tiles that :func:`dxgemm.policy.pipeline_split_k` splits.
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
    per finished kernel; the records in ``todo``'s order.  Both warmups run through it."""
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


PLAIN_BACKENDS = ("warptile", "gemv", "tf32mma", "tf32wgmma", "splitk_reduce")
"""The kernels :func:`plain_kernels` lists come from these, a name each (``warmup --backends``)."""


def plain_kernels(dtypes: Iterable[Any], arrangements: Iterable[tuple[str, str]],
                  device: DeviceInfo = H100) -> list[tuple[str, str, tuple, str]]:
    """``(backend, dtype, (layout A, B, D), tile)`` of every handwritten kernel a plain
    ``dxgemm.gemm(a, b)`` may run (``alpha * A @ B``, no C, D row-major as ``gemm`` allocates it)
    under ``auto`` on ``device``, for the given A/B ``arrangements`` (``"row_major"``/``"col_major"`` pairs).

    That is ``warptile`` on each of its tiles that :func:`dxgemm.policy.tile_fits` the device
    (``warptile.TILE_CONFIGS`` besides ``"large"`` and the batches' ``warptile.BATCH_TILES``,
    float64's split-K tiles among them, which
    :func:`dxgemm.policy.choose_split_k` runs with the plain chain), the split-K reduce that
    applies the chain, ``gemv`` for one output row or column, and float32's default ``tf32mma`` (mode
    ``"tf32x3"``, each of its tiles and their split parts that fit) where ``auto`` runs it
    (:func:`dxgemm.policy.tf32_auto`), and on Hopper ``tf32wgmma``, which takes its 128x128 tile
    where ``auto`` picks it (:func:`dxgemm.policy.choose_tf32_rung`).
    """
    from .. import policy
    from ..kernels import tf32mma, warptile

    out = []
    for dtype in dtypes:
        name = np.dtype(dtype).name
        tf32 = [t for t in tf32mma.CONFIGS if t.startswith("tf32x3")  # float32's default mode, each tile and split
                if name == "float32" and policy.tf32_auto(device) and policy.tf32_tile_fits(device, t)]
        # float32's split and blocked tiles serve deep K, which runs on tf32mma where that runs
        tiles = [t for t in ["large"] + [t for t in warptile.TILE_CONFIGS.get(name, {}) if t != "large"]
                 if policy.tile_fits(device, name, t) and t not in warptile.BATCH_TILES
                 and not (tf32 and (t.endswith("_blocked") or warptile.TILE_CONFIGS[name].get(t, {}).get("split_k")))]
        wgmma = ["tf32x3"] if tf32 and policy.tf32_wgmma_fits(device) else []  # auto's 128x128 tile on Hopper
        split_parts = [t for t in tiles if warptile.TILE_CONFIGS.get(name, {}).get(t, {}).get("split_k")]
        serial = ([("warptile", t) for t in _serial_parts("warptile", name, device) if t in split_parts]
                  + [("tf32mma", t) for t in _serial_parts("tf32mma", name, device) if t in tf32])
        for arrangement in arrangements:
            layouts = tuple(a.split("_")[0] for a in arrangement) + ("row",)
            out += [("warptile", name, layouts, tile) for tile in tiles]
            out += [("gemv", name, layouts, tile) for tile in ("large", "rows", "rows_deep")]
            out += [("tf32mma", name, layouts, tile) for tile in tf32]
            out += [(backend, name, layouts, serial_tile(t)) for backend, t in serial]
            out += [("tf32wgmma", name, layouts, tile) for tile in wgmma]
        if tf32 or split_parts:
            out.append(("splitk_reduce", name, ("row", "row", "row"), "large"))
    return out


def _serial_parts(backend: str, dtype: str, device: DeviceInfo) -> list[str]:
    """The split part tiles of ``backend`` in ``dtype`` whose calls :func:`dxgemm.policy.split_sum_serial`
    may sum in the slices' kernel: those of outputs with a side of at most
    :data:`~dxgemm.policy.SERIAL_SUM_MAX_SIDE` and at most
    :data:`~dxgemm.policy.SERIAL_SUM_MAX_OUTPUT` values (a long K, so that they split)."""
    from .. import policy

    parts = set()
    for side in range(1, policy.SERIAL_SUM_MAX_SIDE + 1):
        for other in {side, max(side, policy.SERIAL_SUM_MAX_OUTPUT // side)}:
            for m, n in ((side, other), (other, side)):
                tile = (policy.choose_tf32_tile("tf32x3", m, n, 1 << 16, device) if backend == "tf32mma"
                        else None)
                parts.add(policy.split_part_tile(backend, tile, m, n, dtype))
    return sorted(parts)


def _build_plain(job: tuple) -> dict:
    """Build one of :func:`plain_kernels` into the cache (a worker process's task)."""
    (backend, dtype, layouts, tile), cc, cache_root = job
    from ..kernels import Layout
    from ..pipelines import _standin
    from ..pipelines.cache import KernelCache

    _standin.activate(tuple(cc))  # no-op with a GPU
    bound = plain_epilogue(dtype)
    if tile.endswith("_serial"):  # the slices' kernel also takes the workspace and arrival counts
        bound = _serial_bound(bound, np.dtype(dtype))
    spec = KernelSpec(np.dtype(dtype), *(Layout(x) for x in layouts), bound.key, None, tile=tile)
    t0 = time.perf_counter()
    entry = stored(backend, spec, bound, tuple(cc), KernelCache(cache_root))
    return {"backend": backend, "tile": tile, "dtype": dtype, "layouts": "/".join(layouts),
            "seconds": round(time.perf_counter() - t0, 1), "path": str(entry.path)}


def _serial_bound(bound: Any, dtype: np.dtype) -> Any:
    """``bound`` as a serial split kernel takes it (:func:`dxgemm.runtime.splitk.rung_serial_split`):
    the workspace and counts enter the kernel and its key by their Numba types alone (1-D,
    contiguous), so host arrays of those types stand for the device buffers a call gets."""
    from .splitk import _SerialBound

    return _SerialBound(bound, (np.empty(1, dtype), np.empty(1, np.int32)))


def warmup_rungs(dtypes: Iterable[Any] = ("float64", "float32"), *,
           arrangements: Iterable[tuple[str, str]] = (("row_major", "row_major"),), cc: tuple[int, int] | None = None,
           cache_root: str | None = None, jobs: int = 1, progress: bool = True,
           log: Callable[[str], None] | None = None, backends: Iterable[str] | None = None) -> list[dict]:
    """Compile :func:`plain_kernels` into the on-disk cache; one record per kernel.

    ``backends``: only the kernels of these (names of :func:`plain_kernels`' first field:
    ``warptile``, ``gemv``, ``tf32mma``, ``tf32wgmma``, ``splitk_reduce``); default all of them.

    ``cc``: the compute capability to build for (default: the current GPU's, or 9.0 where
    there is none, through the stand-in driver; without a GPU any of
    :data:`~dxgemm.runtime.device.DEVICES`' once per process, with one only its own).  The
    kernels are those a plain call runs on that target's smallest GPU
    (:func:`~dxgemm.runtime.device.target_device`).  Kernels already stored cost a file read.
    ``jobs > 1`` builds that many at once in worker processes (Numba compiles a kernel on
    one core: a float64 ``warptile`` tile takes 8-30 s).
    """
    from ..pipelines import _standin

    for dtype in dtypes:
        if np.dtype(dtype) not in (np.float32, np.float64):
            raise TypeError(f"dtypes: the handwritten kernels support float32 and float64, not {np.dtype(dtype)}")
    wanted = None if backends is None else set(backends)
    if wanted is not None and (unknown := sorted(wanted - set(PLAIN_BACKENDS))):
        raise ValueError(f"backends: the handwritten kernels a plain call runs are {', '.join(PLAIN_BACKENDS)}; "
                         f"got {', '.join(unknown)}")
    explicit = cc is not None
    cc = tuple(cc) if explicit else (_standin.active_cc() or (9, 0))
    device = target_device(cc) if explicit else None  # ValueError for a compute capability dxgemm does not know
    if _standin.activate(cc):
        device = device or target_device(cc)
    else:  # a GPU: its own compute capability and figures only
        from numba import cuda

        from .device import device_cc, device_info

        own = device_cc(cuda.get_current_device().id)
        if explicit and own != cc:
            raise ValueError(f"this GPU is {own[0]}.{own[1]}: build for {cc[0]}.{cc[1]} on a machine without a GPU "
                             "or with such a GPU")
        cc, device = own, device_info(cuda.get_current_device().id)
    todo = [(kernel, cc, cache_root) for kernel in plain_kernels(dtypes, arrangements, device)
            if wanted is None or kernel[0] in wanted]
    return build_all(_build_plain, todo, jobs=jobs, desc="dxgemm warmup (handwritten kernels)", progress=progress,
                     log=log, describe=lambda r: f"{r['backend']}/{r['tile']} {r['dtype']} {r['layouts']}: "
                                                 f"{r['seconds']} s")
