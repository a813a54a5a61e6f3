"""float32 GEMM on the TF32 tensor cores (``mma.sync.m16n8k8``), float32-accurate or one pass.

A handwritten ``mma.sync`` kernel (sm_80 and later) in the style of ``warptile``'s FP64
tensor-core path: a block tile of ``BM x BN`` split into warp tiles of ``WM x WN``, each
a grid of m16n8 blocks, the K loop over ``BK``-deep tiles that ``cp.async`` brings into
shared memory ``stages`` deep, and ``warptile``'s fused epilogue store.  Two modes
(``spec.tile``, or ``mode=`` when building):

* ``"tf32x3"`` (float32 accuracy): each operand value is split in registers as it is
  loaded from shared memory, ``hi = tf32(x)``, ``lo = tf32(x - hi)``, and each 8-deep K
  step runs three mmas, ``lo*hi``, ``hi*lo``, ``hi*hi`` (``lo*lo`` is below float32's
  rounding).  No workspace: the split never leaves the registers.
* ``"tf32"`` (TF32 speed and accuracy, PyTorch's ``allow_tf32``): one mma per K step on
  ``tf32(x)``.

How ``tf32x3`` keeps float32 accuracy at long K.  The tensor cores add an mma's products
into its accumulator and truncate the sum toward zero; summing all 3K products in one
accumulator (one GEMM of depth 3K) loses up to an ulp a step in one direction, an error
that grows with K (on same-sign data 24-54x a float32 FFMA chain's at K = 16384-65536).
Here each K step's three mmas start from zero (a fresh partial, three truncations of an
8-product sum), the partial is added into a running float32 sum with an ordinary
(rounding) FADD, and every ``fold`` K tiles that running sum is added into the total and
restarted: a two-level sum, so no chain of rounding adds is longer than ``fold * BK / 8``
or ``K / (fold * BK)``.  Chosen by ``tools/tf32mma_emulate.py`` (a model of the
truncating accumulator) as the cheapest scheme within 2x of a rounded float32 sum on
same-sign data at K = 16384 and 65536; it costs one FADD per accumulator a K step and a
second accumulator set, where a Kahan sum of per-tile partials would have needed three.

Operand values outside the TF32-representable range: ``hi`` is clamped to the largest
finite TF32 before rounding (a value that would round past it becomes it, not infinity),
so ``x - hi`` stays exact for finite ``x`` and is ``inf`` for ``x = inf`` (the sum is then
``inf`` as in float64); NaN stays NaN.  The one-pass mode rounds without the clamp, so
there a finite value within 2^-12 of float32's largest rounds to infinity.  Below 2^-115
``x - hi`` falls among TF32's subnormals, whose 10 bits below 2^-126 keep it only in part:
near float32's underflow the split is accurate to ~2^-10 relative to ``x``, not 2^-22.

The running sums have two levels in both modes: ``acc`` over ``fold`` K tiles, then added
into ``total`` with a rounding FADD.  In ``tf32`` the mma accumulates straight into
``acc``, so its truncation drifts over ``fold * BK / 8`` steps only, not K / 8: a single
truncating accumulator errs one-sidedly at long K on same-sign data.

Under Numba's CUDA simulator a lane cannot read its neighbours' registers: there a
fragment holds whole rows of A and columns of B, rounded to TF32 as the device rounds
them, and the multiply reads them straight, as ``_device.make_dmma`` does for DMMA.

What makes it fast (the figures: ``docs/performance.md``):

* **A cheap split.**  ``cvt.rna.satfinite.tf32.f32`` compiles to six instructions (its own
  NaN and infinity checks); the kernel clamps and rounds ``hi`` in four (two FMNMX, an
  integer add and a mask).  ``lo``, an mma operand only, keeps ``cvt.rna`` (two).
* **The second-level sum in shared memory**, each thread's own slice (touched once every
  ``fold`` tiles): in registers it would take 64 of them, the K steps of a tile would have
  to stay a rolled loop, and each step's fragment loads would wait for the last step's
  mmas.
* **Unchecked copies** for interior blocks with aligned operands, as in warptile's float64
  path (``_device.make_async_tile_stream``).

Two tiles: 128x128 on 8 warps (one block a SM) and 64x64 on 4 warps (two a SM, for outputs
that give the large tile too few blocks; :func:`dxgemm.policy.choose_tf32_tile` picks).  Both
run ``mma.sync``; cuBLAS's TF32 runs on ``wgmma``, which this kernel does not issue, so
``tf32`` stays well below cuBLAS TF32 and ``tf32x3`` (three mmas per product) near cuBLAS SGEMM.
On Hopper :mod:`.tf32wgmma` issues ``wgmma`` with the same sum, and ``auto`` takes it for large outputs.
"""

from __future__ import annotations

import functools
import math
import struct
from typing import Any, Callable, NamedTuple

import numpy as np
from numba import cuda, from_dtype
from numba import uint64 as index_type

from ._device import (SIMULATOR, U, cp_async_commit, cp_async_wait, current_cc, make_async_tile_stream,
                      make_block_tile, make_offset, make_stream_pair, make_tile_async_copier)
