"""``dxgemm.gemm(..., backend="pipeline")``: from validated operands to a pipeline launch.

Nothing here imports nvmath: the kernel comes from the process memo or the on-disk cache,
and only a miss compiles (:mod:`dxgemm.pipelines.loader`).  The configuration and the K
split are :mod:`dxgemm.policy`'s, unless a configuration is forced
(:class:`~dxgemm.pipelines.config.use_config`) or was tuned for the shape class
(:mod:`.tuning`).

What the pipeline can take, and what it cannot
----------------------------------------------
It takes every float32/float64 problem with ``m, n, k >= 1`` whose operands have a unit
stride in one dimension (``dxgemm._arrays`` already copies inputs without one): shapes
that are not tile multiples, short K and misaligned operands are handled by the launcher
(:mod:`dxgemm.pipelines._launch`).  It cannot run when

* the device is not compute capability 9.0 (the cubins are ``sm_90a``: wgmma-era SASS
  that no other GPU loads), or ``DXGEMM_DEVICE_AS`` makes it decide as a GPU that is not,
* Numba's CUDA simulator is active, or cuda.core is missing,
* the kernel is not in the cache and nvmath-python (with libmathdx) is not installed to
  compile it,
* ``n`` needs more column blocks of the chosen tile than CUDA's grid takes in ``y``
  (:data:`~dxgemm.kernels._spec.MAX_GRID_Y`), where the pipeline's launch walks them.

Then :class:`PipelineUnavailable` is raised; ``backend="auto"`` catches it and runs the
best handwritten backend instead, ``backend="pipeline"`` lets it reach the caller.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np

from .. import policy
from ..kernels._device import SIMULATOR
from ..kernels._spec import MAX_GRID_Y
from ..pipelines.config import TARGETS, PipelineConfig, forced_config, parse_config
from ..pipelines.loader import PipelineUnavailable
from ..pipelines.tf32x3 import ARRANGEMENT, kernel_variant
from ..pipelines.tf32x3 import run as run_tf32x3
from . import env
from .device import device_cc, device_info
from .launch import matrix_of
from .tuned import lookup

__all__ = ["PipelineUnavailable", "PipelineCall", "availability", "prepare", "run", "matrix_of", "suggest",
           "split_k", "use_split_k"]

_forced_slices: list[int] = []


def suggest(m: int, n: int, k: int, dtype: Any, *, device: Any = None, method: str | None = None) -> PipelineConfig:
    """The pipeline configuration a call runs: the one :class:`~dxgemm.pipelines.config.use_config`
    forces, else the one :func:`dxgemm.autotune.autotune` stored for the shape class, else
    :func:`dxgemm.policy.pipeline_config` for ``device`` (a ``DeviceInfo``, an ordinal, or
    None: the current device, an H100's figures without one).  ``method``: ``"tf32"`` for a
    float32 call of one TF32 pass (``precision="tf32"``), which takes only the policy's choice."""
    for name, value in (("m", m), ("n", n), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    dt = np.dtype(dtype)
    forced = forced_config()
    if dt in (np.dtype(np.float32), np.dtype(np.float64)) and method is None:
        if forced is not None:
            return parse_config(forced, dt, m, n)
        tuned = lookup(m, n, k, dt)
        if tuned is not None:
            return tuned
    return policy.pipeline_config(m, n, k, dt, device_info(device), method)


def split_k(m: int, n: int, k: int, config: PipelineConfig, dtype: Any, *, device: Any = None,
            segments: int | None = None) -> int:
    """K slices of a pipeline call (:func:`dxgemm.policy.pipeline_split_k`; :class:`use_split_k`
    forces a count).  ``segments``: how many times the kernel's K is the call's (3 under
    3xTF32, 1 for one TF32 pass; default the shape's float32 method)."""
    return policy.pipeline_split_k(m, n, k, config, dtype, device_info(device),
                                   slices=_forced_slices[-1] if _forced_slices else None, segments=segments)


def forced_slices() -> tuple:
    """The split counts :class:`use_split_k` forces now (innermost last)."""
    return tuple(_forced_slices)


class use_split_k:
    """``with use_split_k(4):`` runs pipeline calls in that many K slices (1: unsplit), still
    bounded by the slice minimum; for tests and benchmarks.  Process-wide, nestable."""

    def __init__(self, slices: int):
        self.slices = policy.check_split_count(slices)

    def __enter__(self) -> "use_split_k":
        _forced_slices.append(self.slices)
        return self

    def __exit__(self, *exc: Any) -> None:
        _forced_slices.pop()


def availability(device: int) -> str | None:
    """None when the pipeline can run on ``device``, else the reason it cannot (one sentence)."""
    if SIMULATOR:
        return "Numba's CUDA simulator is active (NUMBA_ENABLE_CUDASIM=1)"
    if importlib.util.find_spec("cuda.core") is None:
        return "cuda.core is not installed"
    try:
        cc = device_cc(int(device))
    except Exception as e:  # no driver, no such device
        return f"GPU {device} cannot be queried ({e})"
    if tuple(cc) not in TARGETS:
        return f"its kernels are built for compute capability {_targets()} (H100/H200); GPU {device} is {cc[0]}.{cc[1]}"
    stand_in = env.device_as()  # decisions as on another GPU (testing): the pipeline only if it has one
    if stand_in is not None and tuple(stand_in.cc) not in TARGETS:
        return (f"DXGEMM_DEVICE_AS makes GPU {device} decide as a {stand_in.name} (compute capability "
                f"{stand_in.cc[0]}.{stand_in.cc[1]}); the pipeline's kernels are built for {_targets()} only")
    return None


def _targets() -> str:
    return ", ".join(f"{a}.{b}" for a, b in TARGETS)


class PipelineCall:
    """What a pipeline call decided before launching: the loaded kernel and how to feed it.

    Depends only on the problem's structure (dtype, shape, arrangements, epilogue
    structure and argument types), never on addresses, so ``dxgemm.gemm`` keeps one per
    call signature and a repeated call goes straight to :meth:`__call__`.
    """

    __slots__ = ("kernel", "segments", "device")

    def __init__(self, kernel: Any, segments: int, device: int):
        """``segments``: 0 for native operands, 3 for the 3xTF32 split, 1 for one TF32 pass
        (:func:`dxgemm.pipelines.tf32x3.run`)."""
        self.kernel, self.segments, self.device = kernel, segments, device

    def __call__(self, a: Any, b: Any, d: Any, m: int, n: int, k: int, epi_args: tuple | list, stream: int):
        """Launch on ``stream`` for :class:`~.launch.Matrix` views ``a``, ``b``, ``d``; returns the Plan."""
        if self.segments:
            return run_tf32x3(self.kernel, a, b, d, m, n, k, epi_args, stream, self.device, self.segments)
        return self.kernel(stream, a, b, d, m, n, k, epi_args)


def prepare(dtype: Any, arrangements: tuple[str, str], m: int, n: int, k: int, bound: Any, device: int,
            *, config: PipelineConfig | None = None, d_arrangement: str = "row_major",
            precision: str | None = None) -> "PipelineCall | Any":
    """Choose the configuration, kernel variant and K split for this problem and load the kernel(s).

    ``arrangements``: A's and B's (``"row_major"``/``"col_major"``); ``bound``: the bound
    epilogue chain (alpha/beta first), whose key and argument types select the kernel;
    ``d_arrangement``: D's, which the split-K reduce is compiled for; ``precision``: None
    (float32 by the shape's method, :func:`~dxgemm.pipelines.config.float32_method`) or
    ``"tf32"`` (one TF32 pass on operands rounded to TF32).  A problem with too
    few output tiles (:func:`split_k`) gets a :class:`.splitk.SplitKCall`.
    Raises :class:`PipelineUnavailable` when the pipeline cannot run here (module docstring).
    """
    from ..pipelines.loader import get_kernel

    reason = availability(device)
    if reason is not None:
        raise PipelineUnavailable(f"the pipeline backend cannot run: {reason}")
    dtype = np.dtype(dtype)
    one_pass = precision == "tf32"
    if precision not in (None, "tf32") or (one_pass and dtype != np.float32):
        raise ValueError(f"the pipeline takes precision None or 'tf32' (float32 only), got {precision!r} for {dtype}")
    cfg = config or suggest(m, n, k, dtype, device=device, method="tf32" if one_pass else None)
    if -(-n // cfg.tile_n) > MAX_GRID_Y:  # before loading anything: auto runs a handwritten rung instead
        raise PipelineUnavailable(f"n = {n} columns need more than {MAX_GRID_Y} column blocks of the "
                                  f"{cfg.tile_n}-column tile (CUDA's grid limit in y)")
    if one_pass:
        arrangement, operands = ARRANGEMENT, "tf32"
        segments = 1
    else:
        arrangement, operands = kernel_variant(dtype, arrangements, m, n)
        segments = 3 if operands == "tf32" else 0
    slices = split_k(m, n, k, cfg, dtype, device=device, segments=segments)
    if slices > 1:
        from .splitk import prepare_split

        return prepare_split(cfg, dtype, arrangement, operands, bound, d_arrangement, slices, device, segments)
    traits = policy.EpilogueTraits.of(bound)  # what the bound chain declares (any object with key/make/args)
    kernel = get_kernel(
        cfg, dtype, arrangement, device=device, operands=operands,
        epilogue_key=bound.key, make_epilogue=bound.make, epi_args=bound.args,
        preload=traits.preload, wide_walk=traits.wide_walk,
    )
    return PipelineCall(kernel, segments, device)


def run(op_a: Any, op_b: Any, op_d: Any, m: int, n: int, k: int, bound: Any, stream: int, device: int,
        *, config: PipelineConfig | None = None):
    """Run ``D = bound_epilogue(A @ B)`` through the pipeline; returns the launch :class:`~dxgemm.pipelines._launch.Plan`.

    ``bound`` is the bound epilogue chain (alpha/beta first).  Raises
    :class:`PipelineUnavailable` when the pipeline cannot run here (module docstring).
    """
    a, b, d = matrix_of(op_a), matrix_of(op_b), matrix_of(op_d)
    call = prepare(op_a.dtype, (a.arrangement, b.arrangement), m, n, k, bound, device, config=config,
                   d_arrangement=d.arrangement)
    return call(a, b, d, m, n, k, bound.args, stream)
