"""Random batched and grouped calls under Numba's CUDA simulator, each checked against float64.

``tools/fuzz_auto.py`` draws single GEMMs; this draws what a batch or a group can get wrong:
broadcast batch shapes (a missing dimension, extents of 1, an empty batch), every operand
arrangement (row, column, a strided view, a reversed batch dimension, transposed matrices),
per-entry biases of each accepted shape, a ``custom`` reading its ``batch`` index, a ``store``
target, and groups of 1-5 problems with zero sizes, single rows and columns among them, on
``auto`` and on named rungs.  Each case is called twice, the second a repeat call (the same
signature, new arrays and values).  Prints one line per call and the count of failures
(an error raised counts as one: named-rung cases that a rung refuses are printed as EXC).

    python tools/fuzz_batched.py SEED CASES
"""

import math
import os
import random
import sys
import time
import traceback

os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests import _fast_simulator

_fast_simulator.install()
import numpy as np
from numba import cuda
import dxgemm
from dxgemm import epilogues as E
from tests.test_batched_cpu import on_device

seed = int(sys.argv[1]) if len(sys.argv) > 1 else 0
count = int(sys.argv[2]) if len(sys.argv) > 2 else 40
rng = np.random.default_rng(seed)
R = random.Random(seed)
SIZES = [1, 2, 3, 5, 7, 9, 16, 17, 33]
BATCHES = [
    ((3,), (3,)),
    ((2, 1), (3,)),
    ((), (4,)),
    ((4,), ()),
    ((1, 2), (3, 1)),
    ((2,), (1,)),
    ((0,), (0,)),
    ((1,), (1, 1, 2)),
]
fails = 0


def report(ok, desc, extra=""):
    global fails
    print(("ok  " if ok else "FAIL") + f" {desc} {extra}", flush=True)
    fails += not ok


