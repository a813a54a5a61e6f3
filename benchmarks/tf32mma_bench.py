"""The TF32 tensor-core rung on the GPU: correctness, accuracy against cuBLAS, speed, mma peak.

    python benchmarks/tf32mma_bench.py check      # both modes, layouts, edges, epilogue vs float64
    python benchmarks/tf32mma_bench.py accuracy   # issue 34's data classes, K = 256 .. 65536
    python benchmarks/tf32mma_bench.py speed [--variants NAME,...] [--pipeline]  # 4096^3, 8192^3 vs cuBLAS
    python benchmarks/tf32mma_bench.py peak       # mma.sync m16n8k8 TF32 from registers only
    python benchmarks/tf32mma_bench.py resources [--cc 80,90]  # registers / spills, no GPU needed

``--rung tf32wgmma`` runs the same checks on Hopper's ``wgmma`` kernel (its variants: ``WG_VARIANTS``).

``--json FILE`` appends one JSON record a line.  Error = max |D - D64| / (|A| @ |B|)
elementwise; ``ratio_to_sgemm`` = error / max(cuBLAS SGEMM's error on the same inputs, 2^-22).
cuBLAS TF32 is PyTorch's matmul with ``allow_tf32``.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

VARIANTS = {  # name: (spec tile, overrides)
    "tf32x3": ("tf32x3", {}),
    "tf32x3_rolled": ("tf32x3", dict(unroll_steps=False)),
    "tf32x3_s4": ("tf32x3", dict(stages=4)),
    "tf32x3_s2": ("tf32x3", dict(stages=2)),
    "tf32x3_checked": ("tf32x3", dict(unchecked=False)),
    "tf32": ("tf32", {}),
    "tf32_s4": ("tf32", dict(stages=4)),
    "tf32_2blk_nofold": ("tf32", dict(fold=0, min_blocks=2)),
}

WG_VARIANTS = {  # --rung tf32wgmma: name: (spec tile, overrides)
    "tf32x3": ("tf32x3", {}),
    "tf32x3_s4": ("tf32x3", dict(stages=4)),
    "tf32x3_n64": ("tf32x3", dict(BN=64, stages=4)),
    "tf32": ("tf32", {}),
    "tf32_s3": ("tf32", dict(stages=3)),
    "tf32_nolag": ("tf32", dict(lag=False)),
    "tf32x3_pair": ("tf32x3", dict(pair_steps=True)),  # a partial every two K steps (not yet measured)
}
RUNG = "tf32mma"
"""The rung this run measures (``--rung``)."""

PIPELINE_PATHS = {  # --pipeline / --calls: whole dxgemm.gemm calls (the pipeline's split pass included)
    "pipeline_tf32": dict(backend="pipeline", precision="tf32"),
    "pipeline_3xtf32": dict(backend="pipeline"),
    "auto": dict(),
    "auto_tf32": dict(precision="tf32"),
    "call_tf32mma": dict(backend="tf32mma"),
    "call_tf32wgmma": dict(backend="tf32wgmma"),
    "call_tf32mma_tf32": dict(backend="tf32mma", precision="tf32"),
    "call_tf32wgmma_tf32": dict(backend="tf32wgmma", precision="tf32"),
}

_records: list[dict] = []


def emit(rec: dict, json_path: str | None) -> None:
    _records.append(rec)
    if json_path:
        with open(json_path, "a") as f:
            f.write(json.dumps(rec) + "\n")


def _bound_epilogue(m, n, epilogue=None):
    from dxgemm._gemm import _adapt_extra
    from dxgemm.epilogues import Chain, EpilogueContext
    from dxgemm.epilogues._base import AlphaBeta

    dtype = np.dtype(np.float32)
    ctx = EpilogueContext(m, n, dtype, adapt=lambda arr, name: _adapt_extra(arr, name, dtype, 0, (m, n)))
    return Chain((AlphaBeta(1.0, 0.0),) + (tuple(epilogue.stages) if epilogue is not None else ())).bind(ctx)


_compiled: dict = {}


def kernel(tile: str, overrides: dict, layouts: str, bound):
    """The compiled rung (cached per variant, layouts and epilogue key)."""
    from numba import typeof

    from dxgemm.kernels import KernelSpec, Layout, compile_rung

    key = (RUNG, tile, tuple(sorted(overrides.items())), layouts, bound.key, typeof(bound.args))
    if key not in _compiled:
        la, lb, ld = (Layout.ROW if x == "r" else Layout.COL for x in layouts)
        spec = KernelSpec(np.dtype(np.float32), la, lb, ld, bound.key, bound.make(), tile=tile)
        t = time.perf_counter()
        _compiled[key] = compile_rung(RUNG, spec, typeof(bound.args), **overrides)
        print(f"  compiled {RUNG} {tile} {overrides} {layouts}: {time.perf_counter() - t:.1f} s", flush=True)
    return _compiled[key]


def run(a, b, tile="tf32x3", overrides=None, layouts="rrr", epilogue=None, offset=(0, 0), d=None):
    """``a @ b`` of CuPy float32 matrices (logical shapes) through the rung; A and B stored in
    ``layouts[0:2]`` and shifted ``offset`` elements from an aligned base (unaligned copies)."""
    import cupy as cp
    from numba import cuda

    from dxgemm.kernels import vector_flags

    m, k = a.shape
    n = b.shape[1]
    bound = _bound_epilogue(m, n, epilogue)
    compiled = kernel(tile, overrides or {}, layouts, bound)

    def stored(x, layout, off):
        lines = x if layout == "r" else x.T
        flat = cp.empty(lines.size + off, cp.float32)
        flat[off:] = cp.ascontiguousarray(lines).ravel()
        return flat[off:], lines.shape[1]

    fa, lda = stored(a, layouts[0], offset[0])
    fb, ldb = stored(b, layouts[1], offset[1])
    if d is None:
        d = cp.full(m * n, cp.nan, cp.float32)
    ldd = n if layouts[2] == "r" else m
    flags = vector_flags(fa.data.ptr, lda, fb.data.ptr, ldb, 4)
    args = [cuda.as_cuda_array(x) for x in (fa, fb, d)]
    compiled.launch(0, *args, m, n, k, lda, ldb, ldd, flags, bound.args)
    return (d.reshape(m, n) if layouts[2] == "r" else d.reshape(n, m).T), (compiled, args, (m, n, k, lda, ldb, ldd,
                                                                                            flags, bound.args))


def rel_error(d, a, b, ref=None):
    import cupy as cp

    a64, b64 = a.astype(cp.float64), b.astype(cp.float64)
    ref = a64 @ b64 if ref is None else ref
    scale = cp.abs(a64) @ cp.abs(b64)
    e = cp.abs(d.astype(cp.float64) - ref) / scale
    return float(cp.nanmax(e)) if not bool(cp.isnan(e).all()) else float("nan")


# ---------------------------------------------------------------------------------------
def check(args) -> None:
    """Every layout of A, B, D in both modes at edge sizes, unaligned operands, bias | relu."""
    import cupy as cp

    from dxgemm import epilogues as E

    rng = cp.random.default_rng(381)
    u32, tf = 2.0**-24, 2.0**-11
    fails = 0
    # k = 512 ends on a first-level fold, k = 20 is one partial tile
    for m, n, k in ((1000, 1030, 999), (129, 127, 4097), (257, 130, 512), (64, 200, 20)):
        a = (rng.uniform(0.5, 1.0, (m, k)) * 2.0 ** rng.integers(-6, 7, (m, k))).astype(cp.float32)
        b = rng.standard_normal((k, n)).astype(cp.float32)
        for name in args.variants:
            mode, over = VARIANTS[name]
            bnd = (k / 8 + 4) * u32 + (0 if mode == "tf32x3" else 2.5 * tf)
            for layouts in ("rrr", "crr", "rcr", "ccr", "rrc", "ccc") if mode == "tf32x3" else ("rrr", "ccc"):
                if args.quick and layouts not in ("rrr", "rcr", "ccc"):
                    continue
                for offset in ((0, 0), (1, 3)) if layouts == "rrr" else ((0, 0),):
                    out, _ = run(a, b, mode, over, layouts, offset=offset)
                    cp.cuda.runtime.deviceSynchronize()
                    nan = int(cp.isnan(out).sum())
                    err = rel_error(out, a, b)
                    ok = nan == 0 and err <= bnd
                    fails += not ok
                    print(f"check {name:12} {layouts} {m}x{n}x{k} offset={offset}: error {err:.2e} (bound {bnd:.2e}), "
                          f"NaN {nan}: {'ok' if ok else 'FAIL'}", flush=True)
                    emit(dict(suite="tf32mma_check", rung=RUNG, variant=name, mode=mode, layouts=layouts, m=m, n=n, k=k, offset=offset,
                              error=err, bound=bnd, ok=ok), args.json)
    m, n, k = 515, 700, 1500
    a = rng.standard_normal((m, k)).astype(cp.float32)
    b = rng.standard_normal((k, n)).astype(cp.float32)
    v = (rng.standard_normal(n) * 4).astype(cp.float32)
    x3 = [name for name in args.variants if VARIANTS[name][0] == "tf32x3"][:1] or ["tf32x3"]
    for layouts in ("rrr", "ccc"):
        out, _ = run(a, b, *VARIANTS[x3[0]], layouts, epilogue=E.bias(v) | E.relu())
        ref = cp.maximum(a.astype(cp.float64) @ b.astype(cp.float64) + v, 0)
        err = rel_error(out, a, b, ref)
        ok = err <= (k / 8 + 4) * u32 + 1e-6 and bool((out >= 0).all())
        fails += not ok
        print(f"check bias|relu {layouts}: error {err:.2e}: {'ok' if ok else 'FAIL'}", flush=True)
    print(f"check: {fails} failures")


# ---------------------------------------------------------------------------------------
def make_class(rng, name, m, n, k):
    """(a, b) of a data class of issue 34 (CuPy float32)."""
    import cupy as cp

    f32 = cp.float32
    if name == "normal":
        return rng.standard_normal((m, k)).astype(f32), rng.standard_normal((k, n)).astype(f32)
    if name == "wide_exp30":
        return ((rng.standard_normal((m, k)) * 2.0 ** rng.uniform(-30, 30, (m, k))).astype(f32),
                (rng.standard_normal((k, n)) * 2.0 ** rng.uniform(-30, 30, (k, n))).astype(f32))
    if name == "uniform01":
        return rng.random((m, k), dtype=f32), rng.random((k, n), dtype=f32)
    if name == "positive_rows_cols":
        return (rng.random((m, k)) * rng.uniform(0.5, 4, (m, 1))).astype(f32), \
            (rng.random((k, n)) * rng.uniform(0.5, 4, (1, n))).astype(f32)
    if name == "cancellation":
        x = rng.standard_normal((m, k // 2)) * 1e3
        y = rng.standard_normal((k // 2, n))
        a = cp.concatenate([x, x * (1 + rng.standard_normal((m, k // 2)) * 1e-4)], axis=1)
        b = cp.concatenate([y, -y], axis=0)
        return a.astype(f32), b.astype(f32)
    if name == "row_col_scaled":
        return (rng.standard_normal((m, k)) * 2.0 ** (cp.arange(m) % 40)[:, None]).astype(f32), \
            (rng.standard_normal((k, n)) * 2.0 ** -(cp.arange(n) % 40)[None, :]).astype(f32)
    if name == "near_overflow":
        return (rng.uniform(0.5, 1, (m, k)) * 2.0**110).astype(f32), \
            (rng.uniform(0.5, 1, (k, n)) * 2.0 ** rng.integers(-30, 8, (1, n))).astype(f32)
    if name == "near_underflow":
        return (rng.uniform(0.5, 1, (m, k)) * 2.0**-70).astype(f32), \
            (rng.uniform(0.5, 1, (k, n)) * 2.0 ** rng.integers(-90, -40, (1, n))).astype(f32)
    if name == "nan_inf":
        a, b = rng.standard_normal((m, k)).astype(f32), rng.standard_normal((k, n)).astype(f32)
        a[3, 5] = cp.nan
        a[7, 9] = cp.inf
        b[11, :] = cp.float32(-cp.inf)
        a[20, 11] = 0
        return a, b
    raise ValueError(name)


CLASSES = ("normal", "wide_exp30", "uniform01", "positive_rows_cols", "cancellation", "row_col_scaled",
           "near_overflow", "near_underflow", "nan_inf")


def accuracy(args) -> None:
    import cupy as cp
    import torch

    rng = cp.random.default_rng(34034)
    size = args.size
    tiny = 2.0**-22
    worst = 0.0
    for k in args.ks:
        for name in CLASSES:
            a, b = make_class(rng, name, size, size, k)
            with np.errstate(all="ignore"):
                ref64 = a.astype(cp.float64) @ b.astype(cp.float64)
                ref32 = ref64.astype(cp.float32)
            torch.backends.cuda.matmul.allow_tf32 = False
            ta, tb = torch.as_tensor(a, device="cuda"), torch.as_tensor(b, device="cuda")
            sgemm = cp.asarray(ta @ tb)
            torch.backends.cuda.matmul.allow_tf32 = True
            tf32_cublas = cp.asarray(ta @ tb)
            torch.backends.cuda.matmul.allow_tf32 = False
            outs = {"sgemm": sgemm, "cublas_tf32": tf32_cublas}
            for variant in args.variants:
                outs[variant] = run(a, b, *VARIANTS[variant])[0].copy()
            cp.cuda.runtime.deviceSynchronize()
            finite = cp.isfinite(ref32)
            errs, pattern = {}, {}
            for key, out in outs.items():
                # Special values: NaN / Inf / zero exactly where float64-then-rounded has them.
                pattern[key] = int((cp.isnan(out) != cp.isnan(ref32)).sum() + (cp.isinf(out) != cp.isinf(ref32)).sum()
                                   + ((out == 0) != (ref32 == 0)).sum())
                sel = finite & cp.isfinite(out)
                if bool(sel.any()):
                    scale = cp.abs(a.astype(cp.float64)) @ cp.abs(b.astype(cp.float64))
                    e = cp.where(sel, cp.abs(out.astype(cp.float64) - ref64) / scale, 0)
                    errs[key] = float(cp.nanmax(e))
                else:
                    errs[key] = 0.0
            base = max(errs["sgemm"], tiny)
            for key in (*args.variants, "cublas_tf32"):
                emit(dict(suite="accuracy", dtype="float32", path=RUNG if key in VARIANTS else "cublas", variant=key,
                          precision=VARIANTS[key][0] if key in VARIANTS else "tf32", data=name, k=k, m=size, n=size,
                          error=errs[key],
                          sgemm_error=errs["sgemm"], ratio_to_sgemm=errs[key] / base, special_mismatch=pattern[key],
                          sgemm_special_mismatch=pattern["sgemm"]), args.json)
            worst = max([worst] + [errs[v] / base for v in args.variants if VARIANTS[v][0] == "tf32x3"])
            cols = " | ".join(f"{key} {errs[key]:.2e} ({errs[key] / base:6.2f}x, special {pattern[key]})"
                              for key in (*args.variants, "cublas_tf32"))
            print(f"acc K={k:6d} {name:19} sgemm {errs['sgemm']:.2e} (special {pattern['sgemm']}) | {cols}", flush=True)
            del a, b, ref64, ref32, outs
    print(f"accuracy: worst tf32x3 ratio to SGEMM {worst:.2f} ({', '.join(args.variants)})")


# ---------------------------------------------------------------------------------------
def _median_ms(fn, reps: int) -> float:
    import cupy as cp

    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop))
    return float(np.median(times))


def speed(args) -> None:
    import cupy as cp
    import torch

    rng = cp.random.default_rng(5)
    if args.wait:  # compile every variant first, then time once the named processes have ended
        small = rng.standard_normal((64, 64), dtype=cp.float32)
        for name in args.variants:
            run(small, small, *VARIANTS[name], "rrr")
        cp.cuda.runtime.deviceSynchronize()
        while any(_alive(pid) for pid in args.wait):
            time.sleep(1)
    for size in args.sizes:
        a = rng.standard_normal((size, size), dtype=cp.float32)
        b = rng.standard_normal((size, size), dtype=cp.float32)
        flop = 2.0 * size**3
        ta, tb = torch.as_tensor(a, device="cuda"), torch.as_tensor(b, device="cuda")
        res = {}

        def torch_mm(tf32):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            return lambda: torch.mm(ta, tb)

        res["cublas_sgemm"] = _median_ms(lambda: cp.matmul(a, b), args.reps)
        res["cublas_tf32"] = _median_ms(torch_mm(True), args.reps)
        torch.backends.cuda.matmul.allow_tf32 = False
        d = cp.full(size * size, cp.nan, cp.float32)
        for name in args.variants:
            tile, over = VARIANTS[name]
            _, (compiled, kargs, rest) = run(a, b, tile, over, "rrr", d=d)
            res[name] = _median_ms(lambda: compiled.launch(0, *kargs, *rest), args.reps)
            err = rel_error(d.reshape(size, size), a, b)
            print(f"  {name} error at {size}^3: {err:.2e}", flush=True)
        import dxgemm

        d2 = cp.full((size, size), cp.nan, cp.float32)
        calls = args.calls or (["pipeline_tf32", "pipeline_3xtf32"] if args.pipeline else [])
        for name, kw in ((c, PIPELINE_PATHS[c]) for c in calls):
            dxgemm.gemm(a, b, d2, **kw)  # load (or build) the kernel outside the timing
            res[name] = _median_ms(lambda: dxgemm.gemm(a, b, d2, **kw), args.reps)
            print(f"  {name} error at {size}^3: {rel_error(d2, a, b):.2e}", flush=True)
        res["cublas_sgemm_again"] = _median_ms(lambda: cp.matmul(a, b), args.reps)
        sg = min(res["cublas_sgemm"], res["cublas_sgemm_again"])
        tf = res["cublas_tf32"]
        for name, ms in res.items():
            tflops = flop / ms / 1e9
            call = PIPELINE_PATHS.get(name, {})
            path = (RUNG if name in VARIANTS else "call:" + call.get("backend", "auto") if name in PIPELINE_PATHS
                    else "cublas")
            default = "pipeline_3xtf32" if call.get("backend") == "pipeline" else "tf32x3"
            precision = (VARIANTS[name][0] if name in VARIANTS else
                         call.get("precision", default) if name in PIPELINE_PATHS else name)
            emit(dict(suite="speed", dtype="float32", path=path, variant=name,
                      precision=precision, m=size, n=size, k=size, ms=ms,
                      tflops=tflops, vs_sgemm=sg / ms, vs_cublas_tf32=tf / ms), args.json)
            print(f"speed {size}^3 {name:20} {ms:8.3f} ms {tflops:7.1f} TFLOP/s  {sg / ms:5.2f}x SGEMM  "
                  f"{tf / ms:5.2f}x cuBLAS TF32", flush=True)
        del a, b, d, ta, tb


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


# ---------------------------------------------------------------------------------------
def peak(args) -> None:
    """mma.sync m16n8k8 TF32 from registers: 8 independent chains a warp, 8 warps a block."""
    import cupy as cp
    from numba import cuda, float32

    from dxgemm.kernels.tf32mma import mma_tf32

    ITERS, CHAINS = 2048, 8

    @cuda.jit("void(float32[:], int64)")
    def mma_loop(out, iters):
        lane = cuda.threadIdx.x % 32
        x = float32(lane) * float32(0.001)
        acc = cuda.local.array((CHAINS, 4), float32)
        for c in range(CHAINS):
            for v in range(4):
                acc[c, v] = float32(0)
        for _ in range(iters):
            for c in range(CHAINS):
                r = mma_tf32((x, x, x, x), (x, x), (acc[c, 0], acc[c, 1], acc[c, 2], acc[c, 3]))
                acc[c, 0], acc[c, 1], acc[c, 2], acc[c, 3] = r
        s = float32(0)
        for c in range(CHAINS):
            for v in range(4):
                s += acc[c, v]
        out[cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x] = s

    sms = cuda.get_current_device().MULTIPROCESSOR_COUNT
    for blocks_per_sm, threads in ((1, 256), (2, 256), (4, 256)):
        blocks = sms * blocks_per_sm
        out = cuda.device_array(blocks * threads, np.float32)
        mma_loop[blocks, threads](out, 16)
        cuda.synchronize()
        ms = _median_ms(lambda: mma_loop[blocks, threads](out, ITERS), 5)
        flop = blocks * (threads // 32) * ITERS * CHAINS * 2 * 16 * 8 * 8
        tflops = flop / ms / 1e9
        emit(dict(suite="mma_peak", shape="m16n8k8.tf32", warps_per_sm=blocks_per_sm * threads // 32,
                  chains=CHAINS, tflops=tflops), args.json)
        print(f"peak mma.sync m16n8k8 tf32, {blocks_per_sm * threads // 32} warps/SM x {CHAINS} chains: "
              f"{tflops:.1f} TFLOP/s", flush=True)
    _ = cp


# ---------------------------------------------------------------------------------------
def resources(args) -> None:
    """Registers, stack and spills of each variant and layout for each ``--cc`` (ptxas -v), no GPU."""
    from numba import cuda, typeof

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    from resources import _pretend_sm90

    from dxgemm.epilogues._base import AlphaBeta, EpilogueContext
    from dxgemm.kernels import KernelSpec, Layout, kernel_signature
    from dxgemm.kernels import tf32mma

    _pretend_sm90()
    dtype = np.dtype(np.float32)
    bound = AlphaBeta(1.0, 0.0).bind(EpilogueContext(1, 1, dtype, adapt=None))
    sig = kernel_signature(dtype, typeof(bound.args)).args
    for (cc, name) in ((cc, name) for cc in args.cc for name in args.variants):
        tile, over = VARIANTS[name]
        for layouts in args.layouts:
            la, lb, ld = (Layout.ROW if x == "r" else Layout.COL for x in layouts)
            spec = KernelSpec(dtype, la, lb, ld, bound.key, bound.make(), tile=tile)
            built = tf32mma.build(spec, **over)
            bounds = (built.block[0], built.min_blocks) if built.min_blocks else built.block[0]
            ptx, _ = cuda.compile_ptx(built.pyfunc, sig, cc=(cc // 10, cc % 10), launch_bounds=bounds)
            with tempfile.TemporaryDirectory() as tmp:
                src = Path(tmp) / "k.ptx"
                # NVVM may stamp a newer PTX ISA than the toolkit's ptxas; .satfinite needs 8.1.
                src.write_text(re.sub(r"^\.version \d+\.\d+", ".version 8.1", ptx, flags=re.M))
                info = subprocess.run(["ptxas", "-v", f"-arch=sm_{cc}", "-O3", str(src), "-o", str(Path(tmp) / "k.o")],
                                      capture_output=True, text=True, check=True).stderr
            regs = int(re.search(r"Used (\d+) registers", info).group(1))
            stack, spill_st, spill_ld = map(int, re.search(
                r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", info).groups())
            rec = dict(suite="resources", cc=cc, variant=name, layouts=layouts, regs=regs, stack=stack,
                       spill_st=spill_st, spill_ld=spill_ld, smem=built.dynamic_smem, mma=ptx.count("mma.sync"))
            emit(rec, args.json)
            print(f"resources sm_{cc} {name:16} {layouts}: {regs} registers, stack {stack}, spills "
                  f"{spill_st}/{spill_ld} bytes, {built.dynamic_smem} B shared, {rec['mma']} mma.sync in the PTX",
                  flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("check", "accuracy", "speed", "peak", "resources"))
    parser.add_argument("--json", help="append JSON records to this file")
    parser.add_argument("--variants", default="tf32x3,tf32", type=lambda s: s.split(","))
    parser.add_argument("--sizes", default="4096,8192", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--ks", default="256,4096,16384,65536", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--size", type=int, default=256, help="m = n of the accuracy runs")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--pipeline", action="store_true", help="speed: also whole dxgemm.gemm calls on the "
                        "cuBLASDx pipeline, one TF32 pass and its single-accumulator 3xTF32")
    parser.add_argument("--calls", default=[], type=lambda s: [x for x in s.split(",") if x],
                        help="speed: whole dxgemm.gemm calls to time too, from PIPELINE_PATHS (auto, call_tf32wgmma, ...)")
    parser.add_argument("--layouts", default="rrr,ccc", type=lambda s: s.split(","),
                        help="resources: layouts of A, B, D to build (r / c each)")
    parser.add_argument("--cc", default="90", type=lambda s: [int(x) for x in s.split(",")],
                        help="resources: compute capabilities to build for, e.g. 80,89,90")
    parser.add_argument("--quick", action="store_true", help="check: three layouts of A, B, D, not six")
    parser.add_argument("--rung", default="tf32mma", choices=("tf32mma", "tf32wgmma"),
                        help="the TF32 rung to run: tf32mma (mma.sync, sm_80+) or tf32wgmma (wgmma, sm_90a)")
    parser.add_argument("--wait", default=[], type=lambda s: [int(x) for x in s.split(",") if x],
                        help="speed: time only after these process ids have ended")
    args = parser.parse_args()
    if args.rung == "tf32wgmma":
        global RUNG
        RUNG = "tf32wgmma"
        VARIANTS.clear()
        VARIANTS.update(WG_VARIANTS)
    globals()[args.what](args)


if __name__ == "__main__":
    main()
