// DFMA throughput on one SM against independent chains per warp (ILP) and warps per scheduler.
// Each thread runs `ilp` independent chains x = fma(x, a, b) for `iters` steps; see dfma_ilp.py.
template <int ILP>
__device__ void chains(int iters, double a, double b, double* out) {
  double x[ILP];
#pragma unroll
  for (int i = 0; i < ILP; ++i) x[i] = threadIdx.x * 1e-3 + i;
  for (int t = 0; t < iters; ++t) {
#pragma unroll
    for (int u = 0; u < 8; ++u) {
#pragma unroll
      for (int i = 0; i < ILP; ++i) x[i] = fma(x[i], a, b);
    }
  }
  double s = 0;
#pragma unroll
  for (int i = 0; i < ILP; ++i) s += x[i];
  if (s == 1.2345) out[threadIdx.x] = s;  // never true; keeps the chains alive
}

extern "C" __global__ void dfma_ilp(int ilp, int iters, double a, double b, double* out) {
  switch (ilp) {
    case 1: chains<1>(iters, a, b, out); break;
    case 2: chains<2>(iters, a, b, out); break;
    case 3: chains<3>(iters, a, b, out); break;
    case 4: chains<4>(iters, a, b, out); break;
    case 8: chains<8>(iters, a, b, out); break;
  }
}
