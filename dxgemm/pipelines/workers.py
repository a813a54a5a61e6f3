"""Compile workers: the build's NVRTC work spread over processes.

A cold pipeline build compiles ~11 libmathdx LTO-IR objects and asks libmathdx for the
finalize traits of its tensors and pipelines; both are slow and independent.  The build
(:mod:`._build`) starts plain subprocesses (``python -m dxgemm.pipelines.workers <job>``):
trait processes, one per trait group, and compile workers that replay the same lowering
(:func:`.codegen._lower`) in ``defer`` mode and compile the objects it asks for into the
shared on-disk store (:mod:`._lto`), which the parent then links.  How many:
:func:`compile_workers` (``DXGEMM_COMPILE_WORKERS``, :mod:`dxgemm.runtime.env`).
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from . import nvmath_internals
from .config import PipelineConfig
from .codegen import _lower, _make_matmul, _operand_precision, _placeholder


def compile_workers() -> int:
    """Processes a cold build spreads libmathdx's NVRTC compiles over (``DXGEMM_COMPILE_WORKERS``,
    :mod:`dxgemm.runtime.env`); by default one per CPU core beyond the first, at most 12 (a
    kernel needs ~11 objects)."""
    from ..runtime import env

    return env.compile_workers()


TRAIT_GROUPS = ("pipeline", "tensor", "descriptor")
"""The finalize batches a cold build runs at the same time (see :func:`_trait_plan`)."""


def _trait_plan(mm, config: PipelineConfig, dtype: np.dtype, arrangement: tuple[str, str]) -> dict[str, Any]:
    """The libmathdx handles whose finalize traits :func:`_lower_inner` reads, by batch.

    Made the way nvmath makes them during the lowering (same builders, same arguments,
    hence the same descriptions in :class:`._lto.FinalizeTraits`), without finalizing
    anything or querying a trait.  Call inside ``_operand_precision`` and
    ``_lto.traits.deferring()``.  ``"pipeline"``: the device and tile pipelines (one
    finalize); ``"tensor"``: the global A/B tensors and the
    suggested register C and accumulator (one finalize); ``"descriptor"``: the
    Matmul descriptor nvmath reads value types, leading dimensions, block dim and
    alignment from (its first trait query compiles it).  The device pipeline's
    value types are derived from ``dtype`` here, where nvmath reads them from the
    descriptor's traits; a handle this plan gets wrong only costs its finalize in the
    lowering (a store miss), never a wrong answer.  ``"handles"``: all of them
    (:class:`.nvmath_internals.LoweringHandles`, made by
    :func:`.nvmath_internals.lowering_handles`).
    """
    h = nvmath_internals.lowering_handles(mm, config.depth, dtype, _placeholder(arrangement[0], dtype),
                                          _placeholder(arrangement[1], dtype))
    return {"pipeline": [h.device_pipeline, h.tile_pipeline], "tensor": [h.rmem_c, h.accumulator_c],
            "descriptor": [h.descriptor], "handles": h}


def _speculate(plan: dict[str, Any], cc: tuple[int, int]) -> list[str]:
    """Ask for the device functions of the pipelines and the accumulator now; returns their keys.

    The lowering will ask for these (nvmath's ``compile_blas_tile_pipeline_{init,execute,
    destroy}``, ``compile_blas_accumulator_init`` and the pipeline's ``create``, made here
    the same way from the plan's handles: :func:`.nvmath_internals.pipeline_function_codes`)
    and they need no trait, so a worker can compile them while the traits are still being
    finalized.  The tile pipeline's ``execute`` is
    the longest compile of a kernel (34 s on the 2-core machine, the others 7-13 s).  A
    request the lowering does not repeat is only wasted work: the link takes what the
    lowering asked for.
    """
    from . import _lto

    codes = nvmath_internals.pipeline_function_codes(plan["handles"], cc)
    return [c.key for c in codes if isinstance(c, _lto.Pending)]


@contextlib.contextmanager
def _planned(config: PipelineConfig, dtype: np.dtype, arrangement: tuple[str, str], cc: tuple[int, int],
             operands: str):
    """``(plan, missing groups)`` with the plan's handles alive inside the block."""
    from . import _lto

    with _operand_precision(operands, dtype), _lto.traits.deferring():
        plan = _trait_plan(_make_matmul(config, dtype, arrangement, cc), config, dtype, arrangement)
        missing = []
        for group in TRAIT_GROUPS:
            handles = plan[group]
            descriptions = [_lto.traits.description(h) for h in handles]
            if any(d is None or _lto.traits.cached(d) is None for d in descriptions):
                missing.append(group)
        yield plan, missing


