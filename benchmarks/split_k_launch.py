"""Split-K launched as one grid against the first version's slices on forked streams (same run).

    . .whl/activate.sh && python benchmarks/split_k_launch.py [--dtypes float64,float32] [--slices 2,4,8]

``grid``: ``dxgemm.gemm`` as it is (``pipelines._splitk``: the split-K kernel variant, the
slices as the grid's z dimension, then the reduce).  ``streams``: the first version,
rebuilt here from the same parts — the plain kernel launched once per slice, slice ``s``
on its own stream after an event fork, an event join, then the same reduce.  Both write
the same workspace layout and are checked against the float64 reference.  GPU time is
the CUDA-event median of ``dxgemm.bench.time_ms``; host time is per call over 20
unsynchronised calls.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

import dxgemm  # noqa: E402
from dxgemm import _calls  # noqa: E402
from dxgemm.bench import time_ms  # noqa: E402
from dxgemm.epilogues.reference import check  # noqa: E402
from dxgemm.pipelines import suggest, use_config  # noqa: E402
from dxgemm.pipelines._launch import Matrix, _aligned_ld  # noqa: E402
from dxgemm.pipelines.config import slice_ranges, split_k  # noqa: E402

SHAPES = [(4096, 64, 4096), (4096, 128, 4096), (2048, 256, 8192), (1000, 1000, 1000), (1024, 1024, 1024)]


class StreamSlices:
    """The first split-K version: one plain-kernel launch per slice, on forked streams."""

    def __init__(self, call, device: int = 0):
        from cuda.bindings import driver

        from dxgemm.pipelines.kernels import get_kernel
        from dxgemm.pipelines.warmup import plain_epilogue

        split = call.kernel
        plain = plain_epilogue(np.dtype(split.meta["dtype"]))
        cfg = dxgemm.pipelines.config.PipelineConfig(**split.meta["config"])
        self.kernel = get_kernel(cfg, split.meta["dtype"], tuple(split.meta["arrangement"]), device=device,
                                 operands=split.meta.get("operands", "native"), epilogue_key=plain.key,
                                 make_epilogue=plain.make, epi_args=plain.args)
        self.call = call
        self.streams, self.done = [], []
        for _ in range(call.slices - 1):
            self.streams.append(driver.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING)[1])
            self.done.append(driver.cuEventCreate(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING)[1])
        self.start = driver.cuEventCreate(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING)[1]

    def __call__(self, a: Matrix, b: Matrix, d: Matrix, m: int, n: int, k: int, w: int, handle: int) -> None:
        from cuda.bindings import driver

        call, it = self.call, d.itemsize
        ranges = slice_ranges(k, call.slices, self.kernel.tile_k)
        ld_w = _aligned_ld(n, it)
        stride = ld_w * m
        main = self.kernel._stream(handle)[1]
        driver.cuEventRecord(self.start, main)
        for s, (k0, ks) in enumerate(ranges):
            a_s = Matrix(a.at(0, k0), m, ks, a.ld, a.arrangement, it)
            b_s = Matrix(b.at(k0, 0), ks, n, b.ld, b.arrangement, it)
            w_s = Matrix(w + s * stride * it, m, n, ld_w, "row_major", it)
            if s == 0:
                self.kernel(handle, a_s, b_s, w_s, m, n, ks, call.one)
                continue
            driver.cuStreamWaitEvent(self.streams[s - 1], self.start, 0)
            self.kernel(int(self.streams[s - 1]), a_s, b_s, w_s, m, n, ks, call.one)
            driver.cuEventRecord(self.done[s - 1], self.streams[s - 1])
        for s in range(1, len(ranges)):
            driver.cuStreamWaitEvent(main, self.done[s - 1], 0)
        stacked = Matrix(w, len(ranges) * m, n, ld_w, "row_major", it)
        call.reduce(stacked, Matrix(w, 1, 1, stride, "row_major", it), d, m, n, len(ranges), call.one, handle)


def host_us(fn, calls: int = 20) -> float:
    cp.cuda.get_current_stream().synchronize()
    started = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = (time.perf_counter() - started) / calls * 1e6
    cp.cuda.get_current_stream().synchronize()
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default="float64,float32")
    parser.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES))
    parser.add_argument("--slices", default="1,2,4,8")
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    print("== split-K launch: grid (one launch) vs streams (a launch per slice); ms, ratio = cuBLAS / dxgemm",
          flush=True)
    handle = cp.cuda.get_current_stream().ptr
    for dtype in (np.dtype(x) for x in args.dtypes.split(",")):
        for m, n, k in shapes:
            rng = cp.random.default_rng(0)
            a = rng.standard_normal((m, k), dtype=np.float64).astype(dtype)
            b = rng.standard_normal((k, n), dtype=np.float64).astype(dtype)
            d = cp.empty((m, n), dtype)
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            t_blas = time_ms(lambda: cp.matmul(a, b, out=d), warmup=3, reps=args.reps)
            cfg = suggest(m, n, k, dtype)
            os.environ.pop("DXGEMM_SPLIT_K", None)
            rule = split_k(m, n, k, cfg, dtype)
            print(f"  {dtype.name} {m}x{n}x{k} {cfg.name}  cuBLAS {t_blas:.4f} ms  (rule: S={rule})", flush=True)
            for s in (int(x) for x in args.slices.split(",")):
                os.environ["DXGEMM_SPLIT_K"] = str(s)
                if split_k(m, n, k, cfg, dtype) != s:
                    continue
                with use_config(cfg):
                    gemm = lambda: dxgemm.gemm(a, b, d, backend="pipeline")  # noqa: E731
                    d.fill(cp.nan)
                    gemm()
                    worst = check(d, None, a64, b64, dtype)
                    t = time_ms(gemm, warmup=3, reps=args.reps)
                    h = host_us(gemm)
                    line = f"    S={s}{'*' if s == rule else ' '} grid {t:.4f} ({t_blas / t:.2f}x, host {h:.0f} us, err/bound {worst:.2g})"
                    call = _calls.lookup(_calls.signature(a, b, d, 1.0, 0.0, None, "pipeline")).call
                    if s > 1 and not call.tf32x3:
                        streams = StreamSlices(call)
                        it = dtype.itemsize
                        work = cp.empty(s * _aligned_ld(n, it) * m, dtype)
                        ma, mb = Matrix(a.data.ptr, m, k, k, "row_major", it), Matrix(b.data.ptr, k, n, n, "row_major", it)
                        md = Matrix(d.data.ptr, m, n, n, "row_major", it)
                        old = lambda: streams(ma, mb, md, m, n, k, work.data.ptr, handle)  # noqa: E731
                        d.fill(cp.nan)
                        old()
                        worst_old = check(d, None, a64, b64, dtype)
                        t_old = time_ms(old, warmup=3, reps=args.reps)
                        h_old = host_us(old)
                        line += (f"   streams {t_old:.4f} ({t_blas / t_old:.2f}x, host {h_old:.0f} us, "
                                 f"err/bound {worst_old:.2g})")
                    print(line, flush=True)
            os.environ.pop("DXGEMM_SPLIT_K", None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
