"""Throughput of each FP64 tensor-core mma shape on this GPU, from registers only.

Each warp runs ``chains`` independent accumulators through 4096 back-to-back
``mma.sync.m{M}n8k{K}.f64`` (no memory traffic), for 4, 8 and 16 warps per block and two
blocks per SM.  It answers two questions a GEMM kernel's design depends on: the peak of
each shape, and how many independent mmas a warp needs to reach it
(results/h100_dmma_peak.log).

    python benchmarks/dmma_peak.py          # on the GPU
    python benchmarks/dmma_peak.py ptx      # write /tmp/<shape>.ptx, no GPU needed
"""
import sys, time
import numpy as np
from numba import cuda, types
from numba.core.extending import intrinsic
from llvmlite import ir

SHAPES = {  # name: (ptx shape, #a, #b)
    "m8n8k4": ("m8n8k4", 1, 1, 2),
    "m16n8k4": ("m16n8k4", 2, 1, 4),
    "m16n8k8": ("m16n8k8", 4, 2, 4),
    "m16n8k16": ("m16n8k16", 8, 4, 4),
}


def make_mma(shape):
    ptx, na, nb, nc = SHAPES[shape]

    @intrinsic
    def mma(typingctx, a, b, c):
        f64 = types.float64
        sig = types.UniTuple(f64, nc)(types.UniTuple(f64, na), types.UniTuple(f64, nb), types.UniTuple(f64, nc))

        def codegen(context, builder, sig, args):
            d = ir.DoubleType()
            av = [builder.extract_value(args[0], i) for i in range(na)]
            bv = [builder.extract_value(args[1], i) for i in range(nb)]
            cv = [builder.extract_value(args[2], i) for i in range(nc)]
            fnty = ir.FunctionType(ir.LiteralStructType([d] * nc), [d] * (na + nb + nc))
            o = 0
            def grp(n):
                nonlocal o
                s = "{" + ", ".join(f"${o + i}" for i in range(n)) + "}"
                o += n
                return s
            dd = grp(nc); aa = grp(na); bb = grp(nb); cc = grp(nc)
            asm = ir.InlineAsm(fnty, f"mma.sync.aligned.{ptx}.row.col.f64.f64.f64.f64 {dd}, {aa}, {bb}, {cc};",
                               ",".join(["=d"] * nc + ["d"] * (na + nb + nc)))
            res = builder.call(asm, av + bv + cv)
            return context.make_tuple(builder, sig.return_type, [builder.extract_value(res, i) for i in range(nc)])

        return sig, codegen

    return mma, na, nb, nc


def make_kernel(shape, chains, iters):
    mma, na, nb, nc = make_mma(shape)
    # `chains` independent accumulators per warp, written out so each is its own register tuple
    src = ["def k(out, seed):",
           "    t = cuda.threadIdx.x",
           "    x = seed[t & 31]",
           f"    a = ({', '.join(['x'] * na)},)",
           f"    b = ({', '.join(['x*0.5'] * nb)},)"]
    for c in range(chains):
        src.append(f"    c{c} = ({', '.join(['x*0.25'] * nc)},)")
    src.append(f"    for i in range({iters}):")
    for c in range(chains):
        src.append(f"        c{c} = mma(a, b, c{c})")
    src.append("    s = 0.0")
    for c in range(chains):
        src.append(f"    s += c{c}[0]")
    src.append("    out[cuda.blockIdx.x * cuda.blockDim.x + t] = s")
    ns = {"cuda": cuda, "mma": mma}
    exec("\n".join(src), ns)
    return cuda.jit(ns["k"]), {"m8n8k4": 256, "m16n8k4": 512, "m16n8k8": 1024, "m16n8k16": 2048}[shape]


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "ptx":
        for shape in SHAPES:
            kern, _ = make_kernel(shape, 4, 64)
            ptx, _ = cuda.compile_ptx(kern.py_func, "(float64[:], float64[:])", cc=(9, 0))
            open(f"/tmp/{shape}.ptx", "w").write(ptx)
        sys.exit()
    dev = cuda.get_current_device()
    print(f"# {dev.name.decode() if isinstance(dev.name, bytes) else dev.name}")
    sms = dev.MULTIPROCESSOR_COUNT
    seed = cuda.to_device(np.random.rand(32))
    for shape in SHAPES:
        for chains in (1, 2, 4, 8):
            for warps in (4, 8, 16):
                iters = 4096
                kern, fma = make_kernel(shape, chains, iters)
                blocks = sms * 2
                out = cuda.device_array(blocks * warps * 32)
                kern[blocks, warps * 32](out, seed); cuda.synchronize()
                ts = []
                for r in range(5):
                    e0, e1 = cuda.event(), cuda.event()
                    e0.record(); kern[blocks, warps * 32](out, seed); e1.record(); e1.synchronize()
                    ts.append(cuda.event_elapsed_time(e0, e1))
                ms = sorted(ts)[2]
                flops = 2 * fma * iters * chains * warps * blocks
                print(f"{shape:9s} chains={chains} warps/block={warps:2d} blocks={blocks} {ms:.3f} ms {flops / ms / 1e9:.1f} TFLOP/s", flush=True)
