"""DFMA throughput against independent chains per warp and warps per scheduler (H100).

Why: a float64 GELU epilogue is ~37 FP64 instructions in two interleaved chains (ptxas's
schedule), and the float64 warptile's medium tile has two warps per scheduler.  If a
dependent DFMA waits longer than two issues, such an epilogue runs below the FP64 rate
unless other warps fill in.  One block per SM of ``warps`` warps, each thread ``ilp``
chains of ``x = fma(x, a, b)``.

    nvcc -arch=sm_90 -cubin -O3 -o /tmp/dfma_ilp.cubin benchmarks/dfma_ilp.cu
    python benchmarks/dfma_ilp.py /tmp/dfma_ilp.cubin

H100 (``h100_dfma_ilp_s22.log``): one warp per scheduler reaches 15 / 29 / 43 / 58 DFMA per
SM per cycle with 1 / 2 / 3 / 4 chains, so a dependent DFMA waits ~8 cycles; two warps per
scheduler reach 58 with two chains each, four warps 56 with one.
"""
import statistics
import sys

import cupy as cp

mod = cp.RawModule(path=sys.argv[1])
kern = mod.get_function("dfma_ilp")
dev = cp.cuda.Device()
sms = dev.attributes["MultiProcessorCount"]
clock_khz = cp.cuda.runtime.getDeviceProperties(0)["clockRate"]
out = cp.zeros(1024, cp.float64)
ITERS = 4000


def run(ilp: int, warps: int, reps: int = 5) -> float:
    args = (cp.int32(ilp), cp.int32(ITERS), cp.float64(0.999999), cp.float64(1e-7), out)
    kern((sms,), (32 * warps,), args)
    ts = []
    for _ in range(reps):
        s, e = cp.cuda.Event(), cp.cuda.Event()
        s.record()
        kern((sms,), (32 * warps,), args)
        e.record()
        e.synchronize()
        ts.append(cp.cuda.get_elapsed_time(s, e))
    return statistics.median(ts)


print(f"# {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, {sms} SMs, one block per SM; "
      f"DFMA per SM per cycle at the {clock_khz / 1e6:.2f} GHz boost clock (64 = the FP64 rate)")
print(f"{'warps/SM':>9} {'per sched':>9} " + " ".join(f"{'ilp ' + str(i):>8}" for i in (1, 2, 3, 4, 8)))
for warps in (4, 8, 12, 16, 32):
    row = []
    for ilp in (1, 2, 3, 4, 8):
        ms = run(ilp, warps)
        dfma = 32 * warps * ilp * 8 * ITERS  # per SM
        row.append(dfma / (ms * 1e-3) / (clock_khz * 1e3))
    print(f"{warps:9d} {warps / 4:9.1f} " + " ".join(f"{r:8.1f}" for r in row), flush=True)
