#!/usr/bin/env python3
"""Try to build one cuBLASDx pipeline kernel for a compute capability the pipeline is not enabled for.

The pipeline runs on :data:`dxgemm.pipelines.config.TARGETS` only (sm_90a today).  This
builds one kernel for another target (default 10.0, sm_100a) on a machine without a GPU,
through the same build as ``python -m dxgemm warmup`` (:func:`dxgemm.pipelines._build.build`,
the stand-in driver reporting that compute capability), into a scratch cache, and writes
what happened: on success the cubin's size, each function's registers and local memory
(:func:`dxgemm.pipelines.elf.kernel_registers`) and the dynamic shared memory; on failure the exception and the end of its traceback.
Nothing here enables the pipeline on that target: that needs a run on such a GPU.

    python tools/build_pipeline_target.py [--cc 10.0] [--dtype float32] [--operands tf32]
        [--config small] [--out benchmarks/results/sm100_pipeline_build.txt]

Exit status 0 when the kernel built, 1 when it did not.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cc", default="10.0", help="compute capability to build for (default 10.0)")
    parser.add_argument("--dtype", default="float32", help="float32 or float64")
    parser.add_argument("--operands", default="tf32", help="native or tf32 (float32 on TF32 tensor cores)")
    parser.add_argument("--config", default="small", help="large, small or e.g. 128x128x32_t256_d3")
    parser.add_argument("--out", default=None, help="also write the result here")
    parser.add_argument("--keep", default=None, help="write the cubins (gemm.cubin, init.cubin) into this folder")
    args = parser.parse_args(argv)
    cc = tuple(int(x) for x in args.cc.split("."))

    from dxgemm.pipelines import _standin

    _standin.activate(cc)
    import numpy as np

    from dxgemm.pipelines import _build
    from dxgemm.pipelines.cache import toolchain_versions
    from dxgemm.pipelines.config import TARGETS, parse_config
    from dxgemm.pipelines.elf import kernel_frame_bytes, kernel_registers
    from dxgemm.pipelines.tf32x3 import ARRANGEMENT

    dtype = np.dtype(args.dtype)
    # "small" under TF32 operands: the 3xTF32 configurations (the one-pass kernels use the same ones)
    config = parse_config(args.config, dtype, None if args.operands == "tf32" else 1, None)
    arch = f"sm_{cc[0]}{cc[1]}{'a' if cc >= (9, 0) else ''}"
    lines = [f"# one cuBLASDx pipeline kernel built for compute capability {cc[0]}.{cc[1]} ({arch}) without a GPU",
             f"# command: python tools/build_pipeline_target.py --cc {args.cc} --dtype {args.dtype} "
             f"--operands {args.operands} --config {args.config}",
             f"# kernel: {config.name} {dtype.name} operands={args.operands} "
             f"A/B {'/'.join(ARRANGEMENT) if args.operands == 'tf32' else 'row_major/row_major'}",
             f"# pipeline targets enabled today: {', '.join(f'{a}.{b}' for a, b in TARGETS)}",
             f"# host: {platform.machine()} {os.cpu_count()} cores; compilers {toolchain_versions()}",
             f"# date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"]
    arrangement = ARRANGEMENT if args.operands == "tf32" else ("row_major", "row_major")
    t0 = time.perf_counter()
    progress: list[str] = []
    try:
        with tempfile.TemporaryDirectory(prefix="dxgemm-pipeline-target-") as lto:
            meta, blobs = _build.build(config, dtype, arrangement, cc=cc, operands=args.operands, lto_dir=lto,
                                       log=lambda m: (progress.append(m), print(m, flush=True)))
        ok = True
    except BaseException as e:  # noqa: BLE001 - what failed is the result
        ok = False
        tb = traceback.format_exception(type(e), e, e.__traceback__)
        lines.append(f"result: FAILED after {time.perf_counter() - t0:.0f} s: {type(e).__name__}: {e}")
        lines.append("# last build steps:")
        lines += [f"#   {m}" for m in progress[-8:]]
        lines.append("# traceback (end):")
        lines += ["#   " + s for s in "".join(tb).splitlines()[-40:]]
    if ok:
        gemm = blobs["gemm"]
        regs, frames = kernel_registers(gemm), kernel_frame_bytes(gemm)
        if args.keep:
            Path(args.keep).mkdir(parents=True, exist_ok=True)
            for name, blob in blobs.items():
                (Path(args.keep) / f"{name}.cubin").write_bytes(blob)
        lines.append(f"result: BUILT in {time.perf_counter() - t0:.0f} s")
        lines.append(f"gemm cubin: {len(gemm)} bytes, arch {meta['arch']}, entry {meta['gemm_entry']}")
        lines.append(f"dynamic shared memory {meta['dynamic_smem']} bytes, block {meta['block_dim']}, "
                     f"storage {meta['storage_bytes']} bytes")
        for name, r in sorted(regs.items()):
            lines.append(f"  registers {r:4}, local memory {frames.get(name, 0):5} bytes a thread: {name[:60]}...")
        lines.append(f"init cubin: {len(blobs['init'])} bytes; outlined cuBLASDx functions: {meta['outlined'] or 'none'}")
        lines.append(f"build times (s): {meta['build_times_s']}")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
