"""Command line: ``python -m dxgemm {demo,bench,info,cache,warmup}``.

``info`` also shows the kernel cache (place, entries, size: the pipeline's kernels and the
handwritten rungs' cubins, :mod:`dxgemm.runtime.rungs`); ``cache clear`` empties it; ``warmup`` pre-compiles
into it what a plain call runs: the pipeline's default configurations and the handwritten
kernels ``auto`` picks from (on a machine without a GPU too, for an H100).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np


def _has_gpu() -> bool:
    from .runtime import env

    if env.simulator_requested():
        return False
    from numba import cuda

    try:
        return bool(cuda.is_available())
    except Exception:
        return False


def _parse_shapes(text: str) -> list[tuple[int, int, int]]:
    shapes = []
    for item in text.split(","):
        parts = [int(p) for p in item.lower().split("x")]
        if len(parts) == 1:
            parts = parts * 3
        if len(parts) != 3 or min(parts) < 1:
            raise argparse.ArgumentTypeError(f"size {item!r} must be N or MxNxK with positive integers")
        shapes.append(tuple(parts))
    return shapes


def cmd_info(args: argparse.Namespace) -> int:
    from . import _info
    from .runtime import env

    try:
        stand_in = env.device_as()
    except ValueError as e:
        print(f"info: {e}", file=sys.stderr)
        return 2
    gpu = _info.gpu()
    if gpu:
        print(f"GPU: {gpu['name']}  compute capability {gpu['compute_capability']}  {gpu['sm_count']} SMs")
    else:
        print("GPU: none found (CPU-only machine; kernels can still run under NUMBA_ENABLE_CUDASIM=1)")
    if stand_in is not None:
        print(f"  decisions as on the {stand_in.name} (DXGEMM_DEVICE_AS, for testing): compute capability "
              f"{stand_in.cc[0]}.{stand_in.cc[1]}, {stand_in.sm_count} SMs; kernels still built for this GPU")
    for name, version in _info.versions().items():
        print(f"  {name:24} {version or '-'}")
    from .pipelines.cache import compiler_mismatch, slower_toolchain, toolchain_versions
    from .pipelines.config import SIMT_FLOAT32_MAX_SIDE, float32_method

    compilers = toolchain_versions()
    print(f"pipeline compilers: NVRTC {compilers['nvrtc'] or '-'}, nvJitLink {compilers['nvjitlink'] or '-'}")
    mismatch = compiler_mismatch(compilers)
    if mismatch:
        print(f"  WARNING: {mismatch}")
    elif note := slower_toolchain(compilers):
        print(f"  note: {note}")
    print("float32 precision (auto): 'tf32x3' by default on tf32mma (float32 accuracy, TF32 tensor cores), "
          "'tf32' one TF32 pass, 'ieee' SIMT FMA")
    method = f"{float32_method()}; fp32 (SIMT) where the output has a side of at most {SIMT_FLOAT32_MAX_SIDE}"
    print(f"pipeline float32 method (backend='pipeline'): {method}")
    print("support: what auto runs on each target (derived from the policy), whether the cuBLASDx pipeline "
          "exists for it, and whether it is measured here or only built (tools/build_targets.py):")
    print(_info.support_markdown())
    _print_cache(verbose=getattr(args, "verbose", False))
    return 0


def _print_cache(verbose: bool = False) -> None:
    """The kernel cache: place, entries, size (and, verbose, one line per kernel)."""
    from .pipelines.cache import KernelCache
    from .pipelines.loader import outlined_accumulator_functions
    from .runtime import env

    cache = KernelCache()
    info = cache.info()
    print(f"kernel cache (pipeline and handwritten kernels): {info.place}")
    print(f"  entries {info.entries}, {info.size_bytes / 2**20:.1f} MiB"
          + (" (set DXGEMM_CACHE_DIR to move it)" if not env.cache_dir_set() else ""))
    lto = info.place / "lto"
    if lto.is_dir():
        files = list(lto.glob("*.ltoir"))
        print(f"  libmathdx LTO-IR objects {len(files)}, {sum(f.stat().st_size for f in files) / 2**20:.1f} MiB")
    if verbose:
        for entry in cache.entries():
            meta = entry.meta
            cfg = meta.get("config", {})
            name = meta.get("name") or (f"{cfg.get('tile_m')}x{cfg.get('tile_n')}x{cfg.get('tile_k')}"
                                        f"_t{cfg.get('block_size')}_d{cfg.get('depth')}")
            dtype = meta.get("dtype", "?") + ("/tf32" if meta.get("operands") == "tf32" else "")
            linker = meta.get("toolchain", {}).get("nvjitlink") or "?"
            outlined = outlined_accumulator_functions(entry)
            print(f"    {entry.key}  {dtype:12} {'/'.join(meta.get('arrangement', [])):20} {name:20} "
                  f"nvJitLink {linker:5} epilogue {entry.fields.get('epilogue')}"
                  + (f"  SLOW: {len(outlined)} cuBLASDx functions not inlined (rebuild it)" if outlined else ""))


def cmd_cache(args: argparse.Namespace) -> int:
    from .pipelines.cache import KernelCache

    cache = KernelCache()
    if args.action == "clear":
        removed = cache.clear()
        lto = cache.root / "lto"
        n_lto = 0
        if lto.is_dir():
            for f in lto.iterdir():
                try:
                    f.unlink()
                    n_lto += 1
                except OSError:
                    pass
        print(f"removed {removed} kernels and {n_lto} LTO-IR objects from {cache.root}")
    else:
        _print_cache(verbose=True)
    return 0


def cmd_warmup(args: argparse.Namespace) -> int:
    from .pipelines import _standin
    from .pipelines.config import TARGETS
    from .runtime.device import DEVICES, target_device

    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = sorted(set(kinds) - {"pipeline", "handwritten"})
    if unknown or not kinds:
        print(f"warmup: --kinds takes pipeline and/or handwritten, got {args.kinds!r}", file=sys.stderr)
        return 2
    targets = []
    for text in (args.cc or "").split(","):
        if not text.strip():
            continue
        try:
            cc = tuple(int(x) for x in text.strip().split("."))
            target_device(cc)
        except ValueError:
            known = ",".join(f"{a}.{b}" for a, b in sorted({d.cc for d in DEVICES.values()}))
            print(f"warmup: --cc takes compute capabilities among {known}, got {text.strip()!r}", file=sys.stderr)
            return 2
        targets.append(cc)
    if len(targets) > 1:  # the stand-in driver reports one compute capability a process: one process each
        worst = 0
        for cc in targets:
            argv = ["warmup", "--kinds", args.kinds, "--dtype", args.dtype, "--config", args.config,
                    "--arrangements", args.arrangements, "--split-k", args.split_k, "--cc", f"{cc[0]}.{cc[1]}"]
            argv += ["--jobs", str(args.jobs)] if args.jobs is not None else []
            argv += ["--backends", args.backends] if args.backends else []
            print(f"warmup: compute capability {cc[0]}.{cc[1]}", flush=True)
            worst = max(worst, subprocess.run([sys.executable, "-m", "dxgemm", *argv]).returncode)
        return worst
    cc = targets[0] if targets else None
    _standin.activate(cc or (9, 0))  # compiles without a GPU too (default: for an H100); a no-op with one
    if cc is not None and cc not in TARGETS and "pipeline" in kinds:
        print(f"warmup: no pipeline kernels for compute capability {cc[0]}.{cc[1]}: the pipeline is built for "
              f"{', '.join(f'{a}.{b}' for a, b in TARGETS)} only (sm_90a's wgmma and TMA; tools/build_pipeline_target.py "
              "tries one kernel for another target); building the handwritten kernels", flush=True)
        kinds = [k for k in kinds if k != "pipeline"]
        if not kinds:
            return 0
    from .pipelines.cache import compiler_mismatch, slower_toolchain
    from .runtime.warmup import ARRANGEMENT_PAIRS, warmup, warmup_rungs

    mismatch = compiler_mismatch()
    if mismatch and "pipeline" in kinds:
        print(f"warmup: not building: {mismatch}", file=sys.stderr)
        return 2
    if "pipeline" in kinds and (note := slower_toolchain()):
        print(f"warmup: note: {note}", file=sys.stderr)

    dtypes = [d.strip() for d in args.dtype.split(",") if d.strip()]
    configs = [c.strip() for c in args.config.split(",") if c.strip()]
    arrangements = ARRANGEMENT_PAIRS if args.arrangements == "all" else [
        tuple(x.split("/")) for x in args.arrangements.split(",")]
    bad = [a for a in arrangements if len(a) != 2 or set(a) - {"row_major", "col_major"}]
    if bad:
        print(f"warmup: --arrangements takes 'all' or A/B pairs of row_major and col_major, got {bad}",
              file=sys.stderr)
        return 2
    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:7.1f} s] {msg}", flush=True)

    records = []
    try:
        if "handwritten" in kinds:
            jobs = args.jobs if args.jobs is not None else min(os.cpu_count() or 1, 8)
            backends = [b.strip() for b in args.backends.split(",") if b.strip()] if args.backends else None
            records += warmup_rungs(dtypes, arrangements=arrangements, cc=cc, jobs=jobs, log=log, backends=backends)
        if "pipeline" in kinds:
            split = [] if args.split_k == "none" else [c.strip() for c in args.split_k.split(",") if c.strip()]
            records += warmup(dtypes, configs=configs, arrangements=arrangements, jobs=args.jobs or 1,
                              split_k_configs=split, log=log)
    except (TypeError, ValueError) as e:
        print(f"warmup: {e}", file=sys.stderr)
        return 2
    print(f"{len(records)} kernels ready in {time.perf_counter() - t0:.1f} s")
    _print_cache()
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from . import available_backends, gemm
    from .testing import check

    BACKENDS = available_backends()

    if not _has_gpu():
        from .runtime import env as dxenv

        if not dxenv.simulator_requested():
            print("No CUDA GPU found: running the ladder at a small size under Numba's CUDA simulator instead.",
                  flush=True)
            env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
            return subprocess.call([sys.executable, "-m", "dxgemm", "demo", "--size", str(min(args.size, 40))], env=env)
        from numba import cuda

        size = args.size
        rng = np.random.default_rng(0)
        print(f"{'backend':12} {'dtype':8} {'size':>5} {'correct':>8} {'seconds (simulated)':>20}")
        for dtype in (np.float32, np.float64):
            a = rng.standard_normal((size, size + 3)).astype(dtype)
            b = rng.standard_normal((size + 3, size - 1)).astype(dtype)
            for backend in BACKENDS:
                start = time.perf_counter()
                d = gemm(cuda.to_device(a), cuda.to_device(b), backend=backend).copy_to_host()
                ok = check(d, a.astype(np.float64), b.astype(np.float64), np.dtype(dtype)) <= 1
                print(f"{backend:12} {np.dtype(dtype).name:8} {size:5d} {str(ok):>8} {time.perf_counter() - start:20.2f}")
        return 0

    import cupy

    from .bench import time_ms

    n = args.size
    rng = cupy.random.default_rng(0)
    print(f"{'backend':12} {'dtype':8} {'size':>5} {'correct':>8} {'ms':>9} {'TFLOP/s':>8}")
    for dtype in (np.float32, np.float64):
        a = rng.standard_normal((n, n), dtype=np.float64).astype(dtype)
        b = rng.standard_normal((n, n), dtype=np.float64).astype(dtype)
        d = cupy.empty((n, n), dtype)
        for backend in list(BACKENDS) + ["cublas"]:
            if backend == "cublas":
                launch = lambda: cupy.matmul(a, b, out=d)  # noqa: E731
            else:
                launch = lambda: gemm(a, b, d, backend=backend)  # noqa: E731
            d.fill(np.nan)
            ms = time_ms(launch, warmup=1, reps=5)
            ok = check(d, a.astype(np.float64), b.astype(np.float64), np.dtype(dtype)) <= 1
            print(f"{backend:12} {np.dtype(dtype).name:8} {n:5d} {str(ok):>8} {ms:9.3f} {2 * n**3 / ms / 1e9:8.2f}",
                  flush=True)
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    if not _has_gpu():
        print("python -m dxgemm bench needs a CUDA GPU; none was found.", file=sys.stderr)
        return 2
    from . import BACKENDS, available_backends, bench

    backends = args.backends.split(",") if args.backends else list(available_backends())
    unknown = [b for b in backends if b not in BACKENDS and b != "auto"]
    if unknown:
        print(f"unknown backend(s) {unknown}; choose from auto, {', '.join(BACKENDS)}", file=sys.stderr)
        return 2
    dtypes = [np.dtype(d) for d in args.dtypes.split(",")]
    peaks = bench.measure_peaks(dtypes)
    records = bench.run(args.sizes, dtypes, backends, warmup=args.warmup, reps=args.reps, progress=not args.quiet)
    print(bench.table(records))
    print("peaks: " + ", ".join(f"{k}={v:.1f}" for k, v in peaks.items()))
    if args.json:
        bench.save(args.json, records, peaks)
        png = args.png or os.path.splitext(args.json)[0] + ".png"
        bench.plot(args.json, png)
        print(f"wrote {args.json} and {png}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dxgemm", description="Fused GEMM kernels for NVIDIA GPUs.")
    sub = parser.add_subparsers(dest="command", metavar="{info,cache,warmup,demo,bench}")
    p = sub.add_parser("info", help="GPU, compute capability, versions of the stack and the kernel cache")
    p.add_argument("-v", "--verbose", action="store_true", help="list every cached kernel")
    p.set_defaults(func=cmd_info)
    p = sub.add_parser("cache", help="show or clear the kernel cache")
    p.add_argument("action", choices=["show", "clear"], nargs="?", default="show",
                   help="show: list every cached kernel (the default); clear: remove them all")
    p.set_defaults(func=cmd_cache)
    p = sub.add_parser("warmup", help="pre-compile the kernels a plain call uses (progress bar; no GPU needed)")
    p.add_argument("--kinds", default="handwritten,pipeline",
                   help="comma-separated: handwritten (warptile's tiles, gemv, the split-K reduce), "
                        "pipeline (its default configurations)")
    p.add_argument("--dtype", default="float64,float32", help="comma-separated: float64, float32")
    p.add_argument("--config", default="large,small", help="comma-separated: large, small or e.g. 128x128x32_t256_d2")
    p.add_argument("--arrangements", default="all", help="'all' or e.g. row_major/row_major,col_major/row_major")
    p.add_argument("--split-k", default="small",
                   help="configurations whose split-K variant is built too (comma-separated, or 'none')")
    p.add_argument("--jobs", type=int, default=None,
                   help="kernels built at once (default: pipeline kernels one at a time, each spreading its "
                        "compiles over worker processes; handwritten kernels one per CPU core, at most 8)")
    p.add_argument("--cc", default=None,
                   help="compute capabilities to build for, e.g. 8.0,8.9,9.0,10.0,12.0 (default: this GPU's, or 9.0 "
                        "without one); without a GPU any of them, the pipeline for 9.0 only")
    p.add_argument("--backends", default=None,
                   help="handwritten kernels of these only, comma-separated among warptile, gemv, tf32mma, "
                        "tf32wgmma, splitk_reduce (default: every one a plain call may run)")
    p.set_defaults(func=cmd_warmup)
    p = sub.add_parser("demo", help="run every backend once, check it and time it")
    p.add_argument("--size", type=int, default=2048, help="square size on a GPU (default 2048)")
    p.set_defaults(func=cmd_demo)
    p = sub.add_parser("bench", help="time every backend against cuBLAS")
    p.add_argument("--sizes", type=_parse_shapes, default=_parse_shapes("1024,2048,4096"),
                   help="comma-separated N or MxNxK (default 1024,2048,4096)")
    p.add_argument("--dtypes", default="float32,float64", help="comma-separated: float32, float64 (default both)")
    p.add_argument("--backends", default=None, help="comma-separated subset of the backends, auto among them "
                                                    "(default: every backend that can run here)")
    p.add_argument("--reps", type=int, default=10, help="timed calls per point; the median is reported (default 10)")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls before the timed ones (default 2)")
    p.add_argument("--json", help="write the result file here (and a PNG plot beside it)")
    p.add_argument("--png", help="where to draw the plot (default: the JSON path with .png)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_bench)
    args = parser.parse_args(argv)
    if args.command is None:  # bare `python -m dxgemm`: say what it can do
        parser.print_help()
        return 0
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