from ._spec import BuiltKernel, KernelSpec, Layout

WARP = 32

MODES = ("tf32x3", "tf32")
"""``tf32x3``: three TF32 products per K step, float32 accuracy; ``tf32``: one, TF32 accuracy."""

# Block 128x128x32 as 8 warps of 64x32 (4x4 m16n8 blocks), three cp.async stages; blocks
# walk 16 tile rows column by column so a wave shares B's column panels in L2.  ``fold``:
# K tiles per first-level sum (tf32x3: 64 K steps, so both levels stay <= 64 adds up to
# K = 262144; tf32: 16 steps of truncating accumulation).  Shared memory 169 KiB (107.5
# stages + 64 total), one block a SM; four stages or rolled K steps are no faster
# (docs/performance.md).  GPUs with less shared memory a block (sm_86 / sm_89: 99 KiB)
# need stages=2 and a smaller tile: not chosen here yet.
CONFIGS: dict[str, dict[str, Any]] = {
    "tf32x3": dict(mode="tf32x3", threads=256, BM=128, BN=128, BK=32, WM=64, WN=32, stages=3, group_m=16,
                   fold=16),
    "tf32": dict(mode="tf32", threads=256, BM=128, BN=128, BK=32, WM=64, WN=32, stages=3, group_m=16, fold=4),
}
CONFIGS["large"] = CONFIGS["tf32x3"]
# The small tile, 64x64 as 4 warps of 32x32 (2x4 m16n8 blocks), for outputs that give the
# 128x128 tile too few blocks to fill the SMs (and entries of a batch narrower than it):
# four times the blocks at a lower mma rate per warp (a 32x32 warp tile loads a fragment for
# every 1.5 mmas, the 64x32 one for every 2).  tf32x3 keeps two cp.async stages (52 KiB) and,
# on sm_90, three blocks a SM (registers held to 168): a third block hides more latency than a
# third stage does, 0-8 % faster at 14 of 15 shapes from K = 16 to 8192 (docs/performance.md).
# Only there: at 168 registers ptxas 13.0 (the ctk130 extra) spills 32 bytes on sm_80 and 100
# on sm_100, where the tile keeps its registers and two blocks a SM (:func:`tile_min_blocks`).
# It is also the tile that fits GPUs with 99 KiB of shared memory a block (sm_86, sm_89, sm_120).
CONFIGS["tf32x3_small"] = dict(CONFIGS["tf32x3"], threads=128, BM=64, BN=64, WM=32, WN=32, stages=2,
                               min_blocks_sm90=3)
CONFIGS["tf32_small"] = dict(CONFIGS["tf32"], threads=128, BM=64, BN=64, WM=32, WN=32)
# The thin tiles, for an output side of at most 16: there every element of the long operand is
# used once per 16 outputs, so the GEMM streams that operand, and a 64-wide tile would spend
# three quarters of its mmas on padding.  "narrow" is 128x16 (4 warps of 32x16 down the rows,
# two stages: many blocks in flight, each short-lived), "flat" 16x128 (4 warps of 16x32 across
# the columns, four stages: each block walks K over a B panel 128 wide).  Both hold registers
# for three a SM; the flat tile's 88 KiB of shared memory leaves it two.
for _mode in MODES:
    CONFIGS[f"{_mode}_narrow"] = dict(CONFIGS[_mode], threads=128, BM=128, BN=16, WM=32, WN=16, stages=2, min_blocks=3)
    CONFIGS[f"{_mode}_flat"] = dict(CONFIGS[_mode], threads=128, BM=16, BN=128, WM=16, WN=32, stages=4, min_blocks=3)
# The K-split parts (``dxgemm.policy.choose_split_k``): each block sums one K slice
# (``blockIdx.z`` of ``gridDim.z``) into its slice of a workspace, which the split-K reduce
# adds up and passes through the caller's epilogue.
for _tile in [t for t in CONFIGS if t != "large"]:
    CONFIGS[f"{_tile}_split"] = dict(CONFIGS[_tile], split_k=True)


def tile_config(tile: str) -> dict:
    """The configuration of ``tile``: its :data:`CONFIGS` entry or, for ``"<split part>_serial"``,
    that part's serial form, whose last slice to arrive at an output tile sums the slices and
    writes D (``splitk_reduce.make_serial_finish``): one launch instead of two."""
    base = tile.removesuffix("_serial")
    if base not in CONFIGS:
        raise ValueError(f"tf32mma has the tiles {sorted(CONFIGS)} (and each split part's '_serial' form), "
                         f"got {tile!r}")
    if base == tile:
        return CONFIGS[tile]
    if not CONFIGS[base].get("split_k"):
        raise ValueError(f"{tile!r}: only a split part has a serial form, and {base!r} is not one")
    return dict(CONFIGS[base], serial=True)


TF32_MAX = float(np.float32((2 - 2.0**-10) * 2.0**127))
"""The largest finite TF32 value (what ``.satfinite`` clamps to)."""


