"""Pipeline configurations: the small fixed set, and the code variants that follow from one.

A configuration is what a pipeline kernel is compiled for besides dtype, arrangement and
epilogue: the block tile ``tile_m x tile_n x tile_k``, the threads per block and the
pipeline depth (shared-memory stages in flight).  Every distinct configuration is a
separate cubin of several MB and a cold compile of minutes, so dxgemm keeps a *small,
fixed* set of them (:data:`CONFIGS`, two per dtype) and :func:`dxgemm.policy.pipeline_config`
only ever picks from that set: a new shape never means a new configuration, and the on-disk
cache stays small.  The set is the fastest of the configurations measured against cuBLAS on
the H100 (``docs/performance.md``); those that spilled registers, or lost at every shape,
are left out.

float32 runs the SIMT configurations only where the output has a side of at most 128
(:func:`float32_method`: there the 3xTF32 split's memory traffic outweighs the GEMM);
elsewhere it runs the 3xTF32 split on the TF32 tensor cores (:mod:`.tf32x3`), whose own
fixed set is :data:`TF32X3_CONFIGS`.  :func:`configs_for` gives the set for a dtype and
output shape.  :func:`pipeline_store`, :func:`walk_unroll` and :func:`walk_preload` say how
a kernel of a configuration stores its fragment (part of its cache key).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..runtime.device import H100, DeviceInfo  # noqa: F401  (re-exported: pipelines.DeviceInfo)

__all__ = ["PipelineConfig", "DeviceInfo", "CONFIGS", "TF32X3_CONFIGS", "FLOAT32_METHODS", "float32_method",
           "uses_tf32x3", "STORES", "pipeline_store", "configs_for", "H100", "waves", "wave_efficiency",
           "use_config", "forced_config", "parse_config", "slice_ranges", "MAX_SPLIT_K"]


SMEM_PER_SM = 228 * 1024
"""Shared memory per SM on sm_90 (H100)."""


@dataclass(frozen=True, order=True)
class PipelineConfig:
    """One compiled pipeline kernel's shape: block tile, threads per block, pipeline depth."""

    tile_m: int
    tile_n: int
    tile_k: int
    block_size: int
    depth: int

    def __post_init__(self) -> None:
        for name in ("tile_m", "tile_n", "tile_k", "block_size", "depth"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.block_size % 32:
            raise ValueError(f"block_size must be a multiple of 32 (whole warps), got {self.block_size}")

    @property
    def name(self) -> str:
        """``"128x128x32_t256_d2"``: how records and cache listings name it."""
        return f"{self.tile_m}x{self.tile_n}x{self.tile_k}_t{self.block_size}_d{self.depth}"

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def smem_bytes(self, itemsize: int) -> int:
        """Shared memory the A/B stages need: ``depth * (tile_m + tile_n) * tile_k * itemsize``.

        An estimate (the pipeline's own ``buffer_size`` adds a little for its barriers);
        used to reject configurations a device cannot hold.
        """
        return self.depth * (self.tile_m + self.tile_n) * self.tile_k * itemsize

    def resident_blocks(self, itemsize: int) -> int:
        """Blocks of this configuration one SM can hold by shared memory (H100: 228 KiB, 1 KiB
        reserved per block), at most 4."""
        return max(1, min(SMEM_PER_SM // (self.smem_bytes(itemsize) + 1024), 4))

    def bounded_blocks(self, itemsize: int) -> int:
        """Blocks per SM a staged kernel is compiled for (its ``launch_bounds`` minimum).

        :meth:`resident_blocks`, but never so many that a thread keeps fewer than 128 of the
        SM's 65536 registers: the accumulator fragment alone takes 64-128, and ptxas
        refuses the TF32 wgmma kernel at 80 (128x128, 256 threads, three blocks asked).
        """
        return max(1, min(self.resident_blocks(itemsize), 65536 // (self.block_size * 128)))

    def min_k(self) -> int:
        """The pipeline prefetches ``depth`` K-tiles before computing: K must cover them."""
        return self.tile_k * self.depth


_F64 = np.dtype(np.float64)
_F32 = np.dtype(np.float32)

# The fixed set, best first for each dtype.  "large" is the default for big problems,
# "small" the one for skinny, shallow or small problems (more blocks, shorter pipeline
# fill).  float64 "small" is 64x64x32: three blocks per SM (64 KiB of pipeline buffer
# each) hide the DMMA and load latency that one 128x64 block per SM leaves exposed
# (docs/performance.md).
CONFIGS: dict[np.dtype, dict[str, PipelineConfig]] = {
    _F64: {
        "large": PipelineConfig(128, 128, 32, 256, 2),
        "small": PipelineConfig(64, 64, 32, 128, 2),
    },
    _F32: {
        "large": PipelineConfig(128, 128, 16, 256, 3),
        "small": PipelineConfig(64, 64, 32, 128, 2),
    },
}


TF32X3_CONFIGS: dict[str, PipelineConfig] = {
    "large": PipelineConfig(128, 256, 32, 256, 3),
    "small": PipelineConfig(128, 128, 32, 256, 3),
}
"""float32 through the 3xTF32 split (:mod:`.tf32x3`): kernels on the TF32 tensor cores
(wgmma 64x128x8 / 64x256x8 per warpgroup, TMA loads), A and B K-major.  Their K is
three times the problem's.  128x256 wins on large squares; 128x128 on shallow K and
small outputs, where the wide tile leaves SMs idle; a fourth stage gains nothing.  The
figures against cuBLAS SGEMM are in ``docs/performance.md``.
"""

_SHALLOW_K_TILES_TF32 = 64
"""The 3xTF32 kernels count K (tripled) as shallow up to 64 K-tiles (k <= 682): the
128x128 tile wins at shallow K and loses at deep K (:data:`TF32X3_CONFIGS`)."""

FLOAT32_METHODS = ("tf32x3", "fp32")
"""How a float32 pipeline GEMM multiplies: ``"tf32x3"`` (split operands on the TF32
tensor cores, float32-accurate; :mod:`.tf32x3`) or ``"fp32"`` (cuBLASDx's float32 SIMT
pipeline)."""


SIMT_FLOAT32_MAX_SIDE = 128
"""float32 outputs with a side of at most this many rows or columns run the SIMT method."""


def float32_method(m: int | None = None, n: int | None = None) -> str:
    """The float32 method (:data:`FLOAT32_METHODS`) for an ``m x n`` output: ``"fp32"`` where a
    side is at most :data:`SIMT_FLOAT32_MAX_SIDE`, else (and without a shape) ``"tf32x3"``.

    The 3xTF32 split reads A and B and writes three copies of each, ~16 (m + n) k bytes
    against the GEMM's m n k multiply-adds: with a side of 64 that traffic alone outlasts
    cuBLAS's whole GEMM, while the SIMT pipeline reads A and B once and has little
    arithmetic to do (it led up to a side of 128, 3xTF32 from 256).  The SIMT method is true
    float32 arithmetic: as accurate as 3xTF32 or more.
    """
    if m is not None and n is not None and min(m, n) <= SIMT_FLOAT32_MAX_SIDE:
        return "fp32"
    return "tf32x3"


STORES = ("loop", "unrolled", "staged", "staged_vec", "staged_tile", "staged_vec_tile")
"""The fragment stores a pipeline kernel can be built with; ``_build`` generates them and
its ``STORES`` note says what each does.  :func:`pipeline_store` picks one."""

TILE_WALK_STORES = ("staged_tile", "staged_vec_tile")
"""The stores that walk a tile wholly inside D with a constant trip count (the tile walk)."""


def pipeline_store(operands: str = "native", config: "PipelineConfig | None" = None, dtype: Any = None) -> str:
    """How a pipeline kernel stores its accumulator fragment (:data:`STORES`).

    The staged stores write the fragment into the finished pipeline's shared memory and then
    store the tile in D's memory order with one copy of the epilogue's code; where the buffer
    leaves room for two blocks per SM, one block's epilogue also overlaps another's main
    loop (the tile walk, ``staged_tile``; vectorised, ``staged_vec_tile``, for the TF32
    kernels).  They beat the loop store on every kernel (``docs/performance.md``).  A
    configuration whose tile does not fit its own pipeline buffer (a shallow ``tile_k`` with
    a large tile) keeps the loop store, as does one with a single block per SM.
    """
    itemsize = np.dtype(dtype).itemsize if dtype is not None else None
    if config is not None and itemsize is not None and \
            config.tile_m * config.tile_n * itemsize > config.smem_bytes(itemsize):
        return "loop"  # the tile does not fit the pipeline's buffer to be staged there
    if operands == "tf32":
        return "staged_vec_tile"
    if config is not None and itemsize is not None and config.resident_blocks(itemsize) >= 2:
        return "staged_tile"
    return "loop"


WALK_UNROLL = 4
"""Groups of the tile walk per loop iteration (:func:`walk_unroll`)."""

WALK_UNROLL_WIDE = 16
"""Groups per iteration of the float32 (vector) tile walk for a chain with a
:attr:`~dxgemm.epilogues.Epilogue.wide_walk` stage (:func:`walk_unroll`)."""


def walk_unroll(store: str, split_k: bool = False, wide: bool = False) -> int:
    """How many groups the tile walk of a ``store`` stores per loop iteration (1: not a walk).

    The walk (``staged_tile`` / ``staged_vec_tile``) loads :data:`WALK_UNROLL` groups from
    shared memory, then runs their epilogues, then stores them: written group by group, a
    group's loads could not start before the previous group's store (D may alias an epilogue
    operand, and Numba's generic pointers may alias shared memory), so every group paid a
    load latency, and a long float64 ``erf`` chain per group could not be hidden.  A float32 chain with a long dependent stage
    (``wide``: the exact ``gelu``, ``tanh``; :attr:`~dxgemm.epilogues.Epilogue.wide_walk`)
    walks :data:`WALK_UNROLL_WIDE` groups per iteration, giving its polynomial four times the
    independent elements to interleave; stages built on two MUFU instructions ran slower so
    and keep 4, as does float64 (its exact GELU would crowd the registers).  The split-K
    variant stores partial sums with no epilogue and walks group by group.  Part of the
    cache key (a kernel's ``walk`` field).
    """
    if store not in TILE_WALK_STORES or split_k:
        return 1
    return WALK_UNROLL_WIDE if wide and store == "staged_vec_tile" else WALK_UNROLL


def walk_preload(store: str, has_preload: bool, split_k: bool = False) -> bool:
    """Whether a kernel with this ``store`` reads its epilogue's per-tile operands early (``has_preload``:
    the bound epilogue has such reads, a column ``bias`` for one; see ``BoundEpilogue.preload``).

    A tile walk keeps each thread's columns (D row-major) for the whole tile, so the compiler
    reads a column bias once per tile, before the walk; but after the staging barriers, where
    the walk's first arithmetic then waits for it (L2, under the other block's stores).  Read
    right after the main loop instead, its latency passes while the block stages its fragment.
    Part of the cache key (a ``preload`` field): only the walking kernels with such reads have it.
    """
    return has_preload and store in TILE_WALK_STORES and not split_k


def uses_tf32x3(dtype: Any, m: int | None = None, n: int | None = None) -> bool:
    """Whether a pipeline GEMM in ``dtype`` with an ``m x n`` output runs the 3xTF32 split
    (float32 under the ``"tf32x3"`` method, :func:`float32_method`)."""
    return np.dtype(dtype) == _F32 and float32_method(m, n) == "tf32x3"


def configs_for(dtype: Any, m: int | None = None, n: int | None = None) -> dict[str, PipelineConfig]:
    """The fixed set :func:`dxgemm.policy.pipeline_config` chooses from for ``dtype`` (and, in float32, the method of an ``m x n`` output)."""
    dt = np.dtype(dtype)
    if dt not in CONFIGS:
        raise TypeError(f"pipeline GEMM supports float32 and float64, not {dt}")
    return _configs(dt, float32_method(m, n) if dt == _F32 else "")


def _configs(dt: np.dtype, method: str) -> dict[str, PipelineConfig]:
    """The configurations of ``dt`` under a float32 ``method``: the TF32-operand ones for
    ``"tf32x3"`` and for one TF32 pass (``"tf32"``), else the native ones."""
    return TF32X3_CONFIGS if dt == _F32 and method in ("tf32x3", "tf32") else CONFIGS[dt]


_SHALLOW_K_TILES = 16
"""K of at most this many large-configuration K-tiles counts as shallow (:func:`dxgemm.policy.pipeline_config`)."""

_DEEP_K_TILES_F64 = 128
"""float64 takes its large tile only where K holds at least this many of its K-tiles
(k >= 4096) and the large tile's waves are at least 90 % full (:func:`dxgemm.policy.pipeline_config`, step 3)."""


def waves(m: int, n: int, config: PipelineConfig, sm_count: int) -> float:
    """Output tiles divided by SM count (one resident block per SM for these configurations)."""
    tiles = math.ceil(m / config.tile_m) * math.ceil(n / config.tile_n)
    return tiles / sm_count


def wave_efficiency(m: int, n: int, config: PipelineConfig, sm_count: int) -> float:
    """Fraction of the SM-time of the launched waves that does useful work.

    ``tiles / (ceil(tiles / SMs) * SMs)``: 1.0 when the tiles fill every wave, ~0.5 when the
    last of two waves holds one tile.  Padding inside edge tiles counts as waste too.
    """
    tiles_m = math.ceil(m / config.tile_m)
    tiles_n = math.ceil(n / config.tile_n)
    tiles = tiles_m * tiles_n
    full_waves = math.ceil(tiles / sm_count)
    occupancy = tiles / (full_waves * sm_count)
    useful = (m * n) / (tiles_m * config.tile_m * tiles_n * config.tile_n)
    return occupancy * useful


_forced: list[str | PipelineConfig] = []


def forced_config() -> "str | PipelineConfig | None":
    """The configuration the innermost :class:`use_config` forces, or None."""
    return _forced[-1] if _forced else None


class use_config:
    """``with use_config("large"):`` makes every pipeline call run that configuration
    (:func:`dxgemm.runtime.pipeline.suggest`).

    For tests, benchmarks and warm-up scripts that must run one known (cached) kernel
    whatever the shape; accepts ``"large"``, ``"small"``, a name like
    ``"128x128x32_t256_d2"`` or a :class:`PipelineConfig`.  Process-wide, nestable.
    """

    def __init__(self, config: "str | PipelineConfig"):
        self.config = config

    def __enter__(self) -> "use_config":
        _forced.append(self.config)
        return self

    def __exit__(self, *exc: Any) -> None:
        _forced.pop()


def parse_config(text: "str | PipelineConfig", dtype: Any, m: int | None = None, n: int | None = None) -> PipelineConfig:
    """``"large"``/``"small"`` (from :func:`configs_for` ``dtype``, and in float32 the method of an
    ``m x n`` output) or ``"128x128x32_t256_d2"`` -> :class:`PipelineConfig`."""
    if isinstance(text, PipelineConfig):
        return text
    dt = np.dtype(dtype)
    if text in ("large", "small"):
        return configs_for(dt, m, n)[text]
    try:
        tile, threads, depth = text.split("_")
        m, n, k = (int(x) for x in tile.split("x"))
        return PipelineConfig(m, n, k, int(threads.lstrip("t")), int(depth.lstrip("d")))
    except ValueError:
        raise ValueError(f"config must be 'large', 'small' or like '128x128x32_t256_d2', got {text!r}") from None


TARGETS: tuple[tuple[int, int], ...] = ((9, 0),)
"""The compute capabilities the pipeline's kernels are built for (sm_90a: wgmma and TMA)."""

TARGET_NOTES: dict[tuple[int, int], str] = {
    (10, 0): "no: a 128-thread test kernel builds for sm_100a on UTCMMA (13.5 compilers); none run",
}
"""Where the pipeline stands on a compute capability outside :data:`TARGETS`, where more is
known than "not built for it" (``tools/build_pipeline_target.py`` builds one kernel for any
target: on sm_100a nvmath-python 1.0 / libmathdx 0.3.2 build it; cuBLASDx takes the tensor
cores' UTCMMA there only with 128 threads a block and the 13.1+ compilers, mma.sync with 256,
``benchmarks/results/sm100_pipeline_build.txt``).  Enabling a target needs a run on such a GPU."""

MAX_SPLIT_K = 8
"""The most K slices :func:`dxgemm.policy.pipeline_split_k` chooses or accepts."""

def slice_ranges(k: int, slices: int, tile_k: int) -> list[tuple[int, int]]:
    """``[(k0, k_s), ...]``: ``slices`` consecutive K ranges covering ``0 .. k-1``.

    Every range starts on a K-tile boundary (so a slice of an aligned operand stays
    aligned) and holds a whole number of K-tiles, spread as evenly as they go; the last
    one also takes the ``k % tile_k`` remainder, which the pipeline's K tail handles.
    """
    if slices < 1 or k < 1:
        raise ValueError(f"need slices >= 1 and k >= 1, got slices={slices}, k={k}")
    full = k // tile_k
    if slices > max(full, 1):
        raise ValueError(f"k={k} holds {full} tiles of {tile_k}: too few for {slices} slices")
    per, extra = divmod(full, slices)
    ranges, k0 = [], 0
    for s in range(slices):
        ks = (per + (1 if s < extra else 0)) * tile_k
        if s == slices - 1:
            ks = k - k0
        ranges.append((k0, ks))
        k0 += ks
    return ranges
