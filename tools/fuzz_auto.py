"""Random ``dxgemm.gemm`` calls under Numba's CUDA simulator, each checked against float64.

The unit tests pin the paths they name; this draws calls the way users make them and lets
``auto`` choose: shapes around every threshold the policy has (sides 1-129 and K up to 513,
and deep K 2047-4100 on thin outputs, where calls split over K), both dtypes, A row- or
column-major or strided, B row- or column-major, C in either order with alpha and beta (a
NaN-filled output where beta is 0, which must not leak), no epilogue, ``relu`` or
``bias | gelu``, and normal, same-sign or wide-exponent data.  Draws above 3e5
multiply-adds are skipped (the simulator runs a thread at a time).  Plain calls are judged
by :func:`dxgemm.testing.check`'s bound; fused ones by the product's bound carried through
the activation.  Prints each failure and a count; exit status 1 on any.

    python tools/fuzz_auto.py SEED CALLS                               # the default split-K sum
    DXGEMM_SPLIT_REDUCE=serial python tools/fuzz_auto.py SEED CALLS     # the serial one
"""

from __future__ import annotations

import math
import os
import sys
import time

os.environ["NUMBA_ENABLE_CUDASIM"] = "1"

import numpy as np  # noqa: E402
from numba import cuda  # noqa: E402

import dxgemm  # noqa: E402
from dxgemm.epilogues import bias, gelu, relu  # noqa: E402
from dxgemm.testing.accuracy import check  # noqa: E402

SIDES = [1, 2, 15, 16, 17, 31, 33, 63, 64, 65, 127, 129]
KS = [1, 3, 8, 16, 63, 64, 65, 200, 513]
DEEP = [2047, 2048, 2049, 4100]
MAX_MACS = 3e5


def place(x: np.ndarray, order: str):
    return cuda.to_device(np.asfortranarray(x) if order == "F" else np.ascontiguousarray(x))


def draw(rng: np.random.Generator):
    """One call's description, or None for a draw too large for the simulator."""
    dt = np.dtype(str(rng.choice(["float32", "float64"])))
    if rng.random() < 0.3:  # a thin output at deep K: the split-K paths
        m, n = int(rng.choice([1, 2, 5, 16, 17])), int(rng.choice([1, 3, 16, 17, 33]))
        if rng.random() < 0.5:
            m, n = n, m
        k = int(rng.choice(DEEP))
    else:
        m, n, k = int(rng.choice(SIDES)), int(rng.choice(SIDES)), int(rng.choice(KS))
    if m * n * k > MAX_MACS:
        return None
    return dict(dtype=dt, m=m, n=n, k=k, data=str(rng.choice(["normal", "same_sign", "wide"])),
                layout=str(rng.choice(["row", "col", "mixed", "strided"])), alpha=float(rng.choice([1.0, 0.5, -2.0])),
                beta=float(rng.choice([0.0, 0.0, 1.0, -0.75])), c_order=str(rng.choice(["C", "F"])),
                epilogue=str(rng.choice(["none", "bias_gelu", "relu"])))


def operands(rng: np.random.Generator, call: dict):
    m, n, k, dt = call["m"], call["n"], call["k"], call["dtype"]
    if call["data"] == "normal":
        a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    elif call["data"] == "same_sign":
        a, b = rng.random((m, k)), rng.random((k, n))
    else:
        a = rng.standard_normal((m, k)) * 2.0 ** rng.integers(-20, 20, (m, k))
        b = rng.standard_normal((k, n)) * 2.0 ** rng.integers(-20, 20, (k, n))
    a, b = a.astype(dt), b.astype(dt)
    layout = call["layout"]
    if layout == "strided":  # every other column of a wider array
        wide = np.zeros((m, 2 * k), dt)
        wide[:, ::2] = a
        da, db = cuda.to_device(wide)[:, ::2], place(b, "C")
    else:
        da = place(a, "F" if layout in ("col", "mixed") else "C")
        db = place(b, "F" if layout == "col" else "C")
    return a, b, da, db


def run(rng: np.random.Generator, call: dict) -> None:
    """Make the call and raise AssertionError if its result is outside the bound."""
    dt, m, n, k = call["dtype"], call["m"], call["n"], call["k"]
    a, b, da, db = operands(rng, call)
    alpha, beta = call["alpha"], call["beta"]
    c0 = rng.standard_normal((m, n)).astype(dt)
    dc = place(c0 if beta != 0 else np.full((m, n), np.nan, dt), call["c_order"])
    v = rng.standard_normal(n).astype(dt)
    epi = {"none": None, "relu": relu(), "bias_gelu": bias(cuda.to_device(v)) | gelu()}[call["epilogue"]]
    dxgemm.gemm(da, db, dc, alpha=alpha, beta=beta, epilogue=epi)
    got = dc.copy_to_host().astype(np.float64)
    a64, b64, c64 = a.astype(np.float64), b.astype(np.float64), c0.astype(np.float64)
    if epi is None:
        ratio = check(got, a64, b64, dt, alpha=alpha, beta=beta, c=c64 if beta else None,
                      split=3 if dt == np.float32 else 1)
        if not ratio <= 1:
            raise AssertionError(f"error / bound {ratio:.3g}")
        return
    x = alpha * (a64 @ b64) + (beta * c64 if beta else 0.0)
    magnitude = abs(alpha) * (np.abs(a64) @ np.abs(b64)) + (abs(beta) * np.abs(c64) if beta else 0.0)
    if call["epilogue"] == "relu":
        ref = np.maximum(x, 0.0)
    else:
        x, magnitude = x + v, magnitude + np.abs(v)
        ref = 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    eps = float(np.finfo(dt).eps)
    # the product's worst-case bound (3xTF32 counts three products a step), carried through an
    # activation whose slope is at most 1.13, plus the activation's own few roundings
    bound = 1.13 * (3 if dt == np.float32 else 1) * (k + 4) * eps * magnitude + 64 * eps * np.abs(ref)
    bound = np.maximum(bound, float(np.finfo(dt).tiny) * (k + 2))
    if not (np.isfinite(got).all() and np.all(np.abs(got - ref) <= bound)):
        raise AssertionError(f"max error / bound {np.nanmax(np.abs(got - ref) / bound):.3g}")


def main(argv: list[str]) -> int:
    seed, calls = int(argv[1]), int(argv[2])
    rng = np.random.default_rng(seed)
    made = failed = 0
    t0 = time.perf_counter()
    for i in range(calls):
        call = draw(rng)
        if call is None:
            continue
        made += 1
        try:
            run(rng, call)
        except Exception as e:  # noqa: BLE001 - report every failure, go on
            failed += 1
            desc = " ".join(f"{key}={value}" for key, value in call.items())
            print(f"FAIL #{i} {desc}: {type(e).__name__}: {str(e)[:300]}", flush=True)
    split = os.environ.get("DXGEMM_SPLIT_REDUCE", "separate")
    print(f"seed {seed}: {made} calls ({split} split-K sum), {failed} failed, {time.perf_counter() - t0:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
