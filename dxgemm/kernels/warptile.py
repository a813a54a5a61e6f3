"""Rung 7 — warp tiling: a tile level between the block and the thread.

The idea: the block tile is split into warp tiles, and each warp's tile into a grid of
sub-tiles that its 32 threads sweep together (``WNITER`` across, ``WMITER`` down).  A
thread's accumulators are spread over those sub-tiles instead of one contiguous patch.
Three things follow: the values a warp reads from shared memory at one K step are a
small set that all its threads share (reads are broadcasts, free of bank conflicts);
the register footprint per thread is chosen independently of the block tile; and the
mapping mirrors the hardware hierarchy (block -> SM, warp -> scheduler, thread -> lane)
that tensor-core kernels use as well.

What else makes this rung fast (the figures: ``docs/performance.md``):

* **Double buffering.**  The next K tile's global loads are issued into registers
  (:class:`~._device.TileStager`) before the current tile is multiplied and stored into
  the other of two shared stages afterwards, so each warp's global latency hides behind
  its own multiply-adds, and one barrier per K tile remains instead of two.  The K loop is
  unrolled by two because NVVM does not unroll 16 steps of 64 FFMA on its own.
* **FP64 tensor cores for float64.**  A warp is exactly the unit that issues an
  ``mma.sync`` (DMMA), so the float64 kernel keeps the block/warp hierarchy and replaces
  each warp's 32 lanes of scalar DFMA with warp-wide ``mma.sync.m16n8kK.f64`` products
  (:func:`_build_dmma`; ``m8n8k4`` before sm_90): cuBLAS's DGEMM runs on them at twice the
  SIMT FP64 rate, and the m16 shapes reach twice the rate of ``m8n8k4``.
* **cuBLAS's own shape, and copies that cost nothing.**  The float64 large tile is
  libcublasLt's sm_90 DGEMM shape (128x128x16, 8 warps, ``DMMA.16x8x16``, ``cp.async``).
  Bounds checks on every copy, issued all at once after the barrier, leave the tensor pipe
  idle, so a block wholly inside D with aligned operands copies every full K tile unchecked
  (:func:`~._device.make_async_tile_stream`: one origin per copy in registers, one add to
  move it along K), spread between the mmas of the tile being multiplied so ptxas can
  schedule them together; unaligned operands and the last partial K tile take the checked
  copier.  Consecutive blocks walk 16 tile rows column by column, so a wave shares B's
  column panels in L2.
* **Fragments streamed behind the mmas.**  The mmas read registers only, so each fragment
  is reloaded as soon as its last mma has issued (A block ``i + 1`` while row ``i``
  multiplies, the next K step's B blocks as the last row frees them, the next tile's first
  blocks right after its barrier): shared-memory loads spread between the DMMAs instead of
  stalling the tensor pipe after the barrier, at no register cost.
* **Addresses the compiler can see.**  ``cp.async`` takes its shared destination as a
  32-bit shared-window address converted outside the inline assembly
  (:func:`~._device.make_cp_async`) and its global source as the origin's address plus the
  tile's K offset in bytes (:func:`~._device.make_cp_async_moved`), so the compiler folds
  the address arithmetic instead of rebuilding each address inside the assembly.
  Fragments are loaded one element per ``ld.shared``: the mma's register pairs are not
  adjacent in shared memory for A, and for column-major B 16-byte loads made ptxas add
  register moves.
* **Edge blocks on the same copies.**  A block on D's edge copies unchecked too, each
  copy origin past the edge moved back to the last row (column, or 16-byte chunk) inside:
  the rows and columns it then fills are never stored.  A wave lasts as long as its
  slowest block, so edge blocks must not be slower than interior ones.
* **K split over the grid for few output tiles.**  A skinny output with deep K
  has too few tiles to fill the SMs; its K slices run as the grid's z, each into a
  workspace laid out like D, and :mod:`~.splitk_reduce` adds them and applies the
  epilogue (float64: ``TILE_CONFIGS["float64"]["split"]``, ``"split_narrow"``, ``"split_wide"``, and the
  thin ``"split_n16"`` and ``"split_m16"``; float32: the tiny tile's ``"split"``;
  ``dxgemm.policy.choose_split_k``).  In float32 it is also what keeps a deep sum accurate:
  each slice sums a short stretch of K, the slices are added once.
* **A blocked sum for small float32 outputs** (the ``"tiny"`` tile, ``fold``).  Each output's
  products go into a fresh partial every 8 K, added into the running sum: far fewer
  roundings at the sum's magnitude than one FMA chain over K.  ``total_every`` adds a third
  level (the running sum into a total every 16 K tiles), so that no chain is longer than
  ``K / 256`` adds where K is not split (a batch's entries).  cuBLAS sums small outputs
  more accurately than a chain, and float32's contract allows twice its error; on large
  outputs cuBLAS's error is a chain's, and the second accumulator set would cost the
  128x128 tile about a fifth of its speed, so it keeps one chain.  The 64x128 tile has a
  blocked form (``"small_blocked"``) for the contract at deep K, where its outputs' cuBLAS
  sums are no chain.
* **16-byte stores.**  A thread's neighbours in a row of D (a lane's pair of the DMMA
  accumulator, a thread's four float32 columns) leave in one ``STG.E.128`` when D is
  row-major and aligned: at short K the GEMM is bound by writing D, and one store per
  element runs at half the write bandwidth.
* **The epilogue from shared memory** (the float64 medium tile).  A heavy float64 epilogue
  (the exact GELU: 37 FP64 instructions an element) run from the accumulators in registers
  one output after another leaves ptxas no registers to overlap outputs, and a dependent
  DFMA waits ~8 cycles, too long for two warps a scheduler.  Each warp stages its
  accumulators in shared memory 8 rows at a time and runs the epilogue on eight
  independent values a lane (:func:`_make_staged_store`).

Memory traffic saved over vectorized: global traffic is the same per output; per K step
a warp reads ``WM + WN`` distinct shared values for ``WM * WN`` multiply-adds, and the
larger K step (16) halves the barriers per multiply-add.  The float32 kernel is
issue-bound (most of its inner loop is FFMA); the float64 kernel's busiest unit is the
tensor pipe.
"""

from __future__ import annotations

from numba import cuda, from_dtype
from numba import uint64 as index_type

from ._device import (SIMULATOR, SMEM_ALIGN, U, cp_async_commit, cp_async_wait, current_cc, dmma_shape_for,
                      is_aligned16, make_async_tile_stream, make_block_tile, make_dmma, make_offset,
                      make_tile_async_copier, make_tile_stager, store_vec)
from ._spec import BuiltKernel, KernelSpec, Layout
from .splitk_reduce import make_serial_finish

WARP = 32

# Per dtype: threads, block tile (BM, BN, BK), warp tile (WM, WN), sub-tiles across a warp
# tile (WNITER), thread tile (TM, TN), shared stages, K-loop unroll; the fastest of a sweep
# of candidates at 4096^3 (docs/performance.md).
# float32: 8 warps with 32 (8x4 twice) accumulators each, two blocks per SM (126 registers).
# float64: cuBLAS's own sm_90 DGEMM shape (libcublasLt's sm90_xmma_gemm_f64f64 kernels):
# 8 warps of 64x32 (4x4 m16n8k16 blocks), BK = 16, cp.async four stages deep, blocks 16 tile
# rows a group so a wave shares B's panels in L2, fragments streamed behind the mmas.
CONFIGS = {
    "float32": dict(threads=256, BM=128, BN=128, BK=16, WM=64, WN=32, WNITER=2, TM=8, TN=4, stages=2, unroll=2),
    "float64": dict(kind="dmma", copy="async", mma_sm90=(16, 16), threads=256, BM=128, BN=128, BK=16, WM=64, WN=32,
                    stages=4, group_m=16),
}

# two blocks per SM, held to 128 registers: at one block (the float64 exact GELU needs more)
# the tile no longer hides latency
_F64_SMALL = dict(kind="dmma", copy="async", threads=256, BM=128, BN=64, BK=8, WM=64, WN=16, stages=4, min_blocks=2)
# cuBLAS's own kernel shape at 4096x4096x256: 128x64x16, 4 warps of 64x32 on m16n8k8, 3
# stages, two blocks per SM.  Blocks inside D take their epilogue through shared memory, 8
# rows a warp at a time (_make_staged_store), so a heavy float64 epilogue runs on eight
# independent outputs a lane
_F64_MEDIUM = dict(kind="dmma", copy="async", mma_sm90=(16, 8), threads=128, BM=128, BN=64, BK=16, WM=64, WN=32,
                   stages=3, min_blocks=2, unchecked_prologue=True, staged_epilogue=8)

