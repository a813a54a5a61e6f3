"""Pipeline configurations and the host-side choice among them.

A configuration is what a pipeline kernel is compiled for besides dtype, arrangement and
epilogue: the block tile ``tile_m x tile_n x tile_k``, the threads per block and the
pipeline depth (shared-memory stages in flight).  Every distinct configuration is a
separate cubin of several MB and a cold compile of minutes, so dxgemm keeps a *small,
fixed* set of them (:data:`CONFIGS`) and :func:`suggest` only ever picks from that set —
a new shape never means a new configuration, and the on-disk cache stays small.

The set comes from the measured table in ``shared/notes/cublasdx-pipeline.md`` (H100,
run-time-shape cubins, init + GEMM per call, against cuBLAS in the same run):

=========  ===================  ======  =====  =====================================
dtype      tile (m x n x k)     threads depth  measured
=========  ===================  ======  =====  =====================================
float64    128 x 128 x 32       256     2      0.82x @4096^3, 0.83x @8192^3 (best)
float64    128 x 64 x 32        128     2      0.79-0.84x @4096^3, 0.80x @8192x8192x512
float32    128 x 128 x 16       256     3      0.44x (best fp32 tried)
float32    64 x 64 x 32         128     2      0.29x (small problems only)
=========  ===================  ======  =====  =====================================

Configurations that collapsed (fp64 128x128x32 with 128 threads, 256x128x16: ~0.2x,
likely register spills) are deliberately absent; fp64 128x128x32 with 512 threads was
slower (0.67x at 4096^3, ``benchmarks/results/h100_pipeline_configs.log``; again with 13.0
builds, depth 2 and 3, at six shapes: 0.42-0.83x against the set's 0.76-0.93x,
``h100_fp64_t512_s12.log``); so did 128x64x32 and 64x128x32 with 256 threads, two blocks
and 16 warps per SM (``h100_fp64_two_blocks_s12.log``).  Three more
float64 shapes of tile, against today's pair in one run (``h100_fp64_configs_more.log``):
64x64x16 (128 threads, depth 4) and 128x128x16 (256, 3) lost at every shape; 128x64x16
(128, 4) won only 8192x8192x512 (0.83x against 0.79x) and lost at 1000^3 (0.40x against
0.52x), so none joined the set; nor did the large tile with a third stage (128x128x32, 256
threads, depth 3, 192 KB): 3.03 ms at 4096^3 against depth 2's 2.95, 1 % faster at 8192^3,
and slower wherever the small tile is suggested (``h100_fp64_d3_s14.log``).

float32 runs the SIMT configurations above only where the output has a side of at most
128 (:func:`float32_method`: there the 3xTF32 split's memory traffic outweighs the GEMM);
elsewhere it runs the 3xTF32 split on the TF32 tensor cores (:mod:`.tf32x3`), whose own
fixed set is :data:`TF32X3_CONFIGS`.  :func:`configs_for` gives the set for a dtype and
output shape (``DXGEMM_FLOAT32_PIPELINE`` forces one method everywhere).
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = ["PipelineConfig", "DeviceInfo", "CONFIGS", "TF32X3_CONFIGS", "FLOAT32_METHODS", "float32_method",
           "uses_tf32x3", "STORES", "pipeline_store", "configs_for", "H100", "suggest", "waves", "wave_efficiency",
           "use_config", "parse_config", "split_k", "slice_ranges", "MAX_SPLIT_K"]


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


@dataclass(frozen=True)
class DeviceInfo:
    """The device properties :func:`suggest` reasons about."""

    cc: tuple[int, int]
    sm_count: int
    smem_per_block: int  # opt-in maximum dynamic shared memory per block, bytes

    @classmethod
    def from_device(cls, device: Any = None) -> "DeviceInfo":
        """Read the properties of ``device`` (an ordinal, default the current device) via cuda.core."""
        from cuda.core import Device

        dev = Device(device)
        props = dev.properties
        return cls(
            cc=tuple(dev.compute_capability),
            sm_count=int(props.multiprocessor_count),
            smem_per_block=int(props.max_shared_memory_per_block_optin),
        )


H100 = DeviceInfo(cc=(9, 0), sm_count=132, smem_per_block=227 * 1024)
"""H100 SXM (the measured host): 132 SMs, 227 KiB opt-in shared memory per block."""

_F64 = np.dtype(np.float64)
_F32 = np.dtype(np.float32)

# The fixed set, best first for each dtype.  "large" is the default for big problems,
# "small" the one for skinny, shallow or small problems (more blocks, shorter pipeline
# fill).  float64 "small" is 64x64x32: three blocks per SM (64 KiB of pipeline buffer
# each) hide the DMMA and load latency that one 128x64 block per SM left exposed; it
# beat 128x64x32 at every shape measured (benchmarks/results/h100_small_tiles.log,
# h100_fp64_64x64.log: 1000^3 0.42x -> 0.52x cuBLAS, 1024^3 0.63x -> 0.69x, 1536^3
# 0.56x -> 0.69x, 8192^2 x 512 1.821 -> 1.715 ms, with bias|gelu 2.274 -> 2.156 ms,
# skinny and short K level).
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
three times the problem's.  Measured on the H100 against cuBLAS SGEMM in the same run
(``benchmarks/results/h100_pipeline_configs.log``), split included:

===================  ========  ========  ============  ============  ======
tile, threads, depth  4096^3    8192^3   8192^2 x 512  4096^2 x 256  1000^3
===================  ========  ========  ============  ============  ======
128x256x32, 256, 3    1.60x     1.74x     0.85x         0.53x         0.37x
128x128x32, 256, 3    1.35x     1.35x     1.00x         0.68x         0.51x
128x128x32, 256, 4    1.33x     1.42x     0.92x         0.62x         0.21x
===================  ========  ========  ============  ============  ======
"""