for case in range(count):
    dtype = R.choice([np.float32, np.float64])
    precision = R.choice([None, "ieee", "tf32"]) if dtype == np.float32 else None
    backend = R.choice(
        ["auto", "auto", "warptile", "naive", "blocktile2d"]
        + (["tf32mma"] if dtype == np.float32 and precision != "ieee" else [])
    )
    if backend not in ("auto", "tf32mma", "warptile") and precision == "tf32":
        precision = None
    if backend == "warptile" and precision == "tf32":
        precision = None
    m, n, k = R.choice(SIZES), R.choice(SIZES), R.choice(SIZES + [0])
    grouped = R.random() < 0.3
    if not grouped:
        ba, bb = R.choice(BATCHES)
        if R.random() < 0.5:
            ba, bb = bb, ba
        batch = np.broadcast_shapes(ba, bb)
        ha, hb = ba + (m, k), bb + (k, n)
        la, lb, lc = (
            R.choice(["row", "col", "view", "reversed", "T"]),
            R.choice(["row", "col", "view", "reversed", "T"]),
            R.choice(["row", "view", "T"]),
        )
        epi_kind = R.choice(["none", "bias_n", "bias_bn", "bias_bm1", "custom_batch", "store", "gelu"])
        alpha = R.choice([1.0, -0.75])
        beta = R.choice([0.0, 0.5])
        with_c = beta != 0 or R.random() < 0.3
        desc = (f"#{case} batched {np.dtype(dtype).name} {ha}@{hb} {backend} prec={precision} a={la} b={lb} "
                f"c={lc if with_c else '-'} beta={beta} epi={epi_kind}")
        for rep in range(2):
            A = rng.uniform(0.5, 1.5, ha).astype(dtype)
            B = (rng.standard_normal(hb) * 2.0 ** rng.integers(-6, 7, hb)).astype(dtype)
            C = rng.standard_normal(batch + (m, n)).astype(dtype)
            pre = alpha * np.matmul(A.astype(np.float64), B.astype(np.float64)) + (beta * C if beta else 0)
            nb = int(np.prod(batch)) if batch else 1
            target = None
            if epi_kind == "none":
                ep, post = None, lambda r: r
            elif epi_kind == "gelu":
                ep, post = E.gelu(), lambda r: r * 0.5 * (1 + np.vectorize(math.erf, otypes=[float])(r / math.sqrt(2)))
            elif epi_kind == "bias_n":
                v = rng.standard_normal(n).astype(dtype)
                ep, post = E.bias(cuda.to_device(v)), (lambda v: lambda r: r + v)(v)
            elif epi_kind == "bias_bn":
                v = rng.standard_normal(batch + (n,)).astype(dtype)
                ep, post = E.bias(cuda.to_device(v)), (lambda v: lambda r: r + v[..., None, :])(v)
            elif epi_kind == "bias_bm1":
                v = rng.standard_normal(batch + (m, 1)).astype(dtype)
                ep, post = E.bias(cuda.to_device(v)), (lambda v: lambda r: r + v)(v)
            elif epi_kind == "custom_batch":
                t = rng.standard_normal((max(nb, 1), n)).astype(dtype)
                ep = E.custom(lambda x, row, col, tab, batch: x - tab[batch, col] * 2, cuda.to_device(t))
                post = (lambda t: lambda r: r - 2 * t[:nb].reshape(batch + (1, n)) if batch else r - 2 * t[0])(t)
            elif epi_kind == "store":
                target = cuda.to_device(np.full(batch + (m, n), np.nan, dtype))
                ep, post = E.store(target) | E.relu(), lambda r: np.maximum(r, 0)
            ref = post(pre)
            try:
                da, db = on_device(A, la), on_device(B, lb)
                dc = on_device(np.full(batch + (m, n), np.nan, dtype) if beta == 0 else C, lc) if with_c else None
                t0 = time.time()
                out = dxgemm.gemm(da, db, dc, alpha=alpha, beta=beta, epilogue=ep, backend=backend, precision=precision)
                got = np.asarray(out.copy_to_host() if hasattr(out, "copy_to_host") else out).astype(np.float64)
                scale = (
                    np.abs(alpha) * np.matmul(np.abs(A.astype(np.float64)), np.abs(B.astype(np.float64)))
                    + (abs(beta) * np.abs(C) if beta else 0)
                    + 1
                )
                eps = (2.0**-10 if precision == "tf32" else 2.0**-20 if dtype == np.float32 else 2.0**-48) * (k + 4)
                err = np.abs(got - ref) / scale if got.shape == ref.shape else np.array([np.inf])
                ok = (
                    got.shape == ref.shape
                    and bool(np.isfinite(got).all())
                    and (err.max() if err.size else 0) <= 4 * eps
                )
                if target is not None:
                    s = target.copy_to_host().astype(np.float64)
                    ok = (
                        ok
                        and bool(np.isfinite(s).all())
                        and ((np.abs(s - pre) / scale).max() if s.size else 0) <= 4 * eps
                    )
                report(
                    ok,
                    desc,
                    f"rep={rep} err={(err.max() if err.size else 0):.2e} shape={got.shape} ({time.time() - t0:.1f}s)",
                )
            except Exception as exc:
                print(f"EXC  {desc} rep={rep}: {type(exc).__name__}: {exc}", flush=True)
                fails += 1
                if not isinstance(exc, (ValueError, TypeError)):
                    traceback.print_exc()
    else:
        G = R.choice([1, 2, 3, 5])
        la, lb = R.choice(["row", "col", "view", "T"]), R.choice(["row", "col", "view", "T"])
        if backend in ("naive", "blocktile2d") and R.random() < 0.5:
            backend = "auto"
        shapes = [(R.choice(SIZES + [0]), R.choice(SIZES), R.choice(SIZES + [0])) for _ in range(G)]
        epi_kind = R.choice(["none", "bias_each", "relu", "custom_batch"])
        beta = R.choice([0.0, 0.5])
        desc = (f"#{case} grouped {np.dtype(dtype).name} {shapes} {backend} prec={precision} a={la} b={lb} "
                f"beta={beta} epi={epi_kind}")
        from tests._sim import device_matrix

        for rep in range(2):
            probs, refs, pres = [], [], []
            eps_list = []
            if epi_kind == "custom_batch":
                t = rng.standard_normal((G, 40)).astype(dtype)
                dt = cuda.to_device(t)
                eps_ep = E.custom(lambda x, row, col, tab, batch: x * tab[batch, col % 40], dt)
            for g, (mg, ng, kg) in enumerate(shapes):
                A = rng.uniform(0.5, 1.5, (mg, kg)).astype(dtype)
                B = rng.standard_normal((kg, ng)).astype(dtype)
                C = rng.standard_normal((mg, ng)).astype(dtype)
                pre = A.astype(np.float64) @ B.astype(np.float64) + (beta * C if beta else 0)
                if epi_kind == "bias_each":
                    v = rng.standard_normal(ng).astype(dtype)
                    eps_list.append(E.bias(cuda.to_device(v)))
                    ref = pre + v
                elif epi_kind == "relu":
                    ref = np.maximum(pre, 0)
                elif epi_kind == "custom_batch":
                    ref = pre * t[g, np.arange(ng) % 40][None, :]
                else:
                    ref = pre
                def lay(host, layout):
                    return device_matrix(host, layout) if host.size else cuda.to_device(host)

                p = (lay(A, la), lay(B, lb)) + ((lay(C, "row"),) if beta else ())
                probs.append(p)
                refs.append((ref, A, B, C, kg))
            ep = (
                eps_list
                if epi_kind == "bias_each"
                else E.relu()
                if epi_kind == "relu"
                else eps_ep
                if epi_kind == "custom_batch"
                else None
            )
            try:
                t0 = time.time()
                outs = dxgemm.grouped_gemm(probs, beta=beta, epilogue=ep, backend=backend, precision=precision)
                worst, ok = 0.0, len(outs) == G
                for out, (ref, A, B, C, kg) in zip(outs, refs):
                    got = out.copy_to_host().astype(np.float64)
                    if got.shape != ref.shape:
                        ok = False
                        continue
                    if not got.size:
                        continue
                    scale = (
                        np.abs(A.astype(np.float64)) @ np.abs(B.astype(np.float64))
                        + (abs(beta) * np.abs(C) if beta else 0)
                        + 1
                    )
                    eps = (2.0**-10 if precision == "tf32" else 2.0**-20 if dtype == np.float32 else 2.0**-48) * (
                        kg + 4
                    )
                    e = (np.abs(got - ref) / scale).max()
                    worst = max(worst, e / eps)
                    ok = ok and bool(np.isfinite(got).all()) and e <= 4 * eps
                report(ok, desc, f"rep={rep} worst/eps={worst:.2f} ({time.time() - t0:.1f}s)")
            except Exception as exc:
                print(f"EXC  {desc} rep={rep}: {type(exc).__name__}: {exc}", flush=True)
                fails += 1
                if not isinstance(exc, (ValueError, TypeError)):
                    traceback.print_exc()
print("fails", fails)
sys.exit(1 if fails else 0)
