"""``dxgemm.gemm``: validate -> choose a backend -> get the (cached) kernel -> launch."""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any

import numpy as np

from . import _arrays, _calls
from ._arrays import Operand, as_operand
from ._rung_cache import rung_call
from ._streams import numba_stream, stream_handle
from .epilogues._base import AlphaBeta, Chain, Epilogue, EpilogueContext
from .kernels import (FLAG_VEC_A, FLAG_VEC_B, H100_L2_BYTES, H100_SMS, RUNGS, KernelSpec, get_kernel, l2_cache_bytes,
                      sm_count, vector_flags)
from .kernels._device import SIMULATOR

BACKENDS: tuple[str, ...] = RUNGS + ("pipeline",)
"""Names ``backend=`` accepts besides ``"auto"``: the handwritten rungs, slowest first, then
``"pipeline"`` (cuBLASDx device pipeline on tensor cores, :mod:`dxgemm.pipelines`)."""


def gemm(
    a: Any,
    b: Any,
    c: Any = None,
    *,
    alpha: float = 1.0,
    beta: float = 0.0,
    epilogue: Epilogue | None = None,
    backend: str = "auto",
    stream: Any = None,
) -> Any:
    """``D = epilogue(alpha * A @ B + beta * C)`` on the GPU, in one kernel.

    Args:
        a: ``(m, k)`` device matrix (CuPy array, PyTorch CUDA tensor, Numba device array,
            or anything with ``__cuda_array_interface__`` / CUDA DLPack), float32 or float64,
            row-major, column-major or a strided view of either.
        b: ``(k, n)`` device matrix of the same dtype and device.
        c: optional ``(m, n)`` matrix.  When given, the result is written into ``c`` and
            ``c`` is returned; it is read only when ``beta != 0`` (BLAS semantics: with
            ``beta == 0`` NaN in ``c`` does not leak).  It must have unit stride in one
            dimension and must not overlap ``a`` or ``b``.
        alpha, beta: real scalars, applied in the matrices' dtype.
        epilogue: an :class:`~dxgemm.epilogues.Epilogue` (or a chain ``e1 | e2``) applied
            to every element in registers after alpha/beta, before the single store.
        backend: ``"auto"`` (the fastest available for the dtype and shape) or one of
            :data:`BACKENDS`.  ``"auto"`` and ``"pipeline"`` run a single-row problem
            (``m == 1``) on :mod:`dxgemm.kernels.gemv`, which streams B once.
        stream: the stream to launch on; default the current stream of ``a``'s library.

    Returns:
        ``c`` when given, otherwise a new row-major ``(m, n)`` matrix of ``a``'s library.

    Raises:
        TypeError: host arrays, unsupported or mixed dtypes, a non-epilogue ``epilogue``.
        ValueError: non-2-D inputs, mismatched shapes, arrays on different devices, an
            output overlapping an input, an unknown backend.
    """
    key = _calls.signature(a, b, c, alpha, beta, epilogue, backend)
    repeat = _calls.lookup(key)
    if repeat is not None:  # same signature as an earlier call: its decisions hold
        return repeat.run(a, b, c, alpha, beta, stream)
    op_a = as_operand(a, "a")
    op_b = as_operand(b, "b")
    if op_a.dtype != op_b.dtype:
        raise TypeError(f"a and b must have the same dtype, got a: {op_a.dtype} and b: {op_b.dtype}")
    dtype = op_a.dtype
    (m, k), (k_b, n) = op_a.shape, op_b.shape
    if k != k_b:
        raise ValueError(f"inner dimensions differ: a is {m}x{k}, b is {k_b}x{n} (a.shape[1] must equal b.shape[0])")
    _check_scalar(alpha, "alpha")
    _check_scalar(beta, "beta")
    if epilogue is not None and not isinstance(epilogue, Epilogue):
        raise TypeError(
            f"epilogue must be a dxgemm.epilogues.Epilogue (e.g. epilogues.relu()), got {type(epilogue).__name__}"
        )
    backend = _check_backend(backend)
    explicit_pipeline = backend == "pipeline"

    device = _arrays.device_of(op_a)
    if _arrays.device_of(op_b) != device:
        raise ValueError(f"a is on GPU {device} but b is on GPU {_arrays.device_of(op_b)}; put both on one device")
    if c is None:
        out = _arrays.empty_like_library(op_a, (m, n))
        op_d = as_operand(out, "c", output=True)
    else:
        op_d = as_operand(c, "c", output=True)
        if op_d.shape != (m, n):
            raise ValueError(f"c has shape {op_d.shape}; a {m}x{k} times b {k}x{n} needs c of shape ({m}, {n})")
        if op_d.dtype != dtype:
            raise TypeError(f"c has dtype {op_d.dtype}, but a and b are {dtype}; c must match them")
        if _arrays.device_of(op_d) != device:
            raise ValueError(f"c is on GPU {_arrays.device_of(op_d)} but a and b are on GPU {device}")
        _arrays.check_output_overlap(op_d, (("a", op_a), ("b", op_b)))
        out = c
    if m == 0 or n == 0:
        return out

    ctx = EpilogueContext(m, n, dtype, adapt=lambda arr, name: _adapt_extra(arr, name, dtype, device, (m, n)),
                          device=device, inputs=(op_a, op_b), output=op_d)
    chain = Chain((AlphaBeta(alpha, beta, c if c is not None else None),) + (epilogue.stages if epilogue else ()))
    bound = chain.bind(ctx)
    handle = stream_handle(stream, op_a.library)
    if m == 1 and backend in ("auto", "pipeline"):
        backend = "gemv"  # one output row: no reuse to tile for (dxgemm.kernels.gemv)
    flags = vector_flags(op_a.ptr, op_a.ld, op_b.ptr, op_b.ld, dtype.itemsize)
    with _arrays.on_device(device):  # choose, load and launch on the arrays' GPU
        if backend == "auto":
            backend = choose_backend(dtype, m, n, k, pipeline=_pipeline_reason(device) is None,
                                     aligned=flags == FLAG_VEC_A | FLAG_VEC_B, transcendental=chain.transcendental,
                                     medium_min_k=chain.medium_tile_min_k, sms=sm_count())
        if backend == "pipeline":
            from .pipelines._dispatch import PipelineUnavailable, matrix_of, prepare

            mat_a, mat_b, mat_d = matrix_of(op_a), matrix_of(op_b), matrix_of(op_d)
            try:
                call = prepare(dtype, (mat_a.arrangement, mat_b.arrangement), m, n, k, bound, device,
                               d_arrangement=mat_d.arrangement)
            except PipelineUnavailable as e:
                if explicit_pipeline:
                    raise ValueError(f"backend='pipeline' cannot run this call: {e}") from None
                call = None
                backend = "warptile"
            if call is not None:
                call(mat_a, mat_b, mat_d, m, n, k, bound.args, handle)
                _calls.remember(key, call, op_a, op_b, op_d, (a, b), m, n, k, bound, alpha, beta, c is not None)
                return out
        sms = sm_count()
        tile = choose_tile(backend, dtype, m, n, k, sms, chain.medium_tile_min_k, l2_cache_bytes())
        slices = choose_split_k(backend, dtype, m, n, k, tile, sms)
        if SIMULATOR:  # nothing is compiled: Numba's simulated launch
            _simulated_rung(backend, tile, op_a, op_b, op_d, m, n, k, flags, bound, slices)
            return out
        from .pipelines._dispatch import matrix_of
        from .pipelines._launch import _values

        spec = KernelSpec(dtype, op_a.layout, op_b.layout, op_d.layout, bound.key, None, tile=tile)
        if slices > 1:
            call = _warptile_split_k(spec, bound, device, slices, n)
        else:
            call = rung_call(backend, spec, bound, device)
        call(matrix_of(op_a), matrix_of(op_b), matrix_of(op_d), m, n, k, _values(bound.args), handle)
        _calls.remember(key, call, op_a, op_b, op_d, (a, b), m, n, k, bound, alpha, beta, c is not None)
        return out