def _compute_traits(plan: dict[str, Any], group: str) -> None:
    """Finalize one group of the plan (one libmathdx call) and store its traits."""
    from . import _lto

    if group == "descriptor":
        for handle in plan[group]:
            _lto.traits.entry(handle)
    else:
        _lto.traits.materialize(group)


def _trait_job(config: dict, dtype: str, arrangement: list[str], cc: list[int], store_root: str, target: str,
               group: str, operands: str = "native") -> dict:
    """Trait process: finalize one group of :func:`_trait_plan` and store its traits."""
    from . import _lto, _standin

    t0 = time.perf_counter()
    _standin.activate(tuple(cc))
    _lto.intercept(_lto.LtoStore(store_root), mode="defer", target=target)
    t1 = time.perf_counter()
    with _planned(PipelineConfig(**config), np.dtype(dtype), tuple(arrangement), tuple(cc), operands) as (plan, missing):
        if group in missing:
            _compute_traits(plan, group)
    return {"traits": group, "import_s": t1 - t0, "finalize_s": time.perf_counter() - t1,
            "stats": _lto.traits.stats()}


def _worker(config: dict, dtype: str, arrangement: list[str], cc: list[int], store_root: str,
            target: str, index: int, workers: int, operands: str = "native", wait: bool = False,
            fragment_store: str = "loop", speculate: bool = True) -> dict:
    """Worker process: replay the lowering in ``defer`` mode, compile its share of the objects.

    With ``wait``, the worker imports everything, compiles its share of the requests
    :func:`_speculate` knows without traits, and then waits for a ``go`` line on stdin: the
    parent sends it once the finalize traits are on disk, so the replay reads them instead
    of finalizing (anything else on stdin, or its end, stops the worker).  Workers share
    the compiles through claims (:func:`._lto.compile_pending`).
    """
    from . import _lto, _standin

    t0 = time.perf_counter()
    _standin.activate(tuple(cc))
    _lto.intercept(_lto.LtoStore(store_root), mode="defer", target=target)
    config_, dtype_, arrangement_, cc_ = PipelineConfig(**config), np.dtype(dtype), tuple(arrangement), tuple(cc)
    t1 = time.perf_counter()
    speculated = 0
    if wait and speculate:
        # While the traits are finalized elsewhere: the device functions that need none
        # (inside the plan's block: its handles must be alive to compile from)
        with _planned(config_, dtype_, arrangement_, cc_, operands) as (plan, _missing):
            speculated = _lto.compile_pending(index, workers, _speculate(plan, cc_))
    t2 = time.perf_counter()
    if wait:
        import sys

        if sys.stdin.readline().strip() != "go":
            return {"index": index, "compiled": speculated, "stopped": True}
    t3 = time.perf_counter()
    _lower(config_, dtype_, arrangement_, None, (), cc_, operands, fragment_store)
    t4 = time.perf_counter()
    done = _lto.compile_pending(index, workers)
    return {"index": index, "compiled": speculated + done, "speculated": speculated, "import_s": t1 - t0,
            "speculate_s": t2 - t1, "wait_s": t3 - t2, "replay_s": t4 - t3, "compile_s": time.perf_counter() - t4,
            "traits": _lto.traits.stats()}


def _spawn(job: list) -> Any:
    """``python -m dxgemm.pipelines.workers <job>``: a worker or a trait process.

    Plain subprocesses, not ``multiprocessing``: its ``spawn`` start method re-imports the
    caller's ``__main__``, and a user script without a ``__main__`` guard that calls
    ``dxgemm.gemm`` at top level would then run again in every worker.
    """
    import json
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-m", "dxgemm.pipelines.workers", json.dumps(job)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                                [str(Path(__file__).resolve().parents[2])]
                                + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])))


