"""NumPy model of the TF32 tensor-core accumulation schemes, to choose the one ``tf32mma`` uses.

The model: one ``mma.sync.m16n8k8`` adds its 8 exact products (TF32 x TF32 fits a float64)
to its float32 accumulator and truncates the result toward zero; a FADD rounds to nearest.
Operands split as ``hi = rna(x)``, ``lo = rna(x - hi)`` (TF32: 10 stored mantissa bits).
cuBLAS SGEMM's stand-in is one float32 FFMA chain over K (every step rounded to nearest).

Schemes (``tf32x3`` unless named ``tf32_*``):

* ``single``: all 3K products into one truncating accumulator (one GEMM of depth 3K);
* ``tile32``: each 32-deep K tile's 12 mmas into a fresh partial, FADDed into the sum;
* ``k8``: each 8-deep K step's 3 mmas (lo*hi, hi*lo, hi*hi) into a fresh partial, FADDed;
* ``tile32_kahan``: ``tile32`` with a compensated (Kahan) running sum;
* ``tile32_2lvl``: ``tile32`` with the partials summed 16 at a time, each sum into the total;
* ``k8_2lvl64``: ``k8`` with the partials summed 64 at a time (512 K), each sum into the
  total: what ``dxgemm.kernels.tf32mma`` does (``fold`` = 16 K tiles of 32);
* ``k16_2lvl32``: two K steps' six mmas (in step order) into each fresh partial, half the
  rounding adds of ``k8``, summed 32 at a time (the same 512 K a first-level sum);
* ``k16s_2lvl32``: the same with both steps' small products (lo*hi, hi*lo) first;
* ``tf32_direct`` / ``tf32_k8``: one pass, straight into the accumulator / per K step.

Error = max |D - D64| / (|A| @ |B|) over the outputs.

    python tools/tf32mma_emulate.py [--outputs 24]
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def tf32_rna(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to TF32 (10 mantissa bits), to nearest, ties away from zero."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def trunc32(x: np.ndarray) -> np.ndarray:
    """float64 values to float32, rounded toward zero (the tensor cores' accumulation)."""
    r = x.astype(np.float32)
    over = np.abs(r.astype(np.float64)) > np.abs(x)
    return np.where(over, np.nextafter(r, np.float32(0)), r)


def group_sums(a: np.ndarray, b: np.ndarray, width: int) -> np.ndarray:
    """(m, n, K / width) exact-enough float64 sums of ``width`` consecutive products."""
    m, k = a.shape
    n = b.shape[1]
    ag = a.astype(np.float64).reshape(m, k // width, width)
    bg = b.astype(np.float64).reshape(k // width, width, n)
    return np.einsum("mgw,gwn->mng", ag, bg)


def scheme(a: np.ndarray, b: np.ndarray, name: str) -> np.ndarray:
    """The float32 result of ``a @ b`` (float32 inputs, K a multiple of 32) under a scheme."""
    ah, bh = tf32_rna(a), tf32_rna(b)
    al, bl = tf32_rna(a - ah), tf32_rna(b - bh)
    m, n = a.shape[0], b.shape[1]
    if name.startswith("tf32_"):
        hh = group_sums(ah, bh, 8)
        acc = np.zeros((m, n), np.float32)
        for g in range(hh.shape[2]):
            if name == "tf32_direct":
                acc = trunc32(acc.astype(np.float64) + hh[:, :, g])
            else:
                acc = (acc.astype(np.float64) + trunc32(hh[:, :, g])).astype(np.float32)
        return acc
    lh, hl, hh = group_sums(al, bh, 8), group_sums(ah, bl, 8), group_sums(ah, bh, 8)
    steps = hh.shape[2]
    acc = np.zeros((m, n), np.float32)
    comp = np.zeros((m, n), np.float32)
    if name == "single":
        for g in range(steps):
            for prod in (lh, hl, hh):
                acc = trunc32(acc.astype(np.float64) + prod[:, :, g])
        return acc
    per = 1 if name.startswith("k8") else 2 if name.startswith("k16") else 4  # mma K steps a fresh partial
    for t in range(steps // per):
        part = np.zeros((m, n), np.float32)
        order = ([(p, g) for g in range(t * per, (t + 1) * per) for p in (lh, hl)]
                 + [(hh, g) for g in range(t * per, (t + 1) * per)] if name.startswith("k16s") else
                 [(p, g) for g in range(t * per, (t + 1) * per) for p in (lh, hl, hh)])
        for prod, g in order:
            part = trunc32(part.astype(np.float64) + prod[:, :, g])
        if "2lvl" in name:  # partials summed `group` at a time, those sums into acc
            group = {"k8_2lvl64": 64, "k16_2lvl32": 32, "k16s_2lvl32": 32}.get(name, 16)
            comp = (comp + part).astype(np.float32)
            if t % group == group - 1 or t == steps // per - 1:
                acc = (acc + comp).astype(np.float32)
                comp[:] = 0
        elif name.endswith("kahan"):
            y = (part - comp).astype(np.float32)
            s = (acc + y).astype(np.float32)
            comp = ((s - acc).astype(np.float32) - y).astype(np.float32)
            acc = s
        else:
            acc = (acc + part).astype(np.float32)
    return acc


def sgemm_model(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One rounded float32 FFMA chain per output over K (cuBLAS SGEMM's stand-in)."""
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    for kk in range(a.shape[1]):
        acc = (acc + np.outer(a64[:, kk], b64[kk])).astype(np.float32)
    return acc


def error(d: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return float(np.max(np.abs(d - a64 @ b64) / (np.abs(a64) @ np.abs(b64))))


SCHEMES = ("single", "tile32", "k8", "tile32_kahan", "tile32_2lvl", "k8_2lvl64", "k16_2lvl32", "k16s_2lvl32",
           "tf32_direct", "tf32_k8")
CASES = (("same-sign U[0,1)", 256), ("same-sign U[0,1)", 4096), ("same-sign U[0,1)", 16384),
         ("same-sign U[0,1)", 65536), ("normal", 256), ("normal", 4096))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outputs", type=int, default=24, help="m = n of the emulated product")
    parser.add_argument("--schemes", type=lambda x: tuple(x.split(",")), default=SCHEMES)
    args = parser.parse_args()
    rng = np.random.default_rng(34)
    s = args.outputs
    print(f"{'data':18} {'K':>6} {'sgemm':>9} " + " ".join(f"{x:>16}" for x in args.schemes))
    for data, k in CASES:
        start = time.perf_counter()
        if data == "normal":
            a, b = rng.standard_normal((s, k)).astype(np.float32), rng.standard_normal((k, s)).astype(np.float32)
        else:
            a, b = rng.random((s, k), np.float32), rng.random((k, s), np.float32)
        ref = max(error(sgemm_model(a, b), a, b), 2.0**-22)
        cells = []
        for name in args.schemes:
            e = error(scheme(a, b, name), a, b)
            cells.append(f"{e:9.2e} ({e / ref:4.1f}x)")
        print(f"{data:18} {k:6d} {ref:9.2e} " + " ".join(cells), f"[{time.perf_counter() - start:.0f} s]")
    print("ratio = error / max(SGEMM-model error, 2^-22)")


if __name__ == "__main__":
    main()
