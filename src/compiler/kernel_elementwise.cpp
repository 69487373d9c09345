// Fused elementwise kernel: the whole body per tile, in SBUF.
//
// The output shape is cut into [P, F] tiles (the operator library's tiling: dims merged where
// every operand is contiguous, up to 128 partitions). Per tile: each input is loaded once,
// every step writes an SBUF scratch tile (assign_scratch_tiles reuses dead ones), each output
// is stored once (large transfers split by partition groups over several DMA queues, as one
// queue moves a fraction of the core's bandwidth). Inputs and scratch tiles rotate through two
// buffers, so the loads of tile i+1, the compute of tile i and the stores of tile i-1 overlap.
#include <algorithm>

#include "trnsim/tiling.h"
#include "kernel_common.h"

namespace trnsim::compiler {

using namespace tiling;

std::vector<int> assign_scratch_tiles(const Node& fused, int* num_tiles) {
    const int n = static_cast<int>(fused.body.size());
    std::vector<int> last_read(n, -1);
    for (int s = 0; s < n; ++s)
        for (int a : fused.body[s].args)
            if (a < 0) last_read[-a - 1] = s;
    for (int out : fused.body_outputs) last_read[out] = n;   // stored after the whole body
    std::vector<int> tile(n, -1), free_tiles;
    int count = 0;
    for (int s = 0; s < n; ++s) {
        // Tiles whose value step s reads for the last time are free for its result: steps are
        // elementwise over identical [P, F] views, so writing in place is safe.
        for (int t = 0; t < s; ++t)
            if (last_read[t] == s) free_tiles.push_back(tile[t]);
        if (!free_tiles.empty()) {
            tile[s] = free_tiles.back();
            free_tiles.pop_back();
        } else {
            tile[s] = count++;
        }
    }
    *num_tiles = count;
    return tile;
}

namespace {

// Whether operand k of a tile has the same value along every column (a broadcast input:
// stride 0 in every column dim), so that one element per row is all a load needs to move.
bool constant_along_columns(const TileBox& t, int k) {
    if (t.F <= 1) return false;
    for (size_t d = static_cast<size_t>(t.row_dims); d < t.box.dims.size(); ++d)
        if (t.box.dims[d].size > 1 && t.box.dims[d].stride[k] != 0) return false;
    return true;
}

}  // namespace

void build_fused_elementwise(KernelBuilder& kb, const Node& node, const std::vector<ops::TensorDesc>& in,
                             const std::vector<ops::TensorDesc>& out) {
    const std::string name = "fused_elementwise";
    const int nout = static_cast<int>(out.size()), nin = static_cast<int>(in.size());
    if (nout + nin > kMaxOperands) fail(name, "too many operands");
    // Operands: the outputs first (out[0] defines the iteration space), then the inputs.
    std::vector<const ops::TensorDesc*> operands;
    for (const auto& t : out) operands.push_back(&t);
    for (const auto& t : in) operands.push_back(&t);
    IterSpace space;
    space.nops = static_cast<int>(operands.size());
    space.dims.resize(out[0].sizes.size());
    for (size_t d = 0; d < out[0].sizes.size(); ++d) space.dims[d].size = out[0].sizes[d];
    for (int k = 0; k < space.nops; ++k) {
        check_desc(name, *operands[k], "operand");
        const std::vector<int64_t> st = broadcast_strides(name, *operands[k], out[0].sizes);
        for (size_t d = 0; d < st.size(); ++d) space.dims[d].stride[k] = st[d];
        space.offset[k] = operands[k]->offset;
    }
    if (space.numel() == 0) return;
    simplify(space);
    for (int k = 0; k < nout; ++k) check_no_overlap(name, space, k);

    int num_scratch = 0;
    const std::vector<int> scratch_of = assign_scratch_tiles(node, &num_scratch);
    uint64_t bytes_per_column = 4 * static_cast<uint64_t>(num_scratch);
    for (const auto& t : in) bytes_per_column += dtype_size(t.dtype);
    constexpr int kDepth = 2;
    const uint32_t fmax = column_budget(kb.chip(), bytes_per_column, kDepth);
    const std::vector<TileBox> tiles = plan_tiles(space, fmax);
    uint32_t F = 1;
    for (const TileBox& t : tiles) F = std::max(F, t.F);

    std::vector<TileRing> in_rings, scratch_rings;
    for (const auto& t : in) in_rings.emplace_back(kb, kDepth, std::vector<uint32_t>{F}, t.dtype);
    for (int s = 0; s < num_scratch; ++s) scratch_rings.emplace_back(kb, kDepth, std::vector<uint32_t>{F}, DType::f32);
    DmaQueues queues(kb.chip());
    EngineBalancer engines(kb.chip());

    SpmdSplit spmd(kb, tiles.size());   // the tiles are independent: dealt out to the physical cores
    for (size_t i = 0; i < tiles.size(); ++i) {
        const TileBox& t = tiles[i];
        spmd.enter(i);
        std::vector<AccessPattern> in_views(nin);
        for (int k = 0; k < nin; ++k) {
            const Tile& tile = in_rings[k].next();
            if (constant_along_columns(t, nout + k)) {
                // One element per row is loaded; the steps read it broadcast (column stride 0).
                Box column = t.box;
                for (size_t d = static_cast<size_t>(t.row_dims); d < column.dims.size(); ++d) column.dims[d].size = 1;
                kb.dma_copy(tile_view(tile, t.P, 1), hbm_ap(column, nout + k, in[k]), queues.load());
                in_views[k] = tile_view(tile, t.P, {t.F}, {0});
            } else {
                in_views[k] = tile_view(tile, t.P, t.F);
                dma_tile(kb, queues, in_views[k], hbm_ap(t.box, nout + k, in[k]), false);
            }
        }
        std::vector<const Tile*> scratch(num_scratch);
        for (int s = 0; s < num_scratch; ++s) scratch[s] = &scratch_rings[s].next();
        std::vector<AccessPattern> step_views(node.body.size());
        for (size_t s = 0; s < node.body.size(); ++s) {
            const Step& step = node.body[s];
            std::vector<AccessPattern> args;
            for (int a : step.args) args.push_back(a >= 0 ? in_views[a] : step_views[-a - 1]);
            step_views[s] = with_dtype(tile_view(*scratch[scratch_of[s]], t.P, t.F), step.dtype);
            emit_step(kb, engines, step, step_views[s], args);
        }
        for (int k = 0; k < nout; ++k)
            dma_tile(kb, queues, hbm_ap(t.box, k, out[k]), step_views[node.body_outputs[k]], true);
    }
    for (int s = num_scratch - 1; s >= 0; --s) scratch_rings[s].release(kb);
    for (int k = nin - 1; k >= 0; --k) in_rings[k].release(kb);
}

}  // namespace trnsim::compiler