# ---------------------------------------------------------------------------------------
# Device primitives: the TF32 conversion and the mma, as inline PTX.  PTX takes TF32
# operands in .b32 registers, so the intrinsics bitcast float32 <-> i32 around the asm.
# ---------------------------------------------------------------------------------------
if SIMULATOR:

    def _tf32_bits(x: float, satfinite: bool) -> float:
        bits = struct.unpack("<I", struct.pack("<f", np.float32(x)))[0]
        if (bits & 0x7F800000) == 0x7F800000:  # inf and NaN pass through
            value = np.float32(x)
        else:
            value = struct.unpack("<f", struct.pack("<I", ((bits + 0x1000) & 0xFFFFE000) & 0xFFFFFFFF))[0]
            value = np.float32(value)
        if satfinite and math.isinf(value) and not math.isinf(float(x)):
            value = np.float32(math.copysign(TF32_MAX, float(x)))
        elif satfinite and math.isinf(float(x)):
            value = np.float32(math.copysign(TF32_MAX, float(x)))
        return value

    def tf32_round(x):
        """Simulator: ``x`` rounded to TF32, to nearest (ties away from zero)."""
        return _tf32_bits(x, False)

    def tf32_round_sat(x):
        """Simulator: as :func:`tf32_round`, finite values (and infinities) clamped to +-TF32_MAX."""
        return _tf32_bits(x, True)

else:
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    def _bits_op(ptx: str, doc: str):
        """An intrinsic running ``ptx`` (``$0`` the .b32 result, ``$1`` the float32 operand)."""

        @intrinsic
        def op(typingctx, x):
            if x != types.float32:
                return None

            def codegen(context, builder, sig, args):
                fn = ir.FunctionType(ir.IntType(32), [ir.FloatType()])
                bits = builder.call(ir.InlineAsm(fn, ptx, "=r,f"), [args[0]])
                return builder.bitcast(bits, ir.FloatType())

            return types.float32(x), codegen

        op.__doc__ = doc
        return op

    # ``hi``: clamp to +-TF32_MAX (min/max return the other operand for NaN, so NaN gives
    # TF32_MAX here and NaN in ``x - hi``), then round to nearest, ties away, in the integer
    # unit: add half a TF32 ulp, clear the 13 low bits.  Four instructions where
    # ``cvt.rna.satfinite.tf32.f32`` compiled to six (its own NaN and infinity checks).
    tf32_round_sat = _bits_op(
        "{ .reg .f32 c; .reg .b32 r; min.f32 c, $1, 0f7F7FE000; max.f32 c, c, 0fFF7FE000; "
        "mov.b32 r, c; add.s32 r, r, 4096; and.b32 $0, r, -8192; }",
        "float32 ``x`` clamped to +-TF32_MAX and rounded to TF32 (nearest, ties away).")
    # An mma operand: ``cvt.rna.tf32.f32`` itself.  ptxas knows the mma reads only the 19 high
    # bits of a TF32 operand and lowers it to a compare on |x| and a predicated add of half a
    # TF32 ulp, two instructions that leave infinities and NaNs alone.  (A bare integer add,
    # one instruction, carried the GPU's NaN 0x7FFFFFFF of ``NaN - hi`` into the sign bit and
    # lost it on the H100.)
    tf32_round = _bits_op("cvt.rna.tf32.f32 $0, $1;",
                          "float32 ``x`` as an mma operand rounded to TF32 (nearest, ties away); inf and NaN kept.")

    @intrinsic
    def mma_tf32(typingctx, a, b, c):
        """``d = a @ b + c`` for one warp: ``mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32``
        on UniTuples of float32 (A 4 values, B 2, C 4, each lane's fragment)."""
        f32 = types.float32
        if (a, b, c) != (types.UniTuple(f32, 4), types.UniTuple(f32, 2), types.UniTuple(f32, 4)):
            return None
        sig = types.UniTuple(f32, 4)(a, b, c)

        def codegen(context, builder, sig, args):
            fl, i32 = ir.FloatType(), ir.IntType(32)
            ins = [builder.bitcast(builder.extract_value(args[0], i), i32) for i in range(4)]
            ins += [builder.bitcast(builder.extract_value(args[1], i), i32) for i in range(2)]
            ins += [builder.extract_value(args[2], i) for i in range(4)]
            text = ("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {$0, $1, $2, $3}, {$4, $5, $6, $7}, "
                    "{$8, $9}, {$10, $11, $12, $13};")
            fnty = ir.FunctionType(ir.LiteralStructType([fl] * 4), [i32] * 6 + [fl] * 4)
            res = builder.call(ir.InlineAsm(fnty, text, ",".join(["=f"] * 4 + ["r"] * 6 + ["f"] * 4)), ins)
            return context.make_tuple(builder, sig.return_type, [builder.extract_value(res, i) for i in range(4)])

        return sig, codegen


