"""Every host decision in one place: which backend, which tile, how many K slices, which pipeline configuration.

Each rule is a pure function of the problem (dtype, ``m x n x k``, operand alignment), the
epilogue's traits (:class:`EpilogueTraits`, data the epilogue stages declare) and the
device's properties (a :class:`~dxgemm.runtime.device.DeviceInfo`: compute capability, SMs,
shared memory, L2; :data:`~dxgemm.runtime.device.H100` where none is named).  Nothing here
reads the environment or queries a device, so every rule can be checked on a machine without
a GPU, for any GPU's figures (:data:`dxgemm.runtime.device.DEVICES`); the caller asks the
device and passes its answer in.
The measurements behind the constants are in ``docs/performance.md`` and
``benchmarks/results/``; the docstrings give each rule and its reason.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .kernels._spec import MAX_GRID_Y
from .kernels.gemv import TILE_CONFIGS as GEMV_TILES
from .kernels.warptile import CONFIGS as WARPTILE_CONFIGS
from .kernels.warptile import TILE_CONFIGS as WARPTILE_TILES
from .pipelines.config import (_DEEP_K_TILES_F64, _SHALLOW_K_TILES, _SHALLOW_K_TILES_TF32, CONFIGS, MAX_SPLIT_K, SIMT_FLOAT32_MAX_SIDE,
                               TARGETS as PIPELINE_TARGETS, PipelineConfig, _configs, float32_method, uses_tf32x3,
                               wave_efficiency, waves)
from .gpus import H100, DeviceInfo, tf32_tensor_ratio

__all__ = ["EpilogueTraits", "PRECISIONS", "resolve_precision", "choose_backend", "choose_tile", "choose_split_tile",
           "thin_orientation",
           "split_part_tile", "choose_split_k", "choose_tf32_tile", "choose_batched_tf32", "gemv_column",
           "pipeline_config", "pipeline_split_k", "check_split_count", "F64_BLOCK_COST", "MIN_SLICE_TILES", "tile_fits",
           "tile_smem", "warptile_resident", "PIPELINE_TARGETS"]


@dataclass(frozen=True)
class EpilogueTraits:
    """What the host rules need to know about a call's epilogue chain (alpha/beta first).

    ``transcendental``: a stage evaluates ``exp``, ``erf`` or ``tanh`` per element;
    ``medium_tile_min_k``: the smallest K at which float64 ``warptile``'s medium tile may run
    it (``inf``: never; a ``custom`` stage that is not straight-line code asks for that);
    ``preload``: a stage reads per-tile operands the pipeline's tile walk can issue early;
    ``wide_walk``: the pipeline's tile walk takes its wide width for it.
    """

    transcendental: bool = False
    medium_tile_min_k: float = 0.0
    preload: bool = False
    wide_walk: bool = False

    @classmethod
    def of(cls, chain: Any) -> "EpilogueTraits":
        """The traits of an epilogue chain (or a bound one): the attributes each stage declares."""
        return cls(bool(getattr(chain, "transcendental", False)), float(getattr(chain, "medium_tile_min_k", 0.0)),
                   getattr(chain, "preload", None) is not None, bool(getattr(chain, "wide_walk", False)))


PRECISIONS: tuple[str, ...] = ("tf32x3", "tf32", "ieee")
"""What ``precision=`` accepts for float32 (Triton's ``input_precision`` names):

* ``"tf32x3"`` (the default): float32 accuracy on the TF32 tensor cores, each operand split
  into two TF32 parts and three products summed with rounding adds (:mod:`dxgemm.kernels.tf32mma`);
* ``"tf32"``: one TF32 pass, TF32's accuracy (inputs rounded to 10 mantissa bits), PyTorch's
  ``allow_tf32``;
* ``"ieee"``: float32 FMA on the SIMT units (the handwritten ladder, ``warptile``).

PyTorch's ``set_float32_matmul_precision`` levels map as ``"highest"`` -> ``"ieee"`` or
``"tf32x3"`` (both float32 accuracy), ``"high"`` / ``"medium"`` -> ``"tf32"``."""

TF32_BACKENDS = ("tf32mma", "tf32wgmma")
"""Backends that compute float32 on the TF32 tensor cores (``precision`` ``"tf32x3"`` or ``"tf32"``)."""

WGMMA_TARGETS = ((9, 0),)
"""Compute capabilities ``tf32wgmma`` runs on: ``wgmma`` is Hopper's alone (sm_90a)."""


def tf32_wgmma_fits(device: DeviceInfo) -> bool:
    """Whether ``tf32wgmma`` can run on ``device``: Hopper (:data:`WGMMA_TARGETS`), and blocks
    that take its shared memory (:func:`dxgemm.kernels.tf32wgmma.most_smem_bytes`)."""
    from .kernels.tf32wgmma import most_smem_bytes

    return tuple(device.cc) in WGMMA_TARGETS and device.smem_per_block >= most_smem_bytes()


TF32X3_MIN_K = 129
"""Below this K float32's default runs IEEE ``warptile``, not the TF32 rungs.  An output that
one product dominates (data of a wide exponent range) carries that product's TF32 split and
truncation, about ``1.5-2x 2^-22`` at any K, while the contract allows ``max(2 x SGEMM's
error, 2^-22)``: the TF32 rungs missed it up to K = 96 (H200, 24x40, 4 seeds: 1.0-1.45x the
bound), and met it from K = 128 (0.87x, and 0.76-0.95x at 192-257) as SGEMM's error grows.
``warptile`` meets it at every K measured (0.81x at worst, 8-257): on small outputs its tiny
tile sums in blocks of 8 K (``warptile.TILE_CONFIGS``' ``fold``), on large ones cuBLAS's error
is a chain's like its own.  It is also as fast or faster on large outputs up to K = 128, the
TF32 rungs faster from K = 192 (``benchmarks/results/h200_float32_blocked_sum.log``,
``h200_float32_short_k.log``)."""



def tf32_rung_fits(cc: tuple[int, int], smem_per_block: int, precision: str | None = "tf32x3") -> bool:
    """Whether ``tf32mma`` can run on a device of compute capability ``cc`` whose blocks may take
    ``smem_per_block`` bytes of shared memory: ``mma.sync`` on TF32 needs 8.0, and its smaller
    tile's stages and second-level sums :func:`dxgemm.kernels.tf32mma.smem_bytes` (70 KiB; the
    128x128 tile's 172 KiB fit an H100, H200 or B200 only, :func:`choose_tf32_tile`)."""
    from .kernels.tf32mma import smem_bytes

    return tuple(cc) >= (8, 0) and smem_per_block >= smem_bytes(tf32_smallest_tile(precision))


def tf32_smallest_tile(precision: str | None) -> str:
    """``tf32mma``'s 64x64 tile at ``precision`` (None: the default, ``"tf32x3"``): the least shared
    memory of the tiles that take any shape (the thin ones take only an output side <= 16)."""
    return f"{'tf32' if precision == 'tf32' else 'tf32x3'}_small"


TF32_MIN_TENSOR_RATIO = 4.0
"""``auto`` runs float32 on the TF32 tensor cores only where they are at least this many times
the float32 FMA rate (:func:`dxgemm.gpus.tf32_tensor_ratio`): three TF32 products per float32
product, plus the split, must beat one FMA.  An A100, H100, H200 or B200 (7-14x) qualifies; an
Ada or consumer Blackwell GPU (1x) does not: there ``warptile``'s IEEE float32 is as fast as
one TF32 pass and more accurate."""


def tf32_auto(device: DeviceInfo, precision: str | None = "tf32x3") -> bool:
    """Whether ``auto`` may run ``tf32mma`` on ``device``: it fits (:func:`tf32_rung_fits`) and
    the tensor cores pay (:data:`TF32_MIN_TENSOR_RATIO`)."""
    return (tf32_rung_fits(device.cc, device.smem_per_block, precision)
            and tf32_tensor_ratio(device.cc) >= TF32_MIN_TENSOR_RATIO)


TF32_TILE_COST = {"": (96, 1.0, 1), "_small": (32, 0.26, 2)}
"""``tf32mma``'s cost per tile (by the suffix after the precision), as ``(fixed, rate,
saturating)`` in units of one 128x128 block's time per K alone on an SM: the busiest SM, holding
``q`` blocks, takes ``fixed`` per wave of resident blocks (prologue, first tiles in flight, the
store) plus ``rate * K`` per block, for at least ``saturating`` blocks (fewer leave its tensor
cores as idle as that many would).  The 64x64 tile does a quarter of the large block's work at
a lower mma rate per warp (a 32x32 warp tile loads a fragment for every 1.5 mmas, the 64x32
one for every 2), so two of them take about half a large block's time per K, and one alone
no less; three resident hide latency the two could not.  Fitted on the H100 over 30 float32
shapes from 256^2 to 4096^2 at K 64..16384 with both tiles forced, and checked on 20 more
after the small tile took two stages and three blocks a SM (``docs/performance.md``)."""


THIN_SIDE = 16
"""An output side of at most this many rows or columns runs a thin tile: ``tf32mma``'s
(:func:`tf32_thin_tile`) or float64 ``warptile``'s (:func:`choose_tile`)."""


def thin_orientation(m: int, n: int) -> str | None:
    """Which thin tile an ``m x n`` output takes: ``"n"`` (few columns: a tile 16 wide, tall),
    ``"m"`` (few rows), or None where both sides exceed :data:`THIN_SIDE`.  A tie goes to the
    columns."""
    if min(m, n) > THIN_SIDE:
        return None
    return "n" if n <= m else "m"


def tf32_thin_tile(precision: str, m: int, n: int) -> str | None:
    """``tf32mma``'s thin tile for an ``m x n`` output with a side of at most
    :data:`THIN_SIDE`: ``"narrow"`` (128x16) for few columns, ``"flat"`` (16x128) for few
    rows; None for other outputs.  Such a GEMM streams its long operand (each element feeds at
    most 16 outputs), and the 64x64 tile would spend three quarters of its mmas on padding: on
    the H100 the thin tiles ran up to 2.2x cuBLAS SGEMM where the 64x64 tile ran 0.44-0.91x, and
    within 5 % of it on the smallest such shapes (``docs/performance.md``)."""
    side = thin_orientation(m, n)
    return None if side is None else f"{precision}_{'narrow' if side == 'n' else 'flat'}"


def tf32_tile_shape(tile: str) -> tuple[int, int]:
    """``(rows, columns)`` of ``tf32mma``'s block ``tile`` (``"tf32x3"``, ``"tf32_small_split"``, ...)."""
    from .kernels.tf32mma import CONFIGS

    cfg = CONFIGS[tile]
    return cfg["BM"], cfg["BN"]


def tf32_tile_fits(device: DeviceInfo, tile: str) -> bool:
    """Whether ``tf32mma``'s ``tile`` fits a block of ``device``."""
    from .kernels.tf32mma import smem_bytes

    return smem_bytes(tile) <= device.smem_per_block


def tf32_resident(device: DeviceInfo, tile: str) -> int:
    """Blocks of ``tf32mma``'s ``tile`` one SM of ``device`` holds at once: its threads at up to
    255 registers each (the split mode's kernels use 249-255) unless the tile caps them for
    some blocks a SM on this target (``tile_min_blocks``), its shared memory plus the 1 KiB the
    driver reserves, its threads."""
    from .kernels.tf32mma import CONFIGS, smem_bytes, tile_min_blocks

    threads = CONFIGS[tile]["threads"]
    by_registers = max(tile_min_blocks(tile, device.cc), device.regs_per_sm // (256 * threads))
    return max(1, min(by_registers, device.sm_smem // (smem_bytes(tile) + 1024), device.threads_per_sm // threads))


def choose_tf32_tile(precision: str, m: int, n: int, k: int, device: DeviceInfo = H100, *,
                     split: bool = True) -> str:
    """``tf32mma``'s tile for an ``m x n x k`` call at ``precision`` (``"tf32x3"`` or ``"tf32"``):
    the 128x128 tile (named as the precision), the 64x64 one (``precision + "_small"``) or a
    thin one (``"_narrow"``, ``"_flat"``).

    A wave model with the K split each tile would run (:func:`choose_split_k`): the busiest
    SM runs ``q = ceil(blocks / SMs)`` blocks in ``ceil(q / resident)`` waves
    (:func:`tf32_resident`), costed by :data:`TF32_TILE_COST` for each block's share of K; the
    cheaper tile wins, ties to the large one.
    Few output tiles or a short K favour the small tile (more blocks, a smaller fixed cost),
    full waves of long K the large one.  An output side of at most :data:`THIN_SIDE`
    takes a thin tile (:func:`tf32_thin_tile`), one of at most 64 the small tile (the large
    one would compute half its rows or columns as padding), and so does a device
    whose blocks cannot take the large tile's shared memory (an A100's 163 KiB, 99 KiB on
    sm_86/89/120).  ``split=False``: a call that is never split over K (a batched one, whose
    entries stacked are ``m`` rows)."""
    thin = tf32_thin_tile(precision, m, n)
    if thin is not None:
        return thin
    small = f"{precision}_small"
    if min(m, n) <= 64 or not tf32_tile_fits(device, precision):
        return small
    costs = {tile: _tf32_cost(tile, TF32_TILE_COST[suffix], m, n, k, device, split)
             for tile, suffix in ((precision, ""), (small, "_small"))}
    return small if costs[small] < costs[precision] else precision


def _tf32_cost(tile: str, cost: tuple, m: int, n: int, k: int, device: DeviceInfo, split: bool) -> float:
    """:func:`choose_tf32_tile`'s wave model of ``tile`` (a ``tf32mma`` tile, its 128x128 one
    also standing for ``tf32wgmma``'s, whose block is the same) at ``cost`` (``(fixed, rate,
    saturating)``), with the K split :func:`choose_split_k` gives it when ``split``."""
    (rows, cols), (fixed, rate, saturating) = tf32_tile_shape(tile), cost
    slices = choose_split_k("tf32mma", np.float32, m, n, k, tile, device) if split else 1
    busiest = -(-(-(-m // rows) * -(-n // cols) * slices) // device.sm_count)
    waves = -(-busiest // tf32_resident(device, tile))
    return waves * fixed + rate * -(-k // slices) * max(busiest, saturating)


SERIAL_SUM_MAX_SIDE = 16
SERIAL_SUM_MAX_OUTPUT = 16384
SERIAL_SUM_MAX_SLICES = 16


def split_sum_serial(m: int, n: int, slices: int) -> bool:
    """Whether a handwritten call split ``slices`` ways over K sums the slices in their own
    kernel (the last block of each output tile sums it: one launch) instead of in the split-K
    reduce (a second launch over the workspace).  Serial for a thin output (a side of at most
    :data:`SERIAL_SUM_MAX_SIDE`, at most :data:`SERIAL_SUM_MAX_OUTPUT` values) split at most
    :data:`SERIAL_SUM_MAX_SLICES` ways: there the second launch is a large part of a call of a
    few tens of microseconds and the last block's sum is short.  Elsewhere the reduce, which sums
    every tile at once, was faster.  H200, plain calls, both dtypes (``h200_split_reduce.log``):
    serial 1.02-1.37x the reduce at the 21 split shapes this takes, 0.27-1.42x at the 96 others
    (faster at 6 of them)."""
    return min(m, n) <= SERIAL_SUM_MAX_SIDE and m * n <= SERIAL_SUM_MAX_OUTPUT and slices <= SERIAL_SUM_MAX_SLICES


TF32_WGMMA_COST = {"tf32x3": (96, 0.67, 1), "tf32": (96, 0.75, 1)}
"""``tf32wgmma``'s block cost in :data:`TF32_TILE_COST`'s units, by precision: one 128x128 block a
SM as ``tf32mma``'s large tile, at the time ratio of the two measured in one run at 4096^3 and
8192^3 (``docs/performance.md``; ``tf32``'s scaled by the median time ratio, 0.93, of its
groups kept running to waiting, measured in one run); the fixed cost is taken as the large
tile's (not fitted)."""


def choose_tf32_rung(precision: str, m: int, n: int, k: int, device: DeviceInfo = H100, *,
                     wgmma: bool = True) -> tuple[str, str]:
    """``(backend, tile)`` for a float32 call on the TF32 tensor cores under ``auto``:
    ``tf32mma``'s choice (:func:`choose_tf32_tile`, with its K split), or on Hopper
    (:func:`tf32_wgmma_fits`; ``wgmma``: the caller can launch it) ``tf32wgmma``'s 128x128 tile,
    unsplit, where the wave model costs it less (:data:`TF32_WGMMA_COST`).  ``wgmma`` issues at
    the full TF32 rate, where ``mma.sync`` reaches under half of it on Hopper; ``tf32wgmma`` has
    no split, small or thin tiles, so few output tiles over a long K stay on ``tf32mma``."""
    tile = choose_tf32_tile(precision, m, n, k, device)
    if (not wgmma or not tf32_wgmma_fits(device) or tf32_thin_tile(precision, m, n) is not None
            or min(m, n) <= 64):
        return "tf32mma", tile
    return ("tf32wgmma", precision) if _wgmma_cheaper(precision, tile, m, n, k, device, True) else ("tf32mma", tile)


def _wgmma_cheaper(precision: str, tile: str, m: int, n: int, k: int, device: DeviceInfo, split: bool) -> bool:
    """Whether the wave model costs ``tf32wgmma``'s 128x128 tile (unsplit) at most ``tf32mma``'s
    ``tile`` (with its K split when ``split``) for an ``m x n x k`` call."""
    mma = _tf32_cost(tile, TF32_TILE_COST[tile.removeprefix(precision)], m, n, k, device, split)
    return _tf32_cost(precision, TF32_WGMMA_COST[precision], m, n, k, device, False) <= mma


def resolve_precision(dtype: Any, backend: str, precision: str | None) -> str | None:
    """The precision a call runs at, or a clear error for a combination that makes no sense.

    float64 is IEEE float64 on every backend: ``None`` or ``"ieee"``.  float32 under
    ``"auto"`` takes :data:`PRECISIONS` (default ``"tf32x3"``); a TF32 backend takes
    ``"tf32x3"`` (default) or ``"tf32"``; the SIMT rungs ``"ieee"`` only.  The cuBLASDx
    pipeline picks its float32 method by shape (3xTF32 in one tensor-core accumulator, not
    within the float32 contract on long K, or SIMT float32 for an output side of at most 128)
    when ``precision`` is None, and takes ``"tf32"`` for one TF32 pass.
    """
    if precision is not None and precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}: choose 'tf32x3' (float32 accuracy on the tensor cores, "
                         "the default), 'tf32' (one TF32 pass: TF32 speed and accuracy) or 'ieee' (float32 FMA on the "
                         "SIMT units); PyTorch's 'highest' is 'ieee' or 'tf32x3', 'high' and 'medium' are 'tf32'")
    if np.dtype(dtype) == np.float64:
        if backend in TF32_BACKENDS:
            raise TypeError(f"backend={backend!r} computes float32 only (TF32 tensor cores); float64 runs on "
                            "'auto', 'warptile', 'pipeline' or the other rungs")
        if precision not in (None, "ieee"):
            raise ValueError(f"precision={precision!r} applies to float32; float64 always computes in IEEE float64: "
                             "leave precision unset or pass 'ieee'")
        return "ieee"
    if backend == "auto":
        return precision or "tf32x3"
    if backend in TF32_BACKENDS:
        if precision == "ieee":
            raise ValueError(f"backend={backend!r} runs on the TF32 tensor cores: precision 'tf32x3' or 'tf32'; "
                             "for 'ieee' use backend='warptile' or 'auto'")
        return precision or "tf32x3"
    if backend == "pipeline":
        if precision not in (None, "tf32"):
            raise ValueError(f"backend='pipeline' takes precision None (its float32 method by shape: 3xTF32 summed in "
                             "one tensor-core accumulator, or SIMT float32 for an output side <= 128) or 'tf32' (one "
                             f"TF32 pass), not {precision!r}; for float32 accuracy use backend='auto'")
        return precision
    if precision not in (None, "ieee"):
        raise ValueError(f"backend={backend!r} computes with float32 FMA on the SIMT units: precision 'ieee' only; "
                         f"for {precision!r} use backend='auto' or 'tf32mma'")
    return "ieee"


def choose_backend(dtype: np.dtype, m: int, n: int, k: int, *, pipeline: bool = False, aligned: bool = True,
                   transcendental: bool = False, medium_min_k: float = math.inf, device: DeviceInfo = H100,
                   precision: str | None = "ieee", tf32_cores: bool | None = None) -> str:
    """The backend ``backend="auto"`` runs: ``"warptile"``, ``"tf32mma"`` or ``"pipeline"``.

    float32 at ``precision`` ``"tf32x3"`` or ``"tf32"`` runs ``tf32mma`` wherever the device
    runs it (``tf32_cores``; by default :func:`tf32_auto` of ``device``): it is the path
    whose K loop sums each tile's tensor-core products with rounding adds, the only one that
    keeps float32 accuracy at long K; without them, ``warptile`` (IEEE float32, more accurate).
    Below :data:`TF32X3_MIN_K` ``"tf32x3"`` runs ``warptile`` too (the split's own rounding would
    miss the contract there; a chain of so few FMAs meets it).  ``"tf32"`` runs the pipeline's one TF32 pass where the
    pipeline may run, both output sides exceed 128 and the problem has at least
    :data:`TF32_PIPELINE_MIN_MACS` multiply-adds: its wgmma kernel is several times
    ``tf32mma``'s ``mma.sync`` rate, and the rounding copy it needs (``8 (m + n) k`` bytes)
    is small beside ``m n k`` there.

    ``pipeline``: whether the pipeline may run here (its kernels exist only for
    :data:`PIPELINE_TARGETS`, checked against ``device.cc`` as well); ``aligned``: whether both
    operands take 16-byte accesses; ``transcendental``/``medium_min_k``: the epilogue's
    traits (:class:`EpilogueTraits`); ``device``: the GPU's properties.

    float64 runs ``warptile`` where it measured faster: small problems (below K = 128 or
    ``2**28`` multiply-adds, where the pipeline's fixed host and fill costs dominate), and
    aligned operands: its DMMA tiles in cuBLAS's sm_90 shapes and its thin tiles, chosen by
    wave quantization (:func:`choose_tile`) and split over deep K (:func:`choose_split_k`),
    beat cuBLASDx's pipeline there (it ran 0.13-0.79x cuBLAS DGEMM at 28 middling shapes),
    except at K = 128 with an epilogue that keeps it on its small tile (a transcendental stage
    whose ``medium_min_k`` exceeds K).  The pipeline keeps the rest: unaligned operands
    (warptile's checked loads are slower) and those heavy epilogues at K = 128.

    float32 at ``"ieee"`` runs cuBLASDx's SIMT float32 pipeline for an output side of at most
    128 from K = 64 and ``2**30`` multiply-adds (it reads A and B once, far ahead of
    ``warptile`` there), ``warptile`` elsewhere (the SIMT pipeline lost to it on squares).
    Where the pipeline cannot run, ``warptile``.
    """
    dt = np.dtype(dtype)
    if dt == np.float32 and precision == "tf32x3" and k < TF32X3_MIN_K:
        return "warptile"
    if (dt == np.float32 and precision == "tf32" and pipeline and tuple(device.cc) in PIPELINE_TARGETS
            and min(m, n) > SIMT_FLOAT32_MAX_SIDE and m * n * k >= TF32_PIPELINE_MIN_MACS):
        return "pipeline"
    if dt == np.float32 and precision in ("tf32x3", "tf32"):
        if tf32_cores is None:
            tf32_cores = tf32_auto(device, precision)
        return "tf32mma" if tf32_cores else "warptile"
    if not pipeline or tuple(device.cc) not in PIPELINE_TARGETS:
        return "warptile"
    if dt == np.float64:
        heavy = transcendental and medium_min_k > k  # an epilogue that keeps warptile on its small tile
        if k < 128 or m * n * k < 2**28 or (aligned and (k > 128 or not heavy)):
            return "warptile"
        return "pipeline"
    if dt == np.float32 and k >= 64 and m * n * k >= 2**30 and min(m, n) <= SIMT_FLOAT32_MAX_SIDE:
        return "pipeline"
    return "warptile"


TF32_PIPELINE_MIN_MACS = 2**30
"""``precision="tf32"`` takes the pipeline from this many multiply-adds (:func:`choose_backend`);
its one pass (rounding copy included) ran 2.7x (4096^3) and 3.2x (8192^3) as fast as
``tf32mma``'s on the H100; smaller problems stay on ``tf32mma``, which needs no copy pass."""


F64_BLOCK_COST = {"large": 1.0, "medium": 0.53, "small": 0.575, "tiny": 0.31}
"""A float64 ``warptile`` block's time in large-tile block times, each tile at its own
occupancy (large one block per SM, medium and small two, tiny three).  A medium or small
block does half a large block's work, a tiny one a quarter: so the medium tile runs the DMMA
pipe about as well as the large one, the small 15 % worse (64x16 warp tiles) and the tiny
24 % worse, and each trades that for finer waves.  Fitted to all four tiles from 1000^3 to
4096^3 on the H100; it predicted the fastest tile at 12 of 13 shapes it was not fitted on."""


def choose_tile(backend: str, dtype: np.dtype, m: int, n: int, k: int, device: DeviceInfo = H100,
                medium_min_k: float = 0.0, precision: str | None = None) -> str:
    """The tile configuration of a handwritten rung (``KernelSpec.tile``).

    ``medium_min_k``: the epilogue's :attr:`EpilogueTraits.medium_tile_min_k` (0 without an
    epilogue); ``device``: the GPU (its SMs, L2 and shared memory); ``precision``: float32's
    resolved ``precision=`` (:func:`resolve_precision`).  ``gemv`` takes its
    ``"rows"`` tile for one output column (:func:`gemv_column`), ``"rows_deep"`` from
    :data:`GEMV_DEEP_MIN_K`.  Otherwise only ``warptile`` has
    several tiles (``warptile.TILE_CONFIGS``); only those that :func:`tile_fits` the device
    are candidates (with 99 KiB a block, float64 keeps its tiny tile alone).

    float32: the 64x64 tile below ``2**19`` outputs, 64x128 below ``2**22``, 128x128 above
    (finer tiles fill the SMs where there are few outputs).  At ``precision="tf32x3"`` (the
    contract; ``warptile`` runs it where the TF32 tensor cores do not pay, :func:`tf32_auto`) from
    K = :data:`F32_BLOCKED_MIN_K` the 64x128 tile takes its ``"small_blocked"`` form, each output
    summed in blocks of 16 K: on its outputs cuBLAS sums more accurately than one FMA chain (a
    quarter of the chain's error on same-sign data), and blocking costs the tile a few per cent.
    The 128x128 tile keeps its chain, whose error is cuBLAS's on those outputs (blocking it costs
    about a fifth); the 64x64 tile sums in blocks at any K (``docs/performance.md``).

    float64: an output side of at most :data:`THIN_SIDE` takes the thin tile (``"n16"``,
    128x16, or ``"m16"``, 16x128) where it fits.  Otherwise wave quantization: the busiest SM
    runs ``ceil(blocks / sms)`` blocks, each
    costing :data:`F64_BLOCK_COST`; the cheapest tile wins, ties to the larger, within three
    limits the costs do not capture: below ``2**19`` outputs the tiny tile; below K = 1024
    not the large tile (it pads K to 16 and pays a long prologue for few K tiles); the medium
    tile only with more blocks than SMs (one block per SM leaves its 4 warps too few) and
    from K = 64, or the epilogue's ``medium_min_k``.  Then two variants of the same tiles:
    below K = 1024 a medium pick runs ``"medium_grouped"`` (blocks in groups of 8 tile rows)
    where B takes more than half the L2, so B is not streamed from DRAM for every two tile
    rows; below K = 64 a small pick runs ``"short"`` (the same tile on m16n8k8).
    """
    if backend == "gemv":
        if n == 1 and m > 1:
            deep = k >= GEMV_DEEP_MIN_K and (m <= GEMV_DEEP_ROWS_PER_SM * device.sm_count or k >= 4 * GEMV_DEEP_MIN_K)
            return "rows_deep" if deep and m <= 2 * GEMV_MAX_ROW_BLOCKS else "rows"
        return "large"
    if backend != "warptile":
        return "large"
    if np.dtype(dtype) == np.float32:
        tile = "tiny" if m * n < 2**19 else "small" if m * n < 2**22 else "large"
        return "small_blocked" if tile == "small" and _contract_blocks(precision, k) else tile
    dt = np.dtype(dtype)
    if dt != np.float64:
        return "large"
    sms, l2_bytes = device.sm_count, device.l2_bytes
    side = thin_orientation(m, n)
    if side is not None and tile_fits(device, dt, f"{side}16"):
        return f"{side}16"
    if m * n < 2**19:
        return "tiny"
    costs = {}
    for tile, block_cost in F64_BLOCK_COST.items():  # larger tiles first: min() keeps the first of a tie
        if not tile_fits(device, dt, tile):
            continue
        blocks = _warptile_blocks(dt, tile, m, n)
        if tile == "large" and k < 1024:
            continue
        if tile == "medium" and (k < max(64, medium_min_k) or blocks <= sms):
            continue
        costs[tile] = block_cost * -(-blocks // sms)
    best = min(costs, key=costs.__getitem__)
    if best == "medium" and k < 1024 and 2 * n * k * np.dtype(dtype).itemsize > l2_bytes:
        return "medium_grouped"
    return "short" if best == "small" and k < 64 else best


GEMV_MAX_ROW_BLOCKS = MAX_GRID_Y
"""The most blocks of rows ``gemv``'s ``"rows"`` tile launches (the grid's second dimension: CUDA's limit)."""


GEMV_DEEP_MIN_K = 4096
GEMV_DEEP_ROWS_PER_SM = 32
"""A single-column ``gemv`` gives each row of a row-major A four warps (``"rows_deep"``) from
K = :data:`GEMV_DEEP_MIN_K` on up to this many rows per SM (where a warp a row leaves at most
four blocks of 8 rows per SM) and from four times that K on any number; else a warp a row
(``"rows"``).  On the H100 (132 SMs) the deep tile ran 64-1024 rows at K = 16384 1.6-4x as
fast, 16384 rows at K = 1024-4096 up to 2x slower (``docs/performance.md``)."""


GEMV_BATCHED_THREADS_PER_SM = {"batched": 640, "batched_wide": 384}
"""A batch of single rows runs the first of ``gemv``'s batched tiles whose threads over the whole
batch number at least this many an SM, else the single call's tile: ``"batched"`` (8-16 lanes an
output) where the batch keeps every SM busy with it, ``"batched_wide"`` (twice the lanes, twice the
loads in flight an output) for a shorter batch, and the single call's tile (16 outputs a block, 64
lanes: four times the blocks) where even that leaves most SMs idle.  Each figure lies between two
measured sides of its crossover on an H200 (``benchmarks/results/h200_gemv_vector_tiles.log``)."""


def gemv_column(m: int, n: int) -> bool:
    """Whether ``auto`` runs a single-column problem (``n == 1``, a matrix times a vector) on
    ``gemv``'s ``"rows"`` tile: every element of A is used once, so streaming A at full
    bandwidth is the whole job, and a tiled kernel would compute 63 padding columns of 64.
    Up to :data:`GEMV_MAX_ROW_BLOCKS` blocks of 8 rows."""
    return n == 1 and 1 < m <= 8 * GEMV_MAX_ROW_BLOCKS


TINY_BATCHED_MIN_BLOCKS_PER_SM = 3
"""A batch of entries narrower than its tile runs ``warptile``'s batched small tiles from this many
of their blocks an SM (fewer: ``"tiny"``): ``"micro_batched"`` (32x32) where an entry has a side of
at most 32, ``"tiny_batched"`` (64x64) where both sides are at least 64, the single call's
``"tiny"`` in between (there it measured as fast or faster in float64).  With several blocks an SM
the batch is bound by each block's throughput rather than its latency, which the batched tiles
trade for: measured on an H200 from 3.9 (64x64) and 62 (32x32) blocks an SM up, 1.1-3.4x faster
(``benchmarks/results/h200_warptile_tiny_batched*.log``, ``docs/performance.md``)."""


def choose_batched_tile(backend: str, dtype: np.dtype, m: int, n: int, k: int, count: int,
                        device: DeviceInfo = H100, medium_min_k: float = 0.0, precision: str | None = None) -> str:
    """The tile of a batched call: ``count`` entries of ``m x n`` fill the GPU together, so the
    tile is chosen as for their outputs stacked (``count * m`` rows, :func:`choose_tile`), then
    made a small one (``"tiny"``, or a batched small tile by :data:`TINY_BATCHED_MIN_BLOCKS_PER_SM`)
    where an entry is narrower than the tile on either side (a larger tile would be mostly padding)
    or the stacked outputs chose ``"tiny"``.  float32's contract (``precision="tf32x3"`` on
    ``warptile``) from K = :data:`F32_TOTAL_MIN_K` keeps ``"tiny"`` instead of ``"tiny_batched"``:
    a batch is not split over K, and the tiny tile sums in three levels (``total_every``), the
    batched one in two (a third would cost it a block an SM); and from K = :data:`F32_BLOCKED_MIN_K`
    entries stacked to the 128x128 tile's size take the blocked 64x128 tile instead (that tile's
    chain is as accurate as cuBLAS on one large output, not on the entries' own).  ``gemv`` over
    single rows takes the tile :data:`GEMV_BATCHED_THREADS_PER_SM` picks."""
    if backend == "gemv":
        if m != 1:
            return "large"
        tiles = GEMV_TILES[np.dtype(dtype).name]
        for tile, least in GEMV_BATCHED_THREADS_PER_SM.items():
            cols, lanes, _ = tiles[tile]
            if count * -(-n // cols) * 32 * lanes >= least * device.sm_count:
                return tile
        return "large"
    if backend != "warptile":
        return "large"
    tile = choose_tile(backend, dtype, m * count, n, k, device, medium_min_k, precision)
    if tile == "large" and np.dtype(dtype) == np.float32 and _contract_blocks(precision, k):
        tile = "small_blocked"
    cfg = WARPTILE_TILES.get(np.dtype(dtype).name, {}).get(tile, WARPTILE_CONFIGS[np.dtype(dtype).name])
    if tile == "tiny" or m < cfg["BM"] or n < cfg["BN"]:
        tiles = WARPTILE_TILES[np.dtype(dtype).name]
        side = min(m, n)
        # 32x32 blocks where a 64x64 one would be at least half idle; 64x64 where an entry fills one
        small = ("micro_batched" if side <= tiles["micro_batched"]["BM"]
                 else "tiny_batched" if side >= tiles["tiny_batched"]["BM"] else None)
        if small == "tiny_batched" and precision == "tf32x3" and k >= F32_TOTAL_MIN_K:
            small = None
        if small is not None:
            blocks = count * _warptile_blocks(dtype, small, m, n)
            if blocks >= TINY_BATCHED_MIN_BLOCKS_PER_SM * device.sm_count and tile_fits(device, dtype, small):
                return small
        return "tiny"
    return tile


def batched_choice(backend: str, dtype: np.dtype, m: int, n: int, k: int, count: int, *, single_rows: bool,
                   traits: "EpilogueTraits", device: DeviceInfo = H100, precision: str | None = None,
                   wgmma: bool = False) -> tuple[str, str]:
    """``(backend, tile)`` of a batched or grouped call of ``count`` entries, ``m x n x k`` each (a
    grouped call: its largest problem's).  ``auto`` runs ``gemv`` where every entry is a single
    row (``single_rows``), else :func:`choose_backend` without the pipeline (it takes one matrix
    per launch); a TF32 backend takes :func:`choose_batched_tf32`'s rung and tile (``wgmma``: the
    caller can launch ``tf32wgmma``), another rung :func:`choose_batched_tile`."""
    chosen = backend == "auto"
    if chosen:
        backend = "gemv" if single_rows else choose_backend(
            dtype, m, n, k, pipeline=False, transcendental=traits.transcendental,
            medium_min_k=traits.medium_tile_min_k, device=device, precision=precision)
    if backend == "tf32wgmma":
        return backend, precision  # one tile a precision
    if backend in TF32_BACKENDS:
        return choose_batched_tf32(precision, m, n, k, count, device, wgmma=wgmma and chosen)
    return backend, choose_batched_tile(backend, dtype, m, n, k, count, device, traits.medium_tile_min_k, precision)


def choose_batched_tf32(precision: str, m: int, n: int, k: int, count: int, device: DeviceInfo = H100, *,
                        wgmma: bool = False) -> tuple[str, str]:
    """``(backend, tile)`` of a float32 batch of ``count`` entries of ``m x n x k`` on the TF32
    tensor cores.  An entry with a side of at most 64 takes ``tf32mma``'s thin or small tile
    (a 128-wide tile would be mostly padding); otherwise the entries' outputs stacked
    (``count * m`` rows, never split over K: the batch fills the GPU) choose as one call does,
    ``tf32mma``'s tile by :func:`choose_tf32_tile` against ``tf32wgmma``'s by the same wave
    model (:data:`TF32_WGMMA_COST`) where ``wgmma`` and :func:`tf32_wgmma_fits` allow it."""
    if min(m, n) <= 64:
        return "tf32mma", tf32_thin_tile(precision, m, n) or f"{precision}_small"
    rows = m * count
    tile = choose_tf32_tile(precision, rows, n, k, device, split=False)
    if wgmma and tf32_wgmma_fits(device) and _wgmma_cheaper(precision, tile, rows, n, k, device, False):
        return "tf32wgmma", precision
    return "tf32mma", tile


def choose_split_tile(m: int, n: int) -> str:
    """The float64 split-K tile for an ``m x n`` output: the thin tile's split part for a side of
    at most :data:`THIN_SIDE`, 128x64 up to 64 columns and 64x128 up to 64 rows, where the
    128x128 tile would leave half its columns or rows idle, else 128x128."""
    side = thin_orientation(m, n)
    if side is not None:
        return f"split_{side}16"
    return "split_narrow" if n <= 64 else "split_wide" if m <= 64 else "split"


@functools.lru_cache(maxsize=None)
def tile_smem(dtype: Any, tile: str) -> tuple[int, tuple[int, ...], int]:
    """``(dynamic shared memory, block, min_blocks)`` of ``warptile``'s ``tile``: the most
    shared memory over the layouts of A and B (what the kernel builds, not compiled)."""
    from .kernels import KernelSpec, Layout
    from .kernels import warptile

    dt = np.dtype(dtype)
    cfg = WARPTILE_TILES.get(dt.name, {}).get(tile, WARPTILE_CONFIGS[dt.name])
    overrides = {"mma": (16, 8)} if cfg.get("kind") == "dmma" else {}  # any shape: no device asked
    built = [warptile.build(KernelSpec(dt, la, lb, Layout.ROW, ("probe",), lambda v, r, c, a: v, tile=tile),
                            **overrides) for la in Layout for lb in Layout]
    return max(b.dynamic_smem for b in built), tuple(built[0].block), built[0].min_blocks


def warptile_resident(dtype: Any, tile: str) -> int:
    """Blocks of ``warptile``'s ``tile`` an SM holds as designed: the ``min_blocks`` its
    registers are capped for (1 where uncapped)."""
    return max(1, tile_smem(dtype, tile)[2])


def tile_fits(device: DeviceInfo, dtype: Any, tile: str) -> bool:
    """Whether ``warptile``'s ``tile`` runs as designed on ``device``: DMMA (float64) needs
    compute capability 8.0; its shared memory must fit a block, and the ``min_blocks`` blocks
    per SM it is tuned for (registers capped to fit) must fit the SM's shared memory and threads
    (each block also takes 1 KiB the driver reserves)."""
    dt = np.dtype(dtype)
    if dt == np.float64 and tuple(device.cc) < (8, 0):
        return False
    smem, block, _ = tile_smem(dt, tile)
    threads = math.prod(block)
    resident = warptile_resident(dt, tile)
    return (smem <= device.smem_per_block and resident * (smem + 1024) <= device.sm_smem
            and resident * threads <= device.threads_per_sm)


def _warptile_blocks(dtype: Any, tile: str, m: int, n: int) -> int:
    """How many blocks ``warptile``'s ``tile`` in ``dtype`` covers an ``m x n`` output with."""
    name = np.dtype(dtype).name
    cfg = WARPTILE_TILES[name].get(tile, WARPTILE_CONFIGS[name])
    return -(-m // cfg["BM"]) * -(-n // cfg["BN"])


def split_part_tile(backend: str, tile: str, m: int, n: int, dtype: Any) -> str:
    """The tile the K slices of a split ``backend`` call run (:func:`choose_split_k`):
    float64 ``warptile``'s split tile for the width (:func:`choose_split_tile`), float32
    ``warptile``'s one split tile (the tiny tile's), or the split variant of ``tf32mma``'s mode."""
    if backend == "tf32mma":
        return f"{tile}_split"
    return "split" if np.dtype(dtype) == np.float32 else choose_split_tile(m, n)


TF32MMA_MAX_SLICES = 64
"""The most K slices a ``tf32mma`` call is split into (:func:`choose_split_k`)."""

TF32MMA_SPLIT_MIN_K = 512
"""The shortest K a ``tf32mma`` call is split over (:func:`choose_split_k`)."""

TF32MMA_MIN_SLICE_K = 256
"""The least K a ``tf32mma`` slice keeps (eight 32-deep K tiles; :func:`choose_split_k`)."""

F32_BLOCKED_MIN_K = TF32X3_MIN_K
"""From this K float32's contract on ``warptile`` runs the blocked 64x128 tile
(:func:`choose_tile`); below it, where the default runs ``warptile`` on every GPU, one chain
over K errs as cuBLAS's does on those outputs (``TF32X3_MIN_K``)."""

def _contract_blocks(precision: str | None, k: int) -> bool:
    """Whether a float32 ``warptile`` call at ``precision`` sums the larger tiles' outputs in blocks
    (:func:`choose_tile`, :func:`choose_batched_tile`): the contract, from :data:`F32_BLOCKED_MIN_K`."""
    return precision == "tf32x3" and k >= F32_BLOCKED_MIN_K


F32_TOTAL_MIN_K = 1024
"""From this K a float32 batch at the contract's precision on ``warptile`` keeps the tiny tile,
whose three-level sum bounds every chain to ``K / 256`` adds (:func:`choose_batched_tile`)."""

F32_SPLIT_MIN_K = 512
"""The shortest K a float32 ``warptile`` call is split over (:func:`choose_split_k`)."""

F32_MIN_SLICE_K = 256
"""The least K a float32 ``warptile`` slice keeps (16 of the split tile's 16-deep K tiles)."""

F32_MAX_SLICES = 64
"""The most K slices a float32 ``warptile`` call is split into."""

F64_SPLIT_MIN_K = 2048
"""The shortest K a float64 ``warptile`` call is split over (:func:`choose_split_k`).  At
K = 1024 the outputs a split would serve take 25-50 us a call, paced by the host as much as
the GPU, and four slices and the unsplit 64x64 tile traded places between H100 runs
(``docs/performance.md``)."""

F64_MIN_SLICE_K = 256
"""The least K a float64 slice keeps (16 of the split tiles' 16-deep K tiles)."""

F64_MAX_SLICES = 64
"""The most K slices a float64 ``warptile`` call is split into.  One to four split tiles at
K = 16384 (64^2 to 256^2 outputs) ran fastest at 32 or 64 slices on the H100, 1.8-2.7x as
fast as at 8 (``docs/performance.md``)."""


def choose_split_k(backend: str, dtype: np.dtype, m: int, n: int, k: int, tile: str,
                   device: DeviceInfo = H100) -> int:
    """K slices for a float64 ``warptile`` or a ``tf32mma`` call (1: unsplit).

    ``tf32mma``: an output of few tiles of ``tile`` (filling at most half the blocks the GPU
    holds at once) with K from :data:`TF32MMA_SPLIT_MIN_K` leaves most SMs idle through a long K
    loop; its K is sliced so that the tiles times the slices fill the SMs, each slice keeping at
    least :data:`TF32MMA_MIN_SLICE_K` of K, at most :data:`TF32MMA_MAX_SLICES`.  Split from
    K = 512, 256^2 x 1024 and 256 x 1024 x 1024 ran at 0.84-0.95x cuBLAS SGEMM on the H100,
    unsplit at 0.54-0.63x (``docs/performance.md``).  The slices' sums (each within the
    float32 contract) are added by the reduce in float32, which adds to no bias.

    float32 ``warptile`` (IEEE float32: ``precision="ieee"``, and the default where the TF32
    tensor cores do not pay, :func:`tf32_auto`): as ``tf32mma``, on the tiny tile's split form,
    from K = :data:`F32_SPLIT_MIN_K`, slices of at least :data:`F32_MIN_SLICE_K`, at most
    :data:`F32_MAX_SLICES`.  Besides the SMs it fills, the split shortens each output's sum (the
    slices are added once), as cuBLAS's own split does on these outputs: the float32 contract
    compares with it.

    float64: a call whose split tiles (:func:`choose_split_tile`) would fill at most half the
    blocks the GPU holds at once runs on the small, tiny or thin tile, at about half the large
    tile's DMMA rate, on few blocks.  Slicing K over ``gridDim.z`` gives the split tile's warps
    enough blocks; the partial sums are reduced by :mod:`dxgemm.kernels.splitk_reduce`
    (:mod:`dxgemm.runtime.splitk`).  Slices keep at least :data:`F64_MIN_SLICE_K` of K each (a
    slice's start-up is ~10 K tiles' worth), at most :data:`F64_MAX_SLICES`, and only from
    K = :data:`F64_SPLIT_MIN_K`: the split pays for deep K on small outputs, not for cubes; and
    only where the split tile :func:`tile_fits` ``device``.
    """
    if backend == "tf32mma":
        rows, cols = tf32_tile_shape(tile)
        resident = tf32_resident(device, tile.removesuffix("_split"))
        tiles = -(-m // rows) * -(-n // cols)
        if k < TF32MMA_SPLIT_MIN_K or 2 * tiles > resident * device.sm_count:
            return 1
        return max(1, min(resident * device.sm_count // tiles, k // TF32MMA_MIN_SLICE_K, TF32MMA_MAX_SLICES))
    dt = np.dtype(dtype)
    if backend != "warptile" or dt not in (np.float32, np.float64) or (dt == np.float64 and tile == "large"):
        return 1
    min_k, min_slice, most = ((F32_SPLIT_MIN_K, F32_MIN_SLICE_K, F32_MAX_SLICES) if dt == np.float32
                              else (F64_SPLIT_MIN_K, F64_MIN_SLICE_K, F64_MAX_SLICES))
    split_tile = split_part_tile(backend, tile, m, n, dt)
    if k < min_k or not tile_fits(device, dt, split_tile):
        return 1
    slots = device.sm_count * warptile_resident(dt, split_tile)  # blocks resident at once
    tiles = _warptile_blocks(dt, split_tile, m, n)
    if 2 * tiles > slots:
        return 1
    return max(1, min(slots // tiles, k // min_slice, most))


def pipeline_config(m: int, n: int, k: int, dtype: Any, info: Any, method: str | None = None) -> PipelineConfig:
    """The pipeline configuration for an ``m x n x k`` GEMM: one of the fixed set
    (:data:`dxgemm.pipelines.config.CONFIGS`, :data:`~dxgemm.pipelines.config.TF32X3_CONFIGS`).

    Each configuration is a multi-MB cubin and minutes of cold compile, so the choice is
    between two per dtype (``large`` and ``small``), in order:

    1. a configuration whose shared memory exceeds the device's per-block limit is skipped;
    2. skinny outputs (a side below the large tile), or fewer large tiles than one wave,
       take the small tile (the large one would be mostly padding or idle SMs);
    3. float64: the large tile only where K holds at least ``_DEEP_K_TILES_F64`` of its K
       tiles and its waves are at least 90 % full: the small tile (three blocks per SM)
       beat it everywhere else;
    4. float32: a shallow K (at most 16 large K tiles, 64 under 3xTF32, whose K is tripled)
       takes the small tile (pipeline fill and drain dominate), as does a shape where the
       small tile's wave efficiency is more than 15 % better.

    ``method``: float32's method; default the shape's (:func:`~dxgemm.pipelines.config.float32_method`),
    ``"tf32"`` for one TF32 pass (``precision="tf32"``: the TF32-operand configurations, K as given).
    """
    for name, value in (("m", m), ("n", n), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    dt = np.dtype(dtype)
    if dt not in CONFIGS:
        raise TypeError(f"pipeline GEMM supports float32 and float64, not {dt}")
    if dt != np.float32:
        method = ""
    elif method is None:
        method = float32_method(m, n)
    return _choose(int(m), int(n), int(k), dt, info, method)


@functools.lru_cache(maxsize=4096)
def _choose(m: int, n: int, k: int, dt: np.dtype, info: Any, method: str) -> PipelineConfig:
    """:func:`pipeline_config`'s rule for one problem, device and float32 method (memoized: it
    runs on every pipeline call)."""
    large, small = _configs(dt, method)["large"], _configs(dt, method)["small"]
    shallow_tiles = _SHALLOW_K_TILES
    if method in ("tf32x3", "tf32"):
        if method == "tf32x3":
            k = 3 * k  # the split triples K (pipelines.tf32x3)
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
    if dt == np.float64:
        deep = k >= _DEEP_K_TILES_F64 * large.tile_k
        return large if deep and wave_efficiency(m, n, large, info.sm_count) >= 0.9 else small
    if k <= shallow_tiles * large.tile_k:
        return small  # shallow K: pipeline fill/drain is a large share of the loop
    if wave_efficiency(m, n, small, info.sm_count) > 1.15 * wave_efficiency(m, n, large, info.sm_count):
        return small
    return large


MIN_SLICE_TILES = 8
"""Each pipeline K slice holds at least this many K tiles, so the pipeline's fill and drain
stay a small part of every slice's loop."""


def check_split_count(slices: Any) -> int:
    """``slices`` as a K split count a caller may ask for (1 to ``MAX_SPLIT_K``), or ValueError."""
    if isinstance(slices, bool) or not isinstance(slices, (int, np.integer)) or not 1 <= slices <= MAX_SPLIT_K:
        raise ValueError(f"split-K slices must be an integer from 1 to {MAX_SPLIT_K}, got {slices!r}")
    return int(slices)


def pipeline_split_k(m: int, n: int, k: int, config: PipelineConfig, dtype: Any, info: Any,
                     *, slices: int | None = None, segments: int | None = None) -> int:
    """K slices for an ``m x n x k`` pipeline GEMM in ``config`` (1: unsplit).

    A problem with few output tiles leaves most SMs idle however deep K is (4096 x 64 x 4096
    in float64 is 32 tiles on 132 SMs).  ``S`` slices give ``S`` times the blocks, for the
    price of a reduce pass and each slice's fixed cost (fill, drain, tile store).  The rule:
    ``S`` is how many times the output tiles fit into ``R - 1`` blocks per SM (at least one),
    ``R`` being how many blocks of the configuration an SM holds
    (:meth:`~dxgemm.pipelines.config.PipelineConfig.resident_blocks`), at most
    :data:`~dxgemm.pipelines.config.MAX_SPLIT_K`, and every slice keeps at least
    ``max(8, depth)`` K tiles (K tripled under 3xTF32).  An empirical fit: two-block
    configurations were fastest with one block per SM, the three-block 64x64 one with two.
    ``slices``: a count asked for (benchmarks, tests), still bounded by the slice minimum;
    ``segments``: the kernel's K over the call's (3 under 3xTF32, 1 for one TF32 pass;
    default from the shape's float32 method).
    """
    dt = np.dtype(dtype)
    if segments is None:
        segments = 3 if uses_tf32x3(dt, m, n) else 1
    k_eff = max(1, int(segments)) * int(k)
    most = k_eff // (config.tile_k * max(MIN_SLICE_TILES, config.depth))
    if most < 2 and slices is None:
        return 1
    if slices is not None:
        wanted = check_split_count(slices)
    else:
        tiles = math.ceil(m / config.tile_m) * math.ceil(n / config.tile_n)
        per_sm = max(1, config.resident_blocks(dt.itemsize) - 1)
        wanted = min(info.sm_count * per_sm // tiles, MAX_SPLIT_K)
    return max(1, min(wanted, most))
