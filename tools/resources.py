"""Static resource report of every rung, compiled for sm_90 without a GPU.

For each rung and dtype: registers per thread, spill/local-memory bytes and the share of
FMA instructions in the SASS, read from ptxas/nvdisasm (CUDA toolkit on PATH).  This is
the evidence the kernel docstrings cite.

    python tools/resources.py [--rungs warptile,vectorized] [--sass-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from numba import cuda, typeof

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dxgemm.epilogues._base import AlphaBeta, EpilogueContext  # noqa: E402
from dxgemm.kernels import RUNGS, KernelSpec, Layout, kernel_signature  # noqa: E402


def _pretend_sm90() -> None:
    """Device functions ask the current device for its compute capability; answer 9.0."""
    import numba.cuda.dispatcher as dispatcher

    class _Sm90:
        compute_capability = (9, 0)

    dispatcher.get_current_device = lambda: _Sm90()
    cuda.get_current_device = lambda: _Sm90()


def compile_rung(rung: str, dtype: np.dtype, layout: Layout = Layout.ROW):
    import importlib

    bound = AlphaBeta(1.0, 0.0).bind(EpilogueContext(1, 1, dtype, adapt=None))
    spec = KernelSpec(dtype, layout, layout, layout, bound.key, bound.make())
    built = importlib.import_module(f"dxgemm.kernels.{rung}").build(spec)
    sig = kernel_signature(dtype, typeof(bound.args)).args
    threads = int(np.prod(built.block))
    ptx, _ = cuda.compile_ptx(built.pyfunc, sig, cc=(9, 0), launch_bounds=threads)
    return ptx


def report(ptx: str, sass_dir: Path | None, tag: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        # NVVM from the pip toolkit may stamp a newer PTX ISA than the system ptxas knows;
        # these kernels use nothing newer than ISA 8.0.
        src.write_text(re.sub(r"^\.version \d+\.\d+", ".version 8.0", ptx, flags=re.M))
        cubin = Path(tmp) / "k.cubin"
        res = subprocess.run(["ptxas", "-v", "-arch=sm_90", "-O3", str(src), "-o", str(cubin)],
                             capture_output=True, text=True, check=True)
        info = res.stderr
        regs = int(re.search(r"Used (\d+) registers", info).group(1))
        stack = int(re.search(r"(\d+) bytes stack frame", info).group(1))
        spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", info)
        sass = subprocess.run(["nvdisasm", "-c", str(cubin)], capture_output=True, text=True, check=True).stdout
    if sass_dir:
        sass_dir.mkdir(parents=True, exist_ok=True)
        (sass_dir / f"{tag}.sass").write_text(sass)
    ops = re.findall(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(?:\.[A-Z0-9_.]+)?", sass, re.M)
    total = max(len(ops), 1)
    fma = sum(op in ("FFMA", "DFMA") for op in ops)
    return {
        "regs": regs, "stack": stack,
        "spill_st": int(spill.group(1)), "spill_ld": int(spill.group(2)),
        "fma_share": fma / total, "lds128": len(re.findall(r"LDS\.128", sass)),
        "ldg128": len(re.findall(r"LDG\.E\.128", sass)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rungs", default=",".join(RUNGS))
    parser.add_argument("--sass-dir", type=Path)
    args = parser.parse_args()
    _pretend_sm90()
    print(f"{'rung':12} {'dtype':8} {'regs':>5} {'stack':>6} {'spill':>6} {'FMA%':>6} {'LDS128':>7} {'LDG128':>7}")
    for rung in args.rungs.split(","):
        for dtype in (np.dtype(np.float32), np.dtype(np.float64)):
            r = report(compile_rung(rung, dtype), args.sass_dir, f"{rung}_{dtype.name}")
            print(f"{rung:12} {dtype.name:8} {r['regs']:5d} {r['stack']:6d} {r['spill_st'] + r['spill_ld']:6d} "
                  f"{100 * r['fma_share']:5.1f}% {r['lds128']:7d} {r['ldg128']:7d}", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")
    main()
