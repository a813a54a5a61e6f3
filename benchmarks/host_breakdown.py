"""Where dxgemm's host time per pipeline call goes, piece by piece (microseconds per call).

Each piece of the call path is timed on its own in a loop of back-to-back calls, with the
GPU synchronised before and after the loop but not inside it, so the figure is the
Python/driver time the piece costs the host.  CuPy's own ``matmul`` (cuBLAS) is timed
the same way as the reference: a call whose host time exceeds the GPU time of the
problem runs at the host's pace, not the GPU's.  Run on the GPU host with the kernels
cached (float32 4096x4096x256 and float64 4096x4096x256)::

    . .whl/activate.sh && python benchmarks/host_breakdown.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

import dxgemm  # noqa: E402
from dxgemm import _gemm  # noqa: E402
from dxgemm.runtime import calls as _calls
from dxgemm._arrays import as_operand  # noqa: E402
from dxgemm._streams import stream_handle  # noqa: E402
from dxgemm.epilogues import bias, gelu  # noqa: E402
from dxgemm.epilogues._base import AlphaBeta, Chain, EpilogueContext  # noqa: E402
from dxgemm.pipelines import _launch, config, tf32x3  # noqa: E402
from dxgemm.runtime import pipeline as _dispatch  # noqa: E402
from dxgemm.pipelines.loader import get_kernel  # noqa: E402

CALLS = 200


def host_us(fn, calls: int = CALLS) -> float:
    """Median over 3 loops of the host time per call, in microseconds."""
    fn()
    cp.cuda.Device().synchronize()
    out = []
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t) / calls * 1e6)
        cp.cuda.Device().synchronize()
    return sorted(out)[1]


def pieces(dtype, m: int, n: int, k: int, epilogue) -> None:
    rng = cp.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=dtype)
    b = rng.standard_normal((k, n), dtype=dtype)
    d = cp.empty((m, n), dtype)
    label = f"{np.dtype(dtype).name} {m}x{n}x{k} {'bias|gelu' if epilogue is not None else 'none'}"
    rows = {"cupy matmul (cuBLAS)": host_us(lambda: cp.matmul(a, b, out=d))}
    rows["dxgemm.gemm, pipeline (repeat call)"] = host_us(
        lambda: dxgemm.gemm(a, b, d, epilogue=epilogue, backend="pipeline"))
    rows["dxgemm.gemm, pipeline (repeat, new output)"] = host_us(
        lambda: dxgemm.gemm(a, b, epilogue=epilogue, backend="pipeline"))
    rows["dxgemm.gemm, pipeline (first call of a signature)"] = host_us(
        lambda: (_calls.clear(), dxgemm.gemm(a, b, d, epilogue=epilogue, backend="pipeline")))
    rows["  _calls.signature"] = host_us(lambda: _calls.signature(a, b, d, 1.0, 0.0, epilogue, "pipeline"))
    rows["  as_operand x3"] = host_us(lambda: (as_operand(a, "a"), as_operand(b, "b"), as_operand(d, "c", output=True)))
    op_a, op_b, op_d = as_operand(a, "a"), as_operand(b, "b"), as_operand(d, "c", output=True)
    device = 0

    def bind():
        ctx = EpilogueContext(m, n, op_a.dtype, adapt=lambda arr, nm: _gemm._adapt_extra(arr, nm, op_a.dtype, device, (m, n)),
                              device=device, inputs=(op_a, op_b), output=op_d)
        chain = Chain((AlphaBeta(1.0, 0.0, None),) + (epilogue.stages if epilogue else ()))
        return chain.bind(ctx)

    rows["  context + chain.bind"] = host_us(bind)
    rows["  stream_handle"] = host_us(lambda: stream_handle(None, "cupy"))
    bound = bind()
    handle = stream_handle(None, "cupy")
    rows["  _dispatch.run"] = host_us(lambda: _dispatch.run(op_a, op_b, op_d, m, n, k, bound, handle, device))
    rows["    availability"] = host_us(lambda: _dispatch.availability(device))
    rows["    suggest"] = host_us(lambda: config.suggest(m, n, k, np.dtype(dtype), device=device))
    cfg = config.suggest(m, n, k, np.dtype(dtype), device=device)
    mats = [_dispatch.matrix_of(op) for op in (op_a, op_b, op_d)]
    arrangement, operands = tf32x3.kernel_variant(np.dtype(dtype), (mats[0].arrangement, mats[1].arrangement))

    def kernel_lookup():
        return get_kernel(cfg, np.dtype(dtype), arrangement, device=device, operands=operands,
                          epilogue_key=bound.key, make_epilogue=bound.make, epi_args=bound.args)

    rows["    matrix_of x3"] = host_us(lambda: [_dispatch.matrix_of(op) for op in (op_a, op_b, op_d)])
    rows["    get_kernel (memo hit)"] = host_us(kernel_lookup)
    kernel = kernel_lookup()
    a_m, b_m, d_m = mats
    stream = kernel._stream(handle)[0]
    if operands == "tf32":
        k3 = tf32x3.split_extent(k, kernel.tile_k, kernel.depth)
        rows["    split_operands (2-3 launches)"] = host_us(
            lambda: tf32x3.split_operands(a_m, b_m, m, n, k, k3, device, handle))
        a3, b3 = tf32x3.split_operands(a_m, b_m, m, n, k, k3, device, handle)
        a_m = _launch.Matrix(int(a3.data.ptr), m, k3, k3, "row_major", 4)
        b_m = _launch.Matrix(int(b3.data.ptr), k3, n, k3, "col_major", 4)
        kk = k3
    else:
        kk = k
    rows["    PipelineKernel.__call__ (init + GEMM)"] = host_us(lambda: kernel(handle, a_m, b_m, d_m, m, n, kk, bound.args))
    p = _launch.plan(m, n, kk, (kernel.tile_m, kernel.tile_n, kernel.tile_k), kernel.depth, a_m.aligned(), b_m.aligned())
    rows["      plan"] = host_us(lambda: _launch.plan(m, n, kk, (kernel.tile_m, kernel.tile_n, kernel.tile_k),
                                                      kernel.depth, a_m.aligned(), b_m.aligned()))
    storage = kernel._storage(handle, stream)
    d_rs, d_cs = d_m.strides
    values = (d_m.vector_slots(), d_rs, d_cs, m, n, kk, p.k_tail_start, a_m.vector_slots(), *a_m.strides,
              b_m.vector_slots(), *b_m.strides, p.mb_main, p.nb_main, bound.args,
              *(storage + i * kernel._storage_stride for i in range(4)))
    rows["      flatten GEMM args (generic)"] = host_us(lambda: _launch.flatten(values, kernel.meta["gemm_params"]))
    gemm_args = _launch.flatten(values, kernel.meta["gemm_params"])
    cu_stream = kernel._stream(handle)[1]
    init_args = (storage, kernel._storage_stride, a_m.ptr, m, p.k_main, a_m.ld, a_m.ptr, kernel.tile_m, a_m.ld, b_m.ptr,
                 p.k_main, n, b_m.ld, b_m.ptr, kernel.tile_n, b_m.ld)
    rows["      packed launch, init kernel"] = host_us(
        lambda: kernel._launch_init(cu_stream, kernel._init_grid, kernel._init_block, 0, init_args))
    rows[f"      packed launch, GEMM ({len(gemm_args)} args)"] = host_us(
        lambda: kernel._launch_gemm(cu_stream, p.grid, kernel.block, kernel._smem, gemm_args), calls=20)
    print(f"== {label}: host microseconds per call (median of 3 loops of {CALLS})", flush=True)
    for name, us in rows.items():
        print(f"  {name:<70} {us:8.1f}")


if __name__ == "__main__":
    for dt in (np.float32, np.float64):
        for epi_fn in (lambda: None, lambda: bias(cp.random.default_rng(1).standard_normal(4096, dtype=dt)) | gelu()):
            pieces(dt, 4096, 4096, 256, epi_fn())
