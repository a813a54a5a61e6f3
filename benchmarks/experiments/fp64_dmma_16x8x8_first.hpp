// fp64_dmma_order.hpp with DMMA.16x8x8 first (libmathdx passes LIBMATHDX_NVRTC_ARGS_EXTRA
// to NVRTC as one argument, so the choice cannot be a -D beside --pre-include):
//     LIBMATHDX_NVRTC_ARGS_EXTRA=--pre-include=$PWD/benchmarks/experiments/fp64_dmma_16x8x8_first.hpp ...
#define DXGEMM_FP64_DMMA_16X8X8_FIRST
#include "fp64_dmma_order.hpp"