_F64_THIN_N = dict(kind="dmma", copy="async", threads=128, BM=128, BN=16, BK=16, WM=32, WN=16, stages=4, min_blocks=2)
_F64_THIN_M = dict(_F64_THIN_N, BM=16, BN=128, WM=16, WN=32)

TILE_CONFIGS = {
    "float32": {
        "small": dict(threads=256, BM=64, BN=128, BK=16, WM=32, WN=32, WNITER=2, TM=4, TN=4, stages=2, unroll=2),
        "tiny": dict(threads=256, BM=64, BN=64, BK=16, WM=32, WN=16, WNITER=1, TM=4, TN=4, stages=2, unroll=2, fold=8,
                     total_every=16),
        # a batch of small entries: 4 warps of 32x32, twice a thread's outputs (more independent FMAs)
        "tiny_batched": dict(threads=128, BM=64, BN=64, BK=16, WM=32, WN=32, WNITER=2, TM=4, TN=4, stages=2, unroll=2,
                             fold=8),
        # a batch of entries with a side of at most 32: 32x32 blocks, 2 warps of 32x16
        "micro_batched": dict(threads=64, BM=32, BN=32, BK=16, WM=32, WN=16, WNITER=1, TM=4, TN=4, stages=2, unroll=2,
                              fold=8, total_every=16),
        # float32's contract at deep K where it runs here (dxgemm.policy.choose_tile): the 64x128 tile
        # summing each output in blocks of 16 K
        "small_blocked": dict(threads=256, BM=64, BN=128, BK=16, WM=32, WN=32, WNITER=2, TM=4, TN=4, stages=2, unroll=2,
                              fold=16),
        # the tiny tile over K slices (blockIdx.z) into a workspace, for outputs of few tiles and
        # deep K (dxgemm.policy.choose_split_k): the grid fills the SMs, and each output's sum is
        # short blocked chains a slice, the slices added by the reduce
        "split": dict(threads=256, BM=64, BN=64, BK=16, WM=32, WN=16, WNITER=1, TM=4, TN=4, stages=2, unroll=2, fold=8,
                      split_k=True),
    },
    "float64": {
        "small": _F64_SMALL,
        "tiny": dict(kind="dmma", copy="async", threads=256, BM=64, BN=64, BK=8, WM=32, WN=16, stages=4),
        # a batch of small entries: K tiles of 16, twice the bytes a cp.async stage moves, for K
        # loops of a few tiles that are all prologue and drain
        "tiny_batched": dict(kind="dmma", copy="async", threads=256, BM=64, BN=64, BK=16, WM=32, WN=16, stages=4),
        # a batch of entries with a side of at most 32: 32x32 blocks, 4 warps of 16x16
        "micro_batched": dict(kind="dmma", copy="async", threads=128, BM=32, BN=32, BK=16, WM=16, WN=16, stages=4),
        # the small tile on m16n8k8 for K below 64: half its mmas a K tile, where the K loop is
        # too short to hide the longer instruction's extra issue; at deeper K m16n8k4 is as fast
        "short": dict(_F64_SMALL, mma_sm90=(16, 8)),
        "medium": _F64_MEDIUM,
        # blocks in groups of 8 tile rows sweeping the columns, for B too large to stay in L2 while
        # the tile rows go by (dxgemm.policy.choose_tile); where A and B stay in L2 grouping
        # only costs
        "medium_grouped": dict(_F64_MEDIUM, group_m=8),
        # the large tile over K slices (blockIdx.z) into a workspace: dxgemm.policy.choose_split_k
        "split": dict(CONFIGS["float64"], split_k=True, group_m=0),
        # outputs at most 64 columns wide: cuBLAS's 1000^3 shape (128x64x32, 8 warps of 32x32, 3
        # stages) over K slices, which wastes no columns of a 128-wide tile
        "split_narrow": dict(CONFIGS["float64"], BN=64, BK=32, WM=32, WN=32, stages=3, split_k=True, group_m=0),
        # outputs at most 64 rows tall: the same tile turned, 64x128 (8 warps of 32x32)
        "split_wide": dict(CONFIGS["float64"], BM=64, BK=32, WM=32, WN=32, stages=3, split_k=True, group_m=0),
        # outputs with a side of at most 16 (dxgemm.policy.THIN_SIDE): 128x16 (4 warps of 32x16
        # down the rows) and 16x128 (4 warps of 16x32 across the columns), four cp.async stages
        # and two blocks a SM (as fast as three stages at three a SM or faster, at 15 of 16 thin shapes);
        # such a GEMM streams its long operand, which a 64-wide tile would read for three
        # quarters padding
        "n16": _F64_THIN_N,
        "m16": _F64_THIN_M,
        "split_n16": dict(_F64_THIN_N, split_k=True),
        "split_m16": dict(_F64_THIN_M, split_k=True),
    },
}
"""Other tiles by ``spec.tile`` (``dxgemm.policy.choose_tile`` decides); a dtype or name without
an entry uses :data:`CONFIGS` (``"large"``).

float64 ``"small"`` (8 warps of 64x16, ``cp.async`` four stages deep) serves short K and
few output tiles, where the large tile leaves SMs idle; ``"short"``, the same tile on
m16n8k8, takes K below 64; ``"tiny"`` halves it to 64x64 for the smallest outputs, and
``"tiny_batched"`` (K tiles of 16) is that tile for batches of small entries, where many blocks
keep every SM busy and each block's short K loop decides; ``"micro_batched"`` (32x32, 4 warps of
16x16) for batches of entries with a side of at most 32, which would leave three quarters of a
64x64 block idle.
``"medium"``, cuBLAS's own shallow-K kernel shape, has the small tile's 128x64 blocks as 4
warps of 64x32 on m16n8k8, half the instructions per multiply-add: it wins where its blocks
fill every SM twice, or where its finer waves fit the SMs better than the large tile's,
and its blocks inside D run the epilogue from shared memory (:func:`_make_staged_store`),
which keeps heavy float64 epilogues (exact GELU, SiLU, sigmoid, tanh) at the FP64 pipe's
rate.

float32 ``"small"`` (64x128, 8 warps of 32x32) and ``"tiny"`` (64x64, 8 warps of 32x16)
give small and skinny problems the blocks the 128x128 tile leaves idle (``"tiny_batched"``, 4
warps of 32x32, for batches of small entries; ``"micro_batched"``, 32x32 in 2 warps of 32x16, for
entries with a side of at most 32); from 2048^3 the
128x128 tile is fastest.  ``fold`` (the tiny tile: 8) restarts each output's partial sum
every ``fold`` K and adds it into the running sum (module docstring); without it one FMA
chain runs over K.  The measurements behind each tile are in
``docs/performance.md``."""


BATCH_TILES = ("tiny_batched", "micro_batched")
"""The tiles only a batched or grouped call runs (``dxgemm.policy.choose_batched_tile``): what a
plain call runs (``warmup``'s list, ``info``'s table) leaves them out."""

def tile_config(dtype_name: str, tile: str) -> dict:
    """The configuration of ``tile`` for ``dtype_name``: :data:`TILE_CONFIGS`' entry (``"large"`` and
    unnamed tiles: :data:`CONFIGS`), or, for ``"<split tile>_serial"``, that split tile's serial
    form, whose last slice to arrive at an output tile sums the slices and writes D
    (:func:`dxgemm.kernels.splitk_reduce.make_serial_finish`): one launch instead of two."""
    base = tile.removesuffix("_serial")
    cfg = TILE_CONFIGS.get(dtype_name, {}).get(base, CONFIGS[dtype_name])
    if base == tile:
        return cfg
    if not cfg.get("split_k"):
        raise ValueError(f"{tile!r}: only a split-K tile has a serial form, and {base!r} is not one")
    return dict(cfg, serial=True)


STAGES = 2
"""Shared-memory stages: the kernels are double-buffered (module docstring)."""


