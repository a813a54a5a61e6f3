"""Your own epilogue: a Python function of the value, its row and column, and extra arrays.

``banded`` keeps the entries of ``A @ B`` within ``BAND`` of the diagonal and damps the
others by a factor looked up from their distance to it, ``decay[|row - col|]`` — the kind
of position-dependent rule (relative-position biases, masks) no fixed epilogue list has.
Numba compiles it into the GEMM kernel; ``decay`` is passed at run time, so a new table
reuses the compiled kernel.

Everything in a float32 epilogue should be float32: in Numba a bare literal such as
``0.5`` is float64, and so is float32 mixed with an integer index.  dxgemm warns
(``PrecisionWarning``) when a float32 custom epilogue computes in float64.

    python examples/custom_epilogue.py [M N K]

Without a GPU it runs at a small size under Numba's CUDA simulator.
"""

import os
import subprocess
import sys

import numpy as np

BAND = 2


def banded(x, row, col, decay):
    distance = abs(row - col)
    if distance <= BAND:
        return x
    return x * decay[distance]


def main(m: int, n: int, k: int) -> int:
    import dxgemm
    from dxgemm.epilogues import custom
    from dxgemm.epilogues.reference import check

    simulated = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
    if simulated:
        from numba import cuda

        to_device, to_host = cuda.to_device, lambda d: d.copy_to_host()
    else:
        import cupy

        to_device, to_host = cupy.asarray, cupy.asnumpy
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    decay = np.exp(-0.25 * np.arange(max(m, n))).astype(np.float32)  # decay[d] for distance d

    epilogue = custom(banded, to_device(decay))
    d = to_host(dxgemm.gemm(to_device(a), to_device(b), epilogue=epilogue))

    # The same rule written with NumPy, for comparison.
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    distance = np.abs(np.subtract.outer(np.arange(m), np.arange(n)))
    expected = np.where(distance <= BAND, a64 @ b64, (a64 @ b64) * decay[distance])
    # |decay| <= 1, so the epilogue never amplifies an error: its Lipschitz bound is 1.
    ratio = check(d, epilogue, a64, b64, np.dtype(np.float32), custom_lipschitz=1.0)
    print(f"custom epilogue 'banded' on a {m}x{n}x{k} float32 GEMM" + (" (simulated)" if simulated else ""))
    print(f"max |dxgemm - NumPy| = {np.abs(d - expected).max():.3g}, error / bound = {ratio:.3f}")
    return 0 if ratio <= 1 else 1


if __name__ == "__main__":
    sizes = [int(s) for s in sys.argv[1:4]] or [1024, 1024, 512]
    from numba import cuda

    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1" and not cuda.is_available():
        print("No CUDA GPU found: running at a small size under Numba's CUDA simulator.", flush=True)
        small = [str(min(s, cap)) for s, cap in zip(sizes, (19, 23, 13))]
        sys.exit(subprocess.call([sys.executable, __file__, *small], env=dict(os.environ, NUMBA_ENABLE_CUDASIM="1")))
    sys.exit(main(*sizes))
