// Experiment (sessions 13 and 14), not used by dxgemm: make cuBLASDx prefer Hopper's larger DMMAs for double.
//
// cuBLASDx picks the MMA for a pipeline tile from an ordered list per precision
// (layout_database::supermma_instructions); for double on sm_90 that list starts with
// DMMA.16x8x4.  This header, pre-included into every libmathdx NVRTC compile with
//
//     LIBMATHDX_NVRTC_ARGS_EXTRA=--pre-include=$PWD/benchmarks/experiments/fp64_dmma_order.hpp \
//         DXGEMM_CACHE_DIR=/tmp/d16 python -m dxgemm warmup --dtype float64 ...
//
// (use a fresh cache directory: the LTO-IR store is keyed by libmathdx's symbols, which do
// not see this header), re-orders that list to 16x8x16, 16x8x8, 16x8x4, 8x8x4;
// fp64_dmma_16x8x8_first.hpp, pre-included the same way, to 16x8x8, 16x8x4, 8x8x4.
// Both gave correct kernels, and slower ones (the logs name the two files this one replaced,
// fp64_dmma_16x8x16.hpp and fp64_dmma_16x8x8.hpp; rebuilt from this one, the 16x8x16 kernel
// has the same 32 DMMAs per K tile and the 16x8x8 kernel the same SASS):
// - 16x8x16 (32 DMMA.16x8x16 per 128x128x32 K tile and warp, 252 registers): 4096^3 0.70x
//   cuBLAS against 0.81x, 64x64x32 tiles 0.49-0.67x against 0.62-0.84x
//   (benchmarks/results/h100_dmma_atom_s13.log);
// - 16x8x8 (64 DMMA.16x8x8, plus register moves assembling each B operand from the
//   128-bit shared-memory loads): 4096^3 0.73-0.74x against 0.79-0.80x, 2048^3 (64x64x32)
//   0.72x against 0.76-0.77x, 8192^3 0.90-0.91x against 0.91-0.93x
//   (benchmarks/results/h100_dmma8_s14.log).
// Written against libmathdx 0.3.2 (cuBLASDx's internal names may change).
#include <libmathdx_device/cublasdx_defines.cuh>
#include <libmathdx_device/make_tma_atom.cuh>
#include <cublasdx.hpp>

namespace cublasdx { namespace detail { namespace layout_database {

template<int NumWarps, class GEMMShape>
struct get_best_supermma_tiled_instruction<900, NumWarps, GEMMShape, double, double, double> {
    using instruction_list = layout_database::instruction_list<
#ifndef DXGEMM_FP64_DMMA_16X8X8_FIRST
        layout_database::instruction<cute::SM90_16x8x16_F64F64F64F64_TN, 900, 900>,
#endif
        layout_database::instruction<cute::SM90_16x8x8_F64F64F64F64_TN, 900, 900>,
        layout_database::instruction<cute::SM90_16x8x4_F64F64F64F64_TN, 900, 900>,
        layout_database::instruction<cute::SM80_8x8x4_F64F64F64F64_TN, 800>>;

    // The warp grid as cuBLASDx lays it out (rows along the longer side of the tile).
    static constexpr auto warp_tile = get_warp_tile(NumWarps);
    using col_major_tile = cute::Shape<cute::Int<cute::get<0>(warp_tile)>, cute::Int<cute::get<1>(warp_tile)>, cute::_1>;
    static constexpr bool rows_along_n = cute::size<1>(GEMMShape {}) > cute::size<0>(GEMMShape {});
    using search_tile = cute::Layout<cute::Shape<cute::Int<cute::get<rows_along_n ? 1 : 0>(col_major_tile {})>,
                                                 cute::Int<cute::get<rows_along_n ? 0 : 1>(col_major_tile {})>, cute::_1>>;

    using instruction = typename search_mma_list<900, search_tile, GEMMShape, instruction_list>::type;
    using tile = cute::conditional_t<cute::is_void_v<instruction>, void, search_tile>;
    static constexpr instruction_type instruction_kind = instruction_type::supermma;
};

}}}
