// Fused matmul: the library's blocked matmul (build_matmul) with the fused epilogue applied to
// each output tile in SBUF between the PSUM evacuation and the store. Epilogue operands
// (residuals, per-column vectors) are loaded into rotating SBUF tiles by the matmul's prologue,
// before the tile's matmuls, so the epilogue never waits on HBM. Steps whose results are
// outputs besides the one in the library's staging tile write rotating SBUF tiles that the
// epilogue stores on the queues the matmul keeps for loads (its own stores already fill its
// store queues). The column sums of A (node.i0 = 1, a bias gradient) are the library's
// (MatmulArgs::a_column_sums).
#include <algorithm>

#include "trnsim/ops/matmul_kernel.h"
#include "kernel_common.h"

namespace trnsim::compiler {

namespace {

constexpr uint32_t kTileRows = 128, kTileCols = 512;   // build_matmul's output tile

// One 2-D operand of the matmul as MatmulArgs sees it: address, leading dim, stored transposed.
struct MatrixOperand {
    uint64_t addr;
    int64_t ld;
    bool transposed;   // stored [cols, rows]
};

MatrixOperand matrix_operand(const ops::TensorDesc& t, const char* what) {
    const int64_t rows = t.sizes[0], cols = t.sizes[1];
    const int64_t rs = t.strides[0], cs = t.strides[1];
    MatrixOperand m;
    m.addr = static_cast<uint64_t>(t.offset) * dtype_size(t.dtype);
    if (cs == 1 || cols == 1) {
        m.transposed = false;
        m.ld = rows == 1 ? cols : rs;
    } else if (rs == 1 || rows == 1) {
        m.transposed = true;
        m.ld = cols == 1 ? rows : cs;
    } else {
        throw CompileError(std::string("fused_matmul: operand ") + what + " " + t.str() + " has no unit stride");
    }
    return m;
}

// Rows [row0, row0+rows) x columns [col0, col0+cols) of t seen as a matrix with (row, col)
// element strides (rs, cs); rows map to partitions.
AccessPattern hbm_tile(const ops::TensorDesc& t, int64_t rs, int64_t cs, uint32_t row0, uint32_t rows, uint32_t col0,
                       uint32_t cols) {
    AccessPattern ap;
    ap.space = MemSpace::HBM;
    ap.dtype = t.dtype;
    ap.arg = t.arg;
    ap.partitions = static_cast<uint16_t>(rows);
    ap.partition_stride = rs;
    ap.ndim = 1;
    ap.size = {cols, 1, 1, 1};
    ap.stride = {cs, 0, 0, 0};
    ap.offset = static_cast<uint64_t>(t.offset + static_cast<int64_t>(row0) * rs + static_cast<int64_t>(col0) * cs) *
                dtype_size(t.dtype);
    return ap;
}

// Partitions [p0, p0 + np) of an access pattern (rows of an HBM matrix, or SBUF partitions).
AccessPattern partition_rows(AccessPattern ap, uint32_t p0, uint32_t np) {
    if (ap.space == MemSpace::HBM)
        ap.offset += static_cast<uint64_t>(static_cast<int64_t>(p0) * ap.partition_stride *
                                           static_cast<int64_t>(dtype_size(ap.dtype)));
    else
        ap.start_partition = static_cast<uint16_t>(ap.start_partition + p0);
    ap.partitions = static_cast<uint16_t>(np);
    return ap;
}

// One tile transfer as DMAs of 32 partitions each: on the rotating queues they run in parallel,
// so the transfer takes about one group's time.
void transfer_by_partition_groups(const MatmulDma& dma, const AccessPattern& dst, const AccessPattern& src) {
    for (uint32_t p0 = 0; p0 < src.partitions; p0 += 32) {
        const uint32_t np = std::min(32u, src.partitions - p0);
        dma(partition_rows(dst, p0, np), partition_rows(src, p0, np));
    }
}

}  // namespace

void build_fused_matmul(KernelBuilder& kb, const Node& node, const std::vector<ops::TensorDesc>& in,
                        const std::vector<ops::TensorDesc>& out) {
    const ops::TensorDesc &a = in[0], &b = in[1];
    if (a.dim() != 2 || b.dim() != 2) throw CompileError("fused_matmul: operands must be 2-D");
    const MatrixOperand A = matrix_operand(a, "a"), B = matrix_operand(b, "b");
    MatmulArgs args;
    args.M = static_cast<uint32_t>(a.sizes[0]);
    args.K = static_cast<uint32_t>(a.sizes[1]);
    args.N = static_cast<uint32_t>(b.sizes[1]);
    const size_t nsteps = node.body.size();

    // The step writing each output (out[0]: the last step's result when body_outputs is empty);
    // with i0 = 1 the column sums of A follow them.
    const std::vector<int> writer = node.body_outputs.empty() ? std::vector<int>{static_cast<int>(nsteps) - 1}
                                                              : node.body_outputs;
    const bool column_sums = node.i0 == 1;
    if (out.size() != writer.size() + (column_sums ? 1 : 0) || writer[0] != static_cast<int>(nsteps) - 1)
        throw CompileError("fused_matmul: outputs do not match the body's output steps");
    if (column_sums) {
        const ops::TensorDesc& sums = out.back();
        if (sums.numel() != static_cast<int64_t>(args.K) || !sums.is_contiguous())
            throw CompileError("fused_matmul: column sums " + sums.str() + " are not a contiguous vector of K elements");
        args.a_column_sums = {true, static_cast<uint64_t>(sums.offset) * dtype_size(sums.dtype), sums.arg, sums.dtype};
    }
    std::vector<int> output_of(nsteps, -1);   // per step: the output it writes, or -1
    for (size_t k = 0; k < writer.size(); ++k) {
        const ops::TensorDesc& o = out[k];
        if (o.numel() != static_cast<int64_t>(args.M) * args.N || !o.is_contiguous())
            throw CompileError("fused_matmul: output " + o.str() + " is not a contiguous [M, N] matrix");
        output_of[writer[k]] = static_cast<int>(k);
    }
    // The library stores its staging tile: the product when that is an output (the tile then keeps
    // it and every step writes other tiles), else the last step's result (written into the tile).
    const bool product_stored = output_of[0] >= 0;
    const ops::TensorDesc& c = out[product_stored ? output_of[0] : 0];

    args.a = A.addr, args.a_arg = a.arg, args.a_dtype = a.dtype, args.lda = A.ld;
    args.a_transposed = A.transposed;
    args.b = B.addr, args.b_arg = b.arg, args.b_dtype = b.dtype, args.ldb = B.ld;
    args.b_transposed = B.transposed;
    args.c = static_cast<uint64_t>(c.offset) * dtype_size(c.dtype), args.c_arg = c.arg;
    args.c_dtype = c.dtype;
    args.alpha = node.f0;
    const auto strides_of = [&](size_t input) {
        return std::pair<int64_t, int64_t>{node.dims[2 * (input - 2)], node.dims[2 * (input - 2) + 1]};
    };
    if (node.i1 & 1) {
        const ops::TensorDesc& d = in[2];
        const auto [rs, cs] = strides_of(2);
        args.addend = {true, static_cast<uint64_t>(d.offset) * dtype_size(d.dtype), d.arg, d.dtype, rs, cs, 0, node.f1};
    }

    // SBUF: epilogue operands and stored step results in rotating tiles (one per output tile in
    // flight), one scratch tile per other step, one fp32 tile for steps with a partial result.
    constexpr int kSlots = kMatmulTilesInFlight;
    const size_t first_operand = (node.i1 & 1) ? 3 : 2;
    std::vector<std::vector<Tile>> operand_tiles, stored_tiles(nsteps);
    for (size_t k = first_operand; k < in.size(); ++k) {
        operand_tiles.emplace_back();
        for (int r = 0; r < kSlots; ++r) operand_tiles.back().push_back(kb.alloc_sbuf(kTileRows, {kTileCols}, in[k].dtype));
    }
    const bool round_product = !product_stored && node.body[0].dtype != c.dtype;
    // The step writing the staging tile in place (the last one, unless the tile keeps the product).
    const size_t tile_step = product_stored ? 0 : nsteps - 1;
    std::vector<Tile> scratch(nsteps);
    bool need_partial = false;
    for (size_t s = 0; s < nsteps; ++s) {
        need_partial = need_partial || step_needs_scratch(node.body[s]);
        if (s == tile_step || (s == 0 && !round_product)) continue;
        if (s > 0 && output_of[s] >= 0)
            for (int r = 0; r < kSlots; ++r) stored_tiles[s].push_back(kb.alloc_sbuf(kTileRows, {kTileCols}, node.body[s].dtype));
        else
            scratch[s] = kb.alloc_sbuf(kTileRows, {kTileCols}, DType::f32);
    }
    Tile partial;
    if (need_partial) partial = kb.alloc_sbuf(kTileRows, {kTileCols}, DType::f32);
    EngineBalancer engines(kb.chip());
    uint64_t tiles_loaded = 0, tiles_finished = 0;

    args.prologue = [&](KernelBuilder&, uint32_t, uint32_t row0, uint32_t rows, uint32_t col0, uint32_t cols,
                        const MatmulDma& load) {
        const int slot = static_cast<int>(tiles_loaded++ % kSlots);
        for (size_t j = 0; j < operand_tiles.size(); ++j) {
            const auto [rs, cs] = strides_of(first_operand + j);
            transfer_by_partition_groups(load, operand_tiles[j][slot].region(0, rows, 0, cols),
                                         hbm_tile(in[first_operand + j], rs, cs, row0, rows, col0, cols));
        }
    };
    args.epilogue = [&](KernelBuilder& k, const AccessPattern& tile, uint32_t, uint32_t row0, uint32_t col0,
                        const MatmulDma& store) {
        const uint32_t rows = tile.partitions, cols = static_cast<uint32_t>(tile.free_elems());
        const int slot = static_cast<int>(tiles_finished++ % kSlots);
        std::vector<AccessPattern> operand_views;
        for (auto& tiles : operand_tiles) operand_views.push_back(tiles[slot].region(0, rows, 0, cols));
        const AccessPattern partial_view = need_partial ? partial.region(0, rows, 0, cols) : AccessPattern{};
        std::vector<AccessPattern> step_views(nsteps);
        step_views[0] = tile;
        if (round_product) {   // the product rounds to its own dtype before the epilogue reads it
            step_views[0] = with_dtype(scratch[0].region(0, rows, 0, cols), node.body[0].dtype);
            k.tensor_copy(step_views[0], tile,
                          engines.pick({Engine::Vector, Engine::GpSimd}, cols, tile.space == MemSpace::PSUM));
        }
        for (size_t s = 1; s < nsteps; ++s) {
            const Step& step = node.body[s];
            std::vector<AccessPattern> views;
            for (int arg : step.args) views.push_back(arg >= 0 ? operand_views[arg - first_operand] : step_views[-arg - 1]);
            if (s == tile_step) step_views[s] = tile;
            else if (output_of[s] >= 0) step_views[s] = stored_tiles[s][slot].region(0, rows, 0, cols);
            else step_views[s] = with_dtype(scratch[s].region(0, rows, 0, cols), step.dtype);
            emit_step(k, engines, step, step_views[s], views, need_partial ? &partial_view : nullptr);
            if (output_of[s] >= 0 && s != tile_step) {
                const ops::TensorDesc& o = out[output_of[s]];
                transfer_by_partition_groups(store, hbm_tile(o, static_cast<int64_t>(args.N), 1, row0, rows, col0, cols),
                                             step_views[s]);
            }
        }
    };
    build_matmul(kb, args);

    if (need_partial) kb.release(partial);
    for (size_t s = nsteps; s-- > 0;) {
        for (auto it = stored_tiles[s].rbegin(); it != stored_tiles[s].rend(); ++it) kb.release(*it);
        if (scratch[s].partitions) kb.release(scratch[s]);
    }
    for (auto it = operand_tiles.rbegin(); it != operand_tiles.rend(); ++it)
        for (auto t = it->rbegin(); t != it->rend(); ++t) kb.release(*t);
}

}  // namespace trnsim::compiler