class Tf32Mma(NamedTuple):
    """Device functions of one mode for shared tiles of given orientations.

    ``load_a(tile, base, ld, lane, frag, i)`` / ``load_b(...)`` fill row ``i`` of a
    ``cuda.local.array((count, a_vals), float32)`` fragment array with this lane's values
    of the m16 x k8 A block (k8 x n8 B block) whose corner is ``tile[base]``, rounded (and
    in ``tf32x3`` split) as loaded.  ``mma(a_frag, i, b_frag, j, acc, lo, hi)`` adds A block
    ``i`` times B block ``j`` into ``acc[lo], acc[lo + 1]`` (rows ``g``) and ``acc[hi],
    acc[hi + 1]`` (rows ``g + 8``): in ``tf32x3`` as a fresh three-product partial added
    with FADDs, in ``tf32`` as one mma into the accumulator.
    """

    a_vals: int
    b_vals: int
    load_a: Callable
    load_b: Callable
    mma: Callable


def make_tf32_mma(mode: str, a_kmajor: bool, b_kmajor: bool) -> Tf32Mma:
    """:class:`Tf32Mma` for ``mode``; ``a_kmajor``: shared A holds ``(i, k)`` at ``k * ld + i``
    (else ``i * ld + k``); ``b_kmajor``: shared B holds ``(k, j)`` at ``k * ld + j`` (else
    ``j * ld + k``)."""
    if mode not in MODES:
        raise ValueError(f"tf32mma mode must be one of {MODES}, got {mode!r}")
    split = mode == "tf32x3"
    a_at = (lambda r, k: f"({k}) * ld + {r}") if a_kmajor else (lambda r, k: f"({r}) * ld + {k}")
    b_at = (lambda k, c: f"({k}) * ld + {c}") if b_kmajor else (lambda k, c: f"({c}) * ld + {k}")
    ns: dict[str, Any] = {"U": U, "np": np}
    if SIMULATOR:
        # A fragment holds rows g, g + 8 of A (columns 2t, 2t + 1 of B) over the whole K step,
        # hi values then lo values; the partial of a K step is rounded once to float32.
        ns.update(hi_of=tf32_round_sat if split else tf32_round)
        src = f"""
def split(x):
    hi = hi_of(x)
    return hi, (tf32_round(np.float32(x - hi)) if SPLIT else np.float32(0))

def load_a(tile, base, ld, lane, frag, i):
    g = lane // 4
    for vm in range(2):
        for kk in range(8):
            hi, lo = split(tile[base + {a_at("g + 8 * vm", "kk")}])
            frag[i, vm * 8 + kk] = hi
            frag[i, 16 + vm * 8 + kk] = lo

def load_b(tile, base, ld, lane, frag, j):
    t2 = (lane % 4) * 2
    for h in range(2):
        for kk in range(8):
            hi, lo = split(tile[base + {b_at("kk", "t2 + h")}])
            frag[j, h * 8 + kk] = hi
            frag[j, 16 + h * 8 + kk] = lo

def mma(a_frag, i, b_frag, j, acc, lo, hi):
    for vm in range(2):
        c = lo if vm == 0 else hi
        for h in range(2):
            part = 0.0
            for kk in range(8):
                ah, bh = float(a_frag[i, vm * 8 + kk]), float(b_frag[j, h * 8 + kk])
                part += ah * bh
                if SPLIT:
                    part += float(a_frag[i, 16 + vm * 8 + kk]) * bh + ah * float(b_frag[j, 16 + h * 8 + kk])
            acc[c + h] = np.float32(float(acc[c + h]) + float(np.float32(part)))
"""
        ns.update(tf32_round=tf32_round, SPLIT=split)
        exec(src, ns)
        return Tf32Mma(32, 32, ns["load_a"], ns["load_b"], ns["mma"])

    # Lane (g, t): A values A[g, t], A[g + 8, t], A[g, t + 4], A[g + 8, t + 4]; B values
    # B[t, g], B[t + 4, g]; C values C[g, 2t], C[g, 2t + 1], C[g + 8, 2t], C[g + 8, 2t + 1].
    a_pos = [("g", "t"), ("g + U(8)", "t"), ("g", "t + U(4)"), ("g + U(8)", "t + U(4)")]
    b_pos = [("t", "g"), ("t + U(4)", "g")]
    ns.update(tf32_round=tf32_round, tf32_round_sat=tf32_round_sat, mma_tf32=mma_tf32, f32=np.float32)
    if split:
        a_loads = "\n".join(f"    x = tile[base + {a_at(*p)}]\n    h = tf32_round_sat(x)\n    frag[i, {v}] = h\n"
                            f"    frag[i, {4 + v}] = tf32_round(x - h)" for v, p in enumerate(a_pos))
        b_loads = "\n".join(f"    x = tile[base + {b_at(*p)}]\n    h = tf32_round_sat(x)\n    frag[j, {v}] = h\n"
                            f"    frag[j, {2 + v}] = tf32_round(x - h)" for v, p in enumerate(b_pos))
        body = """
    ahi = (a_frag[i, 0], a_frag[i, 1], a_frag[i, 2], a_frag[i, 3])
    bhi = (b_frag[j, 0], b_frag[j, 1])
    z = f32(0)
    p = mma_tf32((a_frag[i, 4], a_frag[i, 5], a_frag[i, 6], a_frag[i, 7]), bhi, (z, z, z, z))
    p = mma_tf32(ahi, (b_frag[j, 2], b_frag[j, 3]), p)
    p = mma_tf32(ahi, bhi, p)
    acc[lo] += p[0]
    acc[lo + 1] += p[1]
    acc[hi] += p[2]
    acc[hi + 1] += p[3]
"""
        nvals = (8, 4)
    else:
        a_loads = "\n".join(f"    frag[i, {v}] = tf32_round(tile[base + {a_at(*p)}])" for v, p in enumerate(a_pos))
        b_loads = "\n".join(f"    frag[j, {v}] = tf32_round(tile[base + {b_at(*p)}])" for v, p in enumerate(b_pos))
        body = """
    acc[lo], acc[lo + 1], acc[hi], acc[hi + 1] = mma_tf32(
        (a_frag[i, 0], a_frag[i, 1], a_frag[i, 2], a_frag[i, 3]), (b_frag[j, 0], b_frag[j, 1]),
        (acc[lo], acc[lo + 1], acc[hi], acc[hi + 1]))
"""
        nvals = (4, 2)
    src = f"""
def load_a(tile, base, ld, lane, frag, i):
    g = lane >> U(2)
    t = lane & U(3)
{a_loads}

def load_b(tile, base, ld, lane, frag, j):
    g = lane >> U(2)
    t = lane & U(3)
{b_loads}

def mma(a_frag, i, b_frag, j, acc, lo, hi):
{body}
"""
    exec(src, ns)
    dev = cuda.jit(device=True, inline="always")
    return Tf32Mma(nvals[0], nvals[1], dev(ns["load_a"]), dev(ns["load_b"]), dev(ns["mma"]))


