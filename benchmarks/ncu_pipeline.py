"""One pipeline GEMM per dtype, for profiling under Nsight Compute.

    ncu -k regex:gemm_pyfunc --section WarpStateStats ... python benchmarks/ncu_pipeline.py float64
    ncu ... --launch-skip 1 --launch-count 1 ... python benchmarks/ncu_pipeline.py float32 \\
        --shape 4096x4096x256 --epilogue bias --repeat 2

By default 4096^3 on the large configuration with no epilogue, launched once; ``--shape``
takes the configuration ``suggest`` gives, ``--epilogue`` is ``none``, ``bias``, ``gelu`` or
``bias|gelu`` (fusion.py's operands and bias), ``--repeat`` launches it more than once (skip
the first under the profiler).  The kernels must be in the cache (``DXGEMM_CACHE_DIR``): a
compile under the profiler would take minutes.  float32 runs the 3xTF32 method (its split
kernel is not profiled with the regex above).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cupy  # noqa: E402

import dxgemm  # noqa: E402
from dxgemm import epilogues as E  # noqa: E402
from dxgemm.pipelines import use_config  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("dtypes", nargs="*", default=["float64", "float32"])
parser.add_argument("--shape", help="MxNxK (default 4096^3 on the large configuration)")
parser.add_argument("--epilogue", choices=["none", "bias", "gelu", "bias|gelu"], default="none")
parser.add_argument("--repeat", type=int, default=1)
args = parser.parse_args()

for name in args.dtypes:
    if args.shape:
        from fusion import operands

        a, b, v = operands(tuple(int(x) for x in args.shape.split("x")), name)
        config = contextlib.nullcontext()
    else:
        a = cupy.random.default_rng(0).standard_normal((4096, 4096)).astype(name)
        b = cupy.random.default_rng(1).standard_normal((4096, 4096)).astype(name)
        v = cupy.random.default_rng(2).standard_normal(4096).astype(name)
        config = use_config("large")
    epilogue = {"none": None, "bias": E.bias(v), "gelu": E.gelu(), "bias|gelu": E.bias(v) | E.gelu()}[args.epilogue]
    with config:
        for _ in range(args.repeat):
            dxgemm.gemm(a, b, epilogue=epilogue, backend="pipeline")
    cupy.cuda.Device().synchronize()