def choose_backend(dtype: np.dtype, m: int, n: int, k: int, *, pipeline: bool = False, aligned: bool = True,
                   transcendental: bool = False, medium_min_k: float = math.inf, sms: int = H100_SMS) -> str:
    """The backend ``"auto"`` runs (``pipeline``: whether the pipeline can run on this device;
    ``aligned``: whether both operands take 16-byte accesses, :func:`~.kernels.vector_flags`;
    ``transcendental``: whether the call's epilogue has a stage with an ``exp``, ``erf`` or
    ``tanh`` per element, :attr:`dxgemm.epilogues.Epilogue.transcendental`, and
    ``medium_min_k`` its :attr:`~dxgemm.epilogues.Epilogue.medium_tile_min_k`; ``sms``: the
    device's SMs).

    float64 skinny outputs with deep K (at least 128 rows and 64 columns, few output tiles,
    :func:`choose_split_k`) run ``warptile`` split over K: its split tiles then have blocks
    for every SM, and beat the pipeline's own split-K at every such shape measured
    (``h100_splitk_ab_s17.log``, GPU ms, warptile split / unsplit / pipeline): 2048x256x8192
    0.163 / 0.339 / 0.208 (1.00x cuBLAS), 4096x128x4096 0.092 / 0.173 / 0.118,
    1024x256x8192 0.090 / 0.244 / 0.111, 512x512x8192 0.089 / 0.240 / 0.110, 1024x512x16384
    0.305 / 0.666 / 0.416; 4096x64x4096 on the 128x64 split tile 0.064 against the
    pipeline's 0.075 (``h100_splitk_narrow_s17.log``).  Fewer than 128 rows would leave most
    of a split tile idle: those stay on the pipeline.

    float64 runs ``warptile`` wherever its unchecked interior loop can run (both operands
    16-byte aligned) on outputs of more than 256 rows and columns: with it, and its large
    tile in cuBLAS's own sm_90 shape (DMMA.16x8x16, 128x128x16, ``cp.async``), it beats
    cuBLASDx's pipeline there.  ``benchmarks/results/h100_auto_choice_f64_s15.log`` (GPU ms,
    pipeline / warptile): 1024^3 0.057 / 0.054, 2048^3 0.382 / 0.347, 4096^3 2.960 / 2.836,
    8192^3 25.99 / 23.50 (0.81x / 0.90x cuBLAS); 1000^3 0.083 / 0.088, but 0.148 / 0.086 a
    call in a loop; below K = 1024 the small tile (``choose_tile``; since session 18 the
    medium one where the epilogue is light, faster still) is the faster one,
    ``h100_warptile_f64_tiles_s15.log``: 4096^2 x 256 0.197 ms against the pipeline's 0.228,
    8192^2 x 512 1.426 against 1.549, 4096^2 x 128 0.114 against 0.122.  The pipeline keeps
    unaligned operands (4097^3: 1.03x / 0.77x cuBLAS, warptile's checked copies), skinny
    outputs that warptile does not split over K (below), and at K = 128 calls whose epilogue
    is ``transcendental`` and keeps warptile on its small tile (``medium_min_k > k``: a
    ``custom`` stage; every built-in stage now runs on the medium tile, where warptile leads at
    K = 128 too: ``bias | silu`` 0.1330 against the pipeline's 0.1517 ms at 4096^2 x 128,
    0.2094 / 0.2395 at 4096^2 x 256, ``h100_backends_silu64_s24.log``).  Since the float64
    exact GELU lost libdevice's ``erf`` (session 20) warptile's small tile (since session 23
    the medium one, faster still: ``choose_tile``) leads with ``bias | gelu`` at every other
    shallow K measured, the two interleaved in rounds
    (``h100_backends_gelu64_s20.log``, pipeline / warptile ms): 4096^2 x 256 0.249 / 0.243,
    8192^2 x 512 1.73 / 1.64, 2048^2 x 256 0.070 / 0.066, 6144^2 x 512 0.943 / 0.902,
    4096^2 x 768 0.599 / 0.573, but 4096^2 x 128 0.161 / 0.168 (on the medium tile, with its
    epilogue staged in shared memory, warptile leads there too: 0.1599 / 0.1443, and 0.2489 /
    0.2154 at 4096^2 x 256, ``h100_backends_gelu64_staged_s23.log``; so the pipeline keeps K =
    128 only for chains that stay on the small tile); SiLU and sigmoid (libdevice
    ``exp``) by 6-12 % at 4096^2 x 256, 8192^2 x 512, 2048^2 x 256 and 6144^2 x 512
    (``h100_backends_transcendental_s20.log``: ``silu`` 0.265 / 0.241 ms at 4096^2 x 256,
    ``sigmoid`` 0.246 / 0.232).  Before it the two had tied
    (``h100_auto_choice_epilogues_s18.log``: 4096^2 x 256 0.258 / 0.258 ms, 8192^2 x 512
    1.725 / 1.670, 4096^2 x 128 0.174 / 0.187) and the pipeline kept K < 1024; light
    chains (``bias``, ``bias | relu``) stay on warptile's medium tile, ahead at 11 of 12
    shapes there (``bias | relu`` 4096^2 x 256 0.211 / 0.188, 8192^2 x 512 1.488 / 1.341,
    6144^2 x 512 0.948 / 0.774; ``bias`` at 4096^2 x 128 a tie).  Earlier figures:
    ``bias | gelu`` 4096^2 x 256 0.260 ms against warptile's 0.269, 8192^2 x 512 1.813
    against 1.918, while from K = 1024 warptile's large tile leads, 8192^2 x 1024
    3.187 against 3.277 and 4096^3 2.810 against 3.048 (``h100_fusion_f64_pipeline_s15.log``,
    ``h100_fusion_f64_warptile2_s15.log``: one session, two processes).  The table below is
    from before those changes, when the pipeline led at every K >= 128:

    Measured on the H100, pipeline against warptile in the same run: wall time per call
    of 200 calls back to back (host time included where it exceeds the GPU's), ms.
    float64 from ``benchmarks/results/h100_auto_choice_stores.log`` (after warptile's
    16-byte stores; ``h100_auto_choice_async.log`` repeats it after its small tile moved
    to ``cp.async``: warptile 0.063 ms at 4096 x 4096 x 40, 0.96x cuBLAS, and a tie with
    the pipeline at K = 128).  float32 from ``h100_auto_choice_f32_s11.log`` (the pipeline
    with its K tail in shared memory, FORMAT_VERSION 5), two rounds on two machines:

    ===================  =================  ==========================
    shape                float64            float32 (3xTF32)
                         pipeline/warptile  pipeline r1, r2 / warptile
    ===================  =================  ==========================
    512^3                0.065 / 0.044      0.116, 0.164 / 0.033-0.049
    768^3                0.047 / 0.064      0.139, 0.088 / 0.067
    1024^3               0.058 / 0.089      0.126, 0.087 / 0.090
    1000^3               —                  0.144, 0.080 / 0.093
    4096 x 4096 x 40     0.120 / 0.070      0.105, 0.060 / 0.061
    4096 x 4096 x 64     0.103 / 0.087      0.108, 0.062 / 0.075
    4096 x 4096 x 100    0.162 / 0.125      0.097, 0.077 / 0.112
    4096 x 4096 x 128    0.139 / 0.148      0.084, 0.083 / 0.125
    4096 x 4096 x 256    0.231 / 0.249      0.132, 0.131 / 0.231
    8192 x 8192 x 32     —                  0.170, 0.169 / 0.158
    8192 x 8192 x 64     0.381 / 0.323      0.205, 0.205 / 0.256
    8192 x 8192 x 128    0.540 / 0.545      0.276, 0.281 / 0.467
    4096 x 64 x 4096     —                  0.201, 0.201 / 0.237
    ===================  =================  ==========================

    Small problems are host-bound: a pipeline call costs ~45-65 us of host time in float64
    and 60-145 us in float32 (the 3xTF32 split is a launch of its own, and an output with
    few tiles adds the split-K reduce), and the float32 figure moved by 2x between two
    machines of the same kind (rounds r1 and r2 above; their GPU times agree).  So the
    pipeline's shorter GPU time (3x at 512^3) shows once warptile takes longer than a
    pipeline call's host time: from ~2^28 multiply-adds in float64 and ~2^30 in float32
    (warptile's float32 rate, ~1.5e10 multiply-adds per ms, times 60-100 us).  Near 2^30
    in float32 the faster backend depends on the host (1024^3: 0.126 or 0.087 against
    0.090).  Below K = 128 in float64 warptile is faster: the pipeline pads K to its depth
    and runs many short blocks, while warptile's stores, 16 bytes a thread, run near the
    write bandwidth that bounds a short-K GEMM (4096 x 4096 x 40: 0.96x cuBLAS).  The
    float32 pipeline, whose K tail and stores now cost little (4096 x 4096 x 40 at 0.98x
    cuBLAS on the GPU), leads from K = 64 (8192 x 8192 x 64); at K = 32 warptile still
    does (8192 x 8192 x 32).  An output with a side of at most 128 runs cuBLASDx's SIMT
    float32 pipeline (:func:`~dxgemm.pipelines.config.float32_method`), far ahead of
    warptile there (4096 x 64 x 4096: 0.075 against 0.241 ms,
    ``h100_float32_method_skinny_s11.log``); on other shapes that method (forced with
    ``DXGEMM_FLOAT32_PIPELINE=fp32``, 0.66x cuBLAS at squares) lost to warptile at every
    size, so there float32 stays on warptile.  Every device where the pipeline cannot run
    gets ``warptile``.
    """
    dt = np.dtype(dtype)
    if not pipeline:
        return "warptile"
    if dt == np.float64:
        heavy = transcendental and medium_min_k > k  # an epilogue that keeps warptile on its small tile
        if k < 128 or m * n * k < 2**28 or (aligned and min(m, n) > 256 and (k > 128 or not heavy)):
            return "warptile"
        tile = choose_tile("warptile", dt, m, n, k, sms)  # any tile but large: the same split count
        if aligned and m >= 128 and n >= 64 and choose_split_k("warptile", dt, m, n, k, tile, sms) > 1:
            return "warptile"
        return "pipeline"
    if dt == np.float32 and k >= 64 and m * n * k >= 2**30:
        from .pipelines.config import SIMT_FLOAT32_MAX_SIDE, uses_tf32x3

        if uses_tf32x3(dt, m, n) or min(m, n) <= SIMT_FLOAT32_MAX_SIDE:
            return "pipeline"
    return "warptile"


