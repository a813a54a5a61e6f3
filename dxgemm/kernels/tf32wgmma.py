"""float32 GEMM on Hopper's warpgroup tensor-core instructions (``wgmma``), float32-accurate or one pass.

The ``wgmma`` sibling of :mod:`.tf32mma` (sm_90a only: ``wgmma.mma_async`` exists on
Hopper alone).  On the H100 ``mma.sync`` reaches under half of the TF32 tensor-core rate
(``docs/performance.md``), so three ``mma.sync`` products per step stay near cuBLAS SGEMM;
``wgmma`` runs at the full rate, which the accurate sum needs to beat SGEMM by a wide margin.

The block is ``warpgroups`` groups of four warps stacked down M, each computing a 64 x BN
slab with ``wgmma.m64nBNk8`` (A from registers, B from shared memory).  Per 32-deep K tile:

1. ``cp.async`` brings the raw float32 tiles of A and B into shared memory, ``stages`` deep
   (the global layouts kept, as in :mod:`.tf32mma`);
2. the block rewrites the raw B tile as TF32 ``hi = tf32(x)`` and (``tf32x3``) ``lo =
   tf32(x - hi)``, each N-major line of 32 K values in the 128-byte swizzled layout ``wgmma``
   reads: TF32 ``wgmma`` takes B K-major only, so this is also where a row-major B turns
   over, and it is the one copy the split costs (no workspace in global memory).  It runs
   while the previous tile's ``wgmma`` do, into the other of two line buffers: one barrier a
   tile, and the tensor cores are not left idle while the block rewrites B (done in turn, it
   cost 23-35 % of the speed);
3. each thread splits its A fragment in registers as it loads it (as :mod:`.tf32mma` does)
   and each 8-deep K step runs three ``wgmma`` into a fresh partial, ``lo*hi``, ``hi*lo``,
   ``hi*hi`` (``lo*lo`` is below float32's rounding), waits for it and adds it into the
   running float32 sum with rounding FADDs.

``tf32`` (one pass) keeps a tile's ``wgmma`` group running past the tile's barrier: the next
tile's products queue behind it while the block splits and copies, and a group is waited for
only once the tile after it has been issued (a third line buffer keeps the split clear of the
lines a running group reads).  ``tf32x3`` waits for each step's partial before adding it: with
two partials in flight the second-level total has to leave the registers, and that measured
slower than waiting (``docs/performance.md``).  ``pair_steps`` (a variant, off by default)
sums two steps' six products a partial, the small ones first: half the rounding adds, as
accurate in the NumPy model (``tools/tf32mma_emulate.py``, scheme ``k16s_2lvl32``).

Why the fresh partial: the tensor cores truncate their float32 accumulation, so one
accumulator over all of K drifts one ulp a step in one direction (the cuBLASDx pipeline's
3xTF32: 52x SGEMM's error at K = 16384 on same-sign data).  A partial of one K step holds
three truncations of an 8-product sum; the rounding adds then sum the partials as float32
does, in two levels (every ``fold`` K tiles the running sum joins a second-level total, in
registers too), so no chain of adds is long.  ``tf32`` (one pass, TF32's accuracy) accumulates
``fold`` K tiles in the tensor cores before the same second level.

Special values behave as in :mod:`.tf32mma` (the same ``hi``/``lo`` rounding functions).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from numba import cuda, from_dtype
from numba import uint64 as index_type

from ._device import (SIMULATOR, U, cp_async_commit, cp_async_wait, load_vec, make_async_tile_stream,
                      make_block_tile, make_offset, make_stream_pair, make_tile_async_copier, store_vec)
from ._spec import BuiltKernel, KernelSpec, Layout
from .tf32mma import MODES, _stage_layout, make_tf32_mma, tf32_round, tf32_round_sat

WARP = 32
BK = 32
"""K per tile: one 128-byte swizzled line of TF32 values per B column, what ``wgmma`` reads."""
SWIZZLE_BYTES = 1024
"""A 128-byte swizzle repeats every 8 lines: the B buffers start on this boundary."""
ALIGN_SLACK = SWIZZLE_BYTES // 4
"""Floats reserved in front of the B buffers to align them at run time."""

CONFIGS: dict[str, dict[str, Any]] = {
    # Two warpgroups of 64 x 128 (a 128 x 128 block, one a SM: 174-183 KiB of shared memory, and
    # tf32x3's three accumulator sets take 253-255 registers).  fold: K tiles per first-level
    # sum, as tf32mma's (tf32x3: both levels <= 64 adds up to K = 262144; tf32: 16 truncating
    # steps).  Stages: tf32x3 three (a tile's three-product steps hide the copies), tf32 four
    # (measured 5 % faster than three; docs/performance.md).
    "tf32x3": dict(mode="tf32x3", warpgroups=2, BN=128, stages=3, group_m=16, fold=16),
    # tf32's lag: a tile's group left running past its barrier (a third B line buffer).
    "tf32": dict(mode="tf32", warpgroups=2, BN=128, stages=4, group_m=16, fold=4, lag=True),
}

ARCH_SUFFIX = "a"
"""The kernels need the architecture-specific target (``sm_90a``): ``wgmma`` is in no other."""


def tile_config(tile: str) -> dict:
    """The configuration of ``tile`` (a key of :data:`CONFIGS`)."""
    if tile not in CONFIGS:
        raise ValueError(f"tf32wgmma has the tiles {sorted(CONFIGS)}, got {tile!r}")
    return CONFIGS[tile]


def swizzled_index(n: int, k: int) -> int:
    """Float index of ``B[k, n]`` in a buffer of N-major 32-float lines under the 128-byte
    swizzle: line ``n`` at ``32 n``, its 16-byte chunk ``k // 4`` stored at chunk ``(k // 4) ^ (n % 8)``."""
    return 32 * n + (((k // 4) ^ (n % 8)) * 4) + k % 4


def descriptor(address: int) -> int:
    """The ``wgmma`` shared-memory descriptor of a K-major operand at shared ``address`` in the
    128-byte swizzle: start address / 16 (bits 0-13), leading byte offset 16 (unused by a
    swizzled K-major operand; bits 16-29), stride byte offset 1024 between 8-line groups
    (bits 32-45), layout type 1 = 128-byte swizzle (bits 62-63).  A K step inside the 32-deep
    line moves the start address by its bytes (32 per step): the swizzle is applied to the
    address bits, so the buffer itself must sit on a 1024-byte boundary."""
    return ((address >> 4) & 0x3FFF) | (1 << 16) | ((SWIZZLE_BYTES >> 4) << 32) | (1 << 62)


def smem_bytes(tile: str = "tf32x3") -> int:
    """The most dynamic shared memory ``tile``'s kernel takes, over the layouts of A and B."""
    cfg = tile_config(tile)
    return 4 * max(_smem_floats(cfg, ka, kb)[-1] for ka in (False, True) for kb in (False, True))


def most_smem_bytes() -> int:
    """The dynamic shared memory a block needs to run every tile (what a device must give)."""
    return max(smem_bytes(tile) for tile in CONFIGS)


def _geometry(cfg: dict) -> dict:
    return dict(cfg, BM=64 * cfg["warpgroups"], BK=BK, threads=128 * cfg["warpgroups"])


def _line_buffers(cfg: dict) -> int:
    """B line buffers: the tile the ``wgmma`` read and the next being split; with ``lag`` a third,
    as a tile's group may still read its lines while the tile after next is split."""
    return 3 if cfg.get("lag") else 2


def _smem_floats(cfg: dict, a_kmajor: bool, b_kmajor: bool) -> tuple[int, int, int, int]:
    """``(one tile's B lines in floats (lo follows hi), raw A stages' offset, raw B stages' offset,
    floats)``: the alignment slack, two tiles' B lines (the one the ``wgmma`` read, the next being
    split), the raw stages."""
    g = _geometry(cfg)
    _, _, a_stage, b_stage = _stage_layout(g, a_kmajor, b_kmajor)
    line_floats = g["BN"] * BK
    a_at = ALIGN_SLACK + _line_buffers(cfg) * line_floats * (2 if cfg["mode"] == "tf32x3" else 1)
    b_at = a_at + cfg["stages"] * a_stage
    return line_floats, a_at, b_at, b_at + cfg["stages"] * b_stage


# ---------------------------------------------------------------------------------------
# Device primitives, as inline PTX.  The accumulators travel as UniTuples of float32: the
# instructions read and write them in place (tied operands), and the wait returns them so
# that no read of a result can move above it.
# ---------------------------------------------------------------------------------------
if not SIMULATOR:
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    from ._device import _element_pointer

    @intrinsic
    def shared_address(typingctx, array, index):
        """The 32-bit shared-window address of ``array[index]`` (a shared array)."""
        if not isinstance(array, types.Array) or not isinstance(index, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            ptr, _ = _element_pointer(context, builder, sig.args[0], args[0], sig.args[1], args[1])
            shared = builder.addrspacecast(ptr, ir.PointerType(ptr.type.pointee, 3))
            return builder.zext(builder.ptrtoint(shared, ir.IntType(32)), ir.IntType(64))

        return types.uint64(array, index), codegen

    def _statement(text: str):
        @intrinsic
        def statement(typingctx):
            def codegen(context, builder, sig, args):
                builder.call(ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), text, "~{memory}", side_effect=True), [])
                return context.get_dummy_value()

            return types.void(), codegen

        return statement

    wgmma_fence = _statement("wgmma.fence.sync.aligned;")
    wgmma_commit = _statement("wgmma.commit_group.sync.aligned;")
    fence_proxy_async = _statement("fence.proxy.async.shared::cta;")
    wgmma_wait_one = _statement("wgmma.wait_group.sync.aligned 1;")

    @functools.lru_cache(maxsize=None)
    def make_wgmma(bn: int):
        """``wgmma(acc, a, desc, accumulate)``: ``acc = A @ B (+ acc if accumulate)`` for the
        warpgroup, ``m64n{bn}k8`` TF32 (A: this thread's 4 values, B: the descriptor's)."""
        count = bn // 2
        f32 = types.float32
        outs = ", ".join(f"${i}" for i in range(count))
        a0 = count
        text = (f"{{ .reg .pred p; setp.ne.b32 p, ${a0 + 5}, 0; "
                f"wgmma.mma_async.sync.aligned.m64n{bn}k8.f32.tf32.tf32 {{{outs}}}, "
                f"{{${a0}, ${a0 + 1}, ${a0 + 2}, ${a0 + 3}}}, ${a0 + 4}, p, 1, 1; }}")
        constraints = ",".join(["=f"] * count + ["r"] * 4 + ["l", "r"] + [str(i) for i in range(count)])

        @intrinsic
        def wgmma(typingctx, acc, a, desc, accumulate):
            if acc != types.UniTuple(f32, count) or a != types.UniTuple(f32, 4):
                return None
            sig = acc(acc, a, types.uint64, types.int32)

            def codegen(context, builder, sig, args):
                fl, i32, i64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
                ins = [builder.bitcast(builder.extract_value(args[1], i), i32) for i in range(4)]
                ins += [args[2], args[3]] + [builder.extract_value(args[0], i) for i in range(count)]
                fnty = ir.FunctionType(ir.LiteralStructType([fl] * count), [i32] * 4 + [i64, i32] + [fl] * count)
                res = builder.call(ir.InlineAsm(fnty, text, constraints, side_effect=True), ins)
                return context.make_tuple(builder, sig.return_type, [builder.extract_value(res, i) for i in range(count)])

            return sig, codegen

        return wgmma

    @functools.lru_cache(maxsize=None)
    def make_wait(count: int):
        """``wait(acc) -> acc``: ``wgmma.wait_group 0`` with the accumulators passed through it."""
        f32 = types.float32
        constraints = ",".join(["=f"] * count + [str(i) for i in range(count)]) + ",~{memory}"

        @intrinsic
        def wait(typingctx, acc):
            if acc != types.UniTuple(f32, count):
                return None

            def codegen(context, builder, sig, args):
                fl = ir.FloatType()
                fnty = ir.FunctionType(ir.LiteralStructType([fl] * count), [fl] * count)
                ins = [builder.extract_value(args[0], i) for i in range(count)]
                res = builder.call(ir.InlineAsm(fnty, "wgmma.wait_group.sync.aligned 0;", constraints,
                                                side_effect=True), ins)
                return context.make_tuple(builder, sig.return_type, [builder.extract_value(res, i) for i in range(count)])

            return acc(acc), codegen

        return wait


def _tuple_helpers(count: int, blocks_n: int) -> dict:
    """Straight-line device functions over an accumulator tuple (every index a constant)."""
    idx = range(count)
    # acc index of a DMMA-store layout (warptile._make_dmma_store: 8x8 blocks i (rows g + 8i),
    # j (columns 8j + 2t + e) at 2 (i blocks_n + j) + e) for wgmma's d[4j + 2i + e].
    perm = {4 * j + 2 * i + e: 2 * (i * blocks_n + j) + e for j in range(blocks_n) for i in range(2) for e in range(2)}
    src = f"""
def zeros():
    z = f32(0)
    return ({", ".join("z" for _ in idx)},)

def add(r, p):
    return ({", ".join(f"r[{i}] + p[{i}]" for i in idx)},)

def permute(acc, r):
{chr(10).join(f"    acc[{perm[i]}] = r[{i}]" for i in idx)}
"""
    ns: dict[str, Any] = {"f32": np.float32}
    exec(src, ns)  # noqa: S102
    dev = cuda.jit(device=True, inline="always")
    return {name: dev(ns[name]) for name in ("zeros", "add", "permute")}


def build(spec: KernelSpec, **overrides) -> BuiltKernel:
    """The kernel for ``spec`` (float32, sm_90a): ``spec.tile`` names the configuration
    (``"tf32x3"`` or ``"tf32"``); ``overrides`` change its entries (``mode``, ``warpgroups``,
    ``BN``, ``stages``, ``group_m``, ``fold``, ``lag``, ``pair_steps``, ``unchecked``, ``min_blocks``)."""
    if spec.dtype != np.float32:
        raise ValueError(f"tf32wgmma computes float32 GEMMs, got dtype {spec.dtype}")
    if SIMULATOR:
        raise NotImplementedError("tf32wgmma issues wgmma, which Numba's CUDA simulator cannot run")
    cfg = dict(tile_config(spec.tile), **overrides)
    mode = cfg["mode"]
    if mode not in MODES:
        raise ValueError(f"tf32wgmma mode must be one of {MODES}, got {mode!r}")
    g = _geometry(cfg)
    threads, BM, BN, NSTAGES = g["threads"], g["BM"], g["BN"], cfg["stages"]
    if BN % 8 or not 8 <= BN <= 256:
        raise ValueError(f"tf32wgmma's BN must be a multiple of 8 up to 256, got {BN}")
    FOLD = int(cfg.get("fold", 0))
    if FOLD < 1:
        raise ValueError(f"fold must be >= 1 K tiles per first-level sum, got {FOLD}")
    if not 3 <= NSTAGES <= 5:
        raise ValueError(f"tf32wgmma takes 3 to 5 cp.async stages (tile t + 2 lands while tile t runs), got {NSTAGES}")
    SPLIT = mode == "tf32x3"
    LAG = bool(cfg.get("lag", False))
    PAIR = bool(cfg.get("pair_steps", False))  # tf32x3: one partial every two K steps
    if PAIR and not SPLIT:
        raise ValueError("pair_steps is tf32x3's: the one-pass tf32 has no per-step partial")
    if LAG and SPLIT:
        raise ValueError("lag is tf32's: tf32x3 waits for each step's partial to add it")
    A_KMAJOR = spec.layout_a == Layout.COL
    B_KMAJOR = spec.layout_b == Layout.ROW  # raw B as (k, j) at k * ld + j
    ALD, BLD, A_STAGE, B_STAGE = _stage_layout(g, A_KMAJOR, B_KMAJOR)
    LINE, A_AT, B_AT, FLOATS = _smem_floats(cfg, A_KMAJOR, B_KMAJOR)
    load_a = make_tf32_mma(mode, A_KMAJOR, B_KMAJOR).load_a
    A_VALS = 8 if SPLIT else 4
    COUNT = BN // 2
    helpers = _tuple_helpers(COUNT, BN // 8)
    zeros, add, permute = helpers["zeros"], helpers["add"], helpers["permute"]
    wgmma, wait = make_wgmma(BN), make_wait(COUNT)

    from .warptile import _make_dmma_store, _run_store  # the fused epilogue store every warptile kernel uses

    dt = spec.dtype
    nb = dt.type
    d_off = make_offset(spec.layout_d)
    epilogue = spec.epilogue_fn
    store_tile = _make_dmma_store(2, BN // 8, _run_store(2, epilogue, d_off, False), epilogue, d_off, False, BM, BN)
    smem_type = from_dtype(dt)
    uBM, uBN, uBK, uALD, uBLD = U(BM), U(BN), U(BK), U(ALD), U(BLD)
    uA_STAGE, uB_STAGE, uWARP, one, two = U(A_STAGE), U(B_STAGE), U(WARP), U(1), U(2)
    uLAST, uFOLD = U(NSTAGES - 1), U(FOLD)
    BUF_FLOATS = LINE * (2 if SPLIT else 1)  # one tile's B lines
    uLAST_BUF = U(_line_buffers(cfg) - 1)
    BUF_DESC = U(BUF_FLOATS * 4 // 16)  # ... in the descriptor's 16-byte units
    LO_DESC = U(LINE * 4 // 16)
    wait_ahead = cp_async_wait[NSTAGES - 3]
    GROUP_M = int(cfg.get("group_m", 0))
    CHUNK_ITERS = -(-BN * 8 // threads)  # 16-byte chunks of the B tile (BN lines x 8) a thread splits
    CHUNKS_EVEN = BN * 8 % threads == 0
    copy_a = make_tile_async_copier(dt, spec.layout_a, BM, BK, threads, ALD)
    copy_b = make_tile_async_copier(dt, spec.layout_b, BK, BN, threads, BLD)
    # Blocks wholly inside D with 16-byte aligned operands copy every full K tile unchecked,
    # from per-thread origins kept in registers (as tf32mma and warptile's float64 path do).
    UNCHECKED = bool(cfg.get("unchecked", True))
    stream_a = make_async_tile_stream(dt, spec.layout_a, BM, BK, threads, ALD, k_along_rows=False)
    stream_b = make_async_tile_stream(dt, spec.layout_b, BK, BN, threads, BLD, k_along_rows=True)
    streams = make_stream_pair(stream_a, stream_b, A_STAGE, B_STAGE)
    A_IT, B_IT = stream_a.iters, stream_b.iters
    DESC_HIGH = U(descriptor(0))

    block_tile = make_block_tile(GROUP_M)

    @cuda.jit(device=True, inline="always")
    def split_b(smem, raw, hi_at, tid, part, parts):
        """Chunks ``part, part + parts, ...`` of this thread's share of the raw B tile at
        ``smem[raw]``, as TF32 ``hi`` (and ``lo``) lines, swizzled, from ``hi_at``.  A chunk is
        4 K values of one column, read across the raw tile's lines (B row-major) or as one
        16-byte load (column-major) and stored as one 16-byte store: consecutive threads take
        consecutive columns, whose chunks the swizzle puts in different banks."""
        for it in range(part, CHUNK_ITERS, parts):
            q = tid + U(it * threads)
            if CHUNKS_EVEN or q < U(BN * 8):
                nn = q % uBN
                c = q // uBN
                if B_KMAJOR:
                    x = (smem[raw + (c * U(4)) * uBLD + nn], smem[raw + (c * U(4) + one) * uBLD + nn],
                         smem[raw + (c * U(4) + two) * uBLD + nn], smem[raw + (c * U(4) + U(3)) * uBLD + nn])
                else:
                    x = load_vec(smem, raw + nn * uBLD + c * U(4))
                at = hi_at + nn * U(32) + ((c ^ (nn & U(7))) * U(4))
                if SPLIT:
                    h0, h1 = tf32_round_sat(x[0]), tf32_round_sat(x[1])
                    h2, h3 = tf32_round_sat(x[2]), tf32_round_sat(x[3])
                    store_vec(smem, at, (h0, h1, h2, h3))
                    store_vec(smem, at + U(LINE), (tf32_round(x[0] - h0), tf32_round(x[1] - h1),
                                                   tf32_round(x[2] - h2), tf32_round(x[3] - h3)))
                else:
                    store_vec(smem, at, (tf32_round(x[0]), tf32_round(x[1]), tf32_round(x[2]), tf32_round(x[3])))

    @cuda.jit(device=True, inline="always")
    def a_base(a_off, w_row, s):
        if A_KMAJOR:
            return a_off + U(s * 8) * uALD + w_row
        return a_off + w_row * uALD + U(s * 8)

    @cuda.jit(device=True, inline="always")
    def multiply_tile(smem, a_off, w_row, lane, frag, desc, r, p, raw_next, hi_next, tid, split_next, fresh):
        """This warpgroup's part of the K tile whose raw A stage starts at ``smem[a_off]`` and whose
        B lines ``desc`` points to (lo: one line buffer on): ``r`` the running sum, ``p`` the
        partial's registers.  While the tile's ``wgmma`` run, the block splits the next tile's B
        (``split_next``: from ``smem[raw_next]`` into the lines at ``hi_next``), and each step's A
        fragment loads before the last step's partial is waited for.  ``tf32`` with ``lag``: the
        first ``wgmma`` overwrites ``r`` where ``fresh`` (a new first-level sum), and the tile's
        group is left running; the one before it is waited for."""
        if SPLIT and PAIR:
            # Two K steps a partial, both steps' small products first (their truncations are
            # relative to the small partial), then both hi*hi: half the rounding adds.
            for pair in range(2):
                s = 2 * pair
                load_a(smem, a_base(a_off, w_row, s), uALD, lane, frag, 0)
                load_a(smem, a_base(a_off, w_row, s + 1), uALD, lane, frag, 1)
                a_hi0 = (frag[0, 0], frag[0, 1], frag[0, 2], frag[0, 3])
                a_lo0 = (frag[0, 4], frag[0, 5], frag[0, 6], frag[0, 7])
                a_hi1 = (frag[1, 0], frag[1, 1], frag[1, 2], frag[1, 3])
                a_lo1 = (frag[1, 4], frag[1, 5], frag[1, 6], frag[1, 7])
                step0 = desc + U(2 * s)
                step1 = step0 + U(2)
                wgmma_fence()
                p = wgmma(p, a_lo0, step0, 0)
                p = wgmma(p, a_hi0, step0 + LO_DESC, 1)
                p = wgmma(p, a_lo1, step1, 1)
                p = wgmma(p, a_hi1, step1 + LO_DESC, 1)
                p = wgmma(p, a_hi0, step0, 1)
                p = wgmma(p, a_hi1, step1, 1)
                wgmma_commit()
                if split_next:
                    split_b(smem, raw_next, hi_next, tid, pair, 2)
                p = wait(p)
                r = add(r, p)
        elif SPLIT:
            load_a(smem, a_base(a_off, w_row, 0), uALD, lane, frag, 0)
            for s in range(4):
                row = s % 2
                a_hi = (frag[row, 0], frag[row, 1], frag[row, 2], frag[row, 3])
                a_lo = (frag[row, 4], frag[row, 5], frag[row, 6], frag[row, 7])
                step = desc + U(2 * s)  # 32 bytes a K step, in 16-byte units
                wgmma_fence()
                p = wgmma(p, a_lo, step, 0)  # the small products first, from a fresh partial
                p = wgmma(p, a_hi, step + LO_DESC, 1)
                p = wgmma(p, a_hi, step, 1)
                wgmma_commit()
                if split_next:
                    split_b(smem, raw_next, hi_next, tid, s, 4)
                if s < 3:
                    load_a(smem, a_base(a_off, w_row, s + 1), uALD, lane, frag, 1 - row)
                p = wait(p)
                r = add(r, p)  # the rounding add
        else:
            for s in range(4):
                load_a(smem, a_base(a_off, w_row, s), uALD, lane, frag, s)
            wgmma_fence()
            # (lag: zeros written into r by other instructions while a group runs would make
            # ptxas serialize every wgmma, so a fresh sum starts from the accumulate flag)
            r = wgmma(r, (frag[0, 0], frag[0, 1], frag[0, 2], frag[0, 3]), desc, 0 if fresh else 1)
            for s in range(1, 4):
                r = wgmma(r, (frag[s, 0], frag[s, 1], frag[s, 2], frag[s, 3]), desc + U(2 * s), 1)
            wgmma_commit()
            if split_next:
                split_b(smem, raw_next, hi_next, tid, 0, 1)
            if LAG:
                wgmma_wait_one()
            else:
                r = wait(r)
        return r, p

    def tf32wgmma_gemm(a, b, d, m, n, k, lda, ldb, ldd, flags, epi_args):
        smem = cuda.shared.array(0, smem_type)
        frag = cuda.local.array((4, A_VALS), nb)
        acc = cuda.local.array(COUNT, nb)
        tid = U(cuda.threadIdx.x)
        warp = tid // uWARP
        lane = tid % uWARP
        w_row = warp * U(16)  # warpgroup w // 4's slab, 16 rows a warp
        # The B lines on a 1024-byte boundary of the shared window (the swizzle's period).
        base = shared_address(smem, U(0))
        hi_at = ((U(SWIZZLE_BYTES) - (base & U(SWIZZLE_BYTES - 1))) & U(SWIZZLE_BYTES - 1)) // U(4)
        desc_hi = DESC_HIGH | (((base + hi_at * U(4)) >> U(4)) & U(0x3FFF))
        a_tile = smem[A_AT:]
        b_tile = smem[B_AT:]
        r = zeros()  # the first-level sum: fold K tiles
        p = zeros()  # tf32x3: one K step's partial
        total = zeros()  # the second level
        tile_m, tile_n = block_tile()
        row0, col0 = tile_m * uBM, tile_n * uBN
        um, un, uk = U(m), U(n), U(k)
        vec_a = (U(flags) & one) != U(0)
        vec_b = (U(flags) & two) != U(0)
        n_tiles = (uk + uBK - one) // uBK
        # The first stages - 1 tiles go out at once, one commit group each (empty groups past
        # the last tile keep the count the waits rely on).  Tile t lives in stage t % stages.
        for st in range(NSTAGES - 1):
            if U(st) < n_tiles:
                copy_a(a, U(lda), row0, U(st) * uBK, um, uk, a_tile[U(st) * uA_STAGE:], tid, vec_a)
                copy_b(b, U(ldb), U(st) * uBK, col0, uk, un, b_tile[U(st) * uB_STAGE:], tid, vec_b)
            cp_async_commit()
        fast = UNCHECKED and vec_a and vec_b and row0 + uBM <= um and col0 + uBN <= un
        a_src = cuda.local.array(A_IT, index_type)
        b_src = cuda.local.array(B_IT, index_type)
        a_ks, b_ks, a_place, b_place = streams.placement(U(lda), U(ldb), tid)
        if fast:
            streams.origins(U(lda), U(ldb), row0, col0, tid, a_src, b_src)
        full_tiles = uk // uBK
        # Tiles 0 and 1 have landed; tile 0's B is split before the loop, each later tile's
        # while the one before it runs.
        wait_ahead()
        cuda.syncthreads()
        split_b(smem, U(B_AT), hi_at, tid, 0, 1)
        fence_proxy_async()  # the generic-proxy stores above, before the async proxy's reads
        cuda.syncthreads()
        buf = U(0)  # the B line buffer tile t reads
        use = U(0)  # the stage of tile t; tile t + stages - 1 goes to the one tile t - 1 left
        fill = uLAST
        t = U(0)
        # lag: the loop's one way out is the break after the last group's wait (ptxas cannot tell
        # that the loop test never ends it with a group running, and would serialize every wgmma).
        while (LAG and n_tiles > U(0)) or t < n_tiles:
            ahead = t + uLAST
            if ahead < n_tiles:
                if fast and ahead < full_tiles:
                    streams.copy(a_tile, b_tile, fill, a, b, a_src, b_src, ahead * uBK, a_ks, b_ks, a_place, b_place)
                else:
                    copy_a(a, U(lda), row0, ahead * uBK, um, uk, a_tile[fill * uA_STAGE:], tid, vec_a)
                    copy_b(b, U(ldb), ahead * uBK, col0, uk, un, b_tile[fill * uB_STAGE:], tid, vec_b)
            cp_async_commit()
            nxt = use + one if use < uLAST else U(0)
            # Tile t reads line buffer buf and the next tile's B is split into the one after it.
            # With lag that one was last read by tile t - 2 (three buffers), which every warpgroup
            # waited for before the last barrier.
            buf_next = buf + one if buf < uLAST_BUF else U(0)
            r, p = multiply_tile(smem, U(A_AT) + use * uA_STAGE, w_row, lane, frag, desc_hi + buf * BUF_DESC, r, p,
                                 U(B_AT) + nxt * uB_STAGE, hi_at + buf_next * U(BUF_FLOATS), tid,
                                 t + one < n_tiles, t % uFOLD == U(0))
            fence_proxy_async()  # the next tile's B lines, before the async proxy reads them
            wait_ahead()  # tile t + 2 has landed (this thread's copies) ...
            cuda.syncthreads()  # ... everyone's; every wgmma of tile t has finished (lag: of t - 1)
            t += one
            if LAG and t == n_tiles:
                r = wait(r)
                break
            if t % uFOLD == U(0):
                if LAG:
                    r = wait(r)  # the tile's products, all in r; the next tile's first wgmma overwrites it
                    total = add(total, r)
                else:
                    total = add(total, r)
                    r = zeros()
            use = nxt
            fill = fill + one if fill < uLAST else U(0)
            buf = buf_next
        permute(acc, add(total, r))
        store_tile(d, U(ldd), um, un, row0, col0, w_row, U(0), lane, acc, epi_args)

    return BuiltKernel(tf32wgmma_gemm, (threads,), BM, BN, dynamic_smem=FLOATS * dt.itemsize,
                       min_blocks=int(cfg.get("min_blocks", 1)))
