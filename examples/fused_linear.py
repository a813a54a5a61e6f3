"""A dense layer's forward pass, ``gelu(x @ W + b)``, as one kernel.

The usual way runs a cuBLAS GEMM, writes the (batch, out) pre-activation to memory, and
reads it back in a second, elementwise kernel for the bias and the GELU.  Here bias and
GELU are an epilogue: they run on the accumulator in registers, before the kernel's only
store.  The result is checked against a float64 reference with dxgemm's accuracy rule,
and compared with the unfused CuPy computation and with PyTorch when it is installed.

    python examples/fused_linear.py [BATCH IN OUT]

Without a GPU it runs at a small size under Numba's CUDA simulator.
"""

import math
import os
import subprocess
import sys

import numpy as np


def main(batch: int, d_in: int, d_out: int) -> int:
    import dxgemm
    from dxgemm.epilogues import bias, gelu
    from dxgemm.epilogues.reference import check

    simulated = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
    if simulated:  # NumPy data in simulated device arrays
        from numba import cuda

        xp, to_device = np, cuda.to_device
    else:
        import cupy as xp

        to_device = xp.asarray
    rng = xp.random.default_rng(0)
    x = rng.standard_normal((batch, d_in), dtype=np.float32)
    w = rng.standard_normal((d_in, d_out), dtype=np.float32) / math.sqrt(d_in)
    b = rng.standard_normal(d_out, dtype=np.float32)

    layer = bias(to_device(b)) | gelu()
    y = dxgemm.gemm(to_device(x), to_device(w), epilogue=layer)  # one kernel
    if simulated:
        y = y.copy_to_host()

    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    rows = [("dxgemm, fused", y)]
    if not simulated:
        from cupyx.scipy.special import erf

        h = x @ w + b  # cuBLAS, then elementwise kernels
        rows.append(("CuPy, unfused", 0.5 * h * (1 + erf(h / np.float32(math.sqrt(2))))))
        try:
            import torch
        except ImportError:
            print("(PyTorch not installed: skipping its comparison)")
        else:
            xt, wt, bt = (torch.as_tensor(t, device="cuda") for t in (x, w, b))
            rows.append(("PyTorch", xp.asarray(torch.nn.functional.gelu(xt @ wt + bt))))

    print(f"gelu(x @ W + b), float32, x {batch}x{d_in}, W {d_in}x{d_out}" + (" (simulated)" if simulated else ""))
    print(f"{'computed by':16} {'error / bound':>14} {'max |diff| to dxgemm':>22}")
    for label, result in rows:
        ratio = check(result, layer, x64, w64, np.dtype(np.float32))
        diff = float(abs(result.astype(np.float64) - y.astype(np.float64)).max())
        print(f"{label:16} {ratio:14.3f} {diff:22.3g}")
    worst = check(y, layer, x64, w64, np.dtype(np.float32))
    print("dxgemm is within the float32 bound" if worst <= 1 else "dxgemm EXCEEDS the float32 bound")
    return 0 if worst <= 1 else 1


if __name__ == "__main__":
    sizes = [int(s) for s in sys.argv[1:4]] or [4096, 1024, 4096]
    from numba import cuda

    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1" and not cuda.is_available():
        print("No CUDA GPU found: running at a small size under Numba's CUDA simulator.", flush=True)
        small = [str(min(s, cap)) for s, cap in zip(sizes, (24, 40, 33))]
        sys.exit(subprocess.call([sys.executable, __file__, *small], env=dict(os.environ, NUMBA_ENABLE_CUDASIM="1")))
    sys.exit(main(*sizes))