def choose_tile(backend: str, dtype: np.dtype, m: int, n: int, k: int, sms: int = H100_SMS,
                medium_min_k: float = 0.0, l2_bytes: int = H100_L2_BYTES) -> str:
    """The tile configuration of a handwritten rung (``KernelSpec.tile``); ``medium_min_k``:
    the largest :attr:`~dxgemm.epilogues.Epilogue.medium_tile_min_k` of the call's epilogue
    stages (0 without an epilogue); ``l2_bytes``: the device's L2 cache (an H100's 50 MiB).

    Only ``warptile`` has several (``warptile.TILE_CONFIGS``; float32's rule is in the code
    below, with its log).  float64 has four, and the choice is wave quantization.  Each
    tile's blocks are spread over the ``sms`` SMs, so the busiest SM runs ``ceil(tiles /
    sms)`` of them, and a block costs :data:`F64_BLOCK_COST` in large-tile block times (at
    the occupancy each tile runs with: large one block per SM, medium and small two, tiny
    three).  The tile with the least ``cost * ceil(tiles / sms)`` wins, ties going to the
    larger tile, with three limits the costs do not capture:

    * below ``m * n = 2**19`` outputs the tiny tile (64x64x8) whatever the model says
      (``h100_warptile_tiny.log``: 640^3, 4096 x 64 x 4096 at 0.210 against 0.303 ms);
    * below ``k = 1024`` not the large tile, which pads K to 16 and pays a long prologue for
      few K tiles (``h100_warptile_f64_tiles_s15.log``: 4096^2 x 256 0.197 small against
      0.218 ms large, 8192^2 x 512 1.426 against 1.482);
    * the medium tile (cuBLAS's own shallow-K shape, 4 warps of 64x32 on m16n8k8) only with
      more blocks than SMs and from K = 64, or ``medium_min_k`` where an epilogue stage asks
      for more: with one block per SM its 4 warps are too few (1024^3: 0.055 against the
      small tile's 0.052 ms), but with 200 blocks it leads (1280^2 x 512: 0.046 against
      0.050, ``h100_warptile_tiles_model_check_s19.log``).  Every built-in stage runs
      there: the medium tile's warps stage their values in shared memory and run the
      epilogue on eight outputs a lane with the accumulators' registers free
      (``warptile._make_staged_store``), and every float64 activation is straight-line code
      (the exact GELU, 37 FP64 instructions; SiLU, sigmoid, the tanh GELU and tanh, 24-27,
      ``epilogues._pointwise._quotient_float64`` and ``_tanh_float64``), so ptxas overlaps
      the eight outputs' chains and the medium tile's faster main loop decides at every K
      measured: ``bias | gelu`` 4096^2 x 256 0.2139 against the small tile's 0.2288, 2048^2
      x 256 0.0598 / 0.0619, 4096^2 x 512 0.362 / 0.406, 8192^2 x 384 1.29 / 1.35, 3072^2 x
      768 0.292 / 0.344 (``h100_tiles_staged_chains_s23.log``); ``bias | silu`` 0.2115 /
      0.2303 at 4096^2 x 256 (``h100_logistic64_s24.log``), 0.371 / 0.384 at 4096^2 x 512,
      0.289 / 0.341 at 3072^2 x 768, 0.0571 / 0.0615 at 2048^2 x 256, the tanh GELU alike
      (``h100_tiles_logistic_s24.log``); ``bias | tanh`` 0.2055 / 0.2069 at 4096^2 x 256
      (``h100_tanh64_s24.log``).  Before, an epilogue with branches (libdevice's ``exp`` and
      IEEE division, or ``tanh``) ran output after output, a dependent DFMA waiting ~8
      cycles, and the small tile's 16 warps an SM hid that better than the medium tile's 8:
      ``bias | silu`` 0.242 small against 0.278 ms staged medium at 4096^2 x 256, ``bias |
      tanh`` 0.263 / 0.327 (``h100_tiles_staged_chains_s23.log``).  A ``custom`` stage keeps the
      small tile unless it is straight-line arithmetic (``epilogues._custom.straight_line``):
      ``x + v[col]`` 0.1774 medium / 0.1908 small at 4096^2 x 256, 1.437 / 1.556 at 8192^2 x
      512, but bias + GELU through libdevice's ``erf`` 0.3231 / 0.2545 (``h100_custom_tile_s25.log``).

    Below K = 1024 a medium-tile pick runs as ``"medium_grouped"`` (the same tile, its blocks
    launched in groups of 8 tile rows that sweep the columns, as the large tile's are in groups
    of 16) where B, ``n k`` elements, takes more than half the L2 (deeper K, where the medium
    tile is picked for outputs of about 3072^2 and less, was not measured grouped).  Blocks launched row after row
    sweep all of B for every two tile rows (two blocks an SM), and the stream of D's stores
    through L2 takes much of the rest, so such a B comes from DRAM each time; a group of 8
    rows needs an eighth of it at once.  At 8192^2 x 512 (B 32 MiB) ``bias | gelu`` 1.501
    against 1.553 and 1.581 ms in two runs, 8192^2 x 1024 bare 2.636 against 3.004; where
    B is smaller, a tie or slightly slower (4096^2 x 256 0.2199 against 0.2171, 8192^2 x 256
    and 3072^2 x 768 ties within the rounds' spread; 6144^2 x 512, B 24 MiB, 0.842 against
    0.861; ``h100_medium_group_m_s24.log``, ``h100_tiles_group_large8_s24.log``).

    Below K = 64 a small-tile pick runs as ``"short"``, the same tile on m16n8k8
    (``h100_f64_rounds_short_s21.log``: 4096^2 x 40 0.0590 against 0.0634 ms, 8192^2 x 32
    0.199 / 0.205, 2048^2 x 48 a tie).

    The costs come from ``h100_warptile_tiles_mid_s19.log`` and ``h100_warptile_tiles_k1024_s19.log``
    (all four tiles, 1000^3 to 4096^3), and they predict its ratios to within a few
    per cent: 2560^2 x 1024 medium / large 0.89 (model 0.93), tiny / medium 1.09 (1.09);
    1280^3 tiny / large 1.23 (1.24).  Where this rule and the one before it (large from K =
    1024 where ``ceil(large tiles / sms) <= 0.575 * ceil(small tiles / sms)``, else medium
    or small) disagree, interleaved against cuBLAS (``h100_f64_rounds_tile_model_s19.log``,
    ms, model's pick / old pick): 2560^2 x 1024 0.282 / 0.316 (medium / large), 2560^2 x
    4096 1.09 / 1.16, 3072^2 x 2048 0.719 / 0.746, 3072^2 x 4096 1.44 / 1.53, 3712^2 x
    2048 1.04 / 1.06, 3968^2 x 1024 0.609 / 0.617; 1152^2 x 1024 0.0739 / 0.0808 (tiny /
    large), 1152^2 x 256 0.0233 / 0.0279 (tiny / small), 1536^2 x 512 0.0637 / 0.0677
    (tiny / medium); one loss, 1536^2 x 4096 0.482 / 0.478 (tiny / medium, a predicted
    2.5 % gain).  Earlier logs the costs agree with: ``h100_f64_rounds_small_vs_large_s17.log``
    (2000^3 0.367 small / 0.319 large, 1792^3 0.235 / 0.271), ``h100_warptile_tiles_medium_s18.log``
    (4096^2 x 256 0.197 small / 0.184 medium).  On 13 shapes it was not fitted on
    (``h100_warptile_tiles_model_check_s19.log``) it picked the fastest tile at 12, and
    at the thirteenth, 5120^2 x 1024, large where medium was 3 % faster (13 large waves
    against 25 medium blocks an SM, 13 against 13.25 in the model).  Near such ties the
    medium tile's cost is not one number (``h100_warptile_tiles_near_ties_s19.log``, medium
    / large ms): it won at every size from 4608^2 to 6656^2 at K = 1024 and 2048 (6656^2 x
    1024 1.65 / 1.89, a cost of 0.45), lost at 4096^2 and 8192^2 x 1024 (0.51-0.53) and at
    5120^2 x 4096 (0.55).  The model keeps 0.53 until that is understood.
    """
    if backend != "warptile":
        return "large"
    if np.dtype(dtype) == np.float32:
        # h100_warptile_f32_tiles.log: 64x64 below 2^19 outputs (512^3 0.034 ms against 0.074),
        # 64x128 up to 1536^2 (1024^3 0.087 against 0.143), 128x128 from 2048^2.
        return "tiny" if m * n < 2**19 else "small" if m * n < 2**22 else "large"
    if np.dtype(dtype) != np.float64:
        return "large"
    if m * n < 2**19:
        return "tiny"
    costs = {}
    for tile, block_cost in F64_BLOCK_COST.items():  # larger tiles first: min() keeps the first of a tie
        blocks = _f64_tiles(tile, m, n)
        if tile == "large" and k < 1024:
            continue
        if tile == "medium" and (k < max(64, medium_min_k) or blocks <= sms):
            continue
        costs[tile] = block_cost * -(-blocks // sms)
    best = min(costs, key=costs.__getitem__)
    if best == "medium" and k < 1024 and 2 * n * k * np.dtype(dtype).itemsize > l2_bytes:
        return "medium_grouped"
    return "short" if best == "small" and k < 64 else best


F64_BLOCK_COST = {"large": 1.0, "medium": 0.53, "small": 0.575, "tiny": 0.31}
"""A float64 ``warptile`` block's time in large-tile block times, each tile at its own
occupancy (:func:`choose_tile`).  A medium or small block does half a large block's work
(128x64) two to an SM; a tiny one a quarter (64x64), three to an SM.  So the medium tile
runs the DMMA pipe about as well as the large one (0.53 for half the work), the small
15 % worse (64x16 warp tiles) and the tiny 24 % worse, and each trades that for finer
waves."""


def choose_split_tile(n: int) -> str:
    """The float64 split-K tile (``warptile.TILE_CONFIGS["float64"]``) for an output ``n`` wide:
    128x64 up to 64 columns, where the 128x128 tile would leave half its columns idle
    (4096x64x4096: 0.064 against 0.101 ms, ``h100_splitk_narrow_s17.log``), else 128x128."""
    return "split_narrow" if n <= 64 else "split"


def _f64_tiles(tile: str, m: int, n: int) -> int:
    """How many blocks float64 ``warptile``'s ``tile`` covers an ``m x n`` output with."""
    from .kernels.warptile import CONFIGS, TILE_CONFIGS

    cfg = TILE_CONFIGS["float64"].get(tile, CONFIGS["float64"])
    return -(-m // cfg["BM"]) * -(-n // cfg["BN"])


def choose_split_k(backend: str, dtype: np.dtype, m: int, n: int, k: int, tile: str, sms: int) -> int:
    """K slices for a float64 ``warptile`` call whose split tiles (:func:`choose_split_tile`)
    would fill at most half the GPU (1 when it runs unsplit).

    Such calls run on the small or tiny tile, whose 64x16 and 32x16 warp tiles run the DMMA
    pipe at about half the large tile's rate, and on few blocks.  Slicing K over
    ``gridDim.z`` gives the large tile's 64x32 warps enough blocks instead; the slices'
    partial sums go to a workspace laid out like D (on repeat calls the one kept per stream,
    ``dxgemm._calls.SplitKernelCall``), and :mod:`dxgemm.kernels.splitk_reduce` adds them and
    applies alpha, beta, C and the epilogue.  Slices keep at least 16 K tiles each (a
    slice's start-up is ~10 K tiles' worth), at most 8 slices, and K is at least 2048: the
    split pays for deep K on skinny outputs, not for cubes.  Measured on the H100, GPU ms,
    split / unsplit (``h100_splitk_ab_s17.log``): 2048x256x8192 0.163 / 0.339 (1.00x
    cuBLAS), 512x512x8192 0.089 / 0.240 (1.00x), 1024x1024x4096 0.163 / 0.173;
    ``h100_splitk_ab_narrow_s17.log``, on the 128x64 split tile: 4096x64x4096 0.064 / 0.141
    (0.89x), 2048x64x8192 0.064 / 0.258; ``h100_splitk_ab_s16.log``: 1024^3 0.057 split against 0.049
    whole, hence the K bound; 1000x1000x4000 0.176 ms, 0.89x (``h100_f64_rounds_edges_s17.log``)."""
    if backend != "warptile" or np.dtype(dtype) != np.float64 or tile == "large" or k < 2048:
        return 1
    tiles = _f64_tiles(choose_split_tile(n), m, n)
    if 2 * tiles > sms:
        return 1
    return max(1, min(sms // tiles, -(-k // 16) // 16, 8))


def _warptile_split_k(spec: KernelSpec, bound: Any, device: int, slices: int, n: int) -> "_calls.SplitKernelCall":
    """``D = epilogue(A @ B)`` as ``slices`` K slices of the float64 split tile into a
    workspace laid out like D, then one reduce that sums them and applies the epilogue
    (:class:`dxgemm._calls.SplitKernelCall`)."""
    from .pipelines._launch import _values

    plain = _plain_chain(spec.dtype)
    part_spec = dataclasses.replace(spec, epilogue_key=plain.key, tile=choose_split_tile(n))
    part = rung_call("warptile", part_spec, plain, device, slices=slices)
    reduce_spec = KernelSpec(spec.dtype, spec.layout_d, spec.layout_d, spec.layout_d, bound.key, None)
    reduce = rung_call("splitk_reduce", reduce_spec, bound, device)
    return _calls.SplitKernelCall(part, reduce, slices, _values(plain.args), device)


def _plain_chain(dtype: np.dtype) -> Any:
    """The bound alpha = 1, beta = 0 chain the K slices are computed with: the pipeline's own
    (:func:`dxgemm.pipelines.warmup.plain_epilogue`, which its split-K slices and both warmups
    use too), so a warmed split kernel has the key a split call asks for."""
    from .pipelines.warmup import plain_epilogue

    return plain_epilogue(dtype)


def _simulated_rung(backend: str, tile: str, op_a: Operand, op_b: Operand, op_d: Operand, m: int, n: int, k: int,
                    flags: int, bound: Any, slices: int) -> None:
    """The rung's launch under the CUDA simulator, through Numba (split K: the slices into a
    workspace, then the reduce, as :class:`dxgemm._calls.SplitKernelCall` does on a GPU)."""
    from .kernels import Layout

    stream = numba_stream(0)
    dtype = op_a.dtype
    spec = KernelSpec(dtype, op_a.layout, op_b.layout, op_d.layout, bound.key, None, tile=tile)
    if slices == 1:
        compiled = get_kernel(backend, spec, bound.args, bound.make)
        compiled.launch(stream, op_a.flat(), op_b.flat(), op_d.flat(), m, n, k, op_a.ld, op_b.ld, op_d.ld, flags,
                        bound.args)
        return
    rows = op_d.layout == Layout.ROW
    workspace = as_operand(_arrays.empty_like_library(op_a, (slices * m, n) if rows else (slices * n, m)),
                           "workspace", output=True)
    ldw = n if rows else m
    plain = _plain_chain(dtype)
    part = get_kernel("warptile", dataclasses.replace(spec, epilogue_key=plain.key, tile=choose_split_tile(n)),
                      plain.args, plain.make)
    part.launch(stream, op_a.flat(), op_b.flat(), workspace.flat(), m, n, k, op_a.ld, op_b.ld, ldw, flags,
                plain.args, slices=slices)
    reduce_spec = KernelSpec(dtype, op_d.layout, op_d.layout, op_d.layout, bound.key, None)
    reduce = get_kernel("splitk_reduce", reduce_spec, bound.args, bound.make)
    reduce.launch(stream, workspace.flat(), workspace.flat(), op_d.flat(), m, n, slices, ldw, m * n, op_d.ld, 0,
                  bound.args)


def available_backends(device: int = 0) -> tuple[str, ...]:
    """The members of :data:`BACKENDS` that can run here (``"pipeline"`` only on an sm_90 GPU
    with cuda.core, outside Numba's simulator).  Test suites parametrize over this."""
    from .pipelines._dispatch import availability

    return RUNGS if availability(device) is not None else BACKENDS


def _pipeline_reason(device: int) -> str | None:
    """Why ``auto`` may not pick the pipeline on ``device`` (None when it may); imports no nvmath.

    ``DXGEMM_AUTO_PIPELINE=0`` keeps ``auto`` on the handwritten rungs (no pipeline compile
    behind the caller's back, e.g. in a test suite); ``backend="pipeline"`` still works.
    """
    import os

    if os.environ.get("DXGEMM_AUTO_PIPELINE", "1") == "0":
        return "DXGEMM_AUTO_PIPELINE=0"
    from .pipelines._dispatch import availability

    return availability(device)


def _adapt_extra(arr: Any, name: str, dtype: np.dtype, device: int, shape: tuple[int, int] | None) -> Operand:
    op = as_operand(arr, name, output=True)
    if op.dtype != dtype:
        raise TypeError(f"{name} has dtype {op.dtype}; it must match a and b ({dtype})")
    if _arrays.device_of(op) != device:
        raise ValueError(f"{name} is on GPU {_arrays.device_of(op)} but a and b are on GPU {device}")
    return op


def _check_scalar(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")


def _check_backend(backend: Any) -> str:
    if backend != "auto" and backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose 'auto' or one of {', '.join(BACKENDS)}")
    return backend
