"""Do FP64 tensor-core mmas (DMMA) and FP64 SIMT work (DFMA, libdevice erf) overlap on an SM?

Why it matters: a fused float64 epilogue (GELU's erf) can only hide behind the GEMM if the
SM can run it while the tensor cores multiply.  ``fp64_pipes.cu`` runs one block of 8 warps
per SM; warps 0-3 do one kind of work and warps 4-7 another, each alone and both together.
If the two overlapped, "together" would take the longer of the two times; if they share
one pipe, the sum.

    nvcc -arch=sm_90 -cubin -O3 -o /tmp/fp64_pipes.cubin benchmarks/fp64_pipes.cu
    python benchmarks/fp64_pipes.py /tmp/fp64_pipes.cubin

Result on the H100 (benchmarks/results/h100_fp64_pipes_s18.log): the sum, to 1 %.
"""
import statistics, sys
import cupy as cp
mod = cp.RawModule(path=sys.argv[1])
kern = mod.get_function("pipes")
sms = cp.cuda.Device().attributes["MultiProcessorCount"]
out = cp.zeros(256, cp.float64)
N1, N2, N3 = 20000, 640000, 30000
NAMES = {0: "idle", 1: "DMMA", 2: "DFMA", 3: "erf"}
ITERS = {0: 0, 1: N1, 2: N2, 3: N3}
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