def _line_pad(extent: int, kmajor: bool) -> int:
    """Floats added to each shared line so a warp's fragment loads hit 32 different banks.

    A K-major tile puts a lane's ``t`` (4 values) across lines and ``g`` (8) along one: the
    line length must be 8 or 24 mod 32.  The other orientation puts ``g`` across lines and
    ``t`` along: an odd multiple of 4.  Lines stay multiples of 4 floats (16-byte copies)."""
    for pad in range(4, 40, 4):
        ld = (extent + pad) % 32
        if (ld in (8, 24)) if kmajor else (ld % 8 == 4):
            return pad
    raise AssertionError("unreachable: some pad below 40 fits")


def _stage_layout(cfg: dict, a_kmajor: bool, b_kmajor: bool) -> tuple[int, int, int, int]:
    """``(ALD, BLD, A_STAGE, B_STAGE)``: the shared tiles' line lengths and one stage's floats."""
    BM, BN, BK = cfg["BM"], cfg["BN"], cfg["BK"]
    ald = BM + _line_pad(BM, True) if a_kmajor else BK + _line_pad(BK, False)
    bld = BN + _line_pad(BN, True) if b_kmajor else BK + _line_pad(BK, False)
    return ald, bld, ald * (BK if a_kmajor else BM), bld * (BK if b_kmajor else BN)


