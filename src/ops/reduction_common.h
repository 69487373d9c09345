// Shared pieces of the reduction kernels (reductions.cpp, reductions_stats.cpp).
#pragma once
#include <algorithm>
#include <string>
#include <vector>

#include "trnsim/ops.h"
#include "trnsim/tiling.h"

namespace trnsim::ops::reduction_detail {

using namespace trnsim::tiling;

inline ReduceOp reduce_op_for(Reduce op) {
    switch (op) {
        case Reduce::sum:
        case Reduce::mean: return ReduceOp::add;
        case Reduce::max: return ReduceOp::max;
        case Reduce::min: return ReduceOp::min;
        case Reduce::prod_unsupported_: break;
    }
    throw OpError("reduce: product reductions are not supported");
}

inline AluOp alu_for(ReduceOp op) {
    return op == ReduceOp::add ? AluOp::add : op == ReduceOp::max ? AluOp::max : AluOp::min;
}

// [P, G, R] view of a chunk tile and [P, G, R] broadcast of a [P, G] per-group value.
inline AccessPattern chunk_view(const Tile& t, uint32_t P, uint32_t G, uint32_t R) { return tile_view(t, P, {G, R}, {R, 1}); }
inline AccessPattern group_bcast(const Tile& t, uint32_t P, uint32_t G, uint32_t R) { return tile_view(t, P, {G, R}, {1, 0}); }

struct Reduction {
    IterSpace space;
    int nred = 0;
    int64_t R = 1;   // reduced elements per output element
};

inline Reduction make_reduction(const std::string& name, const TensorDesc& in, const std::vector<int64_t>& dims,
                         const std::vector<SpaceOperand>& ops) {
    check_desc(name, in, "in");
    Reduction r;
    r.space = reduction_space(name, in.sizes, dims, ops, &r.nred);
    for (int64_t d : dims) r.R *= in.sizes[d];
    return r;
}

inline uint32_t max_cols(const std::vector<RowTile>& tiles, uint32_t* gmax) {
    uint32_t F = 1, G = 1;
    for (const RowTile& t : tiles) {
        G = std::max(G, t.G);
        for (uint32_t r : t.R) F = std::max(F, t.G * r);
    }
    *gmax = G;
    return F;
}


}  // namespace trnsim::ops::reduction_detail