_SHALLOW_K_TILES_TF32 = 64
"""The 3xTF32 kernels count K (tripled) as shallow up to 64 K-tiles (k <= 682): the
128x128 tile beat the 128x256 one at k = 512 (k3 = 1536) and 256, and lost at 4096."""

FLOAT32_METHODS = ("tf32x3", "fp32")
"""How a float32 pipeline GEMM multiplies: ``"tf32x3"`` (split operands on the TF32
tensor cores, float32-accurate; :mod:`.tf32x3`) or ``"fp32"`` (cuBLASDx's float32 SIMT
pipeline)."""


SIMT_FLOAT32_MAX_SIDE = 128
"""float32 outputs with a side of at most this many rows or columns run the SIMT method."""


def float32_method(m: int | None = None, n: int | None = None) -> str:
    """The float32 method (:data:`FLOAT32_METHODS`) for an ``m x n`` output.

    ``DXGEMM_FLOAT32_PIPELINE`` forces one everywhere.  Otherwise an output with a side of
    at most :data:`SIMT_FLOAT32_MAX_SIDE` runs ``"fp32"`` and every other ``"tf32x3"`` (so
    does a call that gives no shape).  Why: the 3xTF32 split reads A and B and writes three
    copies of each, ~16 (m + n) k bytes against the GEMM's m n k multiply-adds; with a side
    of 64 that traffic alone outlasts cuBLAS's whole GEMM, while the SIMT pipeline reads A
    and B once and its slower arithmetic has little to do.  Measured on the H100, same
    run, SIMT against 3xTF32, x cuBLAS (``benchmarks/results/h100_float32_method_skinny_s11.log``,
    kernels linked by the 13.0 toolchain): 4096x64x4096 0.84x / 0.32x, 64x4096x4096
    0.80x / 0.29x, 8192x64x8192 0.77x / 0.27x, 16384x64x4096 0.74x / 0.26x, 2048x64x2048
    0.99x / 0.41x, 4096x128x4096 0.72x / 0.50x; from a side of 256 3xTF32 leads:
    4096x256x4096 0.67x / 0.78x, 2048x256x8192 0.69x / 0.77x, 1000^3 0.62x / 0.91x.
    The SIMT method is true float32 arithmetic: as accurate as 3xTF32 or more.
    """
    import os

    method = os.environ.get("DXGEMM_FLOAT32_PIPELINE")
    if method is not None:
        if method not in FLOAT32_METHODS:
            raise ValueError(f"DXGEMM_FLOAT32_PIPELINE must be one of {FLOAT32_METHODS}, got {method!r}")
        return method
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

    The staged store writes the fragment into the finished pipeline's shared memory and
    then stores the tile in D's memory order, with one copy of the epilogue's code; where
    the buffer leaves room for two blocks per SM, one block's epilogue also overlaps
    another's main loop.  Measured on the H100 against the earlier stores, each pair in
    one run (ms; ``benchmarks/results/h100_fusion_staged.log`` /
    ``h100_fusion_default_same_run.log``, ``h100_bench_large_staged.log`` /
    ``h100_bench_large_loop.log``, ``h100_fusion_large_staged.log`` / ``_default.log``):

    ==============================  ===========  =========  =========
    kernel, shape                   earlier      store      staged
    ==============================  ===========  =========  =========
    TF32 128x128, 8192^2x512        1.189        unrolled   1.049
    TF32 128x128 bias|gelu, same    1.432        loop       1.103
    TF32 128x128, 4096^2x256        0.242        unrolled   0.208
    TF32 128x128 bias|gelu, same    0.283        loop       0.226
    TF32 128x256, 4096^3            1.651        loop       1.513
    TF32 128x256, 8192^3            12.11        loop       11.48
    TF32 128x256 bias|gelu, 4096^3  1.470        loop       1.541
    TF32 128x256 bias|gelu, 8192^2x1024  2.246   loop       1.874
    fp64 128x64, 8192^2x512         2.037        loop       1.830
    fp64 128x64 bias|gelu, same     2.520        loop       2.277
    fp64 128x64, 4096^2x256         0.404        loop       0.281
    fp64 128x128, 4096^3            3.000        loop       3.033
    fp64 128x128, 8192^3            23.91        loop       24.59
    fp64 128x128, 4097^3            3.986        loop       4.236
    ==============================  ===========  =========  =========

    So every TF32 kernel and every kernel with two or more blocks per SM
    (:meth:`PipelineConfig.resident_blocks`) stores staged (with the tile walk, below); the one-block float64
    configuration, whose large squares lost 1-6 %, keeps the loop.  The unrolled store
    (straight-line stores from registers, 128 inlined epilogue copies for a fused kernel)
    lost to the staged one everywhere it was measured and is only chosen on request.

    The TF32 kernels take the vector variant ``staged_vec`` (16 bytes of consecutive
    elements per thread and step: one index computation, one 128-bit store).  Staged /
    staged_vec in one run (ms, ``benchmarks/results/h100_fusion_staged_vec.log``):

    ==================================  ======  ==========
    kernel, shape                       staged  staged_vec
    ==================================  ======  ==========
    TF32 128x128, 4096^2x256            0.204   0.197
    TF32 128x128 bias|gelu, same        0.222   0.217
    TF32 128x128, 8192^2x512            1.056   1.035
    TF32 128x128 bias|gelu, same        1.101   1.089
    TF32 128x256, 8192^2x1024           1.758   1.700
    TF32 128x256 bias|gelu, same        1.871   1.845
    TF32 128x256, 4096^3                1.494   1.481
    TF32 128x256 bias|gelu, same        1.521   1.528
    fp64 128x64, 8192^2x512             1.807   1.795
    fp64 128x64 bias|gelu, same         2.250   2.290
    fp64 128x64 bias|gelu, 4096^2x256   0.395   0.407
    ==================================  ======  ==========

    float64 keeps the scalar staged store: its fused kernels lost 2-3 % (two inlined
    copies of the float64 erf).

    Both take the *tile walk* (``staged_tile`` / ``staged_vec_tile``): a block whose tile
    lies wholly inside D, with no K tail, walks it with a constant trip count, unsigned
    indices and no bounds checks (:data:`STORES`).  ncu of the float64 short-K kernel
    had shown ~115 thread-instructions per output element, most of them the copy-out's
    index arithmetic and Numba's negative-index fix-ups (``h100_ncu_short_k.log``).  Same
    run, ms (``benchmarks/results/h100_store_tile.log``):

    ==================================  ===========  ==========
    kernel, shape                       without      tile walk
    ==================================  ===========  ==========
    fp64 64x64, 4096^2x40               0.153        0.121
    fp64 64x64, 4096^2x256              0.272        0.228
    fp64 64x64 bias|gelu, same          0.365        0.335
    fp64 64x64, 8192^2x512              1.729        1.674
    fp64 64x64 bias|gelu, same          2.264        2.151
    fp64 64x64, 1024^3                  0.062        0.059
    fp64 64x64, 1000^3 (K tail)         0.085        0.085
    TF32 128x128, 4096^2x40             0.119        0.113
    TF32 128x128 bias|gelu, 4096^2x256  0.214        0.205
    TF32 128x128 bias|gelu, 8192^2x512  1.078        1.053
    ==================================  ===========  ==========

    The walk then lost its remaining run-time work: D's direction is fixed per loop at
    compile time, the 16-byte alignment is checked once per block rather than per group,
    and for row-major D the staging rows are rotated by the vector width, so a group
    leaves shared memory in one 128-bit load.  The float32 fused walk went from ~88 to
    ~34 SASS instructions per element, most of what is left being ``erff``.  Same run,
    two rounds, ms (``benchmarks/results/h100_tile_walk_vector.log``); float64's walk was
    already scalar (unchanged here; its fused cost fell with the three phases of
    :func:`walk_unroll`):

    ===================================  ===========  ==========
    kernel, shape                        before       after
    ===================================  ===========  ==========
    TF32 128x128, 4096^2x256             0.187        0.174
    TF32 128x128 bias|gelu, same         0.205        0.182
    TF32 128x128, 8192^2x512             1.005        0.959
    TF32 128x128 bias|gelu, same         1.053        0.992
    TF32 128x256, 8192^2x1024            1.657        1.546
    TF32 128x256 bias|gelu, same         1.760        1.590
    fp64 64x64 bias|gelu, 4096^2x256     0.336        0.335
    ===================================  ===========  ==========

    A configuration whose tile does not fit its own pipeline buffer (a shallow tile_k with
    a large tile, e.g. float64 128x128x16 at depth 3) keeps the loop store.
    ``DXGEMM_PIPELINE_STORE`` (``loop``, ``unrolled``, ``staged``, ``staged_vec``,
    ``staged_tile`` or ``staged_vec_tile``) overrides the rule.
    """
    import os

    store = os.environ.get("DXGEMM_PIPELINE_STORE")
    if store is None:
        itemsize = np.dtype(dtype).itemsize if dtype is not None else None
        if config is not None and itemsize is not None and \
                config.tile_m * config.tile_n * itemsize > config.smem_bytes(itemsize):
            return "loop"  # the tile does not fit the pipeline's buffer to be staged there
        if operands == "tf32":
            return "staged_vec_tile"
        if config is not None and itemsize is not None and config.resident_blocks(itemsize) >= 2:
            return "staged_tile"
        return "loop"
    if store not in STORES:
        raise ValueError(f"DXGEMM_PIPELINE_STORE must be one of {STORES}, got {store!r}")
    return store


WALK_UNROLL = 4
"""Groups of the tile walk per loop iteration (:func:`walk_unroll`)."""

WALK_UNROLL_WIDE = 16
"""Groups per iteration of the float32 (vector) tile walk for a chain with a
:attr:`~dxgemm.epilogues.Epilogue.wide_walk` stage (:func:`walk_unroll`)."""


def walk_unroll(store: str, split_k: bool = False, wide: bool = False) -> int:
    """How many groups the tile walk of a ``store`` stores per loop iteration (1: not a walk).

    The walk (``staged_tile`` / ``staged_vec_tile``) loads :data:`WALK_UNROLL` groups
    from shared memory, then runs their epilogues, then stores them.  Written group by
    group, a group's loads could not start before the previous group's store (D may
    alias an epilogue operand such as the bias, and Numba's generic pointers may alias
    shared memory), so every group of a fused walk paid a load latency; and one float64
    ``erf`` per group is a chain of ~38 dependent DFMAs that a few warps per scheduler
    cannot hide.  Same run, ms, group by group -> four groups in three phases
    (``benchmarks/results/h100_walk_phases.log``):

    ======================================  =============  ===========
    kernel, shape                           group by group  3 phases
    ======================================  =============  ===========
    TF32 128x128, 4096^2x256                0.174          0.174
    TF32 128x128 bias, same                 0.179          0.175
    TF32 128x128 bias|gelu, same            0.181          0.180
    TF32 128x128, 8192^2x512                0.957          0.957
    TF32 128x128 bias, same                 0.994-1.003    0.964-0.968
    TF32 128x128 bias|gelu, same            0.990-0.992    0.977-0.978
    fp64 64x64, 4096^2x256                  0.225          0.224-0.226
    fp64 64x64 bias, same                   0.240-0.243    0.227-0.229
    fp64 64x64 bias|gelu, same              0.332-0.334    0.268-0.270
    fp64 64x64, 8192^2x512                  1.572-1.574    1.574-1.575
    fp64 64x64 bias, same                   1.625-1.633    1.576-1.577
    fp64 64x64 bias|gelu, same              2.005-2.022    1.741-1.744
    ======================================  =============  ===========

    The split-K variant (``split_k``), which stores partial sums with no epilogue, keeps
    the walk group by group (and its kernels their keys): built with the same toolchain,
    its TF32 128x128 kernel ran 0.062 ms at 1024^3 (two slices) with one group and with
    four.  (Built on the GPU host, the one-group kernel ran 0.056 ms: the CPU machine's
    nvJitLink 13.5 and the host's 13.0 emit different SASS for it,
    ``h100_split_kernel_toolchain.log``.)  Four and eight groups were within 2.4 % of no
    epilogue for the fused float32 kernels at the shallow shapes, two up to 4 %
    (``h100_walk_unroll_ab.log``).

    A float32 chain with a stage whose code is one long dependent chain (``wide``: the
    exact ``gelu``, ``tanh``; :attr:`~dxgemm.epilogues.Epilogue.wide_walk`) walks
    :data:`WALK_UNROLL_WIDE` groups per iteration (the whole 128x128 tile's 16 in one): the
    GELU's degree-9 Horner polynomial then has four times the independent elements to
    interleave.  Session 28, with the bias read before the staging (:func:`walk_preload`),
    two rounds of ``epilogue_cost.py`` per width at 4096x4096x256, ms
    (``h100_walk_unroll_transcendental_s28.log``):

    ==============  =============  =============  =============
    chain           4 groups       8 groups       16 groups
    ==============  =============  =============  =============
    none            0.1174-0.1179  0.1181-0.1183  0.1184-0.1185
    bias            0.1178-0.1183  0.1188-0.1189  0.1185-0.1188
    gelu            0.1197-0.1200  0.1196-0.1197  0.1191-0.1192
    bias | gelu     0.1217-0.1218  0.1202-0.1204  0.1201
    ==============  =============  =============  =============

    So the plain and the bias-only walks keep 4 groups (the compiler unrolls their short
    loop whole anyway) and the GELU's take 16: ``bias | gelu`` 0.1201 ms against the plain
    kernel's 0.1174-0.1179, +2 % where it was +3.3-3.7 %.  At 8192x8192x512 (the same kernel)
    every width was within run-to-run spread.  Every transcendental stage with 16 groups, one
    run (``h100_epilogue_cost_f32_stages_wide_s28.log``): ``gelu`` +0.7 % and ``tanh`` +1.1 %
    (+1.6 and +1.8 % with 4 in session 27's run), but ``gelu_tanh`` +1.6 %, ``sigmoid`` +1.6 %
    and ``bias | gelu_tanh`` +2.7 % (+0.8, +0.9 and +1.5 % with 4): those are two MUFU
    instructions an element (``ex2.approx`` and an approximate division), not a long chain,
    and keep 4.  float64's scalar walk (``staged_tile``) keeps :data:`WALK_UNROLL`: its exact
    GELU is ~37 FP64 instructions an element, and four times as many in flight would crowd
    its registers (not measured).

    It is part of the cache key (a kernel's ``walk`` field), so only the walking kernels
    were rebuilt when it changed.  ``DXGEMM_WALK_UNROLL`` (a positive integer) overrides
    both widths for the kernels that walk; 1 is the walk group by group.
    """
    import os

    if store not in TILE_WALK_STORES or split_k:
        return 1
    text = os.environ.get("DXGEMM_WALK_UNROLL")
    if text is None:
        return WALK_UNROLL_WIDE if wide and store == "staged_vec_tile" else WALK_UNROLL
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"DXGEMM_WALK_UNROLL must be a positive integer, got {text!r}")
    return int(text)


def walk_preload(store: str, has_preload: bool, split_k: bool = False) -> bool:
    """Whether a kernel with this ``store`` reads its epilogue's per-tile operands early (``has_preload``:
    the bound epilogue has such reads, a column ``bias`` for one; see ``BoundEpilogue.preload``).

    A tile walk keeps each thread's columns (D row-major) for the whole tile, so the compiler
    reads a column bias once per tile, before the walk; but after the staging barriers, where
    the walk's first arithmetic then waits for it (L2, under the other block's stores).  Read
    right after the main loop instead, its latency passes while the block stages its fragment.
    Part of the cache key (a ``preload`` field), so only such kernels were rebuilt.
    ``DXGEMM_WALK_PRELOAD=0`` turns it off (the A/B measurement of the change).
    """
    import os

    if not has_preload or store not in TILE_WALK_STORES or split_k:
        return False
    text = os.environ.get("DXGEMM_WALK_PRELOAD", "1")
    if text not in ("0", "1"):
        raise ValueError(f"DXGEMM_WALK_PRELOAD must be 0 or 1, got {text!r}")
    return text == "1"


def uses_tf32x3(dtype: Any, m: int | None = None, n: int | None = None) -> bool:
    """Whether a pipeline GEMM in ``dtype`` with an ``m x n`` output runs the 3xTF32 split
    (float32 under the ``"tf32x3"`` method, :func:`float32_method`)."""
    return np.dtype(dtype) == _F32 and float32_method(m, n) == "tf32x3"


def configs_for(dtype: Any, m: int | None = None, n: int | None = None) -> dict[str, PipelineConfig]:
    """The fixed set :func:`suggest` chooses from for ``dtype`` (and, in float32, the method of an ``m x n`` output)."""
    dt = np.dtype(dtype)
    if dt not in CONFIGS:
        raise TypeError(f"pipeline GEMM supports float32 and float64, not {dt}")
    return _configs(dt, float32_method(m, n) if dt == _F32 else "")


def _configs(dt: np.dtype, method: str) -> dict[str, PipelineConfig]:
    return TF32X3_CONFIGS if dt == _F32 and method == "tf32x3" else CONFIGS[dt]


_SHALLOW_K_TILES = 16
"""K of at most this many large-configuration K-tiles counts as shallow (see :func:`suggest`)."""

_DEEP_K_TILES_F64 = 128
"""float64 takes its large tile only where K holds at least this many of its K-tiles
(k >= 4096) and the large tile's waves are at least 90 % full (:func:`suggest`, step 6)."""


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


class use_config:
    """``with use_config("large"):`` makes :func:`suggest` return that configuration.

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


def suggest(m: int, n: int, k: int, dtype: Any, *, device: Any = None) -> PipelineConfig:
    """The pipeline configuration for an ``m x n x k`` GEMM in ``dtype`` — one of :data:`CONFIGS`.

    Reasoning, in order:

    1. **Only a fixed set.**  Each configuration is a separate multi-MB cubin and minutes of
       cold compile; choosing among two per dtype keeps the cache small and makes a new
       shape free once both are compiled.
    2. **Big problems take the large tile.**  A 128x128 tile reuses each loaded A/B element
       128 times; on the H100 it was the fastest fp64 configuration measured (0.74-0.83x
       cuBLAS at 4096^3 / 8192^3 over several runs).  float32 (3xTF32, :data:`TF32X3_CONFIGS`)
       takes 128x256: 1.6x / 1.8x cuBLAS SGEMM there.
    3. **Wave quantization.**  With one resident block per SM, a kernel runs in
       ``ceil(tiles / SMs)`` waves; a problem with few tiles leaves SMs idle.  When the
       large tile yields less than one full wave of work, or when the small tile's wave
       efficiency (:func:`wave_efficiency`, which also counts tile padding) is clearly
       better (by 15 %), the small tile wins: half the tile, twice the blocks.
       Skinny outputs (``m`` or ``n`` below the large tile) are the extreme case.
    4. **K depth.**  A pipeline of depth ``d`` prefetches ``d`` K-tiles; a K shorter than
       ``tile_k * depth`` cannot fill it, and a short K (a few K-tiles) spends most of its
       time filling and draining.  When K holds at most 16 of the large configuration's
       K-tiles (512 for fp64) the small configuration is preferred: its blocks are
       cheaper to fill and several share each SM.  The measured 8192x8192x512 fp64
       case agrees (128x64x32: 0.80x cuBLAS against 0.73-0.77x for the deeper 128x128
       configurations; 64x64x32, now fp64's small one, 6 % faster again).  3xTF32 triples
       K and counts up to 64 tiles as shallow (measured, see :data:`TF32X3_CONFIGS`).
    5. **Fits the device.**  A configuration whose shared memory exceeds the device's
       per-block opt-in limit is skipped.
    6. **float64: small unless large, deep and well quantized.**  float64's small tile
       (64x64x32, three blocks per SM) beat the large one (128x128x32, one block per SM:
       216 registers) everywhere measured except at 4096^3 and 8192^3
       (``h100_fp64_64x64.log``, x cuBLAS, small / large: 2560^3 0.78 / -, 3072^3 0.69 /
       0.64, 4097^3 0.96 / 0.92, 4096^2 x 1024 0.72 / 0.61, 4096^2 x 2048 0.74 / 0.69,
       8192^2 x 1024 0.67 / 0.64; 4096^3 0.72 / 0.75, 8192^3 0.77 / 0.88).  So float64
       takes the large tile only where K holds at least :data:`_DEEP_K_TILES_F64` of its
       K-tiles and its waves are at least 90 % full (4097^3's are 86 %), and the small
       one everywhere else.  Steps 3 and 4 apply to float32.

    ``device``: a :class:`DeviceInfo`, a device ordinal, or None — None means the current
    device when a GPU is present and the H100's figures otherwise, so the choice can be
    made (and tested) on a machine without a GPU.
    """
    # (the choice itself is memoized: it runs on every pipeline call)
    for name, value in (("m", m), ("n", n), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    dt = np.dtype(dtype)
    if dt not in CONFIGS:
        raise TypeError(f"pipeline GEMM supports float32 and float64, not {dt}")
    if _forced:
        return parse_config(_forced[-1], dt, m, n)
    tuned = _tuned(m, n, k, dt)
    if tuned is not None:
        return tuned
    return _choose(int(m), int(n), int(k), dt, _device_info(device), float32_method(m, n) if dt == _F32 else "")


@functools.lru_cache(maxsize=4096)
def _choose(m: int, n: int, k: int, dt: np.dtype, info: DeviceInfo, method: str) -> PipelineConfig:
    """:func:`suggest`'s reasoning (steps 2-5) for one problem, device and float32 method."""
    large, small = _configs(dt, method)["large"], _configs(dt, method)["small"]
    shallow_tiles = _SHALLOW_K_TILES
    if method == "tf32x3":
        k = 3 * k  # the split triples K (.tf32x3)
        shallow_tiles = _SHALLOW_K_TILES_TF32
    fits = [c for c in (large, small) if c.smem_bytes(dt.itemsize) <= info.smem_per_block]
    if not fits:
        raise ValueError(f"no pipeline configuration fits {info.smem_per_block} bytes of shared memory per block")
    if len(fits) == 1:
        return fits[0]

    if m < large.tile_m or n < large.tile_n:
        return small  # skinny: the large tile would be mostly padding
    if waves(m, n, large, info.sm_count) < 1.0:
        return small  # not even one wave with the large tile
    if dt == _F64:  # step 6 of the docstring
        deep = k >= _DEEP_K_TILES_F64 * large.tile_k
        return large if deep and wave_efficiency(m, n, large, info.sm_count) >= 0.9 else small
    if k <= shallow_tiles * large.tile_k:
        return small  # shallow K: pipeline fill/drain is a large share of the loop
    if wave_efficiency(m, n, small, info.sm_count) > 1.15 * wave_efficiency(m, n, large, info.sm_count):
        return small
    return large


MAX_SPLIT_K = 8
"""The most K slices :func:`split_k` chooses (and ``DXGEMM_SPLIT_K`` accepts)."""

_MIN_SLICE_TILES = 8
"""Each K slice holds at least this many K-tiles, so the pipeline's fill and drain stay a
small part of every slice's loop."""


def split_k(m: int, n: int, k: int, config: PipelineConfig, dtype: Any, *, device: Any = None) -> int:
    """How many K slices an ``m x n x k`` pipeline GEMM in ``config`` runs as (1: no split).

    Why: a problem with few output tiles leaves most SMs idle however deep K is.
    4096 x 64 x 4096 in float64 is 32 tiles of 128 x 64 on 132 SMs: each block walks
    all of K while 100 SMs wait, and it ran at 0.26x cuBLAS.  Splitting K into ``S``
    ranges gives ``S`` times the blocks; each range's partial product goes to a
    workspace and one more pass sums them and applies the epilogue
    (:mod:`dxgemm.kernels.splitk_reduce`).  The price is that pass (``S + 1`` reads and
    one write of ``m x n``) and each slice's fixed cost (pipeline fill and drain, the
    tile store: ~12 microseconds measured for a 128 x 64 float64 slice); the slices
    themselves run as one launch (:mod:`._splitk`).

    The rule: ``S`` is the number of times the output tiles fit into ``R - 1`` blocks
    per SM (at least one), where ``R`` is how many blocks of the configuration one SM
    holds (:meth:`PipelineConfig.resident_blocks`: 1 for the 128x128 float64 and
    128x256 TF32 tiles, 2 for 128x128 TF32 and 128x64 float64, 3 for 64x64 float64), at
    most :data:`MAX_SPLIT_K`, and every slice keeps at least ``max(8, depth)`` K-tiles (K
    tripled under 3xTF32, whose split operands are sliced).  An empirical fit: the
    two-block configurations were fastest with one block per SM, the three-block 64x64
    one with two (``h100_split_k_64x64.log``, float64 ms: 4096x64x4096 0.140 / 0.081 /
    0.079 / 0.080 / 0.098 at S = 1 / 2 / 4 / 6 / 8, rule 4; 4096x128x4096 0.146 / 0.125 /
    0.150, S = 1 / 2 / 4, rule 2; 2048x256x8192 0.275 / 0.215 / 0.259, rule 2; 1024^3
    0.063 unsplit, 0.085 in two).  Measured on the
    H100, GPU time per call in ms against cuBLAS in the same run
    (``benchmarks/results/h100_split_k_launch.log``):

    ==========================  ======  =====  =====  =====  =====  =====
    shape, configuration        cuBLAS  S=1    S=2    S=4    S=8    rule
    ==========================  ======  =====  =====  =====  =====  =====
    f64 4096x64x4096, 128x64    0.059   0.224  0.127  0.079  0.088  4
    f64 4096x128x4096, 128x64   0.089   0.233  0.134  0.132  0.148  2
    f64 2048x256x8192, 128x64   0.165   0.446  0.239  0.224  0.242  2
    f64 1000^3, 128x64          0.044   0.107  0.119                1
    f64 1024^3, 128x64          0.043   0.067  0.078  0.096         1
    f32 4096x64x4096, 128x128   0.063   0.321  0.233  0.211  0.226  4
    f32 1000^3, 128x128         0.053   0.082  0.070  0.078  0.106  2
    f32 1024^3, 128x128         0.059   0.081  0.068  0.076  0.105  2
    f32 4096x128x4096, 128x128  0.101   0.321  0.235  0.213  0.229  4
    f32 2048x256x8192, 128x128  0.183   0.536  0.339  0.253  0.261  4
    ==========================  ======  =====  =====  =====  =====  =====

    Where a split call's time went in the first version, which launched each slice on
    its own stream (``h100_split_k_parts.log``, float64 4096x64x4096, four slices): one
    slice alone 0.065 ms, the four forked and joined 0.080, the reduce 0.006, the whole
    call 0.089 — against 0.224 unsplit.  As one launch the whole call takes 0.079 ms.
    A slice has a fixed cost of ~12 microseconds (pipeline fill, tile store: K=1024 took
    0.065 ms, K=4096 0.224), and four slices together share the memory system (A alone
    is 128 MB).  Deeper pipelines (depth 3 and 4 of the same tile) were slower at every
    count (``h100_split_k_deeper.log``).  A second block per SM (the 128 x 64 float64
    kernel fits two) added little: eight slices of 4096 x 64 x 4096 were slower than
    four, 2048x256x8192 gained 6 % with four slices over the rule's two, and 1024^3
    (128 tiles) was slower split in two; in float32 two blocks per SM lost at every shape
    above — hence one block per SM.  ``DXGEMM_SPLIT_K`` (an integer from 1 to
    :data:`MAX_SPLIT_K`) overrides the count, still bounded by the slice minimum.
    """
    import os

    dt = np.dtype(dtype)
    k_eff = 3 * int(k) if uses_tf32x3(dt, m, n) else int(k)
    most = k_eff // (config.tile_k * max(_MIN_SLICE_TILES, config.depth))
    forced = os.environ.get("DXGEMM_SPLIT_K")
    if most < 2 and forced is None:
        return 1
    if forced is not None:
        if not forced.isdigit() or not 1 <= int(forced) <= MAX_SPLIT_K:
            raise ValueError(f"DXGEMM_SPLIT_K must be an integer from 1 to {MAX_SPLIT_K}, got {forced!r}")
        wanted = int(forced)
    else:
        tiles = math.ceil(m / config.tile_m) * math.ceil(n / config.tile_n)
        per_sm = max(1, config.resident_blocks(dt.itemsize) - 1)
        wanted = min(_device_info(device).sm_count * per_sm // tiles, MAX_SPLIT_K)
    return max(1, min(wanted, most))


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


def _device_info(device: Any) -> DeviceInfo:
    if isinstance(device, DeviceInfo):
        return device
    return _queried_device_info(None if device is None else int(device))


@functools.lru_cache(maxsize=None)
def _queried_device_info(device: int | None) -> DeviceInfo:
    """Device properties, asked once per ordinal (several driver queries: too slow per call)."""
    if device is None:
        try:
            return DeviceInfo.from_device(None)
        except Exception:  # no GPU or no driver: reason with the H100's figures
            return H100
    return DeviceInfo.from_device(device)


def _tuned(m: int, n: int, k: int, dtype: np.dtype) -> PipelineConfig | None:
    """The configuration :func:`dxgemm.pipelines.autotune` persisted for this shape class, if any."""
    try:
        from .tuning import lookup
    except ImportError:
        return None
    return lookup(m, n, k, dtype)
