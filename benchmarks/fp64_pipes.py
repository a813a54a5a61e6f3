"""Do FP64 tensor-core mmas (DMMA) and FP64 SIMT work (DFMA, libdevice erf) overlap on an SM?

Why it matters: a fused float64 epilogue (GELU's erf) can only hide behind the GEMM if the
SM can run it while the tensor cores multiply.  ``fp64_pipes.cu`` runs one block of 8 warps
per SM; warps 0-3 do one kind of work and warps 4-7 another, each alone and both together.
If the two overlapped, "together" would take the longer of the two times; if they share
one pipe, the sum.

    nvcc -arch=sm_90 -cubin -O3 -o /tmp/fp64_pipes.cubin benchmarks/fp64_pipes.cu
    python benchmarks/fp64_pipes.py /tmp/fp64_pipes.cubin [--chains]

Result on the H100 (benchmarks/results/h100_fp64_pipes_s18.log): the sum, to 1 %.
``--chains`` (h100_fp64_pipes_chains_s22.log) adds streams of one dependent chain per warp,
which leave the pipe partly idle: 4 warps of one DMMA chain each still run at 77 % of the
DMMA rate, and beside them a DFMA stream gets part of the rest: one DFMA chain per warp
hid 28 % of its time (4.38 ms together against 3.39 + 1.37), saturating DFMA warps 14 %;
beside saturating DMMA warps, nothing (0 %).  So the pipe is shared at a fine grain, and
DFMA work can use the slots an unsaturated DMMA loop leaves.
"""
import statistics, sys
import cupy as cp
mod = cp.RawModule(path=sys.argv[1])
kern = mod.get_function("pipes")
sms = cp.cuda.Device().attributes["MultiProcessorCount"]
out = cp.zeros(256, cp.float64)
N1, N2, N3, N4, N5 = 20000, 640000, 30000, 10000, 40000
NAMES = {0: "idle", 1: "DMMA", 2: "DFMA", 3: "erf", 4: "DMMA1", 5: "DFMA1"}
ITERS = {0: 0, 1: N1, 2: N2, 3: N3, 4: N4, 5: N5}
def run(lo, hi, reps=7):
    args = (cp.int32(lo), cp.int32(ITERS[lo]), cp.int32(hi), cp.int32(ITERS[hi]), out)
    kern((sms,), (256,), args)
    ts = []
    for _ in range(reps):
        s, e = cp.cuda.Event(), cp.cuda.Event()
        s.record(); kern((sms,), (256,), args); e.record(); e.synchronize()
        ts.append(cp.cuda.get_elapsed_time(s, e))
    return statistics.median(ts)
print(f"# {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, {sms} blocks of 8 warps (one per SM); "
      f"warps 0-3 run 'lo', warps 4-7 'hi'; DMMA {N1} x 8 m16n8k16 per warp, DFMA {N2} x 8 per lane, "
      f"erf {N3} x 4 per lane")
res = {}
for lo, hi in [(1, 0), (0, 2), (1, 2), (0, 3), (1, 3), (1, 1), (2, 2), (3, 3), (2, 0), (3, 0)]:
    res[lo, hi] = t = run(lo, hi)
    print(f"lo {NAMES[lo]:5s} hi {NAMES[hi]:5s} {t:8.3f} ms")
flop = lambda w: w * 4096 * 8 * N1 * 4 * sms  # DMMA flops for w warps per block
print(f"DMMA alone 4 warps: {flop(1) / res[1, 0] / 1e9:.1f} TFLOP/s; 8 warps: {flop(2) / res[1, 1] / 1e9:.1f} TFLOP/s")
print(f"DFMA alone (4 warps): {2 * 8 * N2 * 128 * sms / res[0, 2] / 1e9:.1f} TFLOP/s")
for other in (2, 3):
    a, b, both = res[1, 0], res[0, other], res[1, other]
    print(f"DMMA + {NAMES[other]}: alone {a:.3f} + {b:.3f} = {a + b:.3f} ms, together {both:.3f} ms "
          f"(max {max(a, b):.3f}): overlap {(a + b - both) / min(a, b) * 100:.0f} % of the shorter")
if "--chains" in sys.argv[2:]:
    # Latency-bound streams: one dependent chain per warp leaves the pipe partly idle.  If the
    # SM could give DMMA's idle pipe slots to DFMA (and back), "together" would approach the
    # longer of the two; a pipe taken in turns at a coarse grain gives the sum.
    print(f"# --chains: DMMA1 = {N4} x 8 dependent m16n8k16 per warp (one accumulator), "
          f"DFMA1 = {N5} x 8 dependent DFMA per lane")
    for lo, hi in [(4, 0), (0, 5), (4, 5), (0, 2), (4, 2), (1, 0), (1, 5), (0, 3), (4, 3)]:
        res[lo, hi] = t = run(lo, hi)
        print(f"lo {NAMES[lo]:5s} hi {NAMES[hi]:5s} {t:8.3f} ms")
    for lo, hi in [(4, 5), (4, 2), (1, 5), (4, 3)]:
        a, b, both = res[lo, 0], res[0, hi], res[lo, hi]
        print(f"{NAMES[lo]} + {NAMES[hi]}: alone {a:.3f} + {b:.3f} = {a + b:.3f} ms, together {both:.3f} ms "
              f"(max {max(a, b):.3f}): overlap {(a + b - both) / min(a, b) * 100:.0f} % of the shorter")