def _check_stages(cfg: dict) -> None:
    if cfg.get("stages", STAGES) != STAGES:
        raise ValueError(f"warptile is double-buffered: stages must be {STAGES}, got {cfg['stages']}")


def build(spec: KernelSpec, **overrides) -> BuiltKernel:
    cfg = dict(tile_config(spec.dtype.name, spec.tile), **overrides)
    if cfg.pop("kind", "simt") == "dmma":
        return _build_dmma(spec, cfg)
    threads, BM, BN, BK = cfg["threads"], cfg["BM"], cfg["BN"], cfg["BK"]
    WM, WN, WNITER, TM, TN = cfg["WM"], cfg["WN"], cfg["WNITER"], cfg["TM"], cfg["TN"]
    WMITER = (WM * WN) // (WARP * TM * TN * WNITER)
    if (BM % WM or BN % WN or (BM // WM) * (BN // WN) * WARP != threads or WMITER < 1
            or WMITER * WARP * TM * TN * WNITER != WM * WN):
        raise ValueError(f"inconsistent warptile configuration {cfg}: the warp tiles must cover the block tile "
                         "exactly, one warp each, and the thread tiles each warp tile")
    WSUBM, WSUBN = WM // WMITER, WN // WNITER
    lanes_across = WSUBN // TN

    _check_stages(cfg)
    dt = spec.dtype
    d_off = make_offset(spec.layout_d)
    epilogue = spec.epilogue_fn
    nb = dt.type
    zero = nb(0)
    neg_zero = nb(-0.0)  # a partial's start: -0.0 + x is x for every x, so the first FMA can be a multiply
    UNROLL = cfg.get("unroll", 1)
    BLOCKED = "fold" in cfg
    FOLD = cfg.get("fold", BK)
    if BK % FOLD or FOLD % UNROLL:
        raise ValueError(f"warptile: fold ({FOLD}) must divide BK ({BK}) and be a multiple of unroll ({UNROLL})")
    TOTAL_TILES = int(cfg.get("total_every", 0))  # K tiles between adds of the running sum into a total
    if TOTAL_TILES and not BLOCKED:
        raise ValueError("warptile: total_every needs fold (the sum's second level over the first)")
    a_elems, b_elems = STAGES * BM * BK, STAGES * BK * BN
    uA_STAGE, uB_STAGE = U(BM * BK), U(BK * BN)
    stage_a = make_tile_stager(dt, spec.layout_a, BM, BK, Layout.COL, threads)
    stage_b = make_tile_stager(dt, spec.layout_b, BK, BN, Layout.ROW, threads)
    A_REGS, B_REGS = stage_a.nregs, stage_b.nregs
    M_REG, N_REG = WMITER * TM, WNITER * TN
    acc_elems = M_REG * N_REG
    uBM, uBN, uBK, uWM, uWN = U(BM), U(BN), U(BK), U(WM), U(WN)
    uWSUBM, uWSUBN, uTM, uTN = U(WSUBM), U(WSUBN), U(TM), U(TN)
    uWARP, u_lanes_across, warps_across = U(WARP), U(lanes_across), U(BN // WN)
    D_VEC = spec.layout_d == Layout.ROW and TN * dt.itemsize == 16  # one thread's row of D is 16 bytes
    store_run = _run_store(TN, epilogue, d_off, D_VEC)
    runs = [(wm * TM + i, wm * WSUBM + i, wn * TN, wn * WSUBN) for wm in range(WMITER) for i in range(TM)
            for wn in range(WNITER)]
    store_tile = _make_straight_store(runs, N_REG, store_run)
    SPLIT = bool(cfg.get("split_k", False))  # K sliced over gridDim.z, partial sums into a workspace
    SERIAL = SPLIT and bool(cfg.get("serial", False))  # ... summed by the tile's last slice (finish)
    D_ROWS = spec.layout_d == Layout.ROW
    if SERIAL:  # the slices go to the workspace as they are; the caller's epilogue runs in finish
        store_slice = _make_straight_store(runs, N_REG, _run_store(TN, _identity, d_off, D_VEC))
        finish = make_serial_finish(spec, BM, BN, threads)
    one, two = U(1), U(2)

    def warptile_gemm(a, b, d, m, n, k, lda, ldb, ldd, flags, epi_args):
        a_tile = cuda.shared.array(a_elems, nb, alignment=SMEM_ALIGN)  # STAGES x K-major [BK][BM]
        b_tile = cuda.shared.array(b_elems, nb, alignment=SMEM_ALIGN)  # STAGES x [BK][BN]
        acc = cuda.local.array(acc_elems, nb)
        part = cuda.local.array(acc_elems, nb)  # the last FOLD products of each output
        total = cuda.local.array(acc_elems if TOTAL_TILES else 1, nb)  # the running sums of TOTAL_TILES K tiles
        reg_m = cuda.local.array(M_REG, nb)
        reg_n = cuda.local.array(N_REG, nb)
        for i in range(acc_elems):
            acc[i] = zero
            part[i] = neg_zero
            if TOTAL_TILES:
                total[i] = zero
        tid = U(cuda.threadIdx.x)
        warp = tid // uWARP
        lane = tid % uWARP
        w_row = (warp // warps_across) * uWM
        w_col = (warp % warps_across) * uWN
        l_row = (lane // u_lanes_across) * uTM
        l_col = (lane % u_lanes_across) * uTN
        row0 = U(cuda.blockIdx.y) * uBM
        col0 = U(cuda.blockIdx.x) * uBN
        um, un, uk = U(m), U(n), U(k)
        vec_a = (U(flags) & one) != U(0)
        vec_b = (U(flags) & two) != U(0)
        n_tiles = (uk + uBK - one) // uBK
        kb, ke = U(0), uk
        if SPLIT:  # A's and B's loads end at ke
            kb, ke, n_tiles = k_slice(n_tiles, uk, uBK)
        regs_a = cuda.local.array(A_REGS, nb)
        regs_b = cuda.local.array(B_REGS, nb)
        stage_a.fetch(a, U(lda), row0, kb, um, ke, tid, vec_a, regs_a)
        stage_b.fetch(b, U(ldb), kb, col0, ke, un, tid, vec_b, regs_b)
        stage_a.put(a_tile, tid, regs_a)
        stage_b.put(b_tile, tid, regs_b)
        cuda.syncthreads()
        for t in range(n_tiles):
            # Next K tile's global loads go out now and land while this tile is used.
            a_off = (t & one) * uA_STAGE
            b_off = (t & one) * uB_STAGE
            more = t + one < n_tiles
            if more:
                k_next = kb + (t + one) * uBK
                stage_a.fetch(a, U(lda), row0, k_next, um, ke, tid, vec_a, regs_a)
                stage_b.fetch(b, U(ldb), k_next, col0, ke, un, tid, vec_b, regs_b)
            for f in range(BK // FOLD):
                for p_outer in range(FOLD // UNROLL):
                    for p_inner in range(UNROLL):
                        p = f * FOLD + p_outer * UNROLL + p_inner
                        a_base = a_off + U(p) * uBM + w_row + l_row
                        b_base = b_off + U(p) * uBN + w_col + l_col
                        for wm in range(WMITER):
                            for i in range(TM):
                                reg_m[wm * TM + i] = a_tile[a_base + U(wm) * uWSUBM + U(i)]
                        for wn in range(WNITER):
                            for j in range(TN):
                                reg_n[wn * TN + j] = b_tile[b_base + U(wn) * uWSUBN + U(j)]
                        for i in range(M_REG):
                            for j in range(N_REG):
                                if BLOCKED:
                                    part[i * N_REG + j] += reg_m[i] * reg_n[j]
                                else:
                                    acc[i * N_REG + j] += reg_m[i] * reg_n[j]
                if BLOCKED:  # every FOLD products: the partial into the running sum, a fresh partial
                    for i in range(acc_elems):
                        acc[i] += part[i]
                        part[i] = neg_zero
            if TOTAL_TILES:  # every TOTAL_TILES K tiles: the running sum into the total, a fresh running sum
                if (t + one) % U(TOTAL_TILES) == U(0):
                    for i in range(acc_elems):
                        total[i] += acc[i]
                        acc[i] = neg_zero
            if more:
                stage_a.put(a_tile[uA_STAGE - a_off:], tid, regs_a)
                stage_b.put(b_tile[uB_STAGE - b_off:], tid, regs_b)
            cuda.syncthreads()
        if TOTAL_TILES:
            for i in range(acc_elems):
                acc[i] += total[i]
        # A thread's TN neighbours in a row of D go out in one 16-byte store where the
        # layout and the address allow (at short K the stores are most of the time).
        r0, c0 = row0 + w_row + l_row, col0 + w_col + l_col
        if SERIAL:  # epi_args: (the caller's arguments, workspace, arrival counts)
            w = epi_args[1]
            store_slice(w[U(cuda.blockIdx.z) * um * un:], un if D_ROWS else um, um, un, r0, c0, acc, epi_args[0])
            finish(w, epi_args[2], d, ldd, um, un, row0, col0, tid, epi_args[0])
        elif SPLIT:  # slice z of a workspace laid out like D, one m x n matrix after another
            store_tile(d[U(cuda.blockIdx.z) * (um if D_ROWS else un) * U(ldd):], U(ldd), um, un, r0, c0, acc,
                       epi_args)
        else:
            store_tile(d, U(ldd), um, un, r0, c0, acc, epi_args)

    return BuiltKernel(warptile_gemm, (threads,), BM, BN)


PAD = 4  # doubles added to each K line of a shared tile (see _build_dmma)


def _build_dmma(spec: KernelSpec, cfg: dict) -> BuiltKernel:
    """The float64 warp tile on the FP64 tensor cores.

    Same block/warp hierarchy as the SIMT kernel, but a warp's ``WM x WN`` tile is a grid
    of ``M x 8`` blocks (``cfg["mma"] = (M, K)``, :data:`~._device.DMMA_SHAPES`), each
    advanced by one warp-wide ``mma.sync.mMn8kK`` per K-deep slice instead of 32 lanes of
    scalar DFMA.  The accumulators are kept as 8x8 blocks, two values per lane, whatever
    M is: an m16 block is the 8x8 blocks ``2i`` and ``2i + 1`` stacked.

    Two ways to bring the operands in (``cfg["copy"]``):

    * ``"registers"``: global -> registers -> shared, double-buffered (see the module
      docstring); both shared tiles K-major.
    * ``"async"``: ``cp.async`` straight into shared memory, ``cfg["stages"]`` deep: no
      staging registers, and ``stages - 1`` tiles in flight while one is multiplied.  A
      16-byte copy cannot transpose, so each shared tile keeps its operand's global layout
      and the fragment loads index it accordingly.  The fragments stream in behind the
      mmas (``multiply_tile_streaming``), one barrier per K tile.

    Every shared line is padded by ``PAD`` doubles: a fragment load reads 4 lines of 8
    (or 8 lines of 4) doubles, and lines ``ld = 4 (mod 16)`` doubles apart put each
    half-warp's 16 loads on 16 different bank pairs.
    """
    threads, BM, BN, BK, WM, WN = (cfg[x] for x in ("threads", "BM", "BN", "BK", "WM", "WN"))
    ASYNC = cfg.get("copy", "registers") == "async"
    if not ASYNC:
        _check_stages(cfg)
    NSTAGES = cfg.get("stages", STAGES)
    if ASYNC and not 2 <= NSTAGES <= 5:
        raise ValueError(f"the cp.async pipeline takes 2 to 5 stages, got {NSTAGES}")
    A_KMAJOR = not ASYNC or spec.layout_a == Layout.COL  # shared A holds (i, k) at k * ALD + i
    B_KMAJOR = not ASYNC or spec.layout_b == Layout.ROW  # shared B holds (k, j) at k * BLD + j
    shape = tuple(cfg["mma"]) if "mma" in cfg else _device_dmma_shape(cfg.get("mma_sm90"))
    dmma = make_dmma(shape, A_KMAJOR, B_KMAJOR)
    if BM % WM or BN % WN or (BM // WM) * (BN // WN) * WARP != threads or WM % dmma.m or WN % 8 or BK % dmma.k:
        raise ValueError(f"inconsistent DMMA warptile configuration {cfg} for the m{dmma.m}n8k{dmma.k} mma: the "
                         "warp tiles must cover the block tile exactly, one warp each, in whole mma blocks")
    MI, NI, KSTEPS = WM // dmma.m, WN // 8, BK // dmma.k
    HALVES = dmma.m // 8  # 8x8 accumulator blocks per mma block, stacked in M
    ALD = BM + PAD if A_KMAJOR else BK + PAD
    BLD = BN + PAD if B_KMAJOR else BK + PAD
    A_STAGE, B_STAGE = BM * BK + PAD * (BK if A_KMAJOR else BM), BN * BK + PAD * (BK if B_KMAJOR else BN)

    dt = spec.dtype
    d_off = make_offset(spec.layout_d)
    epilogue = spec.epilogue_fn
    nb = dt.type
    zero = nb(0)
    a_elems, b_elems, acc_elems = NSTAGES * A_STAGE, NSTAGES * B_STAGE, MI * HALVES * NI * 2
    uA_STAGE, uB_STAGE = U(A_STAGE), U(B_STAGE)
    smem_type = from_dtype(dt)
    A_VALS, B_VALS = dmma.a_vals, dmma.b_vals
    load_a, load_b, mma = dmma.load_a, dmma.load_b, dmma.mma
    D_ROW = spec.layout_d == Layout.ROW and dt.itemsize == 8  # a lane's pair is 16 bytes
    store_run = _run_store(2, epilogue, d_off, D_ROW)
    uBM, uBN, uBK, uWM, uWN, uALD, uBLD = U(BM), U(BN), U(BK), U(WM), U(WN), U(ALD), U(BLD)
    uWARP, warps_across, uMMA_M, uMMA_K, u8 = U(WARP), U(BN // WN), U(dmma.m), U(dmma.k), U(8)
    one, two, three = U(1), U(2), U(3)

    GROUP_M = cfg.get("group_m", 0)
    SPLIT = bool(cfg.get("split_k", False))  # K sliced over gridDim.z, partial sums into a workspace
    SERIAL = SPLIT and bool(cfg.get("serial", False))  # ... summed by the tile's last slice (finish)
    if SPLIT and not ASYNC:
        raise ValueError("a split-K DMMA warptile needs copy='async'")
    STAGED_ROWS = int(cfg.get("staged_epilogue", 0))  # blocks inside D: the epilogue through shared memory
    staged_store, staged_elems = None, 0
    if STAGED_ROWS:
        if SPLIT or not ASYNC:
            raise ValueError("the staged epilogue is for the cp.async DMMA warptile without split K")
        staged_store, staged_elems = _make_staged_store(MI * HALVES, NI, epilogue, d_off, spec.layout_d == Layout.ROW,
                                                        WN, threads // WARP, STAGED_ROWS, a_elems + b_elems)
    D_ROWS = spec.layout_d == Layout.ROW
    block_tile = make_block_tile(GROUP_M)

    @cuda.jit(device=True, inline="always")
    def place(m, n, k, flags):
        """This thread's coordinates: thread, lane, warp tile and block tile origins, sizes,
        whether each operand takes 16-byte accesses, and the number of K tiles."""
        tid = U(cuda.threadIdx.x)
        warp = tid // uWARP
        lane = tid % uWARP
        w_row = (warp // warps_across) * uWM
        w_col = (warp % warps_across) * uWN
        tile_m, tile_n = block_tile()
        row0 = tile_m * uBM
        col0 = tile_n * uBN
        um, un, uk = U(m), U(n), U(k)
        vec_a = (U(flags) & one) != U(0)
        vec_b = (U(flags) & two) != U(0)
        return tid, lane, w_row, w_col, row0, col0, um, un, uk, vec_a, vec_b, (uk + uBK - one) // uBK

    @cuda.jit(device=True, inline="always")
    def a_base(a_off, w_row, i, s):
        """Shared index of the corner of this warp's A block ``i`` in K step ``s`` of a tile."""
        if A_KMAJOR:
            return a_off + U(s) * uMMA_K * uALD + w_row + U(i) * uMMA_M
        return a_off + (w_row + U(i) * uMMA_M) * uALD + U(s) * uMMA_K

    @cuda.jit(device=True, inline="always")
    def b_base(b_off, w_col, j, s):
        """Shared index of the corner of this warp's B block ``j`` in K step ``s`` of a tile."""
        if B_KMAJOR:
            return b_off + U(s) * uMMA_K * uBLD + w_col + U(j) * u8
        return b_off + (w_col + U(j) * u8) * uBLD + U(s) * uMMA_K

    @cuda.jit(device=True, inline="always")
    def load_fragments(a_tile, a_off, b_tile, b_off, w_row, w_col, lane, a_frag, b_frag, s):
        """This warp's A and B fragments of K step ``s`` of a shared tile."""
        for i in range(MI):
            load_a(a_tile, a_base(a_off, w_row, i, s), uALD, lane, a_frag, i)
        for j in range(NI):
            load_b(b_tile, b_base(b_off, w_col, j, s), uBLD, lane, b_frag, j)

    @cuda.jit(device=True, inline="always")
    def multiply_tile(a_tile, a_off, b_tile, b_off, w_row, w_col, lane, a_frag, b_frag, acc):
        """``acc += `` this warp's part of one shared K tile."""
        for s in range(KSTEPS):
            load_fragments(a_tile, a_off, b_tile, b_off, w_row, w_col, lane, a_frag, b_frag, s)
            for i in range(MI):
                for j in range(NI):
                    lo = 2 * ((i * HALVES) * NI + j)
                    mma(a_frag, i, b_frag, j, acc, lo, lo + 2 * NI)

    store_tile = _make_dmma_store(MI * HALVES, NI, store_run, epilogue, d_off, D_ROW, BM, BN)
    if SERIAL:  # the slices go to the workspace as they are; the caller's epilogue runs in finish
        store_slice = _make_dmma_store(MI * HALVES, NI, _run_store(2, _identity, d_off, D_ROW), _identity, d_off,
                                       D_ROW, BM, BN)
        finish = make_serial_finish(spec, BM, BN, threads)

    if ASYNC:
        copy_a = make_tile_async_copier(dt, spec.layout_a, BM, BK, threads, ALD)
        copy_b = make_tile_async_copier(dt, spec.layout_b, BK, BN, threads, BLD)
        stream_a = make_async_tile_stream(dt, spec.layout_a, BM, BK, threads, ALD, k_along_rows=False)
        stream_b = make_async_tile_stream(dt, spec.layout_b, BK, BN, threads, BLD, k_along_rows=True)
        A_IT, B_IT = stream_a.iters, stream_b.iters
        N_COPY = A_IT + B_IT
        N_MMA = KSTEPS * MI * NI  # the mmas of a tile, which the copies of a later tile go between
        wait_oldest = cp_async_wait[NSTAGES - 2]
        uLAST = U(NSTAGES - 1)
        A_PSTEP, B_PSTEP = stream_a.place_step, stream_b.place_step

        @cuda.jit(device=True, inline="always")
        def copy_tile_pair(a, lda, b, ldb, row0, col0, k0, um, un, ke, a_tile, b_tile, stage, tid, vec_a, vec_b):
            """This thread's checked copies of the A and B tiles at K offset ``k0`` into ``stage``
            (K ends at ``ke``: the whole of K, or this block's K slice)."""
            copy_a(a, lda, row0, k0, um, ke, a_tile[stage * uA_STAGE:], tid, vec_a)
            copy_b(b, ldb, k0, col0, ke, un, b_tile[stage * uB_STAGE:], tid, vec_b)

        @cuda.jit(device=True, inline="always")
        def next_stage(stage):
            """The shared stage after ``stage`` in the ring of ``NSTAGES``."""
            return stage + one if stage < uLAST else U(0)

        @cuda.jit(device=True, inline="always")
        def issue_copy(c, a, a_tile, a_src, a_dk, a_dst, b, b_tile, b_src, b_dk, b_dst):
            """This thread's unchecked copy ``c`` of a later tile pair (A's chunks first, then B's):
            from its origin ``a_src[c]`` (or ``b_src``) moved ``a_dk`` along K, to stage offset
            ``a_dst`` plus its place."""
            if c < A_IT:
                stream_a.copy(a_tile, a_dst + U(c) * A_PSTEP, a, a_src[c], a_dk)
            else:
                stream_b.copy(b_tile, b_dst + U(c - A_IT) * B_PSTEP, b, b_src[c - A_IT], b_dk)

        @cuda.jit(device=True, inline="always")
        def load_step_head(a_tile, a_off, b_tile, b_off, w_row, w_col, lane, a_frag, b_frag, s):
            """What a K step's first row of mmas needs: all of its B blocks and A block 0."""
            for j in range(NI):
                load_b(b_tile, b_base(b_off, w_col, j, s), uBLD, lane, b_frag, j)
            load_a(a_tile, a_base(a_off, w_row, 0, s), uALD, lane, a_frag, 0)

        def make_step(s: int, copying: bool):
            LAST = s == KSTEPS - 1

            @cuda.jit(device=True, inline="always")
            def multiply_step(a_tile, b_tile, a_off, b_off, w_row, w_col, lane, a_frag, b_frag, acc, a, a_src, a_dk,
                              a_dst, b, b_src, b_dk, b_dst):
                """K step ``s`` of the tile at ``a_off``/``b_off``, its B blocks and A block 0
                already loaded; A block ``i + 1`` loads during row ``i``, and all but the last
                step load the next step's B blocks and A block 0 as the last row frees them."""
                for i in range(MI):
                    if i + 1 < MI:
                        load_a(a_tile, a_base(a_off, w_row, i + 1, s), uALD, lane, a_frag, i + 1)
                    for j in range(NI):
                        lo = 2 * ((i * HALVES) * NI + j)
                        mma(a_frag, i, b_frag, j, acc, lo, lo + 2 * NI)
                        if not LAST and i == MI - 1:
                            load_b(b_tile, b_base(b_off, w_col, j, s + 1), uBLD, lane, b_frag, j)
                        if copying:
                            q = (s * MI + i) * NI + j
                            for c in range(N_COPY):
                                if (c * N_MMA) // N_COPY == q:
                                    issue_copy(c, a, a_tile, a_src, a_dk, a_dst, b, b_tile, b_src, b_dk, b_dst)
                if not LAST:
                    load_a(a_tile, a_base(a_off, w_row, 0, s + 1), uALD, lane, a_frag, 0)

            return multiply_step

        def then(first, rest):
            """One device function running K step ``first``, then ``rest`` (the later steps)."""

            @cuda.jit(device=True, inline="always")
            def steps(a_tile, b_tile, a_off, b_off, w_row, w_col, lane, a_frag, b_frag, acc, a, a_src, a_dk, a_dst, b,
                      b_src, b_dk, b_dst):
                first(a_tile, b_tile, a_off, b_off, w_row, w_col, lane, a_frag, b_frag, acc, a, a_src, a_dk, a_dst, b,
                      b_src, b_dk, b_dst)
                rest(a_tile, b_tile, a_off, b_off, w_row, w_col, lane, a_frag, b_frag, acc, a, a_src, a_dk, a_dst, b,
                     b_src, b_dk, b_dst)

            return steps

        def make_multiply(copying: bool):
            # One device function per K step, chained in sequence: a loop over the steps was
            # left rolled by LLVM, and with it every index into the fragments dynamic.
            all_steps = make_step(KSTEPS - 1, copying)
            for s in range(KSTEPS - 2, -1, -1):
                all_steps = then(make_step(s, copying), all_steps)

            @cuda.jit(device=True, inline="always")
            def multiply_tile_streaming(a_tile, b_tile, use, nxt, w_row, w_col, lane, a_frag, b_frag, acc, a, a_src,
                                        a_dk, a_dst, b, b_src, b_dk, b_dst):
                """``acc += `` this warp's part of the K tile in stage ``use``, whose first K
                step's B blocks and A block 0 are already in ``b_frag``/``a_frag``; leaves in
                them those of the tile in stage ``nxt``, after waiting for it.  This thread's
                copies issued since the last call, and those it issues here, close one group.

                A blocks stream: block ``i + 1`` is loaded while row ``i``'s mmas run, so the
                tensor pipe never waits for a whole step's loads (cuBLAS's DGEMM interleaves the
                same way); the next tile's B blocks and first A block are loaded after the
                barrier for it.  ``copying``: this thread's unchecked copies of a later tile
                (``issue_copy``) go between the mmas."""
                a_off, b_off = use * uA_STAGE, use * uB_STAGE
                all_steps(a_tile, b_tile, a_off, b_off, w_row, w_col, lane, a_frag, b_frag, acc, a, a_src, a_dk, a_dst,
                          b, b_src, b_dk, b_dst)
                cp_async_commit()  # this iteration's copies (possibly none) are one group
                wait_oldest()  # this thread's copies of the next tile have landed ...
                cuda.syncthreads()  # ... everyone's, and nobody reads stage `use` any more
                load_step_head(a_tile, nxt * uA_STAGE, b_tile, nxt * uB_STAGE, w_row, w_col, lane, a_frag, b_frag, 0)

            return multiply_tile_streaming

        multiply_copying, multiply_tile_streaming = make_multiply(True), make_multiply(False)

        @cuda.jit(device=True, inline="always")
        def unchecked_tiles(a_tile, b_tile, w_row, w_col, lane, a_frag, b_frag, acc, a, a_src, lda, b, b_src, ldb, tid,
                            full_tiles):
            """Multiply K tiles from the first while copying, unchecked from the origins in
            ``a_src``/``b_src``, the full tile ``NSTAGES - 1`` ahead; returns the next tile, the
            stage it is in and the stage to fill next."""
            a_ks, b_ks = stream_a.k_stride(lda), stream_b.k_stride(ldb)
            a_place, b_place = stream_a.place(tid), stream_b.place(tid)
            use, fill, t = U(0), uLAST, U(0)
            while t + uLAST < full_tiles:
                dk = (t + uLAST) * uBK
                nxt = next_stage(use)
                multiply_copying(a_tile, b_tile, use, nxt, w_row, w_col, lane, a_frag, b_frag, acc, a, a_src,
                                 dk * a_ks, fill * uA_STAGE + a_place, b, b_src, dk * b_ks, fill * uB_STAGE + b_place)
                use, fill = nxt, next_stage(fill)
                t += one
            return t, use, fill

        def make_prologue(unchecked: bool):
            @cuda.jit(device=True, inline="always")
            def prologue(a, lda, b, ldb, row0, col0, kb, ke, um, un, a_tile, b_tile, tid, vec_a, vec_b, a_src, b_src,
                         n_tiles, w_row, w_col, lane, a_frag, b_frag):
                """The first ``NSTAGES - 1`` tiles go out at once, one commit group each (empty
                groups past the last tile keep the count the waits rely on); then the first
                tile's head is loaded.  Tile t lives in stage t % NSTAGES.  ``unchecked``: full
                tiles are copied from the origins in ``a_src``/``b_src``, as the loop copies
                them; the checked copier's bounds arithmetic had been a fifth of the float64
                medium tile's instructions at K = 256."""
                a_ks, b_ks = stream_a.k_stride(lda), stream_b.k_stride(ldb)
                a_place, b_place = stream_a.place(tid), stream_b.place(tid)
                full_tiles = (ke - kb) // uBK
                for st in range(NSTAGES - 1):
                    if unchecked and U(st) < full_tiles:
                        dk = U(st) * uBK
                        for c in range(N_COPY):
                            issue_copy(c, a, a_tile, a_src, dk * a_ks, U(st) * uA_STAGE + a_place, b, b_tile, b_src,
                                       dk * b_ks, U(st) * uB_STAGE + b_place)
                    elif U(st) < n_tiles:
                        copy_tile_pair(a, lda, b, ldb, row0, col0, kb + U(st) * uBK, um, un, ke, a_tile, b_tile,
                                       U(st), tid, vec_a, vec_b)
                    cp_async_commit()
                wait_oldest()
                cuda.syncthreads()
                load_step_head(a_tile, U(0), b_tile, U(0), w_row, w_col, lane, a_frag, b_frag, 0)

            return prologue

        prologue_unchecked, prologue_checked = make_prologue(True), make_prologue(False)
        # ``unchecked_prologue``: blocks on the unchecked path copy their first tiles unchecked too
        # (``make_prologue``); only the medium tile gains, since on the large tile the second
        # prologue lengthens the K loop (docs/performance.md)
        UNCHECKED_PROLOGUE = bool(cfg.get("unchecked_prologue", False))

        def warptile_dmma_gemm(a, b, d, m, n, k, lda, ldb, ldd, flags, epi_args):
            smem = cuda.shared.array(0, smem_type)
            a_tile = smem[:a_elems]  # NSTAGES x A tile, A's global layout, lines ALD apart
            b_tile = smem[a_elems:]  # NSTAGES x B tile
            acc = cuda.local.array(acc_elems, nb)
            a_frag = cuda.local.array((MI, A_VALS), nb)
            b_frag = cuda.local.array((NI, B_VALS), nb)
            a_src = cuda.local.array(A_IT, index_type)  # this thread's copy origins (interior blocks)
            b_src = cuda.local.array(B_IT, index_type)
            for i in range(acc_elems):
                acc[i] = zero
            tid, lane, w_row, w_col, row0, col0, um, un, uk, vec_a, vec_b, n_tiles = place(m, n, k, flags)
            if SPLIT:
                kb, ke, n_tiles = k_slice(n_tiles, uk, uBK)
            else:
                kb, ke = U(0), uk
            if not UNCHECKED_PROLOGUE:
                prologue_checked(a, U(lda), b, U(ldb), row0, col0, kb, ke, um, un, a_tile, b_tile, tid, vec_a, vec_b,
                                 a_src, b_src, n_tiles, w_row, w_col, lane, a_frag, b_frag)
            # Iteration t multiplies the tile in stage `use` and refills the stage of tile t - 1
            # (`fill`) with tile t + NSTAGES - 1.
            use = U(0)
            fill = uLAST
            t = U(0)
            # With 16-byte operands every tile but a partial last one is copied unchecked, from
            # origins kept in registers, between the mmas.  A block wholly inside D keeps its
            # origins a line step apart; one on D's edge clamps them where that is safe
            # (``edge_ok``).  The loop is inlined once for each: with the clamped origins in
            # the same loop the compiler could no longer tell the copies' addresses a fixed step
            # apart, and interior blocks paid 19 more instructions a K tile.
            fast = False
            if vec_a and vec_b:
                if row0 + uBM <= um and col0 + uBN <= un:
                    fast = True
                    # One add per copy in the loop, cheaper than a multiply by the copy's
                    # line step.
                    a_origin, a_step = stream_a.origin(U(lda), row0, kb, tid), stream_a.step(U(lda))
                    b_origin, b_step = stream_b.origin(U(ldb), kb, col0, tid), stream_b.step(U(ldb))
                    for c in range(A_IT):
                        a_src[c] = a_origin + U(c) * a_step
                    for c in range(B_IT):
                        b_src[c] = b_origin + U(c) * b_step
                    if UNCHECKED_PROLOGUE:
                        prologue_unchecked(a, U(lda), b, U(ldb), row0, col0, kb, ke, um, un, a_tile, b_tile, tid,
                                           vec_a, vec_b, a_src, b_src, n_tiles, w_row, w_col, lane, a_frag, b_frag)
                    t, use, fill = unchecked_tiles(a_tile, b_tile, w_row, w_col, lane, a_frag, b_frag, acc, a, a_src,
                                                   U(lda), b, b_src, U(ldb), tid, (ke - kb) // uBK)
                elif stream_a.edge_ok(row0, um) and stream_b.edge_ok(col0, un):
                    fast = True
                    for c in range(A_IT):
                        a_src[c] = stream_a.edge_origin(U(lda), row0, kb, tid, c, um)
                    for c in range(B_IT):
                        b_src[c] = stream_b.edge_origin(U(ldb), kb, col0, tid, c, un)
                    if UNCHECKED_PROLOGUE:
                        prologue_unchecked(a, U(lda), b, U(ldb), row0, col0, kb, ke, um, un, a_tile, b_tile, tid,
                                           vec_a, vec_b, a_src, b_src, n_tiles, w_row, w_col, lane, a_frag, b_frag)
                    t, use, fill = unchecked_tiles(a_tile, b_tile, w_row, w_col, lane, a_frag, b_frag, acc, a, a_src,
                                                   U(lda), b, b_src, U(ldb), tid, (ke - kb) // uBK)
            if UNCHECKED_PROLOGUE and not fast:
                prologue_checked(a, U(lda), b, U(ldb), row0, col0, kb, ke, um, un, a_tile, b_tile, tid, vec_a, vec_b,
                                 a_src, b_src, n_tiles, w_row, w_col, lane, a_frag, b_frag)
            while t < n_tiles:
                ahead = t + uLAST
                if ahead < n_tiles:
                    copy_tile_pair(a, U(lda), b, U(ldb), row0, col0, kb + ahead * uBK, um, un, ke, a_tile, b_tile,
                                   fill, tid, vec_a, vec_b)
                nxt = next_stage(use)
                multiply_tile_streaming(a_tile, b_tile, use, nxt, w_row, w_col, lane, a_frag, b_frag, acc, a, a_src,
                                        U(0), U(0), b, b_src, U(0), U(0))
                use, fill = nxt, next_stage(fill)
                t += one
            if SERIAL:  # epi_args: (the caller's arguments, workspace, arrival counts)
                w = epi_args[1]
                store_slice(w[U(cuda.blockIdx.z) * um * un:], un if D_ROWS else um, um, un, row0, col0, w_row,
                            w_col, lane, acc, epi_args[0])
                finish(w, epi_args[2], d, ldd, um, un, row0, col0, tid, epi_args[0])
            elif SPLIT:  # slice z of a workspace laid out like D, one m x n matrix after another
                store_tile(d[U(cuda.blockIdx.z) * (um if D_ROWS else un) * U(ldd):], U(ldd), um, un, row0, col0, w_row,
                           w_col, lane, acc, epi_args)
            elif STAGED_ROWS and row0 + uBM <= um and col0 + uBN <= un:
                staged_store(smem, d, U(ldd), row0, col0, w_row, w_col, lane, tid // uWARP, acc, epi_args)
            else:
                store_tile(d, U(ldd), um, un, row0, col0, w_row, w_col, lane, acc, epi_args)

    else:
        stage_a = make_tile_stager(dt, spec.layout_a, BM, BK, Layout.COL, threads, smem_ld=ALD)
        stage_b = make_tile_stager(dt, spec.layout_b, BK, BN, Layout.ROW, threads, smem_ld=BLD)
        A_REGS, B_REGS = stage_a.nregs, stage_b.nregs

        def warptile_dmma_gemm(a, b, d, m, n, k, lda, ldb, ldd, flags, epi_args):
            # Dynamic shared memory: two stages of a 16-deep tile pass the 48 KiB static limit.
            smem = cuda.shared.array(0, smem_type)
            a_tile = smem[:a_elems]  # STAGES x [BK][BM + PAD]
            b_tile = smem[a_elems:]  # STAGES x [BK][BN + PAD]
            acc = cuda.local.array(acc_elems, nb)
            a_frag = cuda.local.array((MI, A_VALS), nb)
            b_frag = cuda.local.array((NI, B_VALS), nb)
            for i in range(acc_elems):
                acc[i] = zero
            tid, lane, w_row, w_col, row0, col0, um, un, uk, vec_a, vec_b, n_tiles = place(m, n, k, flags)
            regs_a = cuda.local.array(A_REGS, nb)
            regs_b = cuda.local.array(B_REGS, nb)
            stage_a.fetch(a, U(lda), row0, U(0), um, uk, tid, vec_a, regs_a)
            stage_b.fetch(b, U(ldb), U(0), col0, uk, un, tid, vec_b, regs_b)
            stage_a.put(a_tile, tid, regs_a)
            stage_b.put(b_tile, tid, regs_b)
            cuda.syncthreads()
            for t in range(n_tiles):
                # Issue the next K tile's global loads now; they land in registers while
                # this tile is multiplied, and go to the other shared stage afterwards.
                a_off = (t & one) * uA_STAGE
                b_off = (t & one) * uB_STAGE
                more = t + one < n_tiles
                if more:
                    k_next = (t + one) * uBK
                    stage_a.fetch(a, U(lda), row0, k_next, um, uk, tid, vec_a, regs_a)
                    stage_b.fetch(b, U(ldb), k_next, col0, uk, un, tid, vec_b, regs_b)
                multiply_tile(a_tile, a_off, b_tile, b_off, w_row, w_col, lane, a_frag, b_frag, acc)
                if more:
                    # The previous step's closing barrier means no warp still reads this stage.
                    stage_a.put(a_tile[uA_STAGE - a_off:], tid, regs_a)
                    stage_b.put(b_tile[uB_STAGE - b_off:], tid, regs_b)
                cuda.syncthreads()
            store_tile(d, U(ldd), um, un, row0, col0, w_row, w_col, lane, acc, epi_args)

    return BuiltKernel(warptile_dmma_gemm, (threads,), BM, BN,
                       dynamic_smem=(a_elems + b_elems + staged_elems) * dt.itemsize,
                       min_blocks=cfg.get("min_blocks", 0))


def _make_straight_store(runs: list, row_len: int, store_run):
    """``store_tile(d, ldd, um, un, r0, c0, acc, epi_args)``: the epilogue of a thread's
    accumulators into D as straight-line code, for the SIMT tile: ``runs`` lists each run of
    row neighbours (``store_run``'s width) as ``(acc row, row offset from r0, acc column, column offset
    from c0)``, the accumulator being ``acc[acc_row * row_len + acc_col + e]``.  As in
    :func:`_make_dmma_store`, constant indices keep the accumulator in registers whatever
    the epilogue; every run is bounds-checked (``store_run``)."""
    lines = []
    for acc_row, dr, acc_col, dc in runs:
        lines.append(f"    if r0 + U({dr}) < um:")
        lines.append(f"        store_run(d, ldd, un, acc, {acc_row * row_len + acc_col}, r0 + U({dr}), c0 + U({dc}), "
                     "epi_args)")
    src = "def store_tile(d, ldd, um, un, r0, c0, acc, epi_args):\n" + "\n".join(lines) + "\n"
    ns = {"U": U, "store_run": store_run}
    exec(src, ns)
    return cuda.jit(device=True, inline="always")(ns["store_tile"])


@cuda.jit(device=True, inline="always")
def k_slice(n_tiles, uk, uBK):
    """``(kb, ke, tiles)``: the K range ``[kb, ke)`` of split-K slice ``blockIdx.z`` of ``gridDim.z``
    and its K tiles, for a K of ``uk`` in ``n_tiles`` tiles of ``uBK``: whole tiles each slice but
    the last (a slice past the end is empty)."""
    one = U(1)
    per = (n_tiles + U(cuda.gridDim.z) - one) // U(cuda.gridDim.z) * uBK
    kb = min(U(cuda.blockIdx.z) * per, uk)
    ke = min(kb + per, uk)
    return kb, ke, (ke - kb + uBK - one) // uBK


@cuda.jit(device=True, inline="always")
def _identity(value, row, col, args):
    """The epilogue of a serial split's slice stores: the partial sum as it is."""
    return value


def _make_dmma_store(blocks_m: int, blocks_n: int, store_run, epilogue, d_off, d_row: bool, BM: int, BN: int):
    """``store_tile(d, ldd, um, un, row0, col0, w_row, w_col, lane, acc, epi_args)``: the
    epilogue of a warp's DMMA accumulators (``blocks_m x blocks_n`` 8x8 blocks, a lane's two
    row neighbours in each, ``acc[2 * (i * blocks_n + j) + e]``) into D.

    Written out as straight-line code, every accumulator index a constant: a loop over the
    blocks is not unrolled once a heavy epilogue sits in it, and an accumulator indexed at
    run time lives in local memory for the whole kernel (the float64 small tile had 256
    bytes of stack and 163 registers with ``bias | gelu``).  A block wholly inside D
    computes every value before it stores any, with no bounds checks between them, so the
    FP64 pipe sees up to 64 independent epilogue chains a thread instead of one run at a
    time.
    Blocks on D's edges store run by run through ``store_run``, bounds-checked."""
    edge, values, vec_stores, one_stores = [], [], [], []
    for i in range(blocks_m):
        edge.append(f"        if r0 + U({8 * i}) < um:")
        for j in range(blocks_n):
            c = 2 * (i * blocks_n + j)
            edge.append(f"            store_run(d, ldd, un, acc, {c}, r0 + U({8 * i}), c0 + U({8 * j}), epi_args)")
            for e in range(2):
                values.append(f"    v{c + e} = epilogue(acc[{c + e}], r0 + U({8 * i}), c0 + U({8 * j + e}), epi_args)")
                one_stores.append(f"        d[d_off(r0 + U({8 * i}), c0 + U({8 * j + e}), ldd)] = v{c + e}")
            vec_stores.append(f"        store_vec(d, d_off(r0 + U({8 * i}), c0 + U({8 * j}), ldd), (v{c}, v{c + 1}))")
    newline = "\n"
    src = f"""
def store_tile(d, ldd, um, un, row0, col0, w_row, w_col, lane, acc, epi_args):
    r0 = row0 + w_row + (lane >> U(2))
    c0 = col0 + w_col + (lane & U(3)) * U(2)
    if row0 + U({BM}) > um or col0 + U({BN}) > un:
{newline.join(edge)}
        return
{newline.join(values)}
    if D_ROW and is_aligned16(d, U(0)) and (ldd & U(1)) == U(0):
{newline.join(vec_stores)}
    else:
{newline.join(one_stores)}
"""
    ns = {"U": U, "store_run": store_run, "epilogue": epilogue, "d_off": d_off, "store_vec": store_vec,
          "is_aligned16": is_aligned16, "D_ROW": d_row}
    exec(src, ns)
    return cuda.jit(device=True, inline="always")(ns["store_tile"])


def _make_staged_store(blocks_m: int, blocks_n: int, epilogue, d_off, d_row: bool, WN: int, warps: int, rows: int,
                       at: int):
    """``(staged_store, elements)``: ``staged_store(smem, d, ldd, row0, col0, w_row, w_col, lane, warp,
    acc, epi_args)`` is the epilogue of a warp's DMMA accumulators (as in
    :func:`_make_dmma_store`) for a block wholly inside D, through shared memory ``rows`` rows
    at a time; ``elements``, the shared doubles it needs beyond ``at``.

    Why: with its accumulators in registers, a warp's epilogue runs one output after another —
    ptxas will not overlap independent outputs' FP64 chains without registers to spare, and
    the medium tile sits at 255 — so a float64 GELU runs well below the FP64 rate, and the
    medium tile, with two warps a scheduler, waited on its own latency.  Here
    each warp writes ``rows`` rows of its tile to a private slice of shared memory (``at``
    onwards, ``rows`` lines of ``WN + 8`` doubles a warp: a lane's pair in one 16-byte store,
    four wavefronts a warp-wide store, the least its 512 bytes take), reads them back with
    lanes along D's contiguous dimension, and runs the epilogue on its ``rows * WN / 32``
    values, independent and with the accumulators' registers freed behind them, which
    ptxas overlaps (the rates: ``docs/performance.md``).  No barrier: the slice is the warp's own
    (``syncwarp`` between writing and reading it, and before refilling it).  A warp stores 32
    consecutive columns of a row of row-major D (8 rows of 4 columns, column-major)."""
    if rows % 8 or (8 * blocks_m) % rows or (WN % 32 and 32 % WN) or 32 % rows or at % 2:
        raise ValueError(f"staged epilogue: {rows} rows of a {8 * blocks_m}x{WN} warp tile at {at} do not fit")
    ld = WN + 8 if d_row else WN + 4
    groups, per_lane = rows // 8, rows * WN // WARP
    sync = "cuda.syncthreads()" if SIMULATOR else "cuda.syncwarp()"  # the simulator has no syncwarp
    lines = [f"    base = U({at}) + warp * U({rows * ld})", "    r = lane >> U(2)", "    c = (lane & U(3)) * U(2)"]
    for chunk in range(8 * blocks_m // rows):
        for g in range(groups):
            for j in range(blocks_n):
                a = 2 * ((chunk * groups + g) * blocks_n + j)
                lines.append(f"    store_vec(smem, base + (r + U({8 * g})) * U({ld}) + c + U({8 * j}), "
                             f"(acc[{a}], acc[{a + 1}]))")
        lines.append(f"    {sync}")
        for t in range(per_lane):
            if not d_row:  # lanes down the rows
                i, j = f"(lane % U({rows}))", f"(U({t * (WARP // rows)}) + lane // U({rows}))"
            elif WN >= WARP:
                i, j = f"U({t // (WN // WARP)})", f"(lane + U({WARP * (t % (WN // WARP))}))"
            else:
                i, j = f"(U({t * (WARP // WN)}) + lane // U({WN}))", f"(lane % U({WN}))"
            row, col = f"row0 + w_row + U({chunk * rows}) + {i}", f"col0 + w_col + {j}"
            lines.append(f"    v{t} = epilogue(smem[base + {i} * U({ld}) + {j}], {row}, {col}, epi_args)")
            lines.append(f"    d[d_off({row}, {col}, ldd)] = v{t}")
        lines.append(f"    {sync}")
    src = ("def staged_store(smem, d, ldd, row0, col0, w_row, w_col, lane, warp, acc, epi_args):\n"
           + "\n".join(lines) + "\n")
    ns = {"U": U, "cuda": cuda, "epilogue": epilogue, "d_off": d_off, "store_vec": store_vec}
    exec(src, ns)
    return cuda.jit(device=True, inline="always")(ns["staged_store"]), warps * rows * ld


def _run_store(width: int, epilogue, d_off, vector: bool):
    """``store_run(d, ldd, un, acc, c, row, col, args)``: the epilogue of ``acc[c:c + width]``
    into row ``row`` of D at columns ``col .. col + width - 1`` (those below ``un``).

    With ``vector`` (D row-major and ``width`` elements 16 bytes) a run wholly inside D at
    a 16-byte aligned address leaves in one 128-bit store; any other run, element by
    element.  One function decides this for every warptile kernel.

    The run's values go to the code that stores them by value, read from ``acc`` at the
    call site: a heavy epilogue (float64 GELU: ~40 instructions an element, four copies
    here) keeps that code out of line, and an accumulator array passed to an out-of-line
    function has to live in local memory for the whole kernel.  (Constant indices at the
    call site are the caller's part: see :func:`_make_dmma_store`.)"""
    if width == 2:
        @cuda.jit(device=True, inline="always")
        def gather(acc, c):
            return acc[c], acc[c + 1]

        @cuda.jit(device=True, inline="always")
        def values(vals, row, col, args):
            return epilogue(vals[0], row, col, args), epilogue(vals[1], row, col + U(1), args)
    elif width == 4:
        @cuda.jit(device=True, inline="always")
        def gather(acc, c):
            return acc[c], acc[c + 1], acc[c + 2], acc[c + 3]

        @cuda.jit(device=True, inline="always")
        def values(vals, row, col, args):
            return (epilogue(vals[0], row, col, args), epilogue(vals[1], row, col + U(1), args),
                    epilogue(vals[2], row, col + U(2), args), epilogue(vals[3], row, col + U(3), args))
    else:
        raise ValueError(f"a run holds 2 or 4 elements, got {width}")
    LAST = U(width - 1)

    @cuda.jit(device=True, inline="always")
    def one(d, ldd, un, v, row, col, args):
        if col < un:
            d[d_off(row, col, ldd)] = epilogue(v, row, col, args)

    @cuda.jit(device=True, inline="always")
    def scalar_run(d, ldd, un, vals, row, col, args):
        for j in range(width):
            one(d, ldd, un, vals[j], row, col + U(j), args)

    @cuda.jit(device=True)
    def store_values(d, ldd, un, vals, row, col, args):
        if vector:
            at = d_off(row, col, ldd)
            if col + LAST < un and is_aligned16(d, at):
                store_vec(d, at, values(vals, row, col, args))
                return
        scalar_run(d, ldd, un, vals, row, col, args)

    @cuda.jit(device=True, inline="always")
    def store_run(d, ldd, un, acc, c, row, col, args):
        store_values(d, ldd, un, gather(acc, c), row, col, args)

    return store_run


def _device_dmma_shape(sm90: tuple[int, int] | None = None) -> tuple[int, int]:
    """The FP64 mma shape for the device kernels are compiled for: ``sm90`` (a tile's own
    choice) on sm_90 and later where given, else :func:`~._device.dmma_shape_for`."""
    cc = current_cc()
    if sm90 is not None and cc >= (9, 0):
        return tuple(sm90)
    return dmma_shape_for(cc)