def _start_traits(config: PipelineConfig, dtype: np.dtype, arrangement: tuple[str, str], cc: tuple[int, int],
                  store: Any, target: str, groups: list[str], operands: str = "native") -> list:
    """One process per finalize group (:func:`_trait_job`)."""
    return [_spawn(["traits", config.as_dict(), dtype.name, list(arrangement), list(cc), str(store.root), target,
                    group, operands]) for group in groups]


def _start_workers(config: PipelineConfig, dtype: np.dtype, arrangement: tuple[str, str], cc: tuple[int, int],
                   store: Any, target: str, workers: int, operands: str = "native", wait: bool = False,
                   fragment_store: str = "loop") -> list:
    """Start ``workers`` processes running :func:`_worker`."""
    return [_spawn(["worker", config.as_dict(), dtype.name, list(arrangement), list(cc), str(store.root), target, i,
                    workers, operands, wait, fragment_store]) for i in range(workers)]


def _release_workers(procs: list) -> None:
    """Send ``go`` to workers started with ``wait``."""
    for proc in procs:
        try:
            proc.stdin.write("go\n")
            proc.stdin.flush()  # not closed here: communicate() flushes stdin again, and a closed one raises
        except (OSError, ValueError):
            pass  # a worker that died: the parent compiles its share (resolve() falls back)


def _wait_traits(procs: list):
    """Wait for the trait processes; yield one log line each."""
    import json

    for proc in procs:
        out, err = proc.communicate()
        lines = [x for x in out.splitlines() if x.startswith("{")]
        if proc.returncode != 0 or not lines:
            # the lowering finalizes whatever is missing itself (slower, same result)
            yield f"trait process failed (exit {proc.returncode}): {err.strip()[-400:]}"
            continue
        r = json.loads(lines[-1])
        yield (f"traits {r['traits']}: import {r['import_s']:.1f} s, finalize {r['finalize_s']:.1f} s "
               f"{r['stats']['finalizes']}")


def _wait_workers(procs: list, desc: str, ready: Callable[[], bool] | None = None):
    """Wait for the workers (progress bar on a terminal); yield one log line per worker.

    ``ready``: once it returns True (every object this process needs is on disk), the
    workers still running are stopped — what they would still do (a replay after a long
    speculative compile, say) is no longer needed, and the link wants the CPUs.
    """
    import json

    try:
        from tqdm import tqdm

        bar = tqdm(total=len(procs), desc=desc, unit="proc", disable=None, leave=False)
    except ImportError:
        bar = None
    pending = list(procs)
    while pending:
        for proc in list(pending):
            if proc.poll() is None:
                continue
            pending.remove(proc)
            out, err = proc.communicate()
            if bar is not None:
                bar.update(1)
            lines = [x for x in out.splitlines() if x.startswith("{")]
            if proc.returncode != 0 or not lines:
                # the parent compiles whatever this worker did not (resolve() falls back)
                yield f"worker failed (exit {proc.returncode}): {err.strip()[-400:]}"
                continue
            r = json.loads(lines[-1])
            if r.get("stopped"):
                yield f"worker {r['index']}: stopped before its replay"
                continue
            yield (f"worker {r['index']}: import {r['import_s']:.1f} s, {r['speculated']} speculative object(s) in "
                   f"{r['speculate_s']:.1f} s, waited {r['wait_s']:.1f} s, replay {r['replay_s']:.1f} s, "
                   f"{r['compiled'] - r['speculated']} object(s) in {r['compile_s']:.1f} s")
        if pending and ready is not None and ready():
            for proc in pending:
                proc.kill()
                proc.communicate()
            yield f"every object on disk: {len(pending)} worker(s) stopped"
            break
        time.sleep(0.05)
    if bar is not None:
        bar.close()


if __name__ == "__main__":  # a compile worker or a trait process (see _spawn)
    import json
    import sys

    _kind, *_args = json.loads(sys.argv[1])
    print(json.dumps((_trait_job if _kind == "traits" else _worker)(*_args)), flush=True)