@functools.lru_cache(maxsize=None)
def smem_bytes(tile: str = "tf32x3") -> int:
    """The most dynamic shared memory ``tile``'s kernel takes, over the layouts of A and B: the
    policy runs this rung only on a device whose blocks may have that much."""
    cfg = tile_config(tile)
    acc = (cfg["WM"] // 16) * 2 * (cfg["WN"] // 8) * 2 * cfg["threads"] if cfg.get("fold", 0) else 0
    stages = cfg.get("stages", 3)
    return 4 * max(stages * (sa + sb) + acc for ka in (False, True) for kb in (False, True)
                   for _, _, sa, sb in [_stage_layout(cfg, ka, kb)])


def tile_min_blocks(tile: str, cc: tuple[int, int]) -> int:
    """The blocks a SM ``tile``'s kernel for compute capability ``cc`` holds registers for (its
    launch bound; 0: none): ``min_blocks_sm90`` on sm_90 where the tile names one, else ``min_blocks``."""
    cfg = tile_config(tile)
    if "min_blocks_sm90" in cfg and tuple(cc) == (9, 0):
        return cfg["min_blocks_sm90"]
    return cfg.get("min_blocks", 0)


def build(spec: KernelSpec, **overrides) -> BuiltKernel:
    """The kernel for ``spec`` (float32 only): ``spec.tile`` names the mode's configuration
    (``"tf32x3"``, the default ``"large"``, or ``"tf32"``); ``overrides`` change any of its
    entries (``mode``, ``threads``, ``BM``, ``BN``, ``BK``, ``WM``, ``WN``, ``stages``,
    ``group_m``, ``fold``, ``unroll_steps``, ``unchecked``, ``min_blocks``, ``split_k``)."""
    if spec.dtype != np.float32:
        raise ValueError(f"tf32mma computes float32 GEMMs, got dtype {spec.dtype}")
    cfg = dict(tile_config(spec.tile), **overrides)
    mode = cfg["mode"]
    threads, BM, BN, BK, WM, WN = (cfg[x] for x in ("threads", "BM", "BN", "BK", "WM", "WN"))
    NSTAGES = cfg.get("stages", 3)
    FOLD = int(cfg.get("fold", 0))  # 0: one level (tf32 only: the three-product sum needs two)
    if FOLD < 0 or (FOLD == 0 and mode == "tf32x3"):
        raise ValueError(f"fold must be >= 1 K tiles per first-level sum (0 allowed for tf32), got {cfg.get('fold')}")
    if not 2 <= NSTAGES <= 5:
        raise ValueError(f"the cp.async pipeline takes 2 to 5 stages, got {NSTAGES}")
    if BM % WM or BN % WN or (BM // WM) * (BN // WN) * WARP != threads or WM % 16 or WN % 8 or BK % 8:
        raise ValueError(f"inconsistent tf32mma configuration {cfg}: the warp tiles must cover the block tile "
                         "exactly, one warp each, in whole m16n8k8 blocks")
    A_KMAJOR = spec.layout_a == Layout.COL  # the shared tiles keep the global layouts (16-byte copies)
    B_KMAJOR = spec.layout_b == Layout.ROW
    ops = make_tf32_mma(mode, A_KMAJOR, B_KMAJOR)
    MI, NI, KSTEPS = WM // 16, WN // 8, BK // 8
    ALD, BLD, A_STAGE, B_STAGE = _stage_layout(cfg, A_KMAJOR, B_KMAJOR)

    from .splitk_reduce import make_serial_finish
    from .warptile import _identity, _make_dmma_store, _run_store  # the fused epilogue store every warptile kernel uses

    dt = spec.dtype
    nb = dt.type
    zero = nb(0)
    d_off = make_offset(spec.layout_d)
    epilogue = spec.epilogue_fn
    a_elems, b_elems, acc_elems = NSTAGES * A_STAGE, NSTAGES * B_STAGE, MI * 2 * NI * 2
    uA_STAGE, uB_STAGE = U(A_STAGE), U(B_STAGE)
    smem_type = from_dtype(dt)
    A_VALS, B_VALS = ops.a_vals, ops.b_vals
    load_a, load_b, mma = ops.load_a, ops.load_b, ops.mma
    store_tile = _make_dmma_store(MI * 2, NI, _run_store(2, epilogue, d_off, False), epilogue, d_off, False, BM, BN)
    uBM, uBN, uBK, uWM, uWN, uALD, uBLD = U(BM), U(BN), U(BK), U(WM), U(WN), U(ALD), U(BLD)
    uWARP, warps_across, u16, u8 = U(WARP), U(BN // WN), U(16), U(8)
    one, two = U(1), U(2)
    uLAST = U(NSTAGES - 1)
    uFOLD = U(max(FOLD, 1))
    SPLIT_K = bool(cfg.get("split_k", False))  # K sliced over gridDim.z, partial sums into a workspace
    SERIAL = SPLIT_K and bool(cfg.get("serial", False))  # ... summed by the tile's last slice (finish)
    if SERIAL:  # the slices go to the workspace as they are; the caller's epilogue runs in finish
        store_slice = _make_dmma_store(MI * 2, NI, _run_store(2, _identity, d_off, False), _identity, d_off, False,
                                       BM, BN)
        finish = make_serial_finish(spec, BM, BN, threads)
    D_ROWS = spec.layout_d == Layout.ROW
    GROUP_M = int(cfg.get("group_m", 0))
    copy_a = make_tile_async_copier(dt, spec.layout_a, BM, BK, threads, ALD)
    copy_b = make_tile_async_copier(dt, spec.layout_b, BK, BN, threads, BLD)
    wait_oldest = cp_async_wait[NSTAGES - 2]
    # Blocks wholly inside D with 16-byte aligned operands copy every full K tile unchecked,
    # from per-thread origins kept in registers, one add to move along K (``_device.
    # make_async_tile_stream``, as warptile's float64 path does): the checked copier's bounds
    # arithmetic costs more issue slots than the copies.
    UNCHECKED = bool(cfg.get("unchecked", True))
    stream_a = make_async_tile_stream(dt, spec.layout_a, BM, BK, threads, ALD, k_along_rows=False)
    stream_b = make_async_tile_stream(dt, spec.layout_b, BK, BN, threads, BLD, k_along_rows=True)
    streams = make_stream_pair(stream_a, stream_b, A_STAGE, B_STAGE)
    A_IT, B_IT = stream_a.iters, stream_b.iters

    block_tile = make_block_tile(GROUP_M)

    @cuda.jit(device=True, inline="always")
    def a_base(a_off, w_row, i, s):
        if A_KMAJOR:
            return a_off + U(s * 8) * uALD + w_row + U(i) * u16
        return a_off + (w_row + U(i) * u16) * uALD + U(s * 8)

    @cuda.jit(device=True, inline="always")
    def b_base(b_off, w_col, j, s):
        if B_KMAJOR:
            return b_off + U(s * 8) * uBLD + w_col + U(j) * u8
        return b_off + (w_col + U(j) * u8) * uBLD + U(s * 8)

    @cuda.jit(device=True, inline="always")
    def copy_tile(a, lda, b, ldb, row0, col0, k0, um, un, uk, a_tile, b_tile, stage, tid, vec_a, vec_b):
        copy_a(a, lda, row0, k0, um, uk, a_tile[stage * uA_STAGE:], tid, vec_a)
        copy_b(b, ldb, k0, col0, uk, un, b_tile[stage * uB_STAGE:], tid, vec_b)

    def make_step(s: int):
        @cuda.jit(device=True, inline="always")
        def step(a_tile, b_tile, a_off, b_off, w_row, w_col, lane, a_frag, b_frag, acc):
            """K step ``s`` of a tile: this warp's fragments, then its MI x NI mma blocks."""
            for i in range(MI):
                load_a(a_tile, a_base(a_off, w_row, i, s), uALD, lane, a_frag, i)
            for j in range(NI):
                load_b(b_tile, b_base(b_off, w_col, j, s), uBLD, lane, b_frag, j)
            for i in range(MI):
                for j in range(NI):
                    lo = 2 * (2 * i * NI + j)
                    mma(a_frag, i, b_frag, j, acc, lo, lo + 2 * NI)

        return step

    def then(first, rest):
        @cuda.jit(device=True, inline="always")
        def steps(a_tile, b_tile, a_off, b_off, w_row, w_col, lane, a_frag, b_frag, acc):
            first(a_tile, b_tile, a_off, b_off, w_row, w_col, lane, a_frag, b_frag, acc)
            rest(a_tile, b_tile, a_off, b_off, w_row, w_col, lane, a_frag, b_frag, acc)

        return steps

    if cfg.get("unroll_steps", True):
        # One device function per K step, chained (as warptile does): LLVM leaves a loop over
        # the steps rolled, and then the next step's fragment loads cannot overlap this step's mmas.
        all_steps = make_step(KSTEPS - 1)
        for s in range(KSTEPS - 2, -1, -1):
            all_steps = then(make_step(s), all_steps)

        @cuda.jit(device=True, inline="always")
        def multiply_tile(a_tile, b_tile, stage, w_row, w_col, lane, a_frag, b_frag, acc):
            """``acc += `` this warp's part of the K tile in ``stage``, K step by K step."""
            all_steps(a_tile, b_tile, stage * uA_STAGE, stage * uB_STAGE, w_row, w_col, lane, a_frag, b_frag, acc)
    else:
        # A rolled loop over the K steps: fewer registers live (the tf32x3 warp tile's two
        # accumulator sets leave little room), no overlap of one step's loads with the last's mmas.
        @cuda.jit(device=True, inline="always")
        def step_at(a_tile, b_tile, a_off, b_off, w_row, w_col, lane, a_frag, b_frag, acc, s):
            for i in range(MI):
                load_a(a_tile, a_off + (s * uALD if A_KMAJOR else s) * u8 + a_base(U(0), w_row, i, 0), uALD,
                       lane, a_frag, i)
            for j in range(NI):
                load_b(b_tile, b_off + (s * uBLD if B_KMAJOR else s) * u8 + b_base(U(0), w_col, j, 0), uBLD,
                       lane, b_frag, j)
            for i in range(MI):
                for j in range(NI):
                    lo = 2 * (2 * i * NI + j)
                    mma(a_frag, i, b_frag, j, acc, lo, lo + 2 * NI)

        @cuda.jit(device=True, inline="always")
        def multiply_tile(a_tile, b_tile, stage, w_row, w_col, lane, a_frag, b_frag, acc):
            """``acc += `` this warp's part of the K tile in ``stage``, K step by K step."""
            for s in range(KSTEPS):
                step_at(a_tile, b_tile, stage * uA_STAGE, stage * uB_STAGE, w_row, w_col, lane, a_frag, b_frag, acc,
                        U(s))

    @cuda.jit(device=True, inline="always")
    def fold(t, acc, total, at):
        """After K tile ``t - 1``: every ``fold`` tiles the first-level sum joins the total,
        this thread's slice of shared memory from ``total[at]``, a stride of ``threads``."""
        if FOLD and t % uFOLD == U(0):
            for i in range(acc_elems):
                total[at + U(i * threads)] += acc[i]
                acc[i] = zero

    def tf32mma_gemm(a, b, d, m, n, k, lda, ldb, ldd, flags, epi_args):
        smem = cuda.shared.array(0, smem_type)
        a_tile = smem[:a_elems]  # NSTAGES x A tile, A's global layout, lines ALD apart
        b_tile = smem[a_elems:]  # NSTAGES x B tile
        acc = cuda.local.array(acc_elems, nb)  # the running first-level sum
        a_frag = cuda.local.array((MI, A_VALS), nb)
        b_frag = cuda.local.array((NI, B_VALS), nb)
        tid = U(cuda.threadIdx.x)
        # The sum of the folded first-level sums lives in shared memory, each thread's own
        # slice (no barrier): touched once every ``fold`` K tiles, it would otherwise hold
        # as many registers as the accumulators, which the K steps need to overlap.
        total = smem
        tot = U(a_elems + b_elems) + tid
        for i in range(acc_elems):
            acc[i] = zero
            if FOLD:
                total[tot + U(i * threads)] = zero
        warp = tid // uWARP
        lane = tid % uWARP
        w_row = (warp // warps_across) * uWM
        w_col = (warp % warps_across) * uWN
        tile_m, tile_n = block_tile()
        row0, col0 = tile_m * uBM, tile_n * uBN
        um, un, uk = U(m), U(n), U(k)
        vec_a = (U(flags) & one) != U(0)
        vec_b = (U(flags) & two) != U(0)
        n_tiles = (uk + uBK - one) // uBK
        kb = U(0)  # this block's K range: kb .. uk - 1
        if SPLIT_K:  # K slice blockIdx.z of gridDim.z, whole K tiles each but the last
            per = (n_tiles + U(cuda.gridDim.z) - one) // U(cuda.gridDim.z) * uBK
            kb = min(U(cuda.blockIdx.z) * per, uk)
            uk = min(kb + per, uk)
            n_tiles = (uk - kb + uBK - one) // uBK
        # The first NSTAGES - 1 tiles go out at once, one commit group each (empty groups past
        # the last tile keep the count the waits rely on).  Tile t lives in stage t % NSTAGES.
        for st in range(NSTAGES - 1):
            if U(st) < n_tiles:
                copy_tile(a, U(lda), b, U(ldb), row0, col0, kb + U(st) * uBK, um, un, uk, a_tile, b_tile, U(st), tid,
                          vec_a, vec_b)
            cp_async_commit()
        use = U(0)
        fill = uLAST
        t = U(0)
        if UNCHECKED and vec_a and vec_b and row0 + uBM <= um and col0 + uBN <= un:
            a_src = cuda.local.array(A_IT, index_type)
            b_src = cuda.local.array(B_IT, index_type)
            streams.origins(U(lda), U(ldb), row0, col0, tid, a_src, b_src)
            a_ks, b_ks, a_place, b_place = streams.placement(U(lda), U(ldb), tid)
            full_tiles = (uk - kb) // uBK
            while t + uLAST < full_tiles:
                wait_oldest()
                cuda.syncthreads()
                dk = kb + (t + uLAST) * uBK
                streams.copy(a_tile, b_tile, fill, a, b, a_src, b_src, dk, a_ks, b_ks, a_place, b_place)
                cp_async_commit()
                multiply_tile(a_tile, b_tile, use, w_row, w_col, lane, a_frag, b_frag, acc)
                t += one
                fold(t, acc, total, tot)
                use = use + one if use < uLAST else U(0)
                fill = fill + one if fill < uLAST else U(0)
        while t < n_tiles:
            wait_oldest()  # this thread's copies of tile t have landed ...
            cuda.syncthreads()  # ... everyone's, and no warp still reads stage `fill` (tile t - 1)
            ahead = t + uLAST
            if ahead < n_tiles:
                copy_tile(a, U(lda), b, U(ldb), row0, col0, kb + ahead * uBK, um, un, uk, a_tile, b_tile, fill, tid,
                          vec_a, vec_b)
            cp_async_commit()
            multiply_tile(a_tile, b_tile, use, w_row, w_col, lane, a_frag, b_frag, acc)
            t += one
            fold(t, acc, total, tot)
            use = use + one if use < uLAST else U(0)
            fill = fill + one if fill < uLAST else U(0)
        if FOLD:
            for i in range(acc_elems):
                acc[i] += total[tot + U(i * threads)]
        if SERIAL:  # epi_args: (the caller's arguments, workspace, arrival counts)
            w = epi_args[1]
            store_slice(w[U(cuda.blockIdx.z) * um * un:], un if D_ROWS else um, um, un, row0, col0, w_row, w_col,
                        lane, acc, epi_args[0])
            finish(w, epi_args[2], d, ldd, um, un, row0, col0, tid, epi_args[0])
        elif SPLIT_K:  # slice z of a workspace laid out like D, one m x n matrix after another
            store_tile(d[U(cuda.blockIdx.z) * (um if D_ROWS else un) * U(ldd):], U(ldd), um, un, row0, col0, w_row,
                       w_col, lane, acc, epi_args)
        else:
            store_tile(d, U(ldd), um, un, row0, col0, w_row, w_col, lane, acc, epi_args)

    min_blocks = overrides.get("min_blocks", tile_min_blocks(spec.tile, current_cc()))
    return BuiltKernel(tf32mma_gemm, (threads,), BM, BN,
                       dynamic_smem=(a_elems + b_elems + (acc_elems * threads if FOLD else 0)) * dt.itemsize,
                       min_blocks=min_blocks)
